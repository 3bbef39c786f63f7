"""The resilience store: tables, migrations and every SQL statement, both dialects.

Operations are written once, as generators of statements (the pattern of
LangGraph's own ``postgres/base.py``): each yields ``Stmt`` objects, receives the
rows of those that fetch, and returns its result. The savers run them with
`execute` / `aexecute` inside a transaction of their dialect, so the sync and
async savers share everything but the I/O lines.

The statements are written once with ``?`` placeholders and ``IN_LIST(?)`` for a
list parameter; `Dialect` renders them for SQLite (``IN (SELECT value FROM
json_each(?))``) or Postgres (``%s`` and ``= ANY(%s)``). Every parameter is bound,
never formatted in.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from langgraph.checkpoint.base import WRITES_IDX_MAP

from langgraph_resilience.errors import CheckpointConflict, ConfigError, LeaseLost

__all__ = [
    "POSTGRES",
    "SQLITE",
    "Counters",
    "Dialect",
    "Stmt",
    "aexecute",
    "execute",
]

T = TypeVar("T")
Row = tuple[Any, ...]


class Stmt(NamedTuple):
    """One statement: SQL, its parameters, whether rows come back, executemany."""

    sql: str
    params: Any = ()
    fetch: bool = False
    many: bool = False


Statements = Generator[Stmt, list[Row], T]


# ---------------------------------------------------------------------------
# Dialects
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    """How one database spells what the store needs."""

    name: str
    blob: str  # binary column type
    real: str  # floating point column type
    bigint: str
    in_list: str  # replaces IN_LIST(?)
    placeholder: str
    # LangGraph's own tables of this dialect, each with the columns that key a
    # row to its checkpoint (all of them have thread_id).
    writes_table: str
    now: str  # the database's clock, epoch seconds (leases use one clock)
    skip_locked: str  # what a claim's row selection ends with
    extra_thread_tables: tuple[str, ...] = ()

    def sql(self, text: str) -> str:
        text = text.replace("IN_LIST(?)", self.in_list)
        text = text.replace("BLOB_T", self.blob).replace("REAL_T", self.real)
        text = text.replace("BIGINT_T", self.bigint).replace("NOW()", self.now)
        text = text.replace("SKIP_LOCKED", self.skip_locked)
        return text.replace("?", self.placeholder)

    def list_param(self, values: Iterable[str]) -> Any:
        values = [str(v) for v in values]
        return json.dumps(values) if self.name == "sqlite" else values


SQLITE = Dialect(
    name="sqlite",
    blob="BLOB",
    real="REAL",
    bigint="INTEGER",
    in_list="IN (SELECT value FROM json_each(?))",
    placeholder="?",
    writes_table="writes",
    now="((julianday('now') - 2440587.5) * 86400.0)",
    skip_locked="",  # the claim runs in an immediate transaction: one writer at a time
)
POSTGRES = Dialect(
    name="postgres",
    blob="BYTEA",
    real="DOUBLE PRECISION",
    bigint="BIGINT",
    in_list="= ANY(?)",
    placeholder="%s",
    writes_table="checkpoint_writes",
    now="extract(epoch from clock_timestamp())::double precision",
    skip_locked="FOR UPDATE SKIP LOCKED",
    extra_thread_tables=("checkpoint_blobs",),
)


# ---------------------------------------------------------------------------
# Schema: an append-only list of migrations (index = version). Never edit or
# reorder an entry that has shipped; append a new one.
# ---------------------------------------------------------------------------

_CREATE_MIGRATIONS = "CREATE TABLE IF NOT EXISTS resilience_migrations (v INTEGER PRIMARY KEY)"

_COMMON_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 0: the version table itself (created before the loop runs).
    (_CREATE_MIGRATIONS,),
    # 1: runs, with their lease (owner, fencing token, expiry).
    (
        """CREATE TABLE IF NOT EXISTS resilience_runs (
            run_id TEXT PRIMARY KEY,
            thread_id TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'queued',
            owner TEXT,
            fencing_token BIGINT_T NOT NULL DEFAULT 0,
            lease_expires_at REAL_T,
            attempts INTEGER NOT NULL DEFAULT 0,
            recoveries INTEGER NOT NULL DEFAULT 0,
            input_type TEXT,
            input BLOB_T,
            budget_type TEXT,
            budget BLOB_T,
            outcome_type TEXT,
            outcome BLOB_T,
            created_at REAL_T NOT NULL,
            updated_at REAL_T NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS resilience_runs_thread ON resilience_runs (thread_id)",
        "CREATE INDEX IF NOT EXISTS resilience_runs_claim "
        "ON resilience_runs (status, lease_expires_at)",
    ),
    # 2: node attempts, one row per try of a task.
    (
        """CREATE TABLE IF NOT EXISTS resilience_node_attempts (
            thread_id TEXT NOT NULL,
            checkpoint_ns TEXT NOT NULL DEFAULT '',
            checkpoint_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            node TEXT NOT NULL,
            status TEXT NOT NULL,
            kind TEXT,
            error_type TEXT,
            reason TEXT,
            started_at REAL_T NOT NULL,
            finished_at REAL_T,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, attempt)
        )""",
    ),
    # 3: side-effect intents and outcomes.
    (
        """CREATE TABLE IF NOT EXISTS resilience_effects (
            thread_id TEXT NOT NULL,
            idempotency_key TEXT NOT NULL,
            checkpoint_ns TEXT NOT NULL DEFAULT '',
            checkpoint_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            name TEXT NOT NULL,
            args_digest TEXT,
            status TEXT NOT NULL,
            fencing_token BIGINT_T,
            intent_at REAL_T NOT NULL,
            outcome_at REAL_T,
            outcome_type TEXT,
            outcome BLOB_T,
            error TEXT,
            PRIMARY KEY (thread_id, idempotency_key)
        )""",
    ),
    # 4: counters, one row per (scope, name); a scope is one process, so
    # workers never contend for a row.
    (
        """CREATE TABLE IF NOT EXISTS resilience_counters (
            scope TEXT NOT NULL,
            name TEXT NOT NULL,
            value BIGINT_T NOT NULL DEFAULT 0,
            PRIMARY KEY (scope, name)
        )""",
    ),
)

