"""What `list_runs` (the ``runs`` command) and `run_report` read of the run
ledger, both dialects: a page of runs, newest first, each with its `Worker`
run (claims, holder, the status a Worker saw) and its recoveries counted, plus
the `Worker` runs that never started a run of their thread (read through the
``updated_at`` indexes); and the rows of one thread (`read_thread_ledger`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_resilience._langgraph import INTERRUPT_CHANNEL
from langgraph_resilience.checkpoint.runlog._events import RecoveryRecord, read_recoveries
from langgraph_resilience.checkpoint.runlog._run_log_reads import (
    ENDED,
    RunLogRecord,
    list_run_rows,
)
from langgraph_resilience.checkpoint.runlog._step_rows import ROW_FIELDS, record_fields
from langgraph_resilience.checkpoint.store._schema import (
    RECOVERIES,
    RECOVERY_PATHS,
    RUN_LOG,
    RUNS,
    STEPS,
)
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt

__all__ = ["ThreadLedger", "list_summaries", "read_thread_ledger"]

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
    "AND c.run = r.run), w.owner, r.updated_at, r.error, w.lease_expires_at AS lease_end, "
    "w.holder AS worker_holder, r.holder AS run_holder, r.seen_at AS seen_at, "
    "CASE WHEN r.status = 'running' AND r.holder IS NOT NULL THEN "
    f"(SELECT max(s.ended_at) FROM {STEPS.name} s WHERE s.thread_id = r.thread_id "
    "AND s.run = r.run) END AS stepped "
    f"FROM {RUN_LOG.name} r LEFT JOIN {RUNS.name} w ON w.run_id = r.run_id "
    "{where}ORDER BY r.updated_at DESC, r.thread_id DESC, r.run DESC LIMIT ?"
)
_UNSTARTED = (
    "SELECT w.thread_id, 0, w.run_id, w.status, w.attempts, 0, w.owner, w.updated_at, "
    "NULL AS error, w.lease_expires_at AS lease_end, w.holder AS worker_holder, "
    "NULL AS run_holder, NULL AS seen_at, NULL AS stepped "
    f"FROM {RUNS.name} w WHERE NOT EXISTS (SELECT 1 FROM {RUN_LOG.name} r "
    "WHERE r.run_id = w.run_id) {where}ORDER BY w.updated_at DESC LIMIT ?"
)


def list_summaries(
    d: Dialect, statuses: Sequence[str] | None, limit: int
) -> Statements[list[tuple[Any, ...]]]:
    """Up to ``limit`` runs, newest first: (thread, run, run id, status, claims,
    recoveries, owner, updated, error, lease end, Worker holder, holder, seen at,
    latest step end); a `Worker` run that never started is run 0. The last five
    tell whether a ``running`` run's process is gone (`_liveness`); the step end
    is read for a running run no Worker holds only."""
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


_STEP_COLUMNS = ("checkpoint_ns", "checkpoint_id", "task_id", *ROW_FIELDS, "tried")


@dataclass(frozen=True, kw_only=True, slots=True)
class ThreadLedger:
    """What `run_report` folds, of one thread: its run rows, step records (as
    `_STEP_COLUMNS`, ``kinds`` and ``usage`` decoded), recoveries, the paths
    each ``retry_failed`` re-runs (by key), and the top-level tasks that wrote
    an interrupt, by checkpoint (the keys of those writes, never their values)."""

    runs: list[RunLogRecord]
    steps: list[dict[str, Any]]
    recoveries: list[RecoveryRecord]
    paths: dict[str, list[str]]
    interrupted: dict[str, set[str]]


def read_thread_ledger(d: Dialect, thread_id: str) -> Statements[ThreadLedger]:
    """One thread's ledger rows (see `ThreadLedger`)."""
    runs = yield from list_run_rows(d, thread_id=thread_id, limit=1_000_000)
    rows = yield Stmt(
        d.sql(
            f"SELECT {', '.join(_STEP_COLUMNS)} FROM {STEPS.name} WHERE thread_id = ? "
            "ORDER BY checkpoint_id, started_at"
        ),
        (thread_id,),
        fetch=True,
    )
    steps = []
    for row in rows:
        step = record_fields(dict(zip(_STEP_COLUMNS, row, strict=True)))
        step["usage"] = step["usage"] or {}
        steps.append(step)
    recoveries = yield from read_recoveries(d, thread_id)
    paths: dict[str, list[str]] = {}
    rows = yield Stmt(
        d.sql(f"SELECT key, path FROM {RECOVERY_PATHS.name} WHERE thread_id = ? ORDER BY path"),
        (thread_id,),
        fetch=True,
    )
    for key, path in rows:
        paths.setdefault(str(key), []).append(str(path))
    rows = yield Stmt(
        d.sql(
            f"SELECT checkpoint_id, task_id FROM {d.writes.name} WHERE thread_id = ? "
            "AND checkpoint_ns = '' AND channel = ?"
        ),
        (thread_id, INTERRUPT_CHANNEL),
        fetch=True,
    )
    interrupted: dict[str, set[str]] = {}
    for checkpoint_id, task_id in rows:
        interrupted.setdefault(str(checkpoint_id), set()).add(str(task_id))
    return ThreadLedger(
        runs=sorted(runs, key=lambda r: r.run),
        steps=steps,
        recoveries=recoveries,
        paths=paths,
        interrupted=interrupted,
    )
