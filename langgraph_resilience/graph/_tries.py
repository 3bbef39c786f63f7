"""One try loop, for a graph node's tries and an agent's model and tool calls.

`try_loop` is the decision, written once: a generator of operations (make a
try, load or store failed tries, sleep) that returns how the tries ended. The
drivers (`_drivers.run_sync` / `run_async`) only do that I/O.

A `Tries` says what a try is: its name in the attempt ledger (a node's name,
or an agent call's label: ``model``, ``tool:<name>``), its policy, how a result
is judged (a node's ``validate``, a subgraph that stopped short), how the next
try's input is compressed after a context overflow, whether a step boundary
checks the run's budget first, and how the end is expressed: a node returns its
output with its run-log update, or its routed give-up; an agent call returns a
`Tried` (its result or a `GaveUp`, and where the tries ended).

The loop's first branch is the plain first try (`Tries.plain`: not a resume,
no budget to check), the path of every step of every run: no preamble, straight
to the try, and a try that completed returns at once. A first try that fails
goes on down the same lines as every other try, so it is judged once.

The preamble (off that path): pause while the run's budget is spent (the
interrupt value of `budget.pause_value`, one shape for a node, a model call and
a try that raised `BudgetExhausted`); load the task's stored failed tries; and,
resumed after a pause or a durable wait, take the same interrupt again (it now
returns the resume value) before the next try.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from langgraph.types import interrupt

from langgraph_resilience._engine import Action, Decision, decide
from langgraph_resilience._keys import BUDGET_KEY
from langgraph_resilience._langgraph import RESUMING_KEY
from langgraph_resilience.budget import Budget, pause_value, topped_up
from langgraph_resilience.checkpoint import AttemptRecord
from langgraph_resilience.classify import Classification, Classifier, FailureKind, is_control_flow
from langgraph_resilience.errors import ConfigError, LeaseLost, message_of
from langgraph_resilience.graph._routes import error_text
from langgraph_resilience.graph._step_log import log_try
from langgraph_resilience.graph._tally import run_used
from langgraph_resilience.graph._task import TaskContext
from langgraph_resilience.limits._admit import Admit, Held, Release
from langgraph_resilience.policy import Attempt, Backoff, NodePolicy

__all__ = [
    "DURABLE_WAIT",
    "FIRST",
    "Call",
    "CallResult",
    "Ended",
    "GaveUp",
    "LoadAttempts",
    "RecordAttempt",
    "Sleep",
    "Tried",
    "Tries",
    "TryOp",
    "durable_wait",
    "try_loop",
    "try_record",
]


# -- the operations the loop yields, and what a try replies ---------------------------------


class Call(NamedTuple):
    """Make a try on ``arg`` (replies a `CallResult`)."""

    arg: Any
    attempt: Attempt


class RecordAttempt(NamedTuple):
    """Store a failed try in the attempt ledger, before acting on it (``error``:
    what the try raised, or its output's validation error, for the try's run)."""

    record: AttemptRecord
    started_at: float
    error: BaseException | None = None


class Sleep(NamedTuple):
    """Wait before the next try."""

    seconds: float


class LoadAttempts(NamedTuple):
    """Read the task's stored failed tries (replies a list of `AttemptRecord`)."""


TryOp = Call | RecordAttempt | Sleep | LoadAttempts | Admit | Release


class CallResult(NamedTuple):
    """What a try returned (``output``) or raised (``error``), and what it used;
    ``stopped``: the failed step of a resilient graph the try invoked that
    ended short (`_step_log.NESTED_STOPS`), if one did; ``inner``: what the
    meters inside the try used (a graph's or an agent's, invoked in the node
    function: `Meter.inner_usage`)."""

    output: Any
    error: BaseException | None
    usage: dict[str, float]
    stopped: Mapping[str, Any] | None = None
    inner: Mapping[str, float] | None = None


# -- how tries end ------------------------------------------------------------------------