# Tables keyed by a thread's checkpoints, copied and deleted with them.
CHECKPOINT_TABLES = ("resilience_node_attempts", "resilience_effects")
THREAD_TABLES = (*CHECKPOINT_TABLES, "resilience_runs")

# Postgres refuses a fork in the same transaction and round trip as the write:
# this function takes a per-thread lock, then raises when the namespace already
# holds a checkpoint newer than the parent (other than the one being written).
# SQLite runs the same query in the write's transaction instead (`put_checkpoint`).
FORK_MARKER = "resilience-fork"
_PG_REFUSE_FORK = f"""
CREATE OR REPLACE FUNCTION resilience_refuse_fork(
    p_thread TEXT, p_ns TEXT, p_parent TEXT, p_new TEXT
) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    newer TEXT;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(p_thread), hashtext(p_ns));
    SELECT checkpoint_id INTO newer FROM checkpoints
    WHERE thread_id = p_thread AND checkpoint_ns = p_ns
      AND checkpoint_id > p_parent AND checkpoint_id <> p_new
    ORDER BY checkpoint_id DESC LIMIT 1;
    IF newer IS NOT NULL THEN
        RAISE EXCEPTION '{FORK_MARKER}' USING DETAIL = newer;
    END IF;
END $$"""

# Postgres fences a write in the same round trip: this function raises unless
# the run still carries the writer's fencing token, and holds the run's row
# (FOR SHARE) until the write commits, so a claim cannot slip in between.
LEASE_MARKER = "resilience-lease-lost"
_PG_CHECK_FENCE = f"""
CREATE OR REPLACE FUNCTION resilience_check_fence(p_run TEXT, p_token BIGINT)
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    current BIGINT;
BEGIN
    SELECT fencing_token INTO current FROM resilience_runs WHERE run_id = p_run FOR SHARE;
    IF current IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION '{LEASE_MARKER}' USING DETAIL = coalesce(current::text, 'none');
    END IF;
END $$"""

_PG_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 5: the fork check (Postgres only; SQLite's slot is a no-op).
    (_PG_REFUSE_FORK,),
    # 6: the fencing check (Postgres only; SQLite checks in Python, `fenced`).
    (_PG_CHECK_FENCE,),
)
# At most one open run per thread, also when two processes submit at once.
_ONE_OPEN_RUN = (
    "CREATE UNIQUE INDEX IF NOT EXISTS resilience_runs_one_open ON resilience_runs "
    "(thread_id) WHERE status IN ('queued', 'running', 'paused')"
)
_PG_MIGRATIONS = (*_PG_MIGRATIONS, (_ONE_OPEN_RUN,))  # 7
_SQLITE_MIGRATIONS: tuple[tuple[str, ...], ...] = (("SELECT 1",), ("SELECT 1",), (_ONE_OPEN_RUN,))


def migrations(d: Dialect) -> tuple[tuple[str, ...], ...]:
    """The migration list of a dialect; both lists have the same length."""
    own = _PG_MIGRATIONS if d is POSTGRES else _SQLITE_MIGRATIONS
    return tuple(tuple(d.sql(s) for s in m) for m in (*_COMMON_MIGRATIONS, *own))


SCHEMA_VERSION = len(_COMMON_MIGRATIONS) + len(_PG_MIGRATIONS) - 1
assert len(_PG_MIGRATIONS) == len(_SQLITE_MIGRATIONS)


def check_schema_version(found: int, *, where: str) -> None:
    """Refuse a database migrated by a newer langgraph-resilience."""
    if found > SCHEMA_VERSION:
        raise ConfigError(
            f"{where} holds resilience schema version {found}, newer than this "
            f"langgraph-resilience knows (up to {SCHEMA_VERSION}). It was set up by a "
            "newer release; upgrade langgraph-resilience instead of using it with this "
            "one (nothing was changed)."
        )


def migrate(d: Dialect, *, where: str) -> Statements[None]:
    """Bring the resilience tables up to `SCHEMA_VERSION`, one transaction."""
    if d is POSTGRES:
        # Two processes setting up at once take turns.
        yield Stmt("SELECT pg_advisory_xact_lock(hashtext('resilience_migrations'))")
    yield Stmt(_CREATE_MIGRATIONS)
    rows = yield Stmt("SELECT max(v) FROM resilience_migrations", fetch=True)
    found = rows[0][0] if rows and rows[0][0] is not None else -1
    check_schema_version(found, where=where)
    for v, statements in enumerate(migrations(d)):
        if v <= found:
            continue
        for sql in statements:
            yield Stmt(sql)
        yield Stmt(d.sql("INSERT INTO resilience_migrations (v) VALUES (?)"), (v,))


