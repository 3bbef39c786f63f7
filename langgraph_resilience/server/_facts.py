"""What the console shows beside a run's report, read from the store: the run's
input, error and graph version, a paused run's questions and waiting nodes, and
the marks of the runs list (recovered, degraded, stale, blocked).

``stale``: a run the store says ``running`` whose process is gone
(`checkpoint.runlog._liveness`): a `Worker` run whose lease ran out or whose
holder is known gone, or a plain ``invoke``'s run whose process (its row's
``holder``) was killed, or was last seen too long ago on another machine.
``blocked``: only when the console knows the graph (`check_deploy` against it);
without one, or on a Redis saver (no `check_deploy` there yet), each run's
version is shown and nothing is marked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_resilience._langgraph import BRANCH_PREFIX
from langgraph_resilience._util._process import executor_alive
from langgraph_resilience.checkpoint.runlog._liveness import plain_run_stale, worker_run_stale
from langgraph_resilience.checkpoint.runlog._run_log_reads import RunLogRecord
from langgraph_resilience.history import RunReport
from langgraph_resilience.history._deploy import check_deploy
from langgraph_resilience.history._questions import questions_of

__all__ = ["RunFacts", "is_stale", "run_facts", "run_marks"]


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What the run page shows beside the report.

    Attributes:
        task_spec: the run's input, as given (None when not stored).
        error: the error a run that ended ``error`` ended on.
        graph_version: the graph version it ran on (None: unversioned).
        questions: a paused run's pending interrupts' values.
        waiting: the nodes a paused run waits in.
        blocked: why the console's graph cannot take this thread (empty: it can,
            or the console has no graph).
    """

    task_spec: Any = None
    error: str | None = None
    graph_version: str | None = None
    questions: tuple[Any, ...] = ()
    waiting: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()


def is_stale(
    status: str,
    worker_run: Any,
    now: float,
    alive: Callable[[str], bool | None] = executor_alive,
) -> bool:
    """A ``running`` run whose process is gone: its `Worker` run's lease ran out,
    or its holder is known dead (pure but for ``alive``)."""
    if status != "running" or worker_run is None:
        return False
    return worker_run_stale(
        worker_run.status, worker_run.lease_expires_at, worker_run.holder, now, alive
    )


def _row_stale(saver: Any, r: RunLogRecord, steps: Iterable[Mapping[str, Any]], now: float) -> bool:
    """Whether a listed run is ``running`` with its process gone: by its `Worker`
    run if it has one, else by the process its row names (its steps' ends are
    signs of it too)."""
    if r.status != "running":
        return False
    worker_run = saver.read_run(r.run_id) if r.run_id else None
    if worker_run is not None:
        return is_stale(r.status, worker_run, now)
    ends = [s.get("ended_at") for s in steps if s.get("run") == r.run]
    return plain_run_stale(r.status, r.holder, (r.seen_at, r.updated_at, *ends), now)


# The statuses of a thread in flight: the only ones `check_deploy` may block.
_IN_FLIGHT = ("running", "paused", "partial_complete", "queued")


def _blocked(saver: Any, graph: Any, statuses: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The blocked threads under ``graph`` (one `check_deploy`: a read of every
    thread in flight), when it is known and a run shown is in flight."""
    if graph is None or not any(s in _IN_FLIGHT for s in statuses):
        return {}
    return {t.thread_id: t.reasons for t in check_deploy(saver, graph).blocked}


def run_marks(
    saver: Any, rows: Sequence[RunLogRecord], graph: Any, now: float | None = None
) -> dict[tuple[str, int], tuple[str, ...]]:
    """Each listed run's marks: ``recovered``, ``degraded``, ``stale``, ``blocked``
    (one ledger read per thread listed, one run read per run running with a run id)."""
    now = time.time() if now is None else now
    blocked = _blocked(saver, graph, (r.status for r in rows))
    ledgers = {t: saver.history.thread_ledger(t) for t in {r.thread_id for r in rows}}
    newest = {t: max(r.run for r in led.runs) for t, led in ledgers.items() if led.runs}
    marks: dict[tuple[str, int], tuple[str, ...]] = {}
    for r in rows:
        led = ledgers[r.thread_id]
        found = []
        if any(v.run == r.run for v in led.recoveries):
            found.append("recovered")
        if any(
            s.get("run") == r.run and s.get("status") in ("degraded", "fallback") for s in led.steps
        ):
            found.append("degraded")
        if _row_stale(saver, r, led.steps, now):
            found.append("stale")
        if r.thread_id in blocked and newest.get(r.thread_id) == r.run:
            found.append("blocked")
        marks[(r.thread_id, r.run)] = tuple(found)
    return marks


def _waiting(checkpoint: Mapping[str, Any]) -> tuple[str, ...]:
    channels: Iterable[str] = (checkpoint.get("channel_values") or {}).keys()
    return tuple(c[len(BRANCH_PREFIX) :] for c in channels if c.startswith(BRANCH_PREFIX))


def run_facts(saver: Any, report: RunReport, graph: Any) -> RunFacts:
    """The run's row, and for a paused run its checkpoint's pending interrupts."""
    row = saver.history.run_row(report.thread_id, report.run) if report.run else None
    questions: tuple[Any, ...] = ()
    waiting: tuple[str, ...] = ()
    if report.status == "paused":
        config = {"configurable": {"thread_id": report.thread_id, "checkpoint_ns": ""}}
        if graph is not None:
            tasks = [t for t in graph.get_state(config).tasks if t.interrupts]
            questions = tuple(i.value for t in tasks for i in t.interrupts)
            waiting = tuple(dict.fromkeys(t.name for t in tasks))
        else:
            found = saver.get_tuple(config)
            if found is not None:
                questions = questions_of(found.pending_writes)
                waiting = _waiting(found.checkpoint) if questions else ()
    blocked = _blocked(saver, graph, [report.status]).get(report.thread_id, ())
    if row is None:
        return RunFacts(questions=questions, waiting=waiting, blocked=blocked)
    return RunFacts(
        task_spec=row.task_spec_of(saver.serde.loads_typed),
        error=row.error,
        graph_version=row.graph_version,
        questions=questions,
        waiting=waiting,
        blocked=blocked,
    )
