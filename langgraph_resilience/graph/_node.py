"""The node wrapper of a `ResilientStateGraph`: one node's tries under its policy.

The wrapper runs the node, classifies a failure on the live exception, and asks
the pure core (`_engine.decide`) what to do:

- retry in place (same task, same task id) after a full-jitter wait, with
  `adapt` overrides, or after compressing the context; failed tries are stored
  in the attempt ledger first, so a crash does not reset the count;
- degrade: record the step as degraded and return, so the node's normal edges
  fire;
- fallback / partial result: raise the routing signal (`_routes`);
- pause: a BUDGET_EXHAUSTED failure interrupts the run (``interrupt``).

The loop is written once (`node_loop`, a generator of operations); the drivers
(`_node_run`) only do its I/O. A node without a policy keeps LangGraph's
behaviour; its wrapper only records the step in the run log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from langchain_core.runnables import Runnable
from langgraph.types import interrupt

from langgraph_resilience._engine import Action, Decision, decide
from langgraph_resilience._langgraph import RESUMING_KEY
from langgraph_resilience.budget import Budget, add_usage, pause_value, topped_up, used
from langgraph_resilience.checkpoint import AttemptRecord
from langgraph_resilience.classify import Classification, Classifier, FailureKind, is_control_flow
from langgraph_resilience.errors import ConfigError, LeaseLost, ValidationFailed
from langgraph_resilience.graph._compress import compress_with_summary
from langgraph_resilience.graph._routes import error_text, route_of, routing, suggestion
from langgraph_resilience.graph._step_log import (
    SubgraphStopped,
    log_gave_up,
    log_of,
    log_try,
    log_update,
    nested_log,
    step_path,
    with_log,
)
from langgraph_resilience.graph._task import BUDGET_KEY, TaskContext
from langgraph_resilience.policy import Attempt, NodePolicy

__all__ = [
    "CallNode",
    "CallResult",
    "LoadAttempts",
    "NodeAction",
    "NodeContext",
    "FirstTry",
    "NodeOp",
    "RecordAttempt",
    "Sleep",
    "durable_wait",
    "first_done",
    "node_loop",
    "plain_start",
    "try_record",
]


logger = logging.getLogger("langgraph_resilience")

#: What LangGraph runs as a node: a function (of the state, and maybe the config
#: or the runtime) or a runnable.
NodeAction = Callable[..., Any] | Runnable[Any, Any]


# -- the node loop, written once for sync and async nodes ------------------------------


class CallNode(NamedTuple):
    """Call the node on ``state`` (replies a `CallResult`)."""

    state: Any
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


NodeOp = CallNode | RecordAttempt | Sleep | LoadAttempts


class CallResult(NamedTuple):
    """What a call returned (``output``) or raised (``error``), and what it used."""

    output: Any
    error: BaseException | None
    usage: dict[str, float]


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeContext:
    """What a node's wrapper knows of its node, fixed when the node is added."""

    name: str
    policy: NodePolicy | None
    classifier: Classifier
    is_terminal: Callable[[str], bool]  # every static edge out of the node goes to END
    rand: Callable[[], float]


_FIRST = Attempt()


def _budget_pause(ctx: NodeContext, record: AttemptRecord) -> dict[str, Any]:
    """The interrupt of a node that raised `BudgetExhausted`."""
    return {
        "reason": "budget_exhausted",
        "node": ctx.name,
        "error": f"{record.error_type}: {record.reason}",
        "resume_with": "Command(resume=Budget(...)) with higher limits, or any value to retry",
    }