def schema_version(d: Dialect) -> Statements[int | None]:
    """The stored schema version, or None when the table does not exist."""
    if d is POSTGRES:
        rows = yield Stmt("SELECT to_regclass('resilience_migrations') IS NOT NULL", fetch=True)
    else:
        rows = yield Stmt(
            "SELECT count(*) FROM sqlite_master WHERE name = 'resilience_migrations'",
            fetch=True,
        )
    if not rows[0][0]:
        return None
    rows = yield Stmt("SELECT max(v) FROM resilience_migrations", fetch=True)
    return -1 if rows[0][0] is None else int(rows[0][0])


# ---------------------------------------------------------------------------
# Counters
# ---------------------------------------------------------------------------

CHECKPOINT_OK = "checkpoint_put_ok"
CHECKPOINT_FAILED = "checkpoint_put_failed"
WRITES_OK = "writes_put_ok"
WRITES_FAILED = "writes_put_failed"
COUNTER_NAMES = (CHECKPOINT_OK, CHECKPOINT_FAILED, WRITES_OK, WRITES_FAILED)


def process_scope() -> str:
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


#: Successful tries are stored at most this often (seconds); failed ones with
#: the next successful write. Storing a count with every write would cost the
#: happy path a row update per checkpoint.
COUNTER_FLUSH_INTERVAL = 1.0


@dataclass
class Counters:
    """Counts kept by one saver (and every copy of it, e.g. under strict msgpack).

    A try's outcome is known only after its transaction, so counts wait here
    and ride along with a later successful write: at once when a failure is
    waiting, otherwise at most every `COUNTER_FLUSH_INTERVAL` seconds. What
    waits here when the process dies is lost; `flush_counters()` on a saver (run
    when its ``from_conn_string`` block exits) stores it.
    """

    scope: str = field(default_factory=process_scope)
    unflushed: dict[str, int] = field(default_factory=dict)
    last_flush: float = 0.0
    interval: float = COUNTER_FLUSH_INTERVAL
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str) -> None:
        with self.lock:
            self.unflushed[name] = self.unflushed.get(name, 0) + 1

    def take_due(self, now: float) -> dict[str, int]:
        """The counts to store with the write about to run (maybe none)."""
        with self.lock:
            failures = any(name.endswith("_failed") for name in self.unflushed)
            if not self.unflushed or not (failures or now - self.last_flush >= self.interval):
                return {}
            deltas, self.unflushed, self.last_flush = self.unflushed, {}, now
        return deltas

    def take_all(self) -> dict[str, int]:
        with self.lock:
            deltas, self.unflushed = self.unflushed, {}
        return deltas

    def give_back(self, deltas: dict[str, int]) -> None:
        """Undo a take after the transaction failed after all."""
        with self.lock:
            for name, n in deltas.items():
                self.unflushed[name] = self.unflushed.get(name, 0) + n

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self.unflushed)


_BUMP = (
    "INSERT INTO resilience_counters (scope, name, value) VALUES (?, ?, ?) "
    "ON CONFLICT (scope, name) DO UPDATE SET value = resilience_counters.value + excluded.value"
)


def bump(d: Dialect, scope: str, deltas: dict[str, int]) -> Statements[None]:
    rows = [(scope, name, n) for name, n in sorted(deltas.items()) if n]
    if rows:
        yield Stmt(d.sql(_BUMP), rows, many=True)


def no_statements() -> Statements[None]:
    """Nothing to run (a transaction that only stores what waits to ride along)."""
    yield from ()


def riders(
    d: Dialect, scope: str, deltas: dict[str, int], outcomes: dict[tuple[str, str], OutcomeFields]
) -> Statements[None]:
    """What rides along with a write: side-effect outcomes written behind, then counts."""
    if outcomes:
        rows = [(*fields, thread, key) for (thread, key), fields in sorted(outcomes.items())]
        yield Stmt(d.sql(_OUTCOME), rows, many=True)
    yield from bump(d, scope, deltas)


def read_counters(d: Dialect, counters: Counters) -> Statements[dict[str, int]]:
    """Stored counts of every process, plus what this saver has not stored yet."""
    rows = yield Stmt("SELECT name, sum(value) FROM resilience_counters GROUP BY name", fetch=True)
    found = dict.fromkeys(COUNTER_NAMES, 0)
    for name, value in [*rows, *counters.snapshot().items()]:
        found[str(name)] = found.get(str(name), 0) + int(value)
    return found


# ---------------------------------------------------------------------------
# No silent forks
# ---------------------------------------------------------------------------


def needs_fork_check(metadata: Any, parent_id: str | None) -> bool:
    """Only a run continuing a thread (input or loop) from a parent is checked.

    ``update``/``fork`` checkpoints (``update_state``, time travel) branch on
    purpose, and a checkpoint without a parent starts a thread.
    """
    source = metadata.get("source") if isinstance(metadata, dict) else None
    return parent_id is not None and source in ("input", "loop")


_NEWER_THAN_PARENT = (
    "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
    "AND checkpoint_id > ? AND checkpoint_id <> ? ORDER BY checkpoint_id DESC LIMIT 1"
)


