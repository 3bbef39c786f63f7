"""The decisions of a `Worker`, apart from its I/O.

Two generators of operations, each driven by a thread driver and an asyncio
driver in `worker.py`:

- `run_steps`: one claimed run (resume or start it, then say how it ended);
- `worker_loop`: the worker's loop (claim, start, wait, renew, stop), a function
  of explicit state: the runs held, the settings, the drain switch and a clock.

`Held` is what a worker knows of a run it claimed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphDrained
from langgraph.runtime import RunControl
from langgraph.types import Command, StateSnapshot

from langgraph_resilience._task import BUDGET_KEY
from langgraph_resilience.budget import Budget
from langgraph_resilience.checkpoint import Fence, RunRecord
from langgraph_resilience.checkpoint._runs import FENCE_KEY
from langgraph_resilience.errors import CheckpointConflict, LeaseLost

__all__ = [
    "Claim",
    "CurrentValues",
    "Finish",
    "Held",
    "Invoke",
    "Invoked",
    "LoopOp",
    "LoopSettings",
    "ActiveRuns",
    "Renew",
    "RunOp",
    "Start",
    "ThreadState",
    "Wait",
    "Where",
    "ended_status",
    "renewed",
    "run_steps",
    "where_of",
    "worker_loop",
]

logger = logging.getLogger("langgraph_resilience")


# -- one claimed run ---------------------------------------------------------------


class ThreadState(NamedTuple):
    """Where the thread is: `Where`."""


class Where(NamedTuple):
    """A thread is "new" (start with the input), "resume" (continue from its last
    checkpoint) or "interrupted" (paused: answer its pending interrupts)."""

    state: str
    interrupt_ids: tuple[str, ...] = ()


class CurrentValues(NamedTuple):
    """The thread's latest state values."""


class Invoke(NamedTuple):
    """Run the graph on the thread (replies `Invoked`)."""

    value: Any  # the input, or None to resume


class Invoked(NamedTuple):
    """What a run's invocation came to."""

    values: dict[str, Any] | None = None
    error: BaseException | None = None
    paused: bool = False  # stopped at an interrupt (a budget, a human)


class Finish(NamedTuple):
    """Store the run's end under this worker's lease."""

    status: str  # success | partial_complete | paused | error | queued (released)
    outcome: dict[str, Any]


RunOp = ThreadState | CurrentValues | Invoke | Finish


def run_steps(
    held: Held, input_value: Any, budget: Budget | None, max_recoveries: int
) -> Generator[RunOp, Any, str | None]:
    """One claimed run: resume or start it, then say how it ended.

    Returns the status the run was left in, or None when this worker lost it.
    """
    record = held.record
    if record.recoveries > max_recoveries:
        values = yield CurrentValues()
        reason = (
            f"run {record.run_id!r} was taken over {record.recoveries} times (more than "
            f"max_recoveries={max_recoveries}): each worker running it died. It is not "
            "run again; its partial result is kept. Find what kills the worker (memory, "
            "a native crash) in the step named by failed_step or the last completed one."
        )
        yield Finish("error", {"error": reason, "values": values})
        return "error"
    where: Where = yield ThreadState()
    # A paused run resumes with its budget, a top-up if `Worker.resume` gave one
    # (any other value re-checks the budget it had).
    top_up = budget if budget is not None else "resumed without a new budget"
    # Every pending interrupt (parallel branches may each have paused) gets it.
    answers: Command[Any] = Command(resume=dict.fromkeys(where.interrupt_ids, top_up))
    value = {"new": input_value, "resume": None}.get(where.state, answers)
    result: Invoked = yield Invoke(value)
    exc = result.error
    if held.lost or isinstance(exc, LeaseLost):
        return None  # another worker holds the run now; nothing more to write
    if isinstance(exc, GraphDrained):  # this worker drains: release the run
        yield Finish("queued", {"released": exc.reason})
        return "queued"
    if exc is not None:
        kind = "conflict" if isinstance(exc, CheckpointConflict) else "error"
        yield Finish("error", {kind: f"{type(exc).__name__}: {exc}"})
        return "error"
    values = result.values or {}
    status = ended_status(values, result.paused)
    yield Finish(status, {"values": values})
    return status


