"""What a try is for a `ResilientStateGraph` node (`NodeContext`, a `_tries.Tries`).

The one try loop (`_tries.try_loop`) runs the node, classifies a failure on
the live exception, and asks the pure core (`_engine.decide`) what to do;
this module says what is particular to a node:

- judging a try: a subgraph that stopped short fails its node, the policy's
  ``validate`` may reject an output, a nested run log's usage counts;
- compressing the state after a context overflow (the policy's ``compress``,
  else a summary of the trimmed messages);
- the end: the output with its step's run-log update (completed; or the
  output alone, its record handed to the saver, `_hand`), or the give-up:
  degraded (the node's normal edges fire), or the routing signal to the
  fallback or the partial result (`_routes`).

A node without a policy keeps LangGraph's behaviour; its wrapper only records
the step in the run log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import Runnable
from langgraph.types import Command

import langgraph_resilience.state as run_log
from langgraph_resilience._engine import Action, Decision
from langgraph_resilience.budget import Budget, add_usage
from langgraph_resilience.checkpoint.runlog._scope import RunScope, Tally
from langgraph_resilience.classify import Classification, FailureKind
from langgraph_resilience.errors import ValidationFailed, message_of
from langgraph_resilience.graph._compress import compress_with_summary
from langgraph_resilience.graph._routes import (
    failure_log,
    partial_outcome,
    route_of,
    routing,
    send_suggestion,
    suggestion,
)
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
from langgraph_resilience.graph._tally import tally_of
from langgraph_resilience.graph._tries import CallResult, Ended, GaveUp, Tries, try_record

__all__ = ["NodeAction", "NodeContext"]


logger = logging.getLogger("langgraph_resilience")

#: What LangGraph runs as a node: a function (of the state, and maybe the config
#: or the runtime) or a runnable.
NodeAction = Callable[..., Any] | Runnable[Any, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeContext(Tries):
    """What a node's wrapper knows of its node, fixed when the node is added,
    and what a try of it is: the node called on the state, judged, compressed,
    ended as a step of its run."""

    is_terminal: Callable[[str], bool]  # every static edge out of the node goes to END

    def judge(
        self, state: Any, result: CallResult, spent: dict[str, float]
    ) -> tuple[BaseException | None, dict[str, float]]:
        """What failed in a try, if anything (it raised, its subgraph stopped
        short, its output was rejected), and the usage so far with the try's."""
        spent = add_usage(spent, result.usage)
        exc = result.error
        inner_usage: Mapping[str, float] | None = None
        if exc is None:
            inner_usage, inner_failed = nested_log(result.output, state)
            if inner_failed is None:  # a resilient graph the node function invoked
                inner_failed = result.stopped
            if inner_failed is not None:
                exc = SubgraphStopped(inner_failed)
        # What ran inside the try: a subgraph's model calls, as its run log brings
        # them back; else (a graph or an agent invoked in the node function, or a
        # try that failed) what the meters inside it counted. Never both: the same spend.
        inner = inner_usage or result.inner
        if inner:
            spent = add_usage(spent, inner)
        policy = self.policy
        if exc is None and policy is not None and policy.validate is not None:
            exc = _validation_error(policy.validate, result.output)
        return exc, spent

    def classify(self, exc: BaseException) -> Classification:
        return _stopped if isinstance(exc, SubgraphStopped) else self.classifier(exc)

    def compress(self, arg: Any) -> tuple[Any, dict[str, Any]] | None:
        """The state for the next try after a context overflow, and what was kept
        (and, by the default compression, what was dropped: ``trimmed``)."""
        assert self.policy is not None  # only a policy decides to compress
        detail: dict[str, Any] = {}
        if self.policy.compress is not None:
            update = dict(self.policy.compress(arg))
        else:
            update, detail = compress_with_summary(arg)
        new_state = {**arg, **update} if isinstance(arg, Mapping) else arg
        kept = {k: (len(v) if isinstance(v, list) else "changed") for k, v in update.items()}
        summary: dict[str, Any] = {"at": time.time(), "kept": kept}
        if detail:
            summary["trimmed"] = detail
        return new_state, summary

    def done(self, end: Ended, output: Any) -> Any:
        """The node's output with its run-log update: the step completed. A
        step that changes nothing in the run log hands its record to the saver
        instead (`_hand`)."""
        state, task = end.state, end.task
        assert task is not None  # a node always runs in a task
        terminal = self.is_terminal(self.name)
        log = log_update(
            self.name, terminal, task, state, "completed", end.tries, output, end.started_at
        )
        if end.summaries:
            log["context_summary"] = end.summaries
        lean = (task.lean or tally_of(task, log_of(state))) if log.get("tallied") else None
        _add_spend(log, end.spent, end.topped, lean)
        if lean is not None and _keeps_rows(lean[0], task):  # a top-level step's
            task_id = task.task_id
            lean[0].finished(task_id, log["step"])  # until its writes land
            nested = output.get("resilience") if type(output) is dict else None
            if nested is not None and isinstance(nested, Mapping):  # a subgraph's run log:
                # the record rides in it
                return {**output, "resilience": {**nested, **log}}
            if _hand(log, output):
                lean[0].hand(task_id, log)
                return output
        elif lean is not None and _hand(log, output):  # no ledger: the record goes nowhere
            return output
        return with_log(output, log)

    def gave_up(self, end: Ended, gave: GaveUp) -> Any:
        """The degraded step's run-log update; or raises the node's error with its
        route to the fallback or the partial result (`_routes.routing`)."""
        state, task = end.state, end.task
        assert task is not None and self.policy is not None
        name, failure, exc, number = self.name, gave.failure, gave.error, gave.attempts
        decision = gave.decision
        if decision.action is Action.DEGRADE:
            terminal = self.is_terminal(name)
            log = log_update(
                name, terminal, task, state, "degraded", end.tries, None, end.started_at
            )
            path = log["step"]["path"]
            log["recovery_suggestions"] = [
                suggestion(name, failure, exc, number, path, retry_after=decision.retry_after)
            ]
            if task.send_index is not None:  # retry_failed(step=path) re-runs it with it
                log["degraded_sends"] = [{"path": path, "send": state}]
            lean = tally_of(task, log_of(state)) if log.get("tallied") else None
            _add_spend(log, end.spent, end.topped, lean)
            log_gave_up(name, task, state, path, failure.kind.value, number, None)
            return {"resilience": log}
        route = gave.route or self._route(end, gave)
        if decision.action is Action.FALLBACK:
            log_gave_up(name, task, state, route["path"], route["kind"], number, route["target"])
        # The node's own error, carrying its route: callbacks and tracers see the
        # failure as it is, never a routing signal (`_routes.routing`).
        raise routing(exc, route)

    def unhandled(self, end: Ended, exc: BaseException) -> Any:
        """A node without a policy whose nested graph ended short (a subgraph
        node, or a graph its function invoked): the step failed and, with no
        policy to decide otherwise, the run ends with a partial result naming
        the inner step. The node's output is not written (it failed), and the
        steps after it do not run (`_step_log.stopped`). Any other error is
        raised, as LangGraph would."""
        if not isinstance(exc, SubgraphStopped) or end.task is None:
            raise exc
        decision = Decision(action=Action.PARTIAL)
        gave = GaveUp(failure=_stopped, error=exc, attempts=len(end.tries) + 1, decision=decision)
        route = self._route(end, gave)
        log_try(
            self.name,
            end.task,
            end.state,
            try_record(gave.attempts, self.name, _stopped, exc, decision),
            decision,
        )
        failure: Any = failure_log(route, end.state)
        known: Any = dict(log_of(end.state))
        values = dict(end.state) if isinstance(end.state, Mapping) else {}
        values["resilience"] = run_log.merge_run_log(known, failure)  # as the run ends
        return {"resilience": {**failure, **partial_outcome(values, None, end.task)}}

    def route(self, end: Ended, gave: GaveUp) -> dict[str, Any] | None:
        """The route of a step that gives up to its fallback or the partial
        result (None: it degrades, and returns)."""
        if self.policy is None or end.task is None or gave.decision.action is Action.DEGRADE:
            return None
        return self._route(end, gave)

    def _route(self, end: Ended, gave: GaveUp) -> dict[str, Any]:
        """The route of a step that gives up, naming the inner step when its
        nested graph stopped short."""
        state, task, exc = end.state, end.task, gave.error
        assert task is not None
        route = route_of(
            node=self.name,
            fallback=self.policy.fallback if self.policy is not None else None,
            decision=gave.decision,
            failure=gave.failure,
            exc=exc,
            attempts=gave.attempts,
            task=task.effect_scope,  # a re-run failed step keeps its first keys
        )
        route["path"] = step_path(self.name, task, log_of(state))
        route["send"] = task.send_index is not None
        if route["send"] and gave.failure.kind.value == "permanent":
            route["suggestion"] = send_suggestion(route["suggestion"], route["path"])
        route["run_id"] = task.fence.run_id if task.fence is not None else None
        if isinstance(exc, SubgraphStopped):  # name the inner step, as it failed
            inner = exc.failed
            route.update(
                {
                    k: inner[k]
                    for k in ("kind", "reason", "error_type", "message", "attempts")
                    if k in inner
                }
            )
            route["path"] = str(inner.get("path") or route["path"])
            # The failure is the inner step's: what it says to do, its one failed row.
            route["nested"] = True
            if inner.get("suggestions"):
                route["suggestion"] = str(inner["suggestions"][0])
        return route