def refuse_fork(
    d: Dialect, thread_id: str, ns: str, parent_id: str, checkpoint_id: str
) -> Statements[None]:
    """Raise `CheckpointConflict` when the thread moved past ``parent_id`` (SQLite;
    Postgres checks inside its upsert, `_PG_PUT_UNLESS_NEWER`)."""
    params = (thread_id, ns, parent_id, checkpoint_id)
    rows = yield Stmt(d.sql(_NEWER_THAN_PARENT), params, fetch=True)
    if rows:
        raise CheckpointConflict(
            thread_id=thread_id,
            checkpoint_ns=ns,
            parent_id=parent_id,
            head_id=rows[0][0],
            checkpoint_id=checkpoint_id,
        )


def fork_conflict(
    exc: BaseException, thread_id: str, ns: str, parent_id: str, checkpoint_id: str
) -> CheckpointConflict | None:
    """The `CheckpointConflict` behind a Postgres error raised by the fork check."""
    diag = getattr(exc, "diag", None)
    if diag is None or getattr(diag, "message_primary", None) != FORK_MARKER:
        return None
    return CheckpointConflict(
        thread_id=thread_id,
        checkpoint_ns=ns,
        parent_id=parent_id,
        head_id=str(diag.message_detail),
        checkpoint_id=checkpoint_id,
    )


# ---------------------------------------------------------------------------
# Thread maintenance: delete, copy, delete_for_runs, prune (resilience side and
# the LangGraph tables SQLite lacks statements for)
# ---------------------------------------------------------------------------


def delete_threads(d: Dialect, thread_ids: Sequence[str]) -> Statements[None]:
    """Every row of the threads, LangGraph's and ours."""
    ids = d.list_param(thread_ids)
    for table in ("checkpoints", d.writes_table, *d.extra_thread_tables, *THREAD_TABLES):
        yield Stmt(d.sql(f"DELETE FROM {table} WHERE thread_id IN_LIST(?)"), (ids,))


def _columns(table: str, d: Dialect) -> tuple[str, ...]:
    if table == "checkpoints":
        return (
            "checkpoint_ns",
            "checkpoint_id",
            "parent_checkpoint_id",
            "type",
            "checkpoint",
            "metadata",
        )
    if table == d.writes_table:
        value = ("type", "value") if d is SQLITE else ("type", "blob")
        return ("checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx", "channel", *value)
    if table == "checkpoint_blobs":
        return ("checkpoint_ns", "channel", "version", "type", "blob")
    if table == "resilience_node_attempts":
        return (
            "checkpoint_ns",
            "checkpoint_id",
            "task_id",
            "attempt",
            "node",
            "status",
            "kind",
            "error_type",
            "reason",
            "started_at",
            "finished_at",
        )
    if table == "resilience_effects":
        return (
            "idempotency_key",
            "checkpoint_ns",
            "checkpoint_id",
            "task_id",
            "name",
            "args_digest",
            "status",
            "fencing_token",
            "intent_at",
            "outcome_at",
            "outcome_type",
            "outcome",
            "error",
        )
    raise KeyError(table)