class Ended(NamedTuple):
    """Where the tries stood when they ended, for `Tries.done` / `Tries.gave_up`."""

    state: Any  # the state whose run log names the step (not compressed)
    task: TaskContext | None
    tries: list[AttemptRecord]  # the failed tries, stored ones first
    started_at: float  # when the first try (of this run of the task) started
    spent: dict[str, float]  # what the tries used, one step included
    topped: Budget | None  # a budget the run was resumed with
    summaries: list[dict[str, Any]]  # what each compression kept


@dataclass(frozen=True, kw_only=True, slots=True)
class GaveUp:
    """The tries failed for good: the last failure, its error, the tries made,
    what was decided (fallback, degrade, partial result) and, to a fallback or
    the partial result, the route (`Tries.route`, recorded with the last try)."""

    failure: Classification
    error: BaseException
    attempts: int
    decision: Decision
    route: dict[str, Any] | None = None

    @property
    def retry_after(self) -> float | None:
        """The wait a service asked for, when it was longer than ``max_wait``."""
        return self.decision.retry_after


class Tried(NamedTuple):
    """An agent call's end: its result (or a `GaveUp`) and where its tries ended."""

    result: Any
    end: Ended


# -- what a try is ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Tries:
    """What a try is, for `try_loop`. The defaults are a graph node's flags and an
    agent call's behaviour (no judging, no compression, a `Tried` at the end).

    ``name``: the node's name, or an agent call's label in the attempt ledger.
    ``gated``: a step boundary, where the run's budget is checked before the
    first try (``budget``: the one in force when the run's config has none).
    ``metered``: the driver meters each try (an agent's calls meter themselves).
    ``watched``: each try is its own callback run and span (a node's tries).
    ``step``: the name the step's path is made of when it is not ``name`` (an
    agent's tool call: ledger label ``tool:search``, step ``tools/search[0]``),
    so its log lines name the step as its record and reports do.
    """

    name: str
    policy: NodePolicy | None
    classifier: Classifier
    rand: Callable[[], float]
    budget: Budget | None = None
    gated: bool = True
    metered: bool = True
    watched: bool = True
    step: str | None = None

    def judge(
        self, state: Any, result: CallResult, spent: dict[str, float]
    ) -> tuple[BaseException | None, dict[str, float]]:
        """What failed in a try (None: it completed), and the usage so far with its."""
        return result.error, spent

    def classify(self, exc: BaseException) -> Classification:
        return self.classifier(exc)

    def compress(self, arg: Any) -> tuple[Any, dict[str, Any]] | None:
        """The next try's input after a context overflow, and what was kept (None:
        nothing to compress)."""
        return None

    def done(self, end: Ended, output: Any) -> Any:
        """What the tries return when one completed."""
        return Tried(output, end)

    def route(self, end: Ended, gave: GaveUp) -> dict[str, Any] | None:
        """Where tries that failed for good send their step (None: nowhere, they
        return): recorded with the last try, before `gave_up` raises it."""
        return None

    def gave_up(self, end: Ended, gave: GaveUp) -> Any:
        """What the tries return, or raise, when they failed for good."""
        return Tried(gave, end)

    def unhandled(self, end: Ended, exc: BaseException) -> Any:
        """What a try that failed without a policy to decide returns (by
        default nothing: it raises ``exc``, as the call would have)."""
        raise exc

    def plain(self, state: Any, task: TaskContext | None) -> bool:
        """Whether the first try needs no preamble: not a resume (no tries
        stored), no budget to check."""
        configurable = (task.config.get("configurable") or _EMPTY) if task is not None else _EMPTY
        if configurable.get(RESUMING_KEY):
            return False
        if not self.gated:
            return True
        if self.budget is not None or configurable.get(BUDGET_KEY) is not None:
            return False
        log = state.get("resilience") if type(state) is dict else None
        return (log is not None and log.get("budget") is None) or topped_up(state) is None


_EMPTY: Mapping[str, Any] = {}

#: What a first try sees of its retries (none yet).
FIRST = Attempt()

_ONE_STEP: dict[str, float] = {"steps": 1}


# -- the records and interrupt values of a failed try ----------------------------------------