def _add_spend(
    log: dict[str, Any],
    spent: dict[str, float],
    topped: Budget | None,
    lean: tuple[RunScope, Tally] | None,
) -> None:
    """What the node used, and a top-up given to it. A tallied step (`log_update`,
    ``lean``: its invoke's scope and run tally) adds it to the tally and keeps
    it in its record (its step row), and the run's end carries the run's usage
    (``run_usage``); any other step's is added up by the run log."""
    if lean is not None:
        scope, tally = lean
        scope.spend(tally, spent)
        log["step"]["usage"] = spent
        if log.get("status") == "success":
            log["run_usage"] = scope.used(tally)
    else:
        log["usage"] = spent
    if topped is not None:
        log["budget"] = topped.to_dict()


#: What a tallied step's update may hold and still change nothing in the run log.
_PLAIN = frozenset(("step", "tallied"))


def _hand(log: dict[str, Any], output: Any) -> bool:
    """Whether a tallied completed step's record goes to the saver (`RunScope.hand`)
    in place of a run-log write: the update changes nothing in the run log and
    the output makes LangGraph store a write of the task (its ``put_writes``
    takes the record and stores it as the step's row, in the transaction of
    those writes). A saver that keeps no ledger has no use for it: the record
    goes nowhere, as the run log drops it."""
    return _PLAIN.issuperset(log) and _writes_something(output)