def copy_thread(d: Dialect, source: str, target: str) -> Statements[None]:
    """Copy a thread's checkpoints, writes (and blobs) and resilience rows.

    Runs are not copied: a run is an execution, not state. A target that
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
    for table in ("checkpoints", d.writes_table, *d.extra_thread_tables, *CHECKPOINT_TABLES):
        cols = ", ".join(_columns(table, d))
        yield Stmt(
            d.sql(
                f"INSERT INTO {table} (thread_id, {cols}) "
                f"SELECT ?, {cols} FROM {table} WHERE thread_id = ?"
            ),
            (str(target), str(source)),
        )


def _orphans(table: str, d: Dialect) -> str:
    return d.sql(
        f"DELETE FROM {table} WHERE thread_id IN_LIST(?) AND NOT EXISTS ("
        f"SELECT 1 FROM checkpoints c WHERE c.thread_id = {table}.thread_id "
        f"AND c.checkpoint_ns = {table}.checkpoint_ns "
        f"AND c.checkpoint_id = {table}.checkpoint_id)"
    )


def delete_orphans(d: Dialect, thread_ids: Sequence[str]) -> Statements[None]:
    """Resilience rows whose checkpoint no longer exists (after a prune or delete)."""
    if not thread_ids:
        return
    ids = d.list_param(thread_ids)
    for table in CHECKPOINT_TABLES:
        yield Stmt(_orphans(table, d), (ids,))


_RUN_CHECKPOINTS = {
    "sqlite": (
        "SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints "
        "WHERE json_extract(CAST(metadata AS TEXT), '$.run_id') IN_LIST(?)"
    ),
    "postgres": (
        "SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints "
        "WHERE metadata ->> 'run_id' IN_LIST(?)"
    ),
}


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
    doomed = yield Stmt(d.sql(_RUN_CHECKPOINTS[d.name]), (d.list_param(run_ids),), fetch=True)
    by_ns: dict[tuple[str, str], list[str]] = {}
    for thread_id, ns, checkpoint_id in doomed:
        by_ns.setdefault((thread_id, ns), []).append(checkpoint_id)
    for (thread_id, ns), ids in sorted(by_ns.items()):
        yield from delete_checkpoints(d, thread_id, ns, ids)
    yield from delete_orphans(d, sorted({t for t, _ in by_ns}))
    yield Stmt(
        d.sql("DELETE FROM resilience_runs WHERE run_id IN_LIST(?)"), (d.list_param(run_ids),)
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
        d.sql(f"DELETE FROM {d.writes_table} WHERE {key} AND checkpoint_id IN_LIST(?)"),
        (thread_id, ns, ids),
    )
    if d is POSTGRES:
        freed = yield Stmt(
            "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s "
            "AND checkpoint_id = ANY(%s) RETURNING checkpoint -> 'channel_versions'",
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
                "DELETE FROM checkpoint_blobs WHERE thread_id = %s AND checkpoint_ns = %s "
                "AND channel = %s AND version = ANY(%s)",
                (thread_id, ns, channel, sorted(versions)),
            )
    else:
        yield Stmt(
            d.sql(f"DELETE FROM checkpoints WHERE {key} AND checkpoint_id IN_LIST(?)"),
            (thread_id, ns, ids),
        )
    yield Stmt(
        d.sql(
            f"UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE {key} "
            "AND parent_checkpoint_id IN_LIST(?)"
        ),
        (thread_id, ns, ids),
    )


PRUNE_STRATEGIES = ("keep_latest", "delete")


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


# ---------------------------------------------------------------------------
# Drivers
# ---------------------------------------------------------------------------


def _rows(cur: Any, fetched: Sequence[Any]) -> list[Row]:
    return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in fetched]


def execute(cur: Any, statements: Statements[T]) -> T:
    """Run a statement generator on a sync cursor (sqlite3 or psycopg)."""
    try:
        stmt = next(statements)
        while True:
            if stmt.many:
                cur.executemany(stmt.sql, stmt.params)
                rows: list[Row] = []
            else:
                cur.execute(stmt.sql, stmt.params)
                rows = _rows(cur, cur.fetchall()) if stmt.fetch else []
            stmt = statements.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def aexecute(cur: Any, statements: Statements[T]) -> T:
    """Async twin of `execute` (aiosqlite or psycopg async cursor)."""
    try:
        stmt = next(statements)
        while True:
            if stmt.many:
                await cur.executemany(stmt.sql, stmt.params)
                rows: list[Row] = []
            else:
                await cur.execute(stmt.sql, stmt.params)
                rows = _rows(cur, await cur.fetchall()) if stmt.fetch else []
            stmt = statements.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------
# Checkpoints and writes
# ---------------------------------------------------------------------------

_SQLITE_PUT = (
    "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
    "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_SQLITE_WRITES = (
    "INSERT OR {verb} INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
    "task_path, idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SQLITE_WRITES_REPLACE = _SQLITE_WRITES.format(verb="REPLACE")
SQLITE_WRITES_IGNORE = _SQLITE_WRITES.format(verb="IGNORE")


class PutCheckpoint(NamedTuple):
    """A checkpoint ready to store: keys, fork check, and the dialect's rows."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    check_fork: bool
    row: tuple[Any, ...]  # the checkpoints row, in the dialect's column order
    blob_rows: Sequence[tuple[Any, ...]] = ()  # Postgres only


_PG_PUT_UNLESS_NEWER = """
INSERT INTO checkpoints
    (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata)
SELECT %s, %s, %s, %s, %s, %s FROM resilience_refuse_fork(%s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id)
DO UPDATE SET checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata
"""


def put_checkpoint(
    d: Dialect, put: PutCheckpoint, *, upsert_sql: str = "", blobs_sql: str = ""
) -> Statements[None]:
    """Refuse a fork, then store the checkpoint (and its blobs on Postgres)."""
    if d is SQLITE and put.check_fork:
        # Check, then insert, in one transaction: in WAL mode a transaction that
        # read a snapshot another process has since moved past cannot write
        # ("database is locked"), and the retry reads afresh. (A single INSERT ...
        # SELECT copies the blob through a temporary table: slower.)
        assert put.parent_id is not None
        yield from refuse_fork(d, put.thread_id, put.ns, put.parent_id, put.checkpoint_id)
        yield Stmt(_SQLITE_PUT, put.row)
        return
    if put.blob_rows:
        yield Stmt(blobs_sql, put.blob_rows, many=True)
    if put.check_fork:
        # The check and the upsert in one statement: the guard raises first.
        assert put.parent_id is not None
        keys = (put.thread_id, put.ns, put.parent_id, put.checkpoint_id)
        yield Stmt(_PG_PUT_UNLESS_NEWER, (*put.row, *keys))
        return
    yield Stmt(upsert_sql or _SQLITE_PUT, put.row)


def writes_sql(writes: Sequence[tuple[str, Any]], *, replace: str, keep_first: str) -> str:
    """Special writes (error, interrupt, resume) replace older ones; others keep the first."""
    return replace if all(w[0] in WRITES_IDX_MAP for w in writes) else keep_first


def put_writes(sql: str, rows: Sequence[tuple[Any, ...]]) -> Statements[None]:
    if rows:
        yield Stmt(sql, rows, many=True)


def check_schema(d: Dialect) -> Statements[None]:
    """Refuse to write to a database whose resilience tables are missing or newer."""
    found = yield from schema_version(d)
    if found is None or found < SCHEMA_VERSION:
        raise ConfigError(
            f"the resilience tables of this {d.name} database are "
            f"{'missing' if found is None else f'at version {found}'} (this release needs "
            f"{SCHEMA_VERSION}). Call saver.setup() once before running graphs; it "
            "also runs LangGraph's own migrations."
        )
    check_schema_version(found, where=f"this {d.name} database")


# ---------------------------------------------------------------------------
# Node attempts
# ---------------------------------------------------------------------------


class AttemptRecord(NamedTuple):
    """One failed try of a task, as stored."""

    attempt: int
    node: str
    kind: str | None
    error_type: str | None
    reason: str | None
    finished_at: float | None