def try_record(
    number: int, name: str, failure: Classification, exc: BaseException, decision: Decision
) -> AttemptRecord:
    """The record of a failed try, as stored before what follows it (a wait, a
    durable wait: ``status="waiting"``, or giving up)."""
    return AttemptRecord(
        attempt=number,
        node=name,
        kind=failure.kind.value,
        error_type=type(exc).__name__,
        reason=message_of(exc)[:500],
        finished_at=time.time(),
        status="waiting" if decision.action is Action.WAIT else "failed",
        wait=decision.wait,
    )


#: The ``reason`` of a durable wait's interrupt value.
DURABLE_WAIT = "retry_after"


def durable_wait(name: str, record: AttemptRecord) -> dict[str, Any]:
    """The interrupt of a try whose service asked for a wait longer than its
    ``Backoff.max_wait``, under a `Worker`: the run is released until ``not_before``
    (``name``: the node's, or an agent's call label: ``model``, ``tool:<name>``)."""
    wait = float(record.wait or 0.0)
    return {
        "reason": DURABLE_WAIT,
        "node": name,
        "attempt": record.attempt,
        "error": f"{record.error_type}: {record.reason}",
        "wait": wait,
        "not_before": (record.finished_at or time.time()) + wait,
    }


def _raised_pause(
    name: str, budget: Budget | None, state: Any, task: TaskContext | None, record: AttemptRecord
) -> Any:
    """The interrupt of a try that raised `BudgetExhausted` (resumed: the resume value)."""
    error = f"{record.error_type}: {record.reason}"
    return interrupt(pause_value(name, budget, run_used(state, task), [], error=error))


def _top_up(resumed: Any, topped: Budget | None) -> Budget | None:
    """A budget a pause was resumed with (any other value: none)."""
    if isinstance(resumed, (Budget, Mapping)):
        return Budget.coerce(resumed, where="the value resumed with")
    return topped


# -- the loop -----------------------------------------------------------------------------


def try_loop(
    what: Tries, state: Any, arg: Any, task: TaskContext | None
) -> Generator[TryOp, Any, Any]:
    """Try ``what`` on ``arg`` under its policy: yields I/O, returns its end
    (`Tries.done`, `Tries.gave_up`).

    ``state``: the state whose run log names the step and holds the run's
    usage. Interrupts, drains, lost leases and configuration errors pass
    through untouched, as any failure of a try without a policy.
    """
    policy = what.policy
    tries: list[AttemptRecord] = []
    budget: Budget | None = None
    topped: Budget | None = None
    if not what.plain(state, task):
        budget, topped = yield from _preamble(what, state, task, tries)
    overrides: Mapping[str, Any] = {}
    summaries: list[dict[str, Any]] = []
    spent = _ONE_STEP
    started = started_at = time.time()
    while True:
        number = len(tries) + 1
        last = tries[-1] if tries else None
        attempt = (
            FIRST
            if last is None and not overrides
            else Attempt(
                number=number,
                last_kind=FailureKind(last.kind) if last and last.kind else None,
                last_error=f"{last.error_type}: {last.reason}" if last else None,
                overrides=overrides,
                validation_failures=sum(r.kind == FailureKind.VALIDATION.value for r in tries),
            )
        )
        if policy is not None and policy.limits:
            result = yield from _limited(what, policy, arg, attempt)
        else:
            result = yield Call(arg, attempt)
        exc, spent = what.judge(state, result, spent)
        if exc is None:
            end = Ended(state, task, tries, started_at, spent, topped, summaries)
            return what.done(end, result.output)
        if is_control_flow(exc) or isinstance(exc, (LeaseLost, ConfigError)):
            # A lost lease ends this worker's part; wrong wiring is the caller's to
            # fix: neither is a failure to retry or route.
            raise exc
        if policy is None:
            return what.unhandled(
                Ended(state, task, tries, started_at, spent, topped, summaries), exc
            )
        failure = what.classify(exc)
        decision = decide(
            policy,
            failure,
            [FailureKind(r.kind) for r in tries if r.kind],
            what.rand(),
            durable_waits=task is not None and task.fence is not None,  # under a Worker
        )
        record = try_record(number, what.name, failure, exc, decision)
        gave: GaveUp | None = None
        if decision.action not in (Action.RETRY, Action.PAUSE, Action.WAIT):
            gave = GaveUp(failure=failure, error=exc, attempts=number, decision=decision)
            end = Ended(state, task, tries, started_at, spent, topped, summaries)
            gave = replace(gave, route=what.route(end, gave))
            if gave.route is not None:  # the handler reads it back after a crash
                record = replace(record, route=json.dumps(gave.route, default=str))
        yield RecordAttempt(record, started, exc)
        if task is not None:
            log_try(what.name, task, state, record, decision, step=what.step)
        if decision.action is Action.PAUSE:
            # Raises until the run is resumed (Command(resume=...)); the task
            # re-runs and, finding this try stored, takes the resume value in
            # the preamble, then tries again.
            topped = _top_up(_raised_pause(what.name, budget, state, task, record), topped)
        if decision.action is Action.WAIT:
            # Raises: the worker releases the run until the wait is over, then
            # resumes it; the task re-runs, finds this try stored, and tries again.
            interrupt(durable_wait(what.name, record))
        tries.append(record)
        if gave is not None:
            end = Ended(state, task, tries, started_at, spent, topped, summaries)
            return what.gave_up(end, gave)
        if decision.adapt and policy.adapt is not None:
            overrides = dict(
                policy.adapt(replace(attempt, last_kind=failure.kind, last_error=error_text(exc)))
            )
        if decision.compress and (shrunk := what.compress(arg)) is not None:
            arg, summary = shrunk
            summaries.append({"node": what.name, **summary})
        if decision.delay > 0:
            yield Sleep(decision.delay)
        started = time.time()