def try_record(
    number: int, node: str, failure: Classification, exc: BaseException, decision: Decision
) -> AttemptRecord:
    """The record of a failed try, as stored before what follows it (a wait, a
    durable wait: ``status="waiting"``, or giving up)."""
    return AttemptRecord(
        attempt=number,
        node=node,
        kind=failure.kind.value,
        error_type=type(exc).__name__,
        reason=str(exc)[:500],
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


def _add_spend(log: dict[str, Any], spent: dict[str, float], topped: Budget | None) -> None:
    """What the node used (added up by the run log), and a top-up given to it."""
    log["usage"] = spent
    if topped is not None:
        log["budget"] = topped.to_dict()


def _compressed(policy: NodePolicy, state: Any) -> tuple[Any, dict[str, Any]]:
    """The state for the next try after a context overflow, and what was kept
    (and, by the default compression, what was dropped: ``trimmed``)."""
    detail: dict[str, Any] = {}
    if policy.compress is not None:
        update = dict(policy.compress(state))
    else:
        update, detail = compress_with_summary(state)
    new_state = {**state, **update} if isinstance(state, Mapping) else state
    kept = {k: (len(v) if isinstance(v, list) else "changed") for k, v in update.items()}
    summary: dict[str, Any] = {"at": time.time(), "kept": kept}
    if detail:
        summary["trimmed"] = detail
    return new_state, summary


def _failure_of(
    ctx: NodeContext, state: Any, result: CallResult, spent: dict[str, float]
) -> tuple[BaseException | None, dict[str, float]]:
    """What failed in a try, if anything (it raised, its subgraph stopped short,
    its output was rejected), and the usage so far with the try's."""
    spent = add_usage(spent, result.usage)
    exc = result.error
    if exc is None:
        inner_usage, inner_failed = nested_log(result.output, state)
        if inner_usage:  # a subgraph's model calls (none for a plain node)
            spent = add_usage(spent, inner_usage)
        if inner_failed is not None:
            exc = SubgraphStopped(inner_failed)
    policy = ctx.policy
    if exc is None and policy is not None and policy.validate is not None:
        exc = _validation_error(policy.validate, result.output)
    return exc, spent


def _completed(
    ctx: NodeContext,
    state: Any,
    task: TaskContext,
    output: Any,
    earlier: list[AttemptRecord],
    first_start: float,
    spent: dict[str, float],
    topped: Budget | None = None,
    summaries: list[dict[str, Any]] | None = None,
) -> Any:
    """The node's output with its step's run-log update: the step completed."""
    log = log_update(
        ctx.name, ctx.is_terminal(ctx.name), task, state, "completed", earlier, output, first_start
    )
    if summaries:
        log["context_summary"] = summaries
    _add_spend(log, spent, topped)
    return with_log(output, log)


def plain_start(state: Any, task: TaskContext) -> bool:
    """Whether the node's first try needs no preamble: not a resume (no tries
    stored), no budget in force. Then the driver makes the try itself and, if it
    completed, returns (`first_done`) without entering `node_loop`."""
    configurable = task.config.get("configurable") or _EMPTY
    if configurable.get(RESUMING_KEY) or configurable.get(BUDGET_KEY) is not None:
        return False
    log = state.get("resilience") if type(state) is dict else None
    return (log is not None and log.get("budget") is None) or topped_up(state) is None


_EMPTY: Mapping[str, Any] = {}


class FirstTry(NamedTuple):
    """A first try the driver made (`plain_start`) that did not complete: its
    result, when it started, what failed and the usage so far, for `node_loop`
    to go on from (``first=``) without judging the try again."""

    result: CallResult
    at: float
    error: BaseException
    spent: dict[str, float]


def first_done(
    ctx: NodeContext, state: Any, task: TaskContext, result: CallResult, at: float
) -> Any:
    """The node's output with its run-log update if the first try (made at
    ``at``, after `plain_start`) completed; else a `FirstTry`."""
    exc, spent = _failure_of(ctx, state, result, _ONE_STEP)
    if exc is not None:
        return FirstTry(result, at, exc, spent)
    return _completed(ctx, state, task, result.output, [], at, spent)


_ONE_STEP: dict[str, float] = {"steps": 1}


def node_loop(
    ctx: NodeContext,
    state: Any,
    task: TaskContext,
    first: FirstTry | None = None,
) -> Generator[NodeOp, Any, Any]:
    """Run a node under its policy: yields I/O to do, returns the node's output.

    ``first``: the first try, already made by the driver (`plain_start`), and
    when it started. Raises `ResilienceRoute` to route to the fallback or the
    partial result, and lets LangGraph's control flow (interrupts, drains)
    through untouched.
    """
    policy = ctx.policy
    # A step boundary: pause here if the run's budget is spent (until a top-up).
    budget = topped_up(state)
    if budget is None:
        budget = task.budget
    topped: Budget | None = None
    while budget is not None and (ran_out := budget.exhausted(used(state))):
        resumed = interrupt(pause_value(ctx.name, budget, used(state), ran_out))
        if isinstance(resumed, (Budget, Mapping)):
            budget = topped = Budget.coerce(resumed, where="the value resumed with")
    loads = task.resuming and policy is not None
    earlier: list[AttemptRecord] = list((yield LoadAttempts())) if loads else []
    if earlier and earlier[-1].kind == FailureKind.BUDGET_EXHAUSTED.value:
        # Resumed after the node paused on BudgetExhausted: the same interrupt
        # now returns what the run was resumed with (a top-up, maybe).
        resumed = interrupt(_budget_pause(ctx, earlier[-1]))
        if isinstance(resumed, (Budget, Mapping)):
            topped = Budget.coerce(resumed, where="the value resumed with")
    elif earlier and earlier[-1].status == "waiting":
        interrupt(durable_wait(ctx.name, earlier[-1]))  # resumed once the wait is over
    overrides: Mapping[str, Any] = {}
    summaries: list[dict[str, Any]] = []
    spent: dict[str, float] = {"steps": 1}
    first_start = time.time()
    while True:
        number = len(earlier) + 1
        last = earlier[-1] if earlier else None
        attempt = (
            _FIRST
            if last is None and not overrides
            else Attempt(
                number=number,
                last_kind=FailureKind(last.kind) if last and last.kind else None,
                last_error=f"{last.error_type}: {last.reason}" if last else None,
                overrides=overrides,
                validation_failures=sum(r.kind == FailureKind.VALIDATION.value for r in earlier),
            )
        )
        exc: BaseException | None
        if first is not None:  # made, and judged, by the driver
            result, started, exc, spent = first
            first_start, first = started, None
        else:
            started = time.time()
            result = yield CallNode(state, attempt)
            exc, spent = _failure_of(ctx, state, result, spent)
        if exc is None:
            return _completed(
                ctx, state, task, result.output, earlier, first_start, spent, topped, summaries
            )
        if is_control_flow(exc) or isinstance(exc, (LeaseLost, ConfigError)) or policy is None:
            # A lost lease ends this worker's part; wrong wiring is the caller's to
            # fix: neither is a failure of the node to retry or route.
            raise exc
        failure = _stopped if isinstance(exc, SubgraphStopped) else ctx.classifier(exc)
        decision = decide(
            policy,
            failure,
            [FailureKind(r.kind) for r in earlier if r.kind],
            ctx.rand(),
            durable_waits=task.fence is not None,
        )
        record = try_record(number, ctx.name, failure, exc, decision)
        yield RecordAttempt(record, started, exc)
        log_try(ctx.name, task, state, record, decision)
        if decision.action is Action.PAUSE:
            # Raises until the run is resumed (Command(resume=...)); the resumed
            # node re-runs and, finding this try stored, takes the resume value
            # above, then tries again.
            interrupt(_budget_pause(ctx, record))
        if decision.action is Action.WAIT:
            # Raises: the worker releases the run until the wait is over, then
            # resumes it; the node re-runs, finds this try stored, and tries again.
            interrupt(durable_wait(ctx.name, record))
        earlier.append(record)
        if decision.action in (Action.RETRY, Action.PAUSE, Action.WAIT):
            if decision.adapt and policy.adapt is not None:
                overrides = dict(
                    policy.adapt(
                        replace(attempt, last_kind=failure.kind, last_error=error_text(exc))
                    )
                )
            if decision.compress:
                state, summary = _compressed(policy, state)
                summaries.append({"node": ctx.name, **summary})
            if decision.delay > 0:
                yield Sleep(decision.delay)
            continue
        if decision.action is Action.DEGRADE:
            log = log_update(
                ctx.name,
                ctx.is_terminal(ctx.name),
                task,
                state,
                "degraded",
                earlier,
                None,
                first_start,
            )
            path = log["step"]["path"]
            log["recovery_suggestions"] = [
                suggestion(ctx.name, failure, exc, number, path, retry_after=decision.retry_after)
            ]
            _add_spend(log, spent, topped)
            log_gave_up(ctx.name, task, state, path, failure.kind.value, number, None)
            return {"resilience": log}
        route = route_of(
            node=ctx.name,
            fallback=policy.fallback,
            decision=decision,
            failure=failure,
            exc=exc,
            attempts=number,
            task=task.effect_scope,  # a re-run failed step keeps its first keys
        )
        route["path"] = step_path(ctx.name, task, log_of(state))
        route["send"] = task.send_index is not None
        route["run_id"] = task.fence.run_id if task.fence is not None else None
        if isinstance(exc, SubgraphStopped):  # name the inner step, as it failed
            inner = exc.failed
            route.update(
                {k: inner[k] for k in ("kind", "reason", "error_type", "message") if k in inner}
            )
            route["path"] = str(inner.get("path") or route["path"])
        if decision.action is Action.FALLBACK:
            log_gave_up(
                ctx.name, task, state, route["path"], route["kind"], number, route["target"]
            )
        # The node's own error, carrying its route: callbacks and tracers see the
        # failure as it is, never a routing signal (`_routes.routing`).
        raise routing(exc, route)


#: A subgraph that stopped short: no retry (its completed steps would run again);
#: the node's policy decides between fallback, degraded and partial result.
_stopped = Classification(kind=FailureKind.DEGRADABLE, reason="its subgraph stopped short")


def _validation_error(validate: Callable[[Any], Any], output: Any) -> BaseException | None:
    try:
        verdict = validate(output)
    except Exception as exc:  # a validator's own error counts as a rejection
        return exc if isinstance(exc, ValidationFailed) else ValidationFailed(str(exc))
    if verdict is False:
        return ValidationFailed("validate() returned False")
    return None