_INSERT_ATTEMPT = (
    "INSERT INTO resilience_node_attempts (thread_id, checkpoint_ns, checkpoint_id, task_id, "
    "attempt, node, status, kind, error_type, reason, started_at, finished_at) "
    "VALUES (?, ?, ?, ?, ?, ?, 'failed', ?, ?, ?, ?, ?) "
    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, attempt) DO UPDATE SET "
    "kind = excluded.kind, error_type = excluded.error_type, reason = excluded.reason, "
    "finished_at = excluded.finished_at"
)
_SELECT_ATTEMPTS = (
    "SELECT attempt, node, kind, error_type, reason, finished_at FROM resilience_node_attempts "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? AND task_id = ? "
    "ORDER BY attempt"
)


def record_attempt(
    d: Dialect, key: tuple[str, str, str, str], record: AttemptRecord, started_at: float
) -> Statements[None]:
    """Store a failed try (before the wait that follows it), idempotently."""
    yield Stmt(
        d.sql(_INSERT_ATTEMPT),
        (
            *key,
            record.attempt,
            record.node,
            record.kind,
            record.error_type,
            record.reason,
            started_at,
            record.finished_at,
        ),
    )


def read_attempts(d: Dialect, key: tuple[str, str, str, str]) -> Statements[list[AttemptRecord]]:
    rows = yield Stmt(d.sql(_SELECT_ATTEMPTS), key, fetch=True)
    return [AttemptRecord(int(r[0]), str(r[1]), *r[2:]) for r in rows]


# ---------------------------------------------------------------------------
# Side effects: intent and outcome records
# ---------------------------------------------------------------------------


class EffectRecord(NamedTuple):
    """One side effect of a thread, as stored."""

    idempotency_key: str
    name: str
    status: str  # intent | done | failed
    intent_at: float
    outcome_at: float | None
    outcome_type: str | None
    outcome: bytes | None
    error: str | None
    checkpoint_ns: str = ""
    checkpoint_id: str = ""
    task_id: str = ""


_EFFECT_COLUMNS = (
    "idempotency_key, name, status, intent_at, outcome_at, outcome_type, outcome, error, "
    "checkpoint_ns, checkpoint_id, task_id"
)


def _effect(row: Row) -> EffectRecord:
    blob = row[6]
    return EffectRecord(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        float(row[3]),
        None if row[4] is None else float(row[4]),
        row[5],
        None if blob is None else bytes(blob),
        row[7],
        str(row[8]),
        str(row[9]),
        str(row[10]),
    )


def read_effect(d: Dialect, thread_id: str, key: str) -> Statements[EffectRecord | None]:
    rows = yield Stmt(
        d.sql(
            f"SELECT {_EFFECT_COLUMNS} FROM resilience_effects "
            "WHERE thread_id = ? AND idempotency_key = ?"
        ),
        (thread_id, key),
        fetch=True,
    )
    return _effect(rows[0]) if rows else None


def record_intent(
    d: Dialect,
    thread_id: str,
    record: EffectRecord,
    args_digest: str | None,
) -> Statements[None]:
    """The intent, before the call (a second intent for the key changes nothing)."""
    yield Stmt(
        d.sql(
            "INSERT INTO resilience_effects (thread_id, idempotency_key, checkpoint_ns, "
            "checkpoint_id, task_id, name, args_digest, status, intent_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 'intent', ?) "
            "ON CONFLICT (thread_id, idempotency_key) DO NOTHING"
        ),
        (
            thread_id,
            record.idempotency_key,
            record.checkpoint_ns,
            record.checkpoint_id,
            record.task_id,
            record.name,
            args_digest,
            record.intent_at,
        ),
    )


class OutcomeFields(NamedTuple):
    """An effect's outcome (or error), as `record_outcome` stores it."""

    status: str  # done | failed
    at: float
    outcome_type: str | None
    outcome: bytes | None
    error: str | None


_OUTCOME = (
    "UPDATE resilience_effects SET status = ?, outcome_at = ?, outcome_type = ?, "
    "outcome = ?, error = ? WHERE thread_id = ? AND idempotency_key = ?"
)


@dataclass
class PendingOutcomes:
    """Effect outcomes written behind: they ride along with the saver's next write.

    That write is, in a node, the next effect's intent or the node's own writes
    (`put_writes`), which LangGraph stores as the node ends; a failed try stores
    its attempt. A process killed before then loses the outcome, and the intent
    stays without one, which ``reconcile`` (or a call with the same idempotency
    key) settles, as for a kill during the call. Reads of this saver see them.
    """

    waiting: dict[tuple[str, str], OutcomeFields] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, thread_id: str, key: str, fields: OutcomeFields) -> None:
        with self.lock:
            self.waiting[(thread_id, key)] = fields

    def take_all(self) -> dict[tuple[str, str], OutcomeFields]:
        if not self.waiting:  # unlocked peek: the common case, nothing waits
            return {}
        with self.lock:
            taken, self.waiting = self.waiting, {}
        return taken

    def give_back(self, taken: dict[tuple[str, str], OutcomeFields]) -> None:
        """Undo a take after the transaction failed after all (newer ones win)."""
        with self.lock:
            self.waiting = {**taken, **self.waiting}

    def overlay(self, thread_id: str, records: list[EffectRecord]) -> list[EffectRecord]:
        """Stored records as they are once their waiting outcomes are stored."""
        if not self.waiting:
            return records
        return [self._applied(thread_id, r) for r in records]

    def _applied(self, thread_id: str, record: EffectRecord) -> EffectRecord:
        fields = self.waiting.get((thread_id, record.idempotency_key))
        if fields is None:
            return record
        return record._replace(
            status=fields.status,
            outcome_at=fields.at,
            outcome_type=fields.outcome_type,
            outcome=fields.outcome,
            error=fields.error,
        )


