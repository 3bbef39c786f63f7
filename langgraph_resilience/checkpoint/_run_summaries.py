"""What `list_runs` (the ``runs`` command) reads: the run ledger's runs, newest
first, each with its `Worker` run (claims, holder, the status a Worker saw)
and its recoveries counted, plus the `Worker` runs that never started a run of
their thread; both dialects, one page of ``limit`` read through indexes
(``updated_at``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph_resilience.checkpoint._run_log_reads import ENDED
from langgraph_resilience.checkpoint._schema import RECOVERIES, RUN_LOG, RUNS
from langgraph_resilience.checkpoint._store import Dialect, Statements, Stmt

__all__ = ["list_summaries"]

_ENDED = ", ".join(repr(s) for s in ENDED)
# A Worker's own word wins when it failed or cancelled the run, or when the
# ledger's row has not ended (queued again, say).
_STATUS = (
    "CASE WHEN w.status IN ('error', 'cancelled') OR "
    f"(w.status IS NOT NULL AND r.status NOT IN ({_ENDED})) THEN w.status ELSE r.status END"
)
_LEDGER = (
    f"SELECT r.thread_id, r.run, r.run_id, {_STATUS}, w.attempts, "
    f"(SELECT count(*) FROM {RECOVERIES.name} c WHERE c.thread_id = r.thread_id "
    "AND c.run = r.run), w.owner, r.updated_at "
    f"FROM {RUN_LOG.name} r LEFT JOIN {RUNS.name} w ON w.run_id = r.run_id "
    "{where}ORDER BY r.updated_at DESC, r.thread_id DESC, r.run DESC LIMIT ?"
)
_UNSTARTED = (
    "SELECT w.thread_id, 0, w.run_id, w.status, w.attempts, 0, w.owner, w.updated_at "
    f"FROM {RUNS.name} w WHERE NOT EXISTS (SELECT 1 FROM {RUN_LOG.name} r "
    "WHERE r.run_id = w.run_id) {where}ORDER BY w.updated_at DESC LIMIT ?"
)


def list_summaries(
    d: Dialect, statuses: Sequence[str] | None, limit: int
) -> Statements[list[tuple[Any, ...]]]:
    """Up to ``limit`` runs, newest first: (thread, run, run id, status, claims,
    recoveries, owner, updated); a `Worker` run that never started is run 0."""
    found: list[tuple[Any, ...]] = []
    for sql, status in ((_LEDGER, _STATUS), (_UNSTARTED, "w.status")):
        where, params = "", tuple[Any, ...]()
        if statuses is not None:
            where, params = f"WHERE {status} IN_LIST(?) ", (d.list_param(statuses),)
        if sql is _UNSTARTED and where:
            where = "AND " + where[len("WHERE ") :]
        rows = yield Stmt(d.sql(sql.format(where=where)), (*params, limit), fetch=True)
        found.extend(tuple(r) for r in rows)
    found.sort(key=lambda r: (float(r[7] or 0.0), str(r[0]), int(r[1])), reverse=True)
    return found[:limit]
