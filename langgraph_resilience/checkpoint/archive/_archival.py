"""The SQL of the cold tier: which threads are idle, a thread's rows to archive,
the claim an archiver holds, the hot delete after the archive is confirmed, and
the restore that puts a thread back (once, however many readers race).

A thread's state in ``resilience_archive`` (`_schema.ARCHIVE`): no row or
``hot`` (its checkpoints are in the hot tier), ``archiving`` (an archiver holds
the claim; the hot rows stay until it is done) or ``archived`` (its checkpoints,
writes and node attempts are in the archive only). Runs and side effects never
leave the hot tier: the ledger stays transactional, and an effect recorded
before archival is found, not called again, after the restore.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from langgraph_resilience.checkpoint.store._schema import ARCHIVE, ATTEMPTS, OPEN_STATUSES, RUNS
from langgraph_resilience.checkpoint.store._store import Dialect, Row, Statements, Stmt
from langgraph_resilience.checkpoint.store._sums import SUM, write_sum

__all__ = [
    "ThreadRows",
    "archive_status",
    "claim_thread",
    "finish_archive",
    "idle_threads",
    "release_thread",
    "restore_thread",
    "thread_rows",
]

_OPEN = ", ".join(f"'{s}'" for s in OPEN_STATUSES)
_A = ARCHIVE.name


def idle_threads(
    d: Dialect, before_id: str, idle_seconds: float, limit: int
) -> Statements[list[str]]:
    """Threads whose newest checkpoint id is older than ``before_id`` (uuid6 ids
    order by time), with no open run, no run or restore within ``idle_seconds``,
    and no live archival claim."""
    rows = yield Stmt(
        d.sql(
            "SELECT c.thread_id FROM checkpoints c WHERE c.thread_id NOT IN ("
            f"SELECT r.thread_id FROM {RUNS.name} r WHERE r.status IN ({_OPEN}) "
            "OR r.updated_at >= NOW() - ?) AND c.thread_id NOT IN ("
            f"SELECT a.thread_id FROM {_A} a WHERE a.touched_at >= NOW() - ? "
            "OR (a.status = 'archiving' AND a.claimed_until >= NOW())) "
            "GROUP BY c.thread_id HAVING max(c.checkpoint_id) < ? "
            "ORDER BY c.thread_id LIMIT ?"
        ),
        (idle_seconds, idle_seconds, before_id, limit),
        fetch=True,
    )
    return [str(r[0]) for r in rows]


def claim_thread(d: Dialect, thread_id: str, claim: str, ttl: float) -> Statements[bool]:
    """Take the archival of a hot thread for ``ttl`` seconds (an expired claim
    of a dead archiver is taken over); False if another archiver holds it or the
    thread is archived already."""
    rows = yield Stmt(
        d.sql(
            f"INSERT INTO {_A} (thread_id, status, claim, claimed_until) "
            "VALUES (?, 'archiving', ?, NOW() + ?) ON CONFLICT (thread_id) DO UPDATE SET "
            "status = 'archiving', claim = excluded.claim, claimed_until = excluded.claimed_until "
            f"WHERE {_A}.status = 'hot' "
            f"OR ({_A}.status = 'archiving' AND {_A}.claimed_until < NOW()) "
            "RETURNING thread_id"
        ),
        (thread_id, claim, ttl),
        fetch=True,
    )
    return bool(rows)


def release_thread(d: Dialect, thread_id: str, claim: str) -> Statements[None]:
    """Give a claim back (the thread stays hot)."""
    yield Stmt(
        d.sql(
            f"UPDATE {_A} SET status = 'hot', claim = NULL, claimed_until = NULL "
            "WHERE thread_id = ? AND status = 'archiving' AND claim = ?"
        ),
        (thread_id, claim),
    )


class ThreadRows(NamedTuple):
    """A thread's writes and node attempts, and what tells whether it changed."""

    writes: list[Row]  # (ns, checkpoint_id, task_id, task_path, idx, channel, type, value)
    attempts: list[dict[str, Any]]
    signature: tuple[Any, ...]


def _signature(d: Dialect, thread_id: str) -> Statements[tuple[Any, ...]]:
    rows = yield Stmt(
        d.sql(
            "SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = ?), "
            "(SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = ?), "
            f"(SELECT count(*) FROM {d.writes.name} WHERE thread_id = ?), "
            f"(SELECT count(*) FROM {ATTEMPTS.name} WHERE thread_id = ?)"
        ),
        (thread_id,) * 4,
        fetch=True,
    )
    return tuple(str(v) for v in rows[0])