def record_outcome(d: Dialect, thread_id: str, key: str, fields: OutcomeFields) -> Statements[None]:
    """The outcome (or the error) after the call, stored at once.

    Used for effects with ``on_unknown="raise"``; the others write it behind
    (`PendingOutcomes`). It is committed without waiting for the disk (Postgres
    ``synchronous_commit`` off for this transaction; SQLite's driver lowers
    ``synchronous`` around it): a process crash keeps it, and if a server or
    power failure loses it, the intent stays without outcome, which
    ``reconcile`` (or a call with the same idempotency key) settles.
    """
    if d is POSTGRES:
        yield Stmt("SELECT set_config('synchronous_commit', 'off', true)")
    yield Stmt(d.sql(_OUTCOME), (*fields, thread_id, key))


def list_effects(d: Dialect, thread_id: str) -> Statements[list[EffectRecord]]:
    rows = yield Stmt(
        d.sql(
            f"SELECT {_EFFECT_COLUMNS} FROM resilience_effects WHERE thread_id = ? "
            "ORDER BY intent_at, idempotency_key"
        ),
        (thread_id,),
        fetch=True,
    )
    return [_effect(r) for r in rows]


# ---------------------------------------------------------------------------
# Runs, leases and fencing
# ---------------------------------------------------------------------------

RUN_STATUSES = ("queued", "running", "paused", "success", "partial_complete", "error")
OPEN_STATUSES = ("queued", "running")


class Fence(NamedTuple):
    """The run a write belongs to and the fencing token its worker holds."""

    run_id: str
    token: int


class RunRecord(NamedTuple):
    """One run, as stored: its status and lease, and what it was given and gave back."""

    run_id: str
    thread_id: str
    status: str
    owner: str | None
    fencing_token: int
    lease_expires_at: float | None
    attempts: int  # claims so far
    recoveries: int  # claims of a run whose worker's lease had expired
    input_type: str | None
    input: bytes | None
    budget_type: str | None
    budget: bytes | None
    outcome_type: str | None
    outcome: bytes | None
    created_at: float
    updated_at: float


_RUN_COLUMNS = (
    "run_id, thread_id, status, owner, fencing_token, lease_expires_at, attempts, "
    "recoveries, input_type, input, budget_type, budget, outcome_type, outcome, "
    "created_at, updated_at"
)


def _run(row: Row) -> RunRecord:
    def blob(v: Any) -> bytes | None:
        return None if v is None else bytes(v)

    return RunRecord(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        row[3],
        int(row[4]),
        None if row[5] is None else float(row[5]),
        int(row[6]),
        int(row[7]),
        row[8],
        blob(row[9]),
        row[10],
        blob(row[11]),
        row[12],
        blob(row[13]),
        float(row[14]),
        float(row[15]),
    )


def fenced(d: Dialect, fence: Fence | None, statements: Statements[T]) -> Statements[T]:
    """Refuse the statements' write, in their transaction, unless ``fence`` still holds.

    Raises:
        LeaseLost: another worker claimed the run since (SQLite; Postgres raises
            a marked error that `lease_lost` maps).
    """
    if fence is not None:
        if d is POSTGRES:
            yield Stmt("SELECT resilience_check_fence(%s, %s)", (fence.run_id, fence.token))
        else:
            rows = yield Stmt(
                "SELECT fencing_token FROM resilience_runs WHERE run_id = ?",
                (fence.run_id,),
                fetch=True,
            )
            current = int(rows[0][0]) if rows else None
            if current != fence.token:
                raise lease_lost_error(fence, current)
    return (yield from statements)


def lease_lost_error(fence: Fence, current: int | None) -> LeaseLost:
    held = "the run is gone" if current is None else f"the run's token is now {current}"
    return LeaseLost(
        f"run {fence.run_id!r}: this worker's lease (fencing token {fence.token}) was "
        f"taken over ({held}); its write was refused. Another worker resumes the run "
        "from its last checkpoint; this one must stop working on it."
    )


def lease_lost(exc: BaseException, fence: Fence | None) -> LeaseLost | None:
    """The `LeaseLost` behind a Postgres error raised by the fencing check."""
    diag = getattr(exc, "diag", None)
    if fence is None or diag is None or getattr(diag, "message_primary", None) != LEASE_MARKER:
        return None
    detail = str(diag.message_detail)
    return lease_lost_error(fence, None if detail == "none" else int(detail))


def one_open_run(thread_id: str) -> ConfigError:
    return ConfigError(
        f"thread {thread_id!r} already has an open run (queued, running or paused); a "
        "thread runs one run at a time. Submit to another thread_id (or none, for a new "
        "one), or wait until that run ends."
    )


def open_run_conflict(exc: BaseException, thread_id: str) -> ConfigError | None:
    """The `ConfigError` behind the unique index refusing a second open run."""
    text = str(exc)
    if "resilience_runs_one_open" in text or "resilience_runs.thread_id" in text:
        return one_open_run(thread_id)
    return None


