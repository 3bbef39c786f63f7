"""The run ledger's one-time backfill: the threads written before it get their
rows, read back once from their writes by the decoding scan (`_scan`, its only
reader now).

Migration 27 lists the threads whose top-level checkpoints are older than
their first run row (``resilience_backfill``). The first history read
(`recovery_metrics`, `run_report`, `list_runs`) that finds that list non-empty
reads each listed thread's runs, steps and recoveries from its writes as the
readers did before the ledger, stores them as rows (runs, steps, the
``retry_failed`` / budget / human recoveries with the paths a retry re-runs,
and the run of each crash or takeover stored before) and takes the thread off
the list, in one transaction per thread. A row the ledger already holds is kept
(a thread with runs before and after the upgrade keeps its later rows), and two
processes backfilling at once insert nothing twice: the backfill is idempotent.
After it, no read decodes writes. A run of a `Worker` that never started stays
a `Worker` run only (``resilience_runs``), as on a store written since.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from langgraph_resilience.checkpoint.runlog import _reads as reads
from langgraph_resilience.checkpoint.runlog._reads import Reads
from langgraph_resilience.checkpoint.runlog._step_rows import step_row
from langgraph_resilience.history._scan import ThreadRun, scan_thread
from langgraph_resilience.history._writes import decode_writes

__all__ = ["backfilled", "ledger_rows", "scan_store"]


def scan_store(
    loads: Callable[[tuple[str, bytes]], Any], thread_id: str | None = None
) -> Reads[list[ThreadRun]]:
    """Every run of the store (or of one thread) read back from its writes, with
    its recoveries."""
    writes = decode_writes((yield reads.run_log(thread_id)), loads)
    events = list((yield reads.recoveries(thread_id)))
    records = list((yield reads.runs(thread_id)))
    threads = sorted({w.thread_id for w in writes} | {r.thread_id for r in records})
    by_thread: dict[str, list[Any]] = {t: [] for t in threads}
    for w in writes:
        by_thread[w.thread_id].append(w)
    runs: list[ThreadRun] = []
    for thread in threads:
        mine = [e for e in events if e.thread_id == thread]
        submitted = [r for r in records if r.thread_id == thread]
        runs.extend(scan_thread(thread, by_thread[thread], mine, submitted))
    return runs


def _usage(values: Iterable[dict[str, Any]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for usage in values:
        for k, v in usage.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                total[k] = total.get(k, 0.0) + float(v)
    return total


def ledger_rows(runs: Iterable[ThreadRun]) -> tuple[list[tuple[Any, ...]], ...]:
    """The rows of a thread's scanned runs: runs, steps, recoveries, paths (in
    `_run_backfill.store_backfill`'s column orders)."""
    run_rows: list[tuple[Any, ...]] = []
    step_rows: list[tuple[Any, ...]] = []
    recoveries: list[tuple[Any, ...]] = []
    paths: list[tuple[Any, ...]] = []
    for run in runs:
        if run.run <= 0:
            continue  # a Worker run that never started: its resilience_runs row
        steps = run.steps
        started = run.started_at
        if started is None:
            started = min(
                (float(s["started_at"]) for s in steps if s.get("started_at")), default=0.0
            )
        failed = [s for s in steps if s.get("status") == "failed"]
        failed_path = str(failed[-1].get("path")) if failed else None
        usage = _usage(dict(s.get("usage") or {}) for s in steps)
        run_rows.append(
            (
                run.thread_id,
                run.run,
                run.status,
                None,  # the input was not kept before the ledger
                None,
                run.checkpoint_id,
                started,
                run.ended_at if run.ended else None,
                run.last_seen() or started,
                failed_path if run.status == "partial_complete" else None,
                json.dumps(usage) if usage else None,
                run.run_id,
                run.owner,
                run.paused_for,  # a later resume's recovery kind
            )
        )
        for s in steps:
            ns, checkpoint_id = str(s.get("checkpoint_ns") or ""), str(s.get("checkpoint_id"))
            step = s if s.get("usage") else {**s, "usage": None}
            step_rows.append(
                step_row(
                    run.thread_id,
                    ns,
                    checkpoint_id,
                    str(s.get("task_id")),
                    run.run,
                    step,
                    s.get("tried"),
                )
            )
        for rec in run.recoveries:
            if rec.kind in ("crash", "takeover"):
                continue  # stored when it happened (its run: given by the backfill)
            key = f"{'resume' if rec.kind != 'retry_failed' else rec.kind}:{rec.checkpoint_id}"
            at = rec.at if rec.at is not None else started
            recoveries.append(
                (run.thread_id, key, rec.kind, run.run_id, None, rec.checkpoint_id, at, run.run)
            )
            paths.extend((run.thread_id, key, p) for p in dict.fromkeys(rec.paths))
    return run_rows, step_rows, recoveries, paths


def backfilled(loads: Callable[[tuple[str, bytes]], Any]) -> Reads[None]:
    """Read the threads still listed for the backfill into the ledger's rows
    (nothing to do, and one cheap read, once they are)."""
    while True:
        pending: list[str] = yield reads.pending_backfill()
        if not pending:
            return
        for thread in pending:
            runs = yield from scan_store(loads, thread)
            yield reads.backfill(thread, ledger_rows(runs))
