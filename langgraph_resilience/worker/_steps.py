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
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphDrained
from langgraph.runtime import RunControl
from langgraph.types import Command, StateSnapshot

from langgraph_resilience._keys import BUDGET_KEY, FENCE_KEY, RUN_META, WORKER_KEY
from langgraph_resilience._store_errors import is_transient_store_error
from langgraph_resilience.budget import Budget
from langgraph_resilience.checkpoint import Fence, RunRecord
from langgraph_resilience.classify import FailureKind
from langgraph_resilience.errors import (
    CheckpointConflict,
    DeployBlocked,
    LeaseLost,
    StoreUnavailable,
    describe,
)
from langgraph_resilience.graph._lifecycle import ended_status, settled_by_hand
from langgraph_resilience.graph._tries import DURABLE_WAIT
from langgraph_resilience.telemetry._emit import takeover_event
from langgraph_resilience.worker._leases import Instant, Proof

__all__ = [
    "Abandon",
    "ActiveRuns",
    "BUDGET_PAUSE",
    "ClaimRuns",
    "CurrentValues",
    "Finish",
    "Held",
    "Invoke",
    "Invoked",
    "LoopOp",
    "LoopSettings",
    "NO_ANSWER",
    "Pause",
    "Renew",
    "RunOp",
    "Start",
    "ThreadState",
    "Wait",
    "Where",
    "answers",
    "ended_status",
    "interrupts_of",
    "invoked",
    "pause_reason",
    "released_waits",
    "renewed",
    "run_steps",
    "settled_by_hand",
    "store_unreachable",
    "store_wait",
    "unrecovered_reason",
    "wait_left",
    "where_of",
    "worker_loop",
]

logger = logging.getLogger("langgraph_resilience")


# -- one claimed run ---------------------------------------------------------------


class ThreadState(NamedTuple):
    """Where the thread is: `Where`."""


class Where(NamedTuple):
    """A thread is "new" for the run (start it with the run's input: a new thread,
    or a new turn on a thread whose earlier runs ended), "resume" (continue from
    the run's last checkpoint) or "interrupted" (paused: answer its interrupts)."""

    state: str
    interrupt_ids: tuple[str, ...] = ()
    budget_ids: tuple[str, ...] = ()  # of those, the budget pauses (answered by a top-up)
    wait_left: float | None = None  # every interrupt is a durable wait: seconds still to wait


class CurrentValues(NamedTuple):
    """The thread's latest state values."""


class Invoke(NamedTuple):
    """Run the graph on the thread (replies `Invoked`)."""

    value: Any  # the input, or None to resume


class Invoked(NamedTuple):
    """What a run's invocation came to."""

    values: dict[str, Any] | None = None
    error: BaseException | None = None
    paused: bool = False  # stopped at an interrupt (a budget, a human, a durable wait)
    interrupts: tuple[dict[str, Any], ...] = ()  # what it stopped at: {"id", "value"}
    unrecovered: tuple[str, ...] = ()  # steps that failed unrecovered (`unrecovered_steps`)


class Finish(NamedTuple):
    """Store the run's end under this worker's lease (replies True: stored; False:
    the lease is another worker's; None: the store could not be reached)."""

    status: str  # success | partial_complete | paused | error | queued (released)
    outcome: dict[str, Any]
    wait: float | None = None  # a released run waits this long before a claim

    @property
    def error(self) -> str | None:
        """What a run that ends ``error`` ended on (its outcome's ``error`` or
        ``conflict``), kept in its run row too; None for any other end."""
        if self.status != "error":
            return None
        said = self.outcome.get("error") or self.outcome.get("conflict")
        return None if said is None else str(said)


class Pause(NamedTuple):
    """Wait before trying again (the store was unreachable)."""

    seconds: float


RunOp = ThreadState | CurrentValues | Invoke | Finish | Pause

#: Waits between tries of a run's end while the store cannot be reached.
FINISH_FIRST_WAIT = 0.1
FINISH_MAX_WAIT = 2.0
#: A run this graph version cannot take (`DeployBlocked`) is left queued, not
#: claimed again for this long: for an operator, or a worker on a version that maps it.
BLOCKED_WAIT = 60.0


#: `run_steps`' ``answer`` when the run was resumed without a value.
NO_ANSWER: Any = object()
#: The ``reason`` of a budget pause's interrupt value.
BUDGET_PAUSE = FailureKind.BUDGET_EXHAUSTED.value


