"""Where a node that failed for good goes: the routing signal and its handler.

A node wrapper that gives up raises the node's own last error with its route
attached (`routing`), so that LangChain callbacks and tracers report the
failure as it is, never a routing signal. The node has failed, so LangGraph
fires none of its edges; the node's error handler (`error_handler`) reads the
route and goes to the fallback node or to the terminal ``partial_result`` node,
writing the failure into the run log.

After a crash between the failure and its handler, LangGraph hands the handler
the stored text of the error instead of the exception. The try that gave up
recorded its route in its attempt row (`AttemptRecord.route`, stored before
the error was raised), and the handler runs with the failed task's identity
(LangGraph gives it the failed task's execution info): it reads the route back
from that row (`ledger_route`), so the route keeps its kind, tries and effect
scope. A saver that keeps no attempts (LangGraph's own) has the route rebuilt
from the node's policy and the stored text (`stored_route`).

A `LeaseLost` is not a failure: the step stopped because its worker could not
prove it held the run's lease. Its handler routes nothing and writes nothing;
it raises a lost lease of its own (LangGraph treats a handler that raises the
very error it was handed as having handled it, and would go on to store a
checkpoint with the step done), so the run stops there and whoever takes it
over runs the step. The savers store none of its writes either.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.errors import NodeError
from langgraph.types import Command

from langgraph_resilience._engine import Action, Decision
from langgraph_resilience._keys import GRAPH_KEY
from langgraph_resilience._langgraph import ERROR_HANDLER_PREFIX, RunnableCallable, StateNodeSpec
from langgraph_resilience.checkpoint import AttemptRecord
from langgraph_resilience.checkpoint.runlog._scope import scope_of
from langgraph_resilience.classify import Classification, FailureKind
from langgraph_resilience.errors import EffectOutcomeUnknown, LeaseLost, describe, message_of
from langgraph_resilience.graph._tally import aensure, ensure, tally_of
from langgraph_resilience.graph._task import TaskContext
from langgraph_resilience.state import FAILED_FIELDS, brief
from langgraph_resilience.telemetry._emit import emit

__all__ = [
    "PARTIAL_RESULT",
    "ROUTES_NODE",
    "send_suggestion",
    "ResilienceRoute",
    "aerror_handler",
    "error_handler",
    "error_text",
    "failure_log",
    "give_up_of",
    "partial_outcome",
    "ROUTE_ATTR",
    "carried_route",
    "ledger_route",
    "partial_result",
    "route_of",
    "routes_node",
    "routing",
    "stored_route",
    "suggestion",
]

PARTIAL_RESULT = "partial_result"
#: The one error handler node of a graph's nodes with a policy: named as
#: LangGraph names a node's handler, after the state key no node may be named.
ROUTES_NODE = f"{ERROR_HANDLER_PREFIX}resilience"


#: The attribute under which a node's error carries its route.
ROUTE_ATTR = "lgr_route"


class ResilienceRoute(Exception):
    """Raised by a node wrapper to hand the task to its error handler, for an
    error that takes no attribute (`ROUTE_ATTR`).

    Not an error of the user's: it carries where the run goes next. Stored (its
    ``repr``), it reads as the error it stands for.
    """

    def __init__(self, route: dict[str, Any]) -> None:
        super().__init__(route.get("message", ""))
        self.route = route

    def __repr__(self) -> str:
        return f"{self.route.get('error_type') or 'Error'}({self.route.get('message', '')!r})"


def carried_route(error: object) -> dict[str, Any] | None:
    """The route a live error carries (None: none)."""
    if isinstance(error, ResilienceRoute):
        return error.route
    carried = getattr(error, ROUTE_ATTR, None)
    return carried if isinstance(carried, dict) else None


def routing(exc: BaseException, route: dict[str, Any]) -> BaseException:
    """What a node that gives up raises: its own error, carrying ``route``."""
    try:
        setattr(exc, ROUTE_ATTR, route)
    except (AttributeError, TypeError):  # an error that takes no attribute
        return ResilienceRoute(route)
    return exc


def ledger_route(tries: Sequence[AttemptRecord], node: str) -> dict[str, Any] | None:
    """The route the failed task's try that gave up recorded (its attempt rows,
    ``tries``), or None (none did: another saver, or a node that routes nothing)."""
    for record in reversed(tries):
        if record.node == node and record.route:
            found = json.loads(record.route)
            return found if isinstance(found, dict) else None
    return None


_STORED_RE = re.compile(r"^(\w+)\((.*)\)$", re.S)


#: Errors a node raises without routing them (wrong wiring, a lost lease).
_NOT_ROUTED = ("ConfigError", "LeaseLost")


def stored_route(node: str, target: str, action: Action, stored: str) -> dict[str, Any] | None:
    """The route of a node whose error was stored before its handler ran (a
    crash in between): where its policy sends it, and what the stored text
    tells (the error's type and message; its kind is not stored: ``permanent``
    stands for it). None for an error the node does not route."""
    match = _STORED_RE.match(stored.strip())
    error_type, message = (match.group(1), match.group(2).strip("'\"")) if match else ("", stored)
    if error_type in _NOT_ROUTED:
        return None
    return {
        "route": action.value,
        "target": target,
        "node": node,
        "kind": FailureKind.PERMANENT.value,
        "reason": "recorded before a restart; the failure's kind was not stored",
        "error_type": error_type,
        "message": message[:500],
        "attempts": 1,
        "exhausted": False,
        "suggestion": (
            f"'{node}' failed ({error_type}: {message[:200]}) and the process stopped before "
            "routing it. Fix the cause, then call retry_failed(graph, config)."
        ),
        "task": "",
    }


def route_of(
    *,
    node: str,
    fallback: str | None,
    decision: Decision,
    failure: Classification,
    exc: BaseException,
    attempts: int,
    task: str,
) -> dict[str, Any]:
    """The route of a node that gives up: where to, and the `FailedStep` the
    run log keeps (its `FAILED_FIELDS`).

    ``task`` is where the step ran: `retry_failed` re-runs it as a new task,
    whose side effects must keep this task's idempotency keys.
    """
    target = fallback if decision.action is Action.FALLBACK else PARTIAL_RESULT
    return {
        "route": decision.action.value,
        "target": target,
        "node": node,
        "kind": failure.kind.value,
        "reason": failure.reason,
        "error_type": type(exc).__name__,
        "message": message_of(exc)[:500],
        "attempts": attempts,
        "exhausted": decision.exhausted,
        "suggestion": suggestion(node, failure, exc, attempts, retry_after=decision.retry_after),
        "task": task,
    }


def send_suggestion(text: str, path: str) -> str:
    """A failed `Send` branch's suggestion: its payload is kept as sent (``update=``
    changes the state, not the payload), and ``payload=`` replaces it."""
    return text.replace(
        "retry_failed(graph, config, update={...}) with corrected state",
        f"retry_failed(graph, config, step={path!r}, payload={{...}}) with the corrected "
        "payload (a Send branch re-runs with the payload it was sent, kept as it was: "
        "update= changes the state, not the payload)",
    )


def error_text(exc: BaseException) -> str:
    """An error as the run log and suggestions quote it."""
    return describe(exc)[:500]


def suggestion(
    node: str,
    failure: Classification,
    exc: BaseException,
    attempts: int,
    step: str | None = None,
    *,
    retry_after: float | None = None,
) -> str:
    """What to do next about a failed step, by kind (``step``: a degraded step's
    path, which `retry_failed` re-runs only when named; ``retry_after``: the wait
    the service asked for, longer than the policy waits in place)."""
    error = error_text(exc)
    tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    by_kind = {
        FailureKind.TRANSIENT: (
            f"'{node}' kept failing with a transient error after {tries} ({error}). Check the "
            "service it calls, then call retry_failed(graph, config) to re-run only this step."
        ),
        FailureKind.PERMANENT: (
            f"'{node}' failed with an error a retry cannot fix ({error}). Fix the cause (code, "
            "configuration or input), then call retry_failed(graph, config, update={...}) with "
            "corrected state to re-run only this step."
        ),
        FailureKind.VALIDATION: (
            f"'{node}' produced output that failed validation {tries} ({error}). Loosen "
            "NodePolicy.validate, give NodePolicy.adapt other parameters, or fix the prompt, "
            "then call retry_failed(graph, config)."
        ),
        FailureKind.CONTEXT_OVERFLOW: (
            f"'{node}' exceeded the model's context even after compression ({error}). Give "
            "NodePolicy(compress=...) that keeps less, or use a model with a larger window, "
            "then call retry_failed(graph, config)."
        ),
        FailureKind.DEGRADABLE: (
            f"'{node}' failed ({error}) and had no fallback. Add NodePolicy(fallback=...) or "
            "call retry_failed(graph, config) once the dependency is back."
        ),
        FailureKind.BUDGET_EXHAUSTED: (
            f"'{node}' ran out of budget ({error}). Resume with a larger budget."
        ),
    }
    text = by_kind[failure.kind]
    if retry_after is not None:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(time.time() + retry_after))
        text = (
            f"'{node}' was asked to wait {retry_after:.0f} s before a retry (Retry-After: "
            f"{error}), longer than its Backoff.max_wait. Call retry_failed(graph, config) "
            f"after {when}."
        )
    if isinstance(exc, EffectOutcomeUnknown):
        text = (
            f"'{node}' stopped at side effect {exc.effect!r}, which was started but whose "
            "outcome is unknown (the process stopped during the call). Check the outside "
            "system, record what you find with settle_effect(saver, thread_id, "
            f"{exc.idempotency_key!r}, happened=True, result=...) or happened=False, then "
            "call retry_failed(graph, config)."
        )
    if step is not None:
        text = text.replace(
            "retry_failed(graph, config", f"retry_failed(graph, config, step={step!r}"
        )
    return text


def give_up_of(fallback: str | None, critical: bool) -> tuple[str, Action] | None:
    """Where a node's policy sends it when it gives up (None: it degrades)."""
    if fallback is not None:
        return fallback, Action.FALLBACK
    return (PARTIAL_RESULT, Action.PARTIAL) if critical else None