def ended_status(values: dict[str, Any], paused: bool) -> str:
    """The status a run that ran to a stop is left in."""
    if paused:
        return "paused"
    outcome = values.get("resilience") if isinstance(values, dict) else None
    if isinstance(outcome, dict) and outcome.get("status") == "partial_complete":
        return "partial_complete"
    return "success"


def where_of(snapshot: StateSnapshot) -> Where:
    """Where a thread is, by its latest state."""
    if not snapshot.created_at:
        return Where("new")
    if snapshot.interrupts:
        return Where("interrupted", tuple(i.id for i in snapshot.interrupts))
    return Where("resume")


# -- the worker's loop ---------------------------------------------------------------


class Claim(NamedTuple):
    room: int  # how many runs to claim at most


class Start(NamedTuple):
    held: Held


class Wait(NamedTuple):
    """Until a run ends or ``timeout`` passes; replies [(run id, status or None)]."""

    timeout: float


class Renew(NamedTuple):
    fences: list[Fence]


class ActiveRuns(NamedTuple):
    """How many runs are queued or running anywhere (replies an int)."""


LoopOp = Claim | Start | Wait | Renew | ActiveRuns


@dataclass(frozen=True, kw_only=True)
class LoopSettings:
    """How a worker's loop runs (see `Worker`'s arguments)."""

    lease_ttl: float
    poll_interval: float
    concurrency: int
    until_idle: bool  # stop when no run is queued or running anywhere


def worker_loop(
    settings: LoopSettings,
    held: dict[str, Held],
    draining: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
) -> Generator[LoopOp, Any, dict[str, str]]:
    """The worker's loop: claim, start, wait, renew, stop; returns {run id: status}.

    ``held`` is the worker's runs in flight, shared with `Worker.drain`: runs
    are added as they are claimed and removed as they end.
    """
    done: dict[str, str] = {}
    beat = settings.lease_ttl / 3
    next_beat = clock() + beat
    while True:
        room = 0 if draining() else settings.concurrency - len(held)
        claimed: list[RunRecord] = (yield Claim(room)) or []
        for record in claimed:
            run = held[record.run_id] = Held(record)
            yield Start(run)
        wait = 0.0 if claimed else min(settings.poll_interval, beat)
        for run_id, status in (yield Wait(wait)) or []:
            held.pop(run_id, None)
            if status is not None:
                done[run_id] = status
        if clock() >= next_beat:
            asked = [h.fence for h in held.values() if not h.lost]
            renewed(held, (yield Renew(asked)), asked, clock(), settings.lease_ttl)
            next_beat = clock() + beat
        if held or claimed:
            continue
        if draining():
            return done
        if settings.until_idle and (yield ActiveRuns()) == 0:
            return done


def renewed(
    held: dict[str, Held],
    kept: Sequence[str] | None,
    asked: Sequence[Fence],
    now: float,
    lease_ttl: float,
) -> None:
    """Mark runs whose renewal failed (or is overdue) as lost.

    ``kept``: the run ids whose lease the store renewed, or None when the store
    could not be reached.
    """
    for fence in asked:
        run = held.get(fence.run_id)
        if run is None or run.ending:
            continue
        if kept is not None and fence.run_id in kept:
            run.renewed_at = now
        elif kept is not None:
            run.lose("another worker took the lease over")
        elif now - run.renewed_at > lease_ttl:
            run.lose("the lease could not be renewed in time (store unreachable)")


# -- what a worker holds ---------------------------------------------------------------


@dataclass
class Held:
    """A run this worker claimed: its fence, its drain switch, its last renewal."""

    record: RunRecord
    control: RunControl = field(default_factory=RunControl)
    renewed_at: float = field(default_factory=time.monotonic)
    lost: bool = False
    ending: bool = False  # its end is being stored: a failed renewal means nothing

    @property
    def fence(self) -> Fence:
        return Fence(run_id=self.record.run_id, token=self.record.fencing_token)

    def config(self, budget: Budget | None) -> RunnableConfig:
        configurable: dict[str, Any] = {"thread_id": self.record.thread_id, FENCE_KEY: self.fence}
        if budget is not None:
            configurable[BUDGET_KEY] = budget
        return {"configurable": configurable}

    def lose(self, reason: str) -> None:
        if not self.lost:
            logger.warning("run %s: %s; stopping at the next step", self.record.run_id, reason)
        self.lost = True
        self.control.request_drain(reason)