def answers(where: Where, answer: Any, top_up: Any) -> dict[str, Any]:
    """What each pending interrupt is resumed with: a budget pause takes the
    top-up; a user's interrupt the value the run was resumed with (by interrupt
    id if it is a mapping of them), or the top-up if none was given."""
    found = {}
    for iid in where.interrupt_ids:
        if iid in where.budget_ids or answer is NO_ANSWER:
            found[iid] = top_up
        elif isinstance(answer, Mapping) and set(answer) <= set(where.interrupt_ids):
            found[iid] = answer.get(iid)
        else:
            found[iid] = answer
    return found


def run_steps(
    held: Held,
    input_value: Any,
    budget: Budget | None,
    max_recoveries: int,
    answer: Any = NO_ANSWER,
    released: frozenset[str] = frozenset(),
) -> Generator[RunOp, Any, str | None]:
    """One claimed run: resume or start it, then say how it ended.

    ``released``: the ids of the durable waits the run was last released for
    (`released_waits`): the store kept it until they were over.

    The replies of `ThreadState` and `CurrentValues` may be the exception that
    reading the thread raised. Returns the status the run was left in, or None
    when this worker lost it.
    """
    record = held.record
    if record.recoveries > max_recoveries:
        values = yield CurrentValues()
        if isinstance(values, BaseException):
            return (yield from _stopped(held, values))
        reason = (
            f"run {record.run_id!r} was taken over {record.recoveries} times (more than "
            f"max_recoveries={max_recoveries}): each worker running it died. It is not "
            "run again; its partial result is kept. Find what kills the worker (memory, "
            "a native crash) in the step named by failed_step or the last completed one."
        )
        return (yield from _finish(held, "error", {"error": reason, "values": values}))
    where: Where | BaseException = yield ThreadState()
    if isinstance(where, BaseException):
        return (yield from _stopped(held, where))
    if where.wait_left and not set(where.interrupt_ids) <= released:
        # Taken over before its release was stored (its worker died): wait on.
        waits = [{"id": i} for i in where.interrupt_ids]
        outcome: dict[str, Any] = {"paused": DURABLE_WAIT, "interrupts": waits}
        return (yield from _finish(held, "queued", outcome, wait=where.wait_left))
    # A paused run resumes with its budget, a top-up if `Worker.resume` gave one
    # (any other value re-checks the budget it had).
    top_up = budget if budget is not None else "resumed without a new budget"
    # Every pending interrupt (parallel branches may each have paused) gets one.
    resumed: Command[Any] = Command(resume=answers(where, answer, top_up))
    value = {"new": input_value, "resume": None}.get(where.state, resumed)
    if where.state == "resume" and answer is not NO_ANSWER:
        # An answer for a pause this graph does not see by its id (a node renamed
        # since, `renames=`): handed on as the resume value of whatever asks next.
        value = Command(resume=answer)
    if where.state == "resume" and record.recoveries:  # its last worker died mid-run
        takeover_event(record.run_id, record.thread_id, record.recoveries, record.owner)
    result: Invoked = yield Invoke(value)
    if isinstance(result.error, DeployBlocked):
        return (yield from _blocked(held, result.error, answer is not NO_ANSWER))
    if result.error is not None:
        return (yield from _stopped(held, result.error))
    if held.taken:
        return None  # another worker holds the run now; nothing more to write
    values = result.values or {}
    if not result.paused and result.unrecovered:  # nothing left to do is not success
        reason = unrecovered_reason(record.run_id, result.unrecovered)
        return (yield from _finish(held, "error", {"error": reason, "values": values}))
    if not result.paused:
        return (yield from _finish(held, ended_status(values, False), {"values": values}))
    why = pause_reason(result.interrupts)
    outcome = {"values": values, "paused": why, "interrupts": list(result.interrupts)}
    if why == DURABLE_WAIT:  # the slot is freed; any worker takes the run when it is due
        return (yield from _finish(held, "queued", outcome, wait=wait_left(result.interrupts)))
    return (yield from _finish(held, "paused", outcome))


def released_waits(outcome: Any) -> frozenset[str]:
    """The interrupt ids a run's stored outcome says it was released to wait for."""
    if not isinstance(outcome, Mapping) or outcome.get("paused") != DURABLE_WAIT:
        return frozenset()
    return frozenset(str(i["id"]) for i in outcome.get("interrupts") or ())