def error_handler(
    give_ups: Mapping[str, tuple[str, Action] | None],
) -> Callable[..., Command[Any]]:
    """The error handler of the nodes with a policy: follows the routing signal
    of the node that failed (LangGraph's ``NodeError.node``).

    One handler node serves every node of a graph (`ROUTES_NODE`): LangGraph
    adds a channel per node and walks every channel at every step, so a handler
    node per node made each step of a long graph cost more.

    ``give_ups``: where each node's policy sends it when it gives up (target,
    action), for an error stored before a crash without its route. Any other
    error fails the run as LangGraph would.
    """

    def handler(state: Any, error: NodeError) -> Command[Any]:
        route = carried_route(_not_lost(error))
        task = TaskContext.current() if route is None else None  # the failed task's
        key = task.attempt_key if task is not None else None
        if task is not None and key is not None and (saver := task.ledger) is not None:
            route = ledger_route(saver.attempts.read(key), error.node)
        return _follow(give_ups, state, error, route)

    handler.__name__ = "route_failure"
    return handler


def aerror_handler(
    give_ups: Mapping[str, tuple[str, Action] | None],
) -> Callable[..., Awaitable[Command[Any]]]:
    """Async twin of `error_handler` (reads the attempt rows of an async saver)."""

    async def ahandler(state: Any, error: NodeError) -> Command[Any]:
        route = carried_route(_not_lost(error))
        task = TaskContext.current() if route is None else None
        key = task.attempt_key if task is not None else None
        if task is not None and key is not None and (saver := task.async_ledger) is not None:
            route = ledger_route(await saver.attempts.aread(key), error.node)
        return _follow(give_ups, state, error, route)

    ahandler.__name__ = "route_failure"
    return ahandler


