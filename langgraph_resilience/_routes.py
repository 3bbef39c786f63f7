"""Where a node that failed for good goes: the routing signal and its handler.

A node wrapper that gives up raises `ResilienceRoute`. The node has failed, so
LangGraph fires none of its edges; the node's error handler (`error_handler`)
reads the route and goes to the fallback node or to the terminal
``partial_result`` node, writing the failure into the run log. The signal's
``repr`` carries the route, so the handler reads it even after a crash, when
LangGraph hands it the stored string instead of the exception.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.errors import NodeError
from langgraph.types import Command

from langgraph_resilience._engine import Action, Decision
from langgraph_resilience._task import TaskContext
from langgraph_resilience.classify import Classification, FailureKind
from langgraph_resilience.state import brief

__all__ = [
    "PARTIAL_RESULT",
    "ResilienceRoute",
    "error_handler",
    "error_text",
    "partial_result",
    "read_route",
    "route_of",
    "suggestion",
]

PARTIAL_RESULT = "partial_result"

_ROUTE_RE = re.compile(r"ResilienceRoute\((\{.*\})\)", re.S)


class ResilienceRoute(Exception):
    """Raised by a node wrapper to hand the task to its error handler.

    Not an error of the user's: it carries where the run goes next.
    """

    def __init__(self, route: dict[str, Any]) -> None:
        super().__init__(route.get("message", ""))
        self.route = route

    def __repr__(self) -> str:
        return f"ResilienceRoute({json.dumps(self.route, sort_keys=True)})"


def read_route(error: object) -> dict[str, Any] | None:
    """The route in a live signal, or in its stored ``repr`` after a reload."""
    if isinstance(error, ResilienceRoute):
        return error.route
    match = _ROUTE_RE.search(str(error)) if isinstance(error, str) else None
    return json.loads(match.group(1)) if match else None


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
    """The route of a node that gives up: where to, and what the run log keeps.

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
        "message": str(exc)[:500],
        "attempts": attempts,
        "exhausted": decision.exhausted,
        "suggestion": suggestion(node, failure, exc, attempts, retry_after=decision.retry_after),
        "task": task,
    }


def error_text(exc: BaseException) -> str:
    """An error as the run log and suggestions quote it."""
    return f"{type(exc).__name__}: {exc}"[:500]


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
    if step is not None:
        text = text.replace(
            "retry_failed(graph, config", f"retry_failed(graph, config, step={step!r}"
        )
    return text


def error_handler(node: str) -> Callable[..., Command[Any]]:
    """The error handler of a node with a policy: follows its routing signal.

    Any other error fails the run as LangGraph would.
    """

    def handler(state: Any, error: NodeError) -> Command[Any]:
        route = read_route(error.error)
        if route is None:  # not a routing signal: fail as LangGraph would
            if isinstance(error.error, BaseException):
                raise error.error
            raise RuntimeError(f"node {node!r} failed: {error.error}")
        return Command(goto=route["target"], update={"resilience": failure_log(route, state)})

    handler.__name__ = f"route_{node}"
    return handler


_FAILED_FIELDS = ("node", "kind", "reason", "error_type", "message", "attempts", "task")


def failure_log(route: Mapping[str, Any], state: Any) -> dict[str, Any]:
    """The run-log update of a step that gave up (``state``: the failed task's
    input, a `Send` branch's own payload)."""
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
    log: dict[str, Any] = {"step": step}
    if status == "fallback":
        log["degraded_steps"] = [path]
        return log
    failed: dict[str, Any] = {"path": path, **{k: route.get(k) for k in _FAILED_FIELDS}}
    if route.get("send"):
        failed["send"] = state
    log["failed_step"] = failed
    log["failed_steps"] = [failed]
    log["recovery_suggestions"] = [route["suggestion"]]
    return log


def _partial(state: Any, history: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The structured partial result; ``history``: the run's stored steps, if kept."""
    log = (state.get("resilience") if isinstance(state, Mapping) else None) or {}
    outcome: dict[str, Any] = {
        "status": "partial_complete",
        "partial_output": {k: v for k, v in state.items() if k != "resilience"},
        "recovery_suggestions": list(log.get("recovery_suggestions") or []),
    }
    if history is not None:  # every completed step, not only the recent window
        done = [brief(s) for s in history if s.get("status") == "completed"]
        # A step whose writes are still on their way to the store (async savers
        # write them in the background) is in the window already.
        stored = {d.get("path") for d in done}
        window = [w for w in log.get("completed_steps") or [] if w.get("path") not in stored]
        outcome["completed_steps"] = done + window
    return {"resilience": outcome}


def _run_of(state: Any) -> int:
    log = (state.get("resilience") if isinstance(state, Mapping) else None) or {}
    return int(log.get("run") or 1)


def _partial_sync(state: Any, config: RunnableConfig) -> dict[str, Any]:
    task = TaskContext(config=config)
    saver, thread = task.saver, task.thread_id
    found = saver.step_history(thread, run=_run_of(state)) if saver and thread else None
    return _partial(state, found)


async def _partial_async(state: Any, config: RunnableConfig) -> dict[str, Any]:
    task = TaskContext(config=config)
    saver, thread = task.async_saver, task.thread_id
    found = await saver.astep_history(thread, run=_run_of(state)) if saver and thread else None
    return _partial(state, found)


#: The terminal node of a run that stopped short: the structured partial result,
#: listing every completed step of the run when the saver keeps the history.
partial_result: Runnable[Any, Any] = RunnableLambda(
    _partial_sync, afunc=_partial_async, name=PARTIAL_RESULT
)