def pause_reason(interrupts: Sequence[Mapping[str, Any]]) -> str:
    """Why a run paused, by its pending interrupts: ``"retry_after"`` (every one
    a durable wait), ``"budget"`` (a budget ran out; no one else is asked), or
    ``"interrupt"`` (a user's interrupt waits for an answer)."""
    reasons = {_reason_of(i.get("value")) for i in interrupts}
    if reasons == {DURABLE_WAIT}:
        return DURABLE_WAIT
    if reasons <= {BUDGET_PAUSE, DURABLE_WAIT} and BUDGET_PAUSE in reasons:
        return "budget"
    return "interrupt"


def _reason_of(value: Any) -> str | None:
    return str(value.get("reason")) if isinstance(value, Mapping) else None


def wait_left(interrupts: Sequence[Mapping[str, Any]], now: float | None = None) -> float:
    """Seconds until the last of these durable waits is over (0: it is)."""
    now = time.time() if now is None else now
    ends = [float(i["value"]["not_before"]) for i in interrupts]
    return max(0.0, max(ends, default=now) - now)


def interrupts_of(snapshot: StateSnapshot) -> tuple[dict[str, Any], ...]:
    """A thread's pending interrupts, as a paused run's record keeps them."""
    return tuple({"id": i.id, "value": i.value} for i in snapshot.interrupts)


def invoked(snapshot: StateSnapshot, unrecovered: Sequence[str] = ()) -> Invoked:
    """What an invocation came to, by the thread's state after it (``unrecovered``:
    `unrecovered_steps` of the run's checkpoints)."""
    return Invoked(
        dict(snapshot.values),
        paused=bool(snapshot.next),
        interrupts=interrupts_of(snapshot),
        unrecovered=tuple(unrecovered),
    )


def store_unreachable(exc: BaseException) -> bool:
    """Whether a run stopped because the store could not be reached (not a fault of
    the run: it is released, to be run again once the store is back)."""
    return isinstance(exc, StoreUnavailable) or is_transient_store_error(exc)


def _stopped(held: Held, exc: BaseException) -> Generator[RunOp, Any, str | None]:
    """A run that stopped on ``exc``: lost, released (drained, or the store was
    unreachable) or ended as ``error``."""
    if isinstance(exc, LeaseLost):
        held.lose(f"its write or side effect was refused ({exc})", taken=True)
        return None
    if held.taken:
        return None
    if isinstance(exc, GraphDrained):  # this worker drains, or could not renew: release
        return (yield from _finish(held, "queued", {"released": exc.reason}))
    if store_unreachable(exc):
        reason = f"the store was unreachable ({describe(exc)})"
        logger.warning("run %s: %s; released, to be run again", held.record.run_id, reason)
        return (yield from _finish(held, "queued", {"released": reason}))
    kind = "conflict" if isinstance(exc, CheckpointConflict) else "error"
    return (yield from _finish(held, "error", {kind: describe(exc)}))


def _blocked(held: Held, exc: DeployBlocked, was_paused: bool) -> Generator[RunOp, Any, str | None]:
    """A run this graph version refused (`DeployBlocked`): never dropped. A paused
    run stays paused (resume it again once a version maps it); any other is kept
    queued, not claimed again for `BLOCKED_WAIT`."""
    logger.error("run %s: refused by this graph version, kept: %s", held.record.run_id, exc)
    if was_paused:
        return (
            yield from _finish(held, "paused", {"paused": "deploy_blocked", "blocked": str(exc)})
        )
    return (yield from _finish(held, "queued", {"blocked": str(exc)}, wait=BLOCKED_WAIT))


def _finish(
    held: Held, status: str, outcome: dict[str, Any], wait: float | None = None
) -> Generator[RunOp, Any, str | None]:
    """Store the run's end, trying again for as long as the store cannot be
    reached (a success never turns into an error for it), unless the worker gave
    up on the run (drain timeout). ``wait``: a released run is not claimed again
    for this many seconds."""
    held.ending = True
    pause = FINISH_FIRST_WAIT
    while not held.abandoned:  # abandoned: its worker is gone, and its lease saver closed
        stored: bool | None = yield Finish(status, outcome, wait)
        if stored:
            return status
        if stored is False:
            held.lose("its end could not be stored: another worker holds its lease", taken=True)
            return None
        yield Pause(pause)
        pause = min(pause * 2, FINISH_MAX_WAIT)
    return None