def _not_lost(error: NodeError) -> object:
    """The failed node's error; a lost lease is raised again (the step stopped:
    it did not fail)."""
    if isinstance(error.error, LeaseLost):
        raise LeaseLost(str(error.error)) from error.error
    return error.error


def _follow(
    give_ups: Mapping[str, tuple[str, Action] | None],
    state: Any,
    error: NodeError,
    route: dict[str, Any] | None,
) -> Command[Any]:
    """Go where ``route`` says; an error stored without one is routed by the
    node's policy (`stored_route`); any other error fails as LangGraph would."""
    node = error.node
    give_up = give_ups.get(node)
    if route is None and give_up is not None and isinstance(error.error, str):
        route = stored_route(node, give_up[0], give_up[1], error.error)
    if route is None:
        if isinstance(error.error, BaseException):
            raise error.error
        raise RuntimeError(f"node {node!r} failed: {error.error}")
    return Command(goto=route["target"], update={"resilience": failure_log(route, state)})


def routes_node(
    give_ups: Mapping[str, tuple[str, Action] | None],
    routes: Mapping[str, Sequence[str]],
    state_schema: type[Any],
) -> StateNodeSpec[Any, Any]:
    """`ROUTES_NODE`'s entry in a builder's nodes: `error_handler` of the nodes
    in ``give_ups``, its ends every target their failures route to (``routes``:
    LangGraph draws them, and checks a `Command`'s ``goto`` against them)."""
    ends = tuple(dict.fromkeys(t for n in give_ups for t in routes.get(n, ())))
    given = dict(give_ups)
    return StateNodeSpec(
        RunnableCallable(
            error_handler(given), aerror_handler(given), name=ROUTES_NODE, trace=False
        ),
        metadata=None,
        input_schema=state_schema,
        retry_policy=None,
        cache_policy=None,
        is_error_handler=True,
        ends=ends,
    )