def thread_rows(d: Dialect, thread_id: str) -> Statements[ThreadRows]:
    value = d.writes.columns[-1].name  # value (SQLite) or blob (Postgres)
    writes = yield Stmt(
        d.sql(
            "SELECT checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, "
            f"{value} FROM {d.writes.name} WHERE thread_id = ?"
        ),
        (thread_id,),
        fetch=True,
    )
    attempts = yield Stmt(
        d.sql(f"SELECT {', '.join(ATTEMPTS.names)} FROM {ATTEMPTS.name} WHERE thread_id = ?"),
        (thread_id,),
        fetch=True,
    )
    signature = yield from _signature(d, thread_id)
    return ThreadRows(
        writes=[(*w[:7], bytes(w[7])) for w in writes],
        attempts=[dict(zip(ATTEMPTS.names, a, strict=True)) for a in attempts],
        signature=signature,
    )


def finish_archive(
    d: Dialect, thread_id: str, claim: str, signature: tuple[Any, ...], objects: int
) -> Statements[bool]:
    """After every object is confirmed in the archive: delete the thread's hot
    checkpoints, writes (blobs) and node attempts, and mark it archived, in one
    transaction; unless the claim was lost, a run opened or the thread changed
    since it was read (then it stays hot, and the claim is given back)."""
    held = yield Stmt(
        d.sql(f"SELECT claim FROM {_A} WHERE thread_id = ? AND status = 'archiving'"),
        (thread_id,),
        fetch=True,
    )
    if not held or held[0][0] != claim:
        return False
    busy = yield Stmt(
        d.sql(f"SELECT count(*) FROM {RUNS.name} WHERE thread_id = ? AND status IN ({_OPEN})"),
        (thread_id,),
        fetch=True,
    )
    now = yield from _signature(d, thread_id)
    if busy[0][0] or now != tuple(signature):
        yield from release_thread(d, thread_id, claim)
        return False
    for table in (*d.thread_tables, ATTEMPTS):
        yield Stmt(d.sql(f"DELETE FROM {table.name} WHERE thread_id = ?"), (thread_id,))
    yield Stmt(
        d.sql(
            f"UPDATE {_A} SET status = 'archived', claim = NULL, claimed_until = NULL, "
            "objects = ?, archived_at = NOW() WHERE thread_id = ?"
        ),
        (objects, thread_id),
    )
    return True


def archive_status(d: Dialect, thread_id: str) -> Statements[str | None]:
    """``archived``, ``archiving``, ``hot`` or None (never archived)."""
    rows = yield Stmt(
        d.sql(f"SELECT status FROM {_A} WHERE thread_id = ?"), (thread_id,), fetch=True
    )
    return str(rows[0][0]) if rows else None


def restore_thread(
    d: Dialect,
    thread_id: str,
    puts: Sequence[Any],
    put_statements: Callable[[Any], Statements[None]],
    writes: Sequence[Row],
    attempts: Sequence[dict[str, Any]],
) -> Statements[bool]:
    """Put an archived thread back in the hot tier; False if another reader did
    first (the status row is the once-only gate: the second waits on its lock
    and then finds it hot)."""
    won = yield Stmt(
        d.sql(
            f"UPDATE {_A} SET status = 'hot', touched_at = NOW(), objects = 0 "
            "WHERE thread_id = ? AND status = 'archived' RETURNING thread_id"
        ),
        (thread_id,),
        fetch=True,
    )
    if not won:
        return False
    for put in puts:
        yield from put_statements(put)
    names = (*d.writes.names, SUM)  # the sums are computed again (`_sums`)
    if writes:
        yield Stmt(
            d.sql(
                f"INSERT INTO {d.writes.name} ({', '.join(names)}) VALUES "
                f"({', '.join('?' for _ in names)}) ON CONFLICT DO NOTHING"
            ),
            [(thread_id, *w, write_sum(*w[1:])) for w in writes],
            many=True,
        )
    by_columns: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
    for row in attempts:
        known = tuple(c for c in ATTEMPTS.names if c in row)
        by_columns.setdefault(known, []).append(tuple(row[c] for c in known))
    for columns, rows in by_columns.items():
        yield Stmt(
            d.sql(
                f"INSERT INTO {ATTEMPTS.name} ({', '.join(columns)}) VALUES "
                f"({', '.join('?' for _ in columns)}) ON CONFLICT DO NOTHING"
            ),
            rows,
            many=True,
        )
    return True
