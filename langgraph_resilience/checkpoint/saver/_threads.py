"""A thread's checkpoints and writes: storing them without silent forks, and the
thread maintenance LangGraph's savers lack (copy, delete by run, prune) or that
must reach our own rows too (delete).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP, CheckpointTuple

from langgraph_resilience.checkpoint.store._schema import (
    ARCHIVE,
    ARCHIVED_MARKER,
    CHECKPOINT_TABLES,
    COPIED_TABLES,
    FORK_MARKER,
    RUN_LOG,
    RUNS,
    THREAD_TABLES,
)
from langgraph_resilience.checkpoint.store._store import SQLITE, Dialect, Statements, Stmt, Table
from langgraph_resilience.checkpoint.store._sums import PG_PUT_UNLESS_NEWER, SUM
from langgraph_resilience.errors import CheckpointConflict, ConfigError

__all__ = ["PutCheckpoint", "put_checkpoint"]

# -- no silent forks ---------------------------------------------------------------------
#
# A write is refused when the writer's view of the thread is stale: it continues
# the head it read, and another writer has advanced the head since. LangGraph
# reads a namespace's latest checkpoint (``get_tuple`` without a checkpoint id) in
# the context that then writes (its executors copy the context), so each context
# keeps its view: per (thread, namespace), the head it read, moved on by every
# checkpoint it writes there itself. A put whose parent is that view is checked;
# any other parent was addressed explicitly (time travel, ``update_state`` or
# ``Command(resume=)`` on an older checkpoint, a ``__copy__``, a replay, a
# subgraph following its parent's fork): an intended branch, stored as stock
# LangGraph stores it.
#
# Each latest read starts a new mapping (set in the reading context, so two tasks
# that resume one thread each keep their own); the puts of that run, in copies of
# the context, move it on in place.

_VIEWS: ContextVar[dict[tuple[str, str], str] | None] = ContextVar(
    "langgraph_resilience_views", default=None
)
#: Views kept per context; a context that reads many threads forgets the oldest.
VIEWS_KEPT = 64


def saw_head(thread_id: str, ns: str, checkpoint_id: str) -> None:
    """This context read ``checkpoint_id`` as the latest of its namespace."""
    views = {k: v for k, v in (_VIEWS.get() or {}).items() if k != (thread_id, ns)}
    views[(thread_id, ns)] = checkpoint_id
    if len(views) > VIEWS_KEPT:
        views = dict(list(views.items())[-VIEWS_KEPT:])
    _VIEWS.set(views)


def wrote_head(put: PutCheckpoint) -> None:
    """This context stored ``put``: its view of the namespace moves on to it."""
    views = _VIEWS.get()
    if views is not None and (put.thread_id, put.ns) in views:
        views[(put.thread_id, put.ns)] = put.checkpoint_id


def wrote(config: RunnableConfig, put: PutCheckpoint) -> RunnableConfig:
    """This context stored ``put`` (its view moves on, as `wrote_head`): the
    config that names the checkpoint."""
    views = _VIEWS.get()
    if views is not None and (put.thread_id, put.ns) in views:
        views[(put.thread_id, put.ns)] = put.checkpoint_id
    return {
        "configurable": {
            "thread_id": config["configurable"]["thread_id"],
            "checkpoint_ns": put.ns,
            "checkpoint_id": put.checkpoint_id,
        }
    }


def saw_latest(config: RunnableConfig, found: CheckpointTuple | None) -> CheckpointTuple | None:
    """A ``get_tuple`` result, passed through; a latest read is remembered (`saw_head`)."""
    configurable = config.get("configurable") or {}
    if found is not None and not configurable.get("checkpoint_id"):
        ns = str(configurable.get("checkpoint_ns") or "")
        saw_head(str(configurable.get("thread_id")), ns, found.checkpoint["id"])
    return found


def continues_head(thread_id: str, ns: str, parent_id: str | None) -> bool:
    """Whether a put continues this context's view of the namespace (and so must be
    checked against a newer head)."""
    views = _VIEWS.get()
    return parent_id is not None and views is not None and views.get((thread_id, ns)) == parent_id


_NEWER_OR_ARCHIVED = (
    "SELECT (SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
    "AND checkpoint_id > ? AND checkpoint_id <> ? ORDER BY checkpoint_id DESC LIMIT 1), "
    f"(SELECT 1 FROM {ARCHIVE.name} WHERE thread_id = ? AND status = 'archived')"
)


class PutCheckpoint(NamedTuple):
    """A checkpoint ready to store: keys, fork check, and the dialect's rows."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    check_fork: bool
    row: tuple[Any, ...]  # the checkpoints row, in the dialect's column order
    blob_rows: Sequence[tuple[Any, ...]] = ()  # Postgres only

    def conflict(self, head_id: str, *, archived: bool = False) -> CheckpointConflict:
        return CheckpointConflict(
            thread_id=self.thread_id,
            checkpoint_ns=self.ns,
            parent_id=self.parent_id or "",
            head_id=head_id,
            checkpoint_id=self.checkpoint_id,
            archived=archived,
        )

    def fork_conflict(self, exc: BaseException) -> CheckpointConflict | None:
        """The `CheckpointConflict` behind a Postgres error raised by the fork check."""
        diag = getattr(exc, "diag", None)
        marker = getattr(diag, "message_primary", None)
        if diag is None or marker not in (FORK_MARKER, ARCHIVED_MARKER):
            return None
        return self.conflict(str(diag.message_detail), archived=marker == ARCHIVED_MARKER)