def unrecovered_reason(run_id: str, steps: Sequence[str]) -> str:
    """A run's error when it stopped with nothing left to do but ``steps`` failed
    without being recovered (`unrecovered_steps`)."""
    return (
        f"run {run_id!r} stopped with nothing left to do, but its step(s) "
        f"{', '.join(steps)} failed without being recovered: its graph did "
        "not end. Fix the cause, then submit the thread again."
    )


def where_of(snapshot: StateSnapshot, run_id: str, now: float | None = None) -> Where:
    """Where a thread is for run ``run_id``, by its latest state."""
    if not snapshot.created_at or (snapshot.metadata or {}).get(RUN_META) != run_id:
        return Where("new")  # no checkpoint of this run yet: its input was never applied
    if snapshot.interrupts:
        pending = interrupts_of(snapshot)
        budget = tuple(i["id"] for i in pending if _reason_of(i["value"]) == BUDGET_PAUSE)
        waiting = pause_reason(pending) == DURABLE_WAIT
        left = wait_left(pending, now) if waiting else None
        return Where("interrupted", tuple(i["id"] for i in pending), budget, left)
    return Where("resume")


# -- the worker's loop ---------------------------------------------------------------


class ClaimRuns(NamedTuple):
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


class Abandon(NamedTuple):
    """Stop waiting for these runs (a drain that timed out): their steps are hung.
    Give them back (released, ``queued``, fenced: the hung step can store nothing
    more), one store call each; replies the run ids given back (the others are
    left to their leases: the store could not be reached)."""

    run_ids: tuple[str, ...]
    fences: tuple[Fence, ...] = ()


LoopOp = ClaimRuns | Start | Wait | Renew | ActiveRuns | Abandon


@dataclass(frozen=True, kw_only=True)
class LoopSettings:
    """How a worker's loop runs (see `Worker`'s arguments)."""

    lease_ttl: float
    poll_interval: float
    concurrency: int
    until_idle: bool  # stop when no run is queued or running anywhere
    drain_timeout: float  # how long a drain waits for the steps in flight

    @property
    def margin(self) -> float:
        """How much of its lease a run must have left for a side effect to call:
        one renewal period, so one late renewal does not stop a call."""
        return self.lease_ttl / 3


def worker_loop(
    settings: LoopSettings,
    held: dict[str, Held],
    draining: Callable[[], bool],
    clock: Callable[[], Instant] = Instant.now,
    drain_asked: Callable[[], float | None] | None = None,
) -> Generator[LoopOp, Any, dict[str, str]]:
    """The worker's loop: claim, start, wait, renew, stop; returns {run id: status}.

    ``held`` is the worker's runs in flight, shared with `Worker.drain`: runs
    are added as they are claimed and removed as they end. A drain that has
    waited ``drain_timeout`` for them abandons the rest and gives them back
    (``queued``, for another worker, one store call each); a run the store could
    not take back is reported ``running``: its lease runs out and another worker
    takes it over.

    ``drain_asked``: when the drain was asked for (``clock().monotonic``), so
    that a store call in flight then counts against ``drain_timeout`` (the loop
    returns within it plus the one store call in flight as it ran out: none is
    begun after). Without it the drain counts from when the loop notices it.
    """
    done: dict[str, str] = {}
    beat = settings.lease_ttl / 3
    next_beat = clock().monotonic + beat
    drain_began: float | None = None
    reachable = True  # whether the store answered the loop's last call
    while True:
        room = 0 if draining() else settings.concurrency - len(held)
        sent = clock()
        got = (yield ClaimRuns(room)) if room > 0 else []
        reachable = got is not None if room > 0 else reachable
        claimed: list[RunRecord] = got or []
        for record in claimed:
            proof = Proof(deadline=sent.after(settings.lease_ttl), margin=settings.margin)
            run = held[record.run_id] = Held(record, proof=proof)
            yield Start(run)
        wait = 0.0 if claimed else min(settings.poll_interval, beat)
        for run_id, status in (yield Wait(wait)) or []:
            held.pop(run_id, None)
            if status is not None:
                done[run_id] = status
        if draining() and held:
            if drain_began is None:
                asked = drain_asked() if drain_asked is not None else None
                drain_began = clock().monotonic if asked is None else asked
            if clock().monotonic - drain_began >= settings.drain_timeout:
                stuck = tuple(held)
                fences = tuple(held[run_id].fence for run_id in stuck)
                for run_id in stuck:
                    held.pop(run_id).abandon(settings.drain_timeout)
                    done[run_id] = "running"
                # Give them back only through a store last seen answering: after a
                # failed store call (a partition) one more would only add its
                # bound to the drain; the leases run out instead.
                given = (yield Abandon(stuck, fences if reachable else ())) or ()
                for run_id in given:
                    done[run_id] = "queued"  # given back, for another worker
        if clock().monotonic >= next_beat:  # after the drain's check: none begun past it
            asked_runs = [h.fence for h in held.values() if not h.taken]
            if asked_runs:
                sent = clock()
                kept = yield Renew(asked_runs)
                reachable = kept is not None
                renewed(held, kept, asked_runs, sent, clock(), settings.lease_ttl)
            next_beat = clock().monotonic + beat
        if held or claimed:
            continue
        if draining():
            return done
        if settings.until_idle and (yield ActiveRuns()) == 0:
            return done


