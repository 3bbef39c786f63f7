"""`list_runs`: the runs of the store, newest first, for the ``runs`` command:
a page of the run ledger's rows (`checkpoint.runlog._run_summaries`), a paused
run with what it asks (`_questions`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from langgraph_resilience.checkpoint.runlog import _reads as reads
from langgraph_resilience.checkpoint.runlog._liveness import plain_run_stale, worker_run_stale
from langgraph_resilience.checkpoint.runlog._reads import Reads, SaverOrGraph
from langgraph_resilience.checkpoint.runlog._run_log_reads import STATUSES
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.history._questions import questions_of

__all__ = ["RunSummary", "alist_runs", "list_runs"]

_STATUSES = ("queued", *STATUSES)  # a Worker run not started yet, then a run row's


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """One run, as the ``runs`` command lists it.

    Attributes:
        thread_id / run / run_id: the thread, the run's number on it (0: a
            `Worker` run that has not started), its `Worker` run id (None for a
            plain ``invoke``).
        status: queued, running, paused, success, partial_complete, error or
            cancelled.
        attempts: goes at the run: a `Worker`'s claims, or 1 plus one per
            recovery for a plain run.
        recoveries: recoveries of the run (see `RecoveryMetrics`).
        owner: the `Worker` holding it now (None when none does).
        updated: epoch seconds of the last thing known to happen to it.
        error: for a run that ended ``error``, what it raised (``Type: message``).
        stale: a ``running`` run whose process is gone: its `Worker`'s lease ran
            out or its holder died, or the process driving a plain ``invoke``
            was killed (`checkpoint.runlog._liveness`). Nobody runs it now.
        questions: for a paused run, what it asks: the values of the
            ``interrupt()`` calls it waits on (a node's, or a tool's in an agent).
    """

    thread_id: str
    run: int
    run_id: str | None
    status: str
    attempts: int
    recoveries: int
    owner: str | None
    updated: float | None
    error: str | None = None
    stale: bool = False
    questions: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in _STATUSES:
            raise ConfigError(f"RunSummary.status must be one of {_STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready values (``questions`` a list)."""
        return {**asdict(self), "questions": list(self.questions)}


def _stale(status: str, row: tuple[Any, ...], now: float) -> bool:
    """Whether a listed run is ``running`` with its process gone (`_liveness`)."""
    lease, worker_holder, holder, seen, stepped = row[9:14]
    if row[2] is not None and (lease is not None or worker_holder is not None):
        return worker_run_stale(status, lease, worker_holder, now)
    return plain_run_stale(status, holder, (seen, row[7], stepped), now)


def _summary(row: tuple[Any, ...], now: float) -> RunSummary:
    thread, run, run_id, status, claims, recoveries, owner, updated, error = row[:9]
    return RunSummary(
        thread_id=str(thread),
        run=int(run),
        run_id=None if run_id is None else str(run_id),
        status=str(status),
        attempts=int(claims or 0) or 1 + int(recoveries),
        recoveries=int(recoveries),
        owner=None if owner is None else str(owner),
        updated=None if updated is None else float(updated),
        error=None if error is None else str(error),
        stale=_stale(str(status), row, now),
    )


def _statuses(status: str | Sequence[str] | None) -> frozenset[str] | None:
    if status is None:
        return None
    wanted = frozenset([status] if isinstance(status, str) else status)
    unknown = wanted - set(_STATUSES)
    if unknown:
        raise ConfigError(
            f"unknown run status(es) {sorted(unknown)}; one of {', '.join(_STATUSES)}"
        )
    return wanted


def _listed(wanted: frozenset[str] | None, limit: int) -> Reads[list[RunSummary]]:
    rows = yield reads.summaries(sorted(wanted) if wanted is not None else None, limit)
    now = time.time()
    found = [_summary(r, now) for r in rows]
    for i, r in enumerate(found):
        if r.status == "paused":  # what it asks, from its thread's latest checkpoint
            latest = yield reads.checkpoint({"configurable": {"thread_id": r.thread_id}})
            if latest is not None:
                found[i] = replace(r, questions=questions_of(latest.pending_writes))
    return found


def _limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"limit must be an int >= 1, got {limit!r}")
    return limit


def list_runs(
    checkpointer: SaverOrGraph, *, status: str | Sequence[str] | None = None, limit: int = 100
) -> list[RunSummary]:
    """The runs of the store, newest first: `Worker` runs and plain threads alike.

    Args:
        checkpointer: a resilient saver (or a graph compiled with one).
        status: only runs in this status (or these).
        limit: at most this many.

    Example:
        >>> [r.to_dict() for r in list_runs(saver, status="partial_complete")]  # doctest: +SKIP
    """
    saver = reads.saver_of(checkpointer, "list_runs")
    return reads.drive(saver, _listed(_statuses(status), _limit(limit)))


async def alist_runs(
    checkpointer: SaverOrGraph, *, status: str | Sequence[str] | None = None, limit: int = 100
) -> list[RunSummary]:
    """Async twin of `list_runs` (on an async resilient saver)."""
    saver = reads.async_saver_of(checkpointer, "alist_runs")
    steps = _listed(_statuses(status), _limit(limit))
    return await reads.adrive(saver, steps)