_SQLITE_PUT = (
    "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
    f"parent_checkpoint_id, type, checkpoint, metadata, {SUM}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_SQLITE_WRITES = (
    "INSERT OR {verb} INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
    f"task_path, idx, channel, type, value, {SUM}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SQLITE_WRITES_REPLACE = _SQLITE_WRITES.format(verb="REPLACE")
SQLITE_WRITES_IGNORE = _SQLITE_WRITES.format(verb="IGNORE")


def put_checkpoint(
    d: Dialect, put: PutCheckpoint, *, upsert_sql: str = _SQLITE_PUT, blobs_sql: str = ""
) -> Statements[None]:
    """Refuse a fork, then store the checkpoint (and its blobs on Postgres)."""
    if put.blob_rows:
        yield Stmt(blobs_sql, put.blob_rows, many=True)
    if not put.check_fork:
        yield Stmt(upsert_sql, put.row)
        return
    assert put.parent_id is not None
    keys = (put.thread_id, put.ns, put.parent_id, put.checkpoint_id)
    if d.procedures:
        yield Stmt(PG_PUT_UNLESS_NEWER, (*put.row, *keys))
        return
    # Check, then insert, in one transaction: in WAL mode a transaction that
    # read a snapshot another process has since moved past cannot write
    # ("database is locked"), and the retry reads afresh. (A single INSERT ...
    # SELECT copies the blob through a temporary table: slower.)
    newer, archived = (yield Stmt(d.sql(_NEWER_OR_ARCHIVED), (*keys, put.thread_id), fetch=True))[0]
    if newer is not None:
        raise put.conflict(str(newer))
    if archived is not None:
        raise put.conflict(put.parent_id, archived=True)
    yield Stmt(upsert_sql, put.row)


def writes_sql(writes: Sequence[tuple[str, Any]], *, replace: str, keep_first: str) -> str:
    """Special writes (error, interrupt, resume) replace older ones; others keep the first."""
    for write in writes:  # a loop, not all(): it runs on every write
        if write[0] not in WRITES_IDX_MAP:
            return keep_first
    return replace


def locate_checkpoint(d: Dialect, thread_id: str, ns: str) -> Statements[str | None]:
    """The id of the latest checkpoint of a namespace (no decoding)."""
    rows = yield Stmt(
        d.sql(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
            "ORDER BY checkpoint_id DESC LIMIT 1"
        ),
        (thread_id, ns),
        fetch=True,
    )
    return str(rows[0][0]) if rows else None


# -- thread maintenance ----------------------------------------------------------------------


def delete_threads(d: Dialect, thread_ids: Sequence[str]) -> Statements[None]:
    """Every row of the threads, LangGraph's and ours."""
    ids = d.list_param(thread_ids)
    for table in (*d.thread_tables, *THREAD_TABLES):
        yield Stmt(d.sql(f"DELETE FROM {table.name} WHERE thread_id IN_LIST(?)"), (ids,))


def copy_thread(d: Dialect, source: str, target: str) -> Statements[None]:
    """Copy a thread's checkpoints, writes (and blobs) and resilience rows.

    `Worker` runs are not copied: a run is an execution, not state (the run
    ledger's rows, the thread's history, are). A target that
    already has checkpoints is refused, since merging two histories would fork
    both.
    """
    if str(source) == str(target):
        raise ConfigError(f"copy_thread needs two different threads, got {source!r} twice")
    rows = yield Stmt(
        d.sql("SELECT count(*) FROM checkpoints WHERE thread_id = ?"), (str(target),), fetch=True
    )
    if rows[0][0]:
        raise ConfigError(
            f"copy_thread target {target!r} already has {rows[0][0]} checkpoint(s); "
            "copy into a new thread id, or delete_thread the target first"
        )
    for table in (*d.thread_tables, *COPIED_TABLES):
        # a sum covers no thread id: it is copied as it is
        cols = ", ".join(copied_columns(table.names, table in d.thread_tables))
        yield Stmt(
            d.sql(
                f"INSERT INTO {table.name} (thread_id, {cols}) "
                f"SELECT ?, {cols} FROM {table.name} WHERE thread_id = ?"
            ),
            (str(target), str(source)),
        )


def copied_columns(names: Sequence[str], summed: bool = False) -> list[str]:
    """The columns `copy_thread` copies as they are (all but the thread id)."""
    return [n for n in names if n != "thread_id"] + ([SUM] if summed else [])


def delete_orphans(
    d: Dialect, thread_ids: Sequence[str], tables: Sequence[Table] = CHECKPOINT_TABLES
) -> Statements[None]:
    """Resilience rows (of ``tables``) whose checkpoint no longer exists (after a
    prune or delete)."""
    if not thread_ids:
        return
    ids = d.list_param(thread_ids)
    for table in tables:
        name = table.name
        yield Stmt(
            d.sql(
                f"DELETE FROM {name} WHERE thread_id IN_LIST(?) AND NOT EXISTS ("
                f"SELECT 1 FROM checkpoints c WHERE c.thread_id = {name}.thread_id "
                f"AND c.checkpoint_ns = {name}.checkpoint_ns "
                f"AND c.checkpoint_id = {name}.checkpoint_id)"
            ),
            (ids,),
        )


def delete_for_runs(d: Dialect, run_ids: Sequence[str]) -> Statements[None]:
    """Checkpoints whose metadata names one of the runs, with their writes.

    Also drops the runs' resilience rows and, on Postgres, the blobs no kept
    checkpoint references. A kept checkpoint whose parent was deleted is left
    with no parent (as LangGraph's own prune does).
    """
    if isinstance(run_ids, str):
        raise ConfigError("run_ids must be a sequence of run ids, not a single str")
    run_ids = [str(r) for r in run_ids]
    if not run_ids:
        return
    run_of = d.metadata_text.format(key="run_id")
    doomed = yield Stmt(
        d.sql(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints "
            f"WHERE {run_of} IN_LIST(?)"
        ),
        (d.list_param(run_ids),),
        fetch=True,
    )
    by_ns: dict[tuple[str, str], list[str]] = {}
    for thread_id, ns, checkpoint_id in doomed:
        by_ns.setdefault((thread_id, ns), []).append(checkpoint_id)
    for (thread_id, ns), ids in sorted(by_ns.items()):
        yield from delete_checkpoints(d, thread_id, ns, ids)
    yield from delete_orphans(d, sorted({t for t, _ in by_ns}))
    for table in (RUNS, RUN_LOG):
        yield Stmt(
            d.sql(f"DELETE FROM {table.name} WHERE run_id IN_LIST(?)"), (d.list_param(run_ids),)
        )


_PG_REFERENCED_VERSIONS = (
    "SELECT DISTINCT v.key, v.value FROM checkpoints c "
    "CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') AS v "
    "WHERE c.thread_id = %s AND c.checkpoint_ns = %s"
)


def delete_checkpoints(
    d: Dialect, thread_id: str, ns: str, checkpoint_ids: Sequence[str]
) -> Statements[None]:
    """Some checkpoints of one namespace, their writes, and (Postgres) freed blobs."""
    ids = d.list_param(checkpoint_ids)
    key = "thread_id = ? AND checkpoint_ns = ?"
    yield Stmt(
        d.sql(f"DELETE FROM {d.writes.name} WHERE {key} AND checkpoint_id IN_LIST(?)"),
        (thread_id, ns, ids),
    )
    if d.blobs is None:
        yield Stmt(
            d.sql(f"DELETE FROM checkpoints WHERE {key} AND checkpoint_id IN_LIST(?)"),
            (thread_id, ns, ids),
        )
    else:
        yield from _delete_with_blobs(d, thread_id, ns, ids)
    yield Stmt(
        d.sql(
            f"UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE {key} "
            "AND parent_checkpoint_id IN_LIST(?)"
        ),
        (thread_id, ns, ids),
    )


def _delete_with_blobs(d: Dialect, thread_id: str, ns: str, ids: Any) -> Statements[None]:
    """Postgres: the checkpoints, then the blob versions no kept checkpoint references."""
    freed = yield Stmt(
        d.sql(
            "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
            "AND checkpoint_id IN_LIST(?) RETURNING checkpoint -> 'channel_versions'"
        ),
        (thread_id, ns, ids),
        fetch=True,
    )
    referenced = yield Stmt(_PG_REFERENCED_VERSIONS, (thread_id, ns), fetch=True)
    kept = {(str(c), str(v)) for c, v in referenced}
    garbage: dict[str, set[str]] = {}
    for (versions,) in freed:
        for channel, version in (versions or {}).items():
            if (channel, str(version)) not in kept:
                garbage.setdefault(channel, set()).add(str(version))
    for channel, versions in sorted(garbage.items()):
        yield Stmt(
            d.sql(
                "DELETE FROM checkpoint_blobs WHERE thread_id = ? AND checkpoint_ns = ? "
                "AND channel = ? AND version IN_LIST(?)"
            ),
            (thread_id, ns, channel, d.list_param(sorted(versions))),
        )


#: "delete_all" is Agent Server's name for "delete" (its gRPC servicer's PruneStrategy).
PRUNE_STRATEGIES = ("keep_latest", "delete", "delete_all")
DELETE_STRATEGIES = ("delete", "delete_all")


def check_prune_args(thread_ids: Sequence[str], strategy: str) -> list[str]:
    if isinstance(thread_ids, str):
        raise ConfigError("thread_ids must be a sequence of thread ids, not a single str")
    if strategy not in PRUNE_STRATEGIES:
        raise ConfigError(
            f"unknown prune strategy {strategy!r}; use one of {', '.join(PRUNE_STRATEGIES)}"
        )
    return [str(t) for t in thread_ids]


_SQLITE_DELTA_THREADS = (
    "SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id IN_LIST(?) AND ("
    "json_extract(CAST(metadata AS TEXT), '$.counters_since_delta_snapshot') IS NOT NULL "
    "OR json_extract(CAST(metadata AS TEXT), '$.delta_writes_versioned') IS NOT NULL)"
)


def sqlite_keep_latest(thread_ids: Sequence[str]) -> Statements[None]:
    """SQLite's keep_latest prune: the latest checkpoint of each namespace and
    its writes stay; older checkpoints, their writes and resilience rows go.

    Threads that use a DeltaChannel are refused (their latest value is rebuilt
    from older checkpoints), as LangGraph's Postgres prune does.
    """
    d = SQLITE
    rows = yield Stmt(d.sql(_SQLITE_DELTA_THREADS), (d.list_param(thread_ids),), fetch=True)
    if rows:
        raise NotImplementedError(
            "keep_latest can't prune threads that use a DeltaChannel: "
            + ", ".join(sorted(r[0] for r in rows))
        )
    for thread_id in thread_ids:
        unkept = yield Stmt(
            "SELECT c.checkpoint_ns, c.checkpoint_id FROM checkpoints c WHERE c.thread_id = ? "
            "AND c.checkpoint_id < (SELECT max(h.checkpoint_id) FROM checkpoints h "
            "WHERE h.thread_id = c.thread_id AND h.checkpoint_ns = c.checkpoint_ns)",
            (thread_id,),
            fetch=True,
        )
        by_ns: dict[str, list[str]] = {}
        for ns, checkpoint_id in unkept:
            by_ns.setdefault(ns, []).append(checkpoint_id)
        for ns, ids in sorted(by_ns.items()):
            yield from delete_checkpoints(d, thread_id, ns, ids)
    yield from delete_orphans(d, thread_ids)