def submit_run(
    d: Dialect,
    run_id: str,
    thread_id: str,
    input_: tuple[str, bytes] | None,
    budget: tuple[str, bytes] | None,
) -> Statements[None]:
    """A queued run. A thread with a queued or running run takes no second one."""
    rows = yield Stmt(
        d.sql(
            "SELECT run_id, status FROM resilience_runs WHERE thread_id = ? "
            "AND status IN ('queued', 'running', 'paused')"
        ),
        (thread_id,),
        fetch=True,
    )
    if rows:
        raise ConfigError(f"{one_open_run(thread_id)} (It is run {rows[0][0]!r}, {rows[0][1]}.)")
    yield Stmt(
        d.sql(
            "INSERT INTO resilience_runs (run_id, thread_id, status, input_type, input, "
            "budget_type, budget, created_at, updated_at) "
            "VALUES (?, ?, 'queued', ?, ?, ?, ?, NOW(), NOW())"
        ),
        (
            run_id,
            thread_id,
            *(input_ or (None, None)),
            *(budget or (None, None)),
        ),
    )


def claim_runs(d: Dialect, owner: str, limit: int, lease_ttl: float) -> Statements[list[RunRecord]]:
    """Claim up to ``limit`` runs: queued ones first, then running ones whose lease
    expired (a recovery). Each claim bumps the fencing token."""
    rows = yield Stmt(
        d.sql(
            "UPDATE resilience_runs SET status = 'running', owner = ?, "
            "fencing_token = fencing_token + 1, lease_expires_at = NOW() + ?, "
            "attempts = attempts + 1, "
            "recoveries = recoveries + CASE WHEN status = 'running' THEN 1 ELSE 0 END, "
            "updated_at = NOW() "
            "WHERE run_id IN (SELECT run_id FROM resilience_runs "
            "WHERE status = 'queued' OR (status = 'running' AND lease_expires_at < NOW()) "
            "ORDER BY status = 'queued', created_at LIMIT ? SKIP_LOCKED) "
            f"RETURNING {_RUN_COLUMNS}"
        ),
        (owner, float(lease_ttl), int(limit)),
        fetch=True,
    )
    return sorted((_run(r) for r in rows), key=lambda r: r.created_at)


def renew_leases(
    d: Dialect, owner: str, fences: Sequence[Fence], lease_ttl: float
) -> Statements[list[str]]:
    """Extend the leases this worker still holds; returns their run ids."""
    if not fences:
        return []
    rows = yield Stmt(
        d.sql(
            "UPDATE resilience_runs SET lease_expires_at = NOW() + ?, updated_at = NOW() "
            "WHERE owner = ? AND status = 'running' AND run_id IN_LIST(?) "
            "RETURNING run_id, fencing_token"
        ),
        (float(lease_ttl), owner, d.list_param(f.run_id for f in fences)),
        fetch=True,
    )
    held = {(str(r[0]), int(r[1])) for r in rows}
    return [f.run_id for f in fences if (f.run_id, f.token) in held]


def finish_run(
    d: Dialect,
    fence: Fence,
    status: str,
    outcome: tuple[str, bytes] | None,
) -> Statements[bool]:
    """End (or release, ``status="queued"``; or pause) a run this worker holds.
    False when the lease was lost meanwhile (nothing is changed)."""
    if status not in RUN_STATUSES or status == "running":
        raise ConfigError(f"a run cannot be finished as {status!r}")
    rows = yield Stmt(
        d.sql(
            "UPDATE resilience_runs SET status = ?, owner = NULL, lease_expires_at = NULL, "
            "outcome_type = ?, outcome = ?, updated_at = NOW() "
            "WHERE run_id = ? AND fencing_token = ? AND status = 'running' RETURNING run_id"
        ),
        (status, *(outcome or (None, None)), fence.run_id, fence.token),
        fetch=True,
    )
    return bool(rows)


def requeue_run(d: Dialect, run_id: str, budget: tuple[str, bytes] | None) -> Statements[bool]:
    """Queue a paused run again (with a new budget, if given)."""
    rows = yield Stmt(
        d.sql(
            "UPDATE resilience_runs SET status = 'queued', "
            "budget_type = coalesce(?, budget_type), budget = coalesce(?, budget), "
            "updated_at = NOW() WHERE run_id = ? AND status = 'paused' RETURNING run_id"
        ),
        (*(budget or (None, None)), run_id),
        fetch=True,
    )
    return bool(rows)


def read_run(d: Dialect, run_id: str) -> Statements[RunRecord | None]:
    rows = yield Stmt(
        d.sql(f"SELECT {_RUN_COLUMNS} FROM resilience_runs WHERE run_id = ?"),
        (run_id,),
        fetch=True,
    )
    return _run(rows[0]) if rows else None


def list_runs(d: Dialect, statuses: Sequence[str] = ()) -> Statements[list[RunRecord]]:
    where = "WHERE status IN_LIST(?) " if statuses else ""
    rows = yield Stmt(
        d.sql(f"SELECT {_RUN_COLUMNS} FROM resilience_runs {where}ORDER BY created_at, run_id"),
        (d.list_param(statuses),) if statuses else (),
        fetch=True,
    )
    return [_run(r) for r in rows]


def open_runs(d: Dialect) -> Statements[int]:
    """Runs some worker still has to finish (queued, or running under a lease)."""
    rows = yield Stmt(
        "SELECT count(*) FROM resilience_runs WHERE status IN ('queued', 'running')",
        fetch=True,
    )
    return int(rows[0][0])