_MAX_WAIT = float(Backoff().max_wait)  # type: ignore[arg-type]


def _limited(
    what: Tries, policy: NodePolicy, arg: Any, attempt: Attempt
) -> Generator[TryOp, Any, CallResult]:
    """A try under the policy's shared limits: admitted (waiting at most
    ``max_wait``), made, and let go of; one not admitted fails with `LimitBusy`
    without running. A failure that asks to wait (``Retry-After``) pauses the
    limits for every process."""
    max_wait = float(policy.retry.max_wait) if policy.retry is not None else _MAX_WAIT  # type: ignore[arg-type]
    held = yield Admit(policy.limits, max_wait)
    if not isinstance(held, Held):
        return CallResult(None, held, {})
    result: CallResult = yield Call(arg, attempt)
    error, pause = result.error, None
    if error is not None and held.pausing and not is_control_flow(error):
        pause = what.classify(error).retry_after
    yield Release(
        held, pause, f"{type(error).__name__}: {message_of(error)[:200]}" if pause else ""
    )
    return result


def _preamble(
    what: Tries, state: Any, task: TaskContext | None, tries: list[AttemptRecord]
) -> Generator[TryOp, Any, tuple[Budget | None, Budget | None]]:
    """Before a first try that is not plain: returns the budget in force and a
    top-up resumed with; fills ``tries`` with the task's stored failed tries."""
    budget: Budget | None = None
    topped: Budget | None = None
    if what.gated:
        # A step boundary: pause here while the run's budget is spent (until a top-up).
        budget = topped_up(state)
        if budget is None and task is not None:
            budget = task.budget
        if budget is None:
            budget = what.budget
        while budget is not None and (ran_out := budget.exhausted(spent := run_used(state, task))):
            resumed = interrupt(pause_value(what.name, budget, spent, ran_out))
            if isinstance(resumed, (Budget, Mapping)):
                budget = topped = Budget.coerce(resumed, where="the value resumed with")
    if task is not None and task.resuming and what.policy is not None:
        tries.extend(r for r in (yield LoadAttempts()) if r.node == what.name)
    if tries and tries[-1].kind == FailureKind.BUDGET_EXHAUSTED.value:
        # Resumed after a try raised BudgetExhausted: the same interrupt now
        # returns what the run was resumed with (a top-up, maybe).
        topped = _top_up(_raised_pause(what.name, budget, state, task, tries[-1]), topped)
        budget = topped or budget
    elif tries and tries[-1].status == "waiting":
        interrupt(durable_wait(what.name, tries[-1]))  # resumed once the wait is over
    return budget, topped