def failure_log(route: Mapping[str, Any], state: Any) -> dict[str, Any]:
    """The run-log update of a step that gave up (``state``: the failed task's
    input, a `Send` branch's own payload); a step inside a nested graph that
    failed (``route["nested"]``) is recorded by that graph, not again here."""
    status = "fallback" if route["route"] == Action.FALLBACK.value else "failed"
    path = str(route.get("path") or route["node"])
    known = state.get("resilience") if isinstance(state, Mapping) else None
    step = {
        "run": int((known or {}).get("run") or 1),
        "path": path,
        "node": route["node"],
        "status": status,
        "attempts": route["attempts"],
        "kinds": [route["kind"]],
        "started_at": time.time(),
        "ended_at": time.time(),
        "summary": "",
    }
    if route.get("run_id"):  # it ran under a Worker's lease
        step["run_id"] = route["run_id"]
    # A nested graph's step that failed (``nested``) has its failed row, stored
    # by its own graph: the node that ran the graph stores none of it again.
    log: dict[str, Any] = {} if route.get("nested") and status == "failed" else {"step": step}
    if status == "fallback":
        log["degraded_steps"] = [path]
        return log
    failed: dict[str, Any] = {k: route.get(k) for k in FAILED_FIELDS}
    failed["path"] = path
    if route.get("send"):
        failed["send"] = state
    log["failed_step"] = failed
    log["failed_steps"] = [failed]
    log["recovery_suggestions"] = [route["suggestion"]]
    # The run stops short here: a step due next (a fan-in the failed step's
    # siblings fed) sees it and does not run (`_step_log.stopped`).
    log["status"] = "partial_complete"
    return log


def partial_outcome(
    state: Any, history: Sequence[Mapping[str, Any]] | None, task: TaskContext
) -> dict[str, Any]:
    """The structured partial result's run-log update (and its event);
    ``history``: the run's stored steps, if kept."""
    log = (state.get("resilience") if isinstance(state, Mapping) else None) or {}
    outcome: dict[str, Any] = {
        "status": "partial_complete",
        "partial_output": {k: v for k, v in state.items() if k != "resilience"},
        "recovery_suggestions": list(log.get("recovery_suggestions") or []),
    }
    if log.get("failed_step"):
        # Said again (the state has it: a no-op there), so that the step's
        # "updates" chunk names it: the error handler's own chunk is hidden
        # (`hide_node`), and a parent streaming this graph reads it here.
        outcome["failed_step"] = log["failed_step"]
    if history is not None:  # every completed step of the run
        done = [brief(s) for s in history if s.get("status") == "completed"]
        # Steps of this invoke whose writes are still on their way to the store
        # (LangGraph stores a task's writes in the background and goes on).
        stored = {d.get("path") for d in done}
        scope = scope_of(task.config)
        pending = scope.unstored(_run_of(state)) if scope is not None else []
        late = [brief(s) for s in pending if s.get("path") not in stored]
        outcome["completed_steps"] = done + late  # the late ones are the latest
    if (lean := tally_of(task, log)) is not None:  # the run's usage, at its end
        outcome["run_usage"] = dict(lean[1].usage)
    _announce(log, outcome, task)
    return outcome


def _announce(log: Mapping[str, Any], outcome: Mapping[str, Any], task: TaskContext) -> None:
    """The event of a run that ends with a partial result (ERROR: an operator's to see)."""
    failed = [f for f in log.get("failed_steps") or [] if isinstance(f, Mapping)]
    paths = [str(f.get("path") or f.get("node")) for f in failed]
    fence = task.fence
    emit(
        "partial_result",
        logging.ERROR,
        "run %s of thread %s ended with a partial result: failed %s; %d steps completed",
        int(log.get("run") or 1),
        task.thread_id,
        ", ".join(paths) or "unknown",
        len(outcome.get("completed_steps") or log.get("completed_steps") or []),
        thread_id=task.thread_id,
        run_id=fence.run_id if fence is not None else None,
        run=int(log.get("run") or 1),
        graph=(task.config.get("configurable") or {}).get(GRAPH_KEY),
        failed_paths=paths,
        kind=str(failed[0].get("kind")) if failed else None,
    )


def _run_of(state: Any) -> int:
    log = (state.get("resilience") if isinstance(state, Mapping) else None) or {}
    return int(log.get("run") or 1)


def _partial_sync(state: Any, config: RunnableConfig) -> dict[str, Any]:
    task = ensure(config, state)
    saver, thread = task.step_log, task.thread_id
    found = saver.step_history(thread, run=_run_of(state)) if saver and thread else None
    return {"resilience": partial_outcome(state, found, task)}


async def _partial_async(state: Any, config: RunnableConfig) -> dict[str, Any]:
    task = await aensure(config, state)
    saver, thread = task.async_step_log, task.thread_id
    found = await saver.astep_history(thread, run=_run_of(state)) if saver and thread else None
    return {"resilience": partial_outcome(state, found, task)}


#: The terminal node of a run that stopped short: the structured partial result,
#: listing every completed step of the run when the saver keeps the history.
partial_result: Runnable[Any, Any] = RunnableLambda(
    _partial_sync, afunc=_partial_async, name=PARTIAL_RESULT
)