def _keeps_rows(scope: RunScope, task: Any) -> bool:
    """Whether the invoke's saver stores step rows (a `StepLog`: a resilient or a
    Redis saver; the same for all the invoke's steps, asked once)."""
    if scope.keeps_rows is None:
        scope.keeps_rows = task.step_log is not None or task.async_step_log is not None
    return scope.keeps_rows


def _writes_something(output: Any) -> bool:
    """Whether LangGraph stores a write of a node that returned ``output``."""
    if type(output) is dict:
        return len(output) > ("resilience" in output)
    if isinstance(output, Command) and output.graph is None:
        update = output.update
        return isinstance(update, dict) and any(k != "resilience" for k in update)
    return False


#: A subgraph that stopped short: no retry (its completed steps would run again);
#: the node's policy decides between fallback, degraded and partial result.
_stopped = Classification(kind=FailureKind.DEGRADABLE, reason="its subgraph stopped short")


def _validation_error(validate: Callable[[Any], Any], output: Any) -> BaseException | None:
    try:
        verdict = validate(output)
    except Exception as exc:  # a validator's own error counts as a rejection
        return exc if isinstance(exc, ValidationFailed) else ValidationFailed(message_of(exc))
    if verdict is False:
        return ValidationFailed("validate() returned False")
    return None
