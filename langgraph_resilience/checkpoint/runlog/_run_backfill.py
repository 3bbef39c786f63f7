"""The one-time backfill of the run ledger, both dialects: the threads written
before it (``resilience_backfill``, listed by migration 27) get their run, step
and recovery rows from what `history._backfill` reads back from their writes.

Each thread is stored in one transaction that also deletes its pending row, and
every insert keeps a row already there (``ON CONFLICT DO NOTHING``: what the
ledger wrote itself, or another process's backfill of the same thread), so the
backfill is idempotent and safe to run from several processes at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph_resilience.checkpoint.store._schema import (
    BACKFILL,
    RECOVERIES,
    RECOVERY_PATHS,
    RUN_LOG,
    STEPS,
)
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt

__all__ = ["pending_threads", "store_backfill"]


def pending_threads(d: Dialect, limit: int = 500) -> Statements[list[str]]:
    """Threads still to be read into the ledger (at most ``limit``)."""
    rows = yield Stmt(
        d.sql(f"SELECT thread_id FROM {BACKFILL.name} ORDER BY thread_id LIMIT ?"),
        (limit,),
        fetch=True,
    )
    return [str(r[0]) for r in rows]


def _insert(table: str, names: Sequence[str]) -> str:
    places = ", ".join("?" for _ in names)
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({places}) ON CONFLICT DO NOTHING"


# A run row the ledger holds is kept, unless no top-level checkpoint started it:
# a nested run log's own story (under a parent that keeps none), which only the
# scan tells, read again each time the thread is listed.
_T = RUN_LOG.name
_RUNS = (
    f"{_insert(_T, RUN_LOG.names).removesuffix(' ON CONFLICT DO NOTHING')} "
    "ON CONFLICT (thread_id, run) DO UPDATE SET status = excluded.status, "
    "ended_at = excluded.ended_at, updated_at = excluded.updated_at, "
    "failed_step = excluded.failed_step, usage = coalesce(excluded.usage, "
    f"{_T}.usage) WHERE NOT EXISTS (SELECT 1 FROM checkpoints c "
    f"WHERE c.thread_id = {_T}.thread_id AND c.checkpoint_ns = '' "
    f"AND c.checkpoint_id = {_T}.checkpoint_id)"
)
_RECOVERY_NAMES = ("thread_id", "key", "kind", "run_id", "owner", "checkpoint_id", "at", "run")


def store_backfill(
    d: Dialect,
    thread_id: str,
    runs: Sequence[tuple[Any, ...]],
    steps: Sequence[tuple[Any, ...]],
    recoveries: Sequence[tuple[Any, ...]],
    paths: Sequence[tuple[str, str, str]],
) -> Statements[None]:
    """One thread's rows (each in its table's column order; recoveries as
    `_RECOVERY_NAMES`), the crash and takeover rows stored before their run had
    a row given it, and the thread taken off the pending list."""
    if runs:
        yield Stmt(d.sql(_RUNS), list(runs), many=True)
    for table, names, rows in (
        (STEPS.name, STEPS.names, steps),
        (RECOVERIES.name, _RECOVERY_NAMES, recoveries),
        (RECOVERY_PATHS.name, RECOVERY_PATHS.names, paths),
    ):
        if rows:
            yield Stmt(d.sql(_insert(table, names)), list(rows), many=True)
    yield Stmt(
        d.sql(
            f"UPDATE {RECOVERIES.name} SET run = (SELECT max(r.run) FROM {RUN_LOG.name} r "
            f"WHERE r.thread_id = {RECOVERIES.name}.thread_id "
            f"AND r.started_at <= {RECOVERIES.name}.at) WHERE thread_id = ? AND run IS NULL"
        ),
        (thread_id,),
    )
    yield Stmt(d.sql(f"DELETE FROM {BACKFILL.name} WHERE thread_id = ?"), (thread_id,))