#: A store call of the loop begun this little before a drain's end is still given
#: this long to answer: a store that answers is not taken for one that does not.
ANSWER_GRACE = 1.0
#: How often a driver looks again at a store call of the loop it waits for.
STORE_SLICE = 0.1


def store_wait(now: float, began: float, drain_end: float | None) -> float | None:
    """How long a driver waits (at most) for the loop's store call begun at
    ``began`` before it looks again, or None: it stops waiting (the drain's end,
    ``drain_end``, has passed, and the call had `ANSWER_GRACE` to answer). The
    call then counts as the store not answering, and is left to itself: the loop
    returns within ``drain_timeout`` whatever a store call in flight does."""
    if drain_end is None:
        return STORE_SLICE
    left = max(drain_end, began + ANSWER_GRACE) - now
    return None if left <= 0 else min(STORE_SLICE, left)


def renewed(
    held: dict[str, Held],
    kept: Sequence[str] | None,
    asked: Sequence[Fence],
    sent: Instant,
    now: Instant,
    lease_ttl: float,
) -> None:
    """Extend the proofs of the leases the store renewed (from when the renewal was
    ``sent``), and mark runs whose renewal failed (or is overdue) as lost.

    ``kept``: the run ids whose lease the store renewed, or None when the store
    could not be reached.
    """
    for fence in asked:
        run = held.get(fence.run_id)
        if run is None:
            continue
        if kept is not None and fence.run_id in kept:
            run.proof.deadline = sent.after(lease_ttl)
        elif run.ending:
            continue  # its end is being stored, fenced: a failed renewal means nothing
        elif kept is not None:
            run.lose("another worker took the lease over", taken=True)
        elif run.proof.left(now) <= 0:
            run.lose("the lease could not be renewed in time (store unreachable)")


# -- what a worker holds ---------------------------------------------------------------


@dataclass
class Held:
    """A run this worker claimed: its fence, its drain switch, what it can prove of
    its lease (`Proof`: what its side effects ask before they call)."""

    record: RunRecord
    proof: Proof
    control: RunControl = field(default_factory=RunControl)
    taken: bool = False  # another worker holds the run: write nothing more for it
    abandoned: bool = False  # a drain gave up waiting for it
    ending: bool = False  # its end is being stored: a failed renewal means nothing

    @property
    def lost(self) -> bool:
        return self.proof.lost is not None

    @property
    def fence(self) -> Fence:
        return Fence(run_id=self.record.run_id, token=self.record.fencing_token)

    def config(self, budget: Budget | None) -> RunnableConfig:
        configurable: dict[str, Any] = {"thread_id": self.record.thread_id, FENCE_KEY: self.fence}
        if self.record.owner:  # named in the run's step records
            configurable[WORKER_KEY] = self.record.owner
        if budget is not None:
            configurable[BUDGET_KEY] = budget
        return {"configurable": configurable, "metadata": {RUN_META: self.record.run_id}}

    def lose(self, reason: str, *, taken: bool = False) -> None:
        """This worker no longer holds the run (``taken``: another worker does):
        its side effects stop calling, and it stops at the next step boundary."""
        if not self.lost:
            logger.warning("run %s lost by this worker: %s", self.record.run_id, reason)
            self.proof.lost = reason
        self.taken = self.taken or taken
        self.control.request_drain(reason)

    def abandon(self, waited: float) -> None:
        self.abandoned = True
        self.lose(
            f"the drain waited {waited:.1f} s for its step, which still runs (a store "
            "call that hangs?); the run is given back (or left to its lease)"
        )
