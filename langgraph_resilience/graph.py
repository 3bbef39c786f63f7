"""`ResilientStateGraph`: LangGraph's `StateGraph` with per-node failure policies.

Each node is wrapped. The wrapper runs the node, classifies a failure on the
live exception, and asks the pure core (`_engine.decide`) what to do:

- retry in place (same task, same task id) after a full-jitter wait, with
  `adapt` overrides, or after compressing the context; failed tries are stored
  in the resilience store first, so a crash does not reset the count;
- degrade: record the step as degraded and return, so the node's normal edges
  fire;
- fallback / partial result: raise a routing signal. The node has failed, so
  LangGraph fires none of its edges; its error handler (generated here) routes
  to the fallback node or to the terminal ``partial_result`` node. The signal's
  ``repr`` carries the route, so the handler reads it even after a crash, when
  LangGraph hands it the stored string instead of the exception;
- pause: a BUDGET_EXHAUSTED failure interrupts the run (``interrupt``).

Nodes added without a policy (and with no default) keep LangGraph's behaviour;
their wrapper only records the step in the run log.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import random
import re
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from langchain_core.messages import AnyMessage, SystemMessage, trim_messages
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.config import get_config
from langgraph.errors import NodeError
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

from langgraph_resilience import state as run_log
from langgraph_resilience._engine import Action, Decision, decide
from langgraph_resilience._task import (
    BUDGET_KEY,
    CURRENT_ATTEMPT,
    DURABILITY_KEY,
    EFFECT_SCOPE_KEY,
    TaskContext,
    current_attempt,
)
from langgraph_resilience.budget import (
    Budget,
    add_usage,
    metering,
    pause_value,
    topped_up,
    used,
)
from langgraph_resilience.checkpoint import AttemptRecord
from langgraph_resilience.classify import (
    Classification,
    Classifier,
    FailureKind,
    is_control_flow,
)
from langgraph_resilience.errors import ConfigError, LeaseLost, ValidationFailed
from langgraph_resilience.policy import Attempt, NodePolicy

__all__ = [
    "PARTIAL_RESULT",
    "ResilientCompiledStateGraph",
    "ResilientStateGraph",
    "aretry_failed",
    "current_attempt",
    "retry_failed",
]

PARTIAL_RESULT = "partial_result"
_UNSET: Any = object()
_DEFAULTS = Classifier()


# ---------------------------------------------------------------------------
# The routing signal
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# The node loop, written once for sync and async nodes
# ---------------------------------------------------------------------------


class CallNode(NamedTuple):
    """Call the node on ``state`` (replies a `CallResult`)."""

    state: Any
    attempt: Attempt


class RecordAttempt(NamedTuple):
    """Store a failed try in the attempt ledger, before acting on it."""

    record: AttemptRecord
    started_at: float


class Sleep(NamedTuple):
    """Wait before the next try."""

    seconds: float


class LoadAttempts(NamedTuple):
    """Read the task's stored failed tries (replies a list of `AttemptRecord`)."""


NodeOp = CallNode | RecordAttempt | Sleep | LoadAttempts


@dataclass(slots=True)
class CallResult:
    """What a call returned (``output``) or raised (``error``), and what it used."""

    output: Any = None
    error: BaseException | None = None
    usage: dict[str, float] | None = None


@dataclass(frozen=True, slots=True)
class NodeContext:
    """What a node's wrapper knows of its node, fixed when the node is added."""

    name: str
    policy: NodePolicy | None
    classifier: Classifier
    is_terminal: Callable[[str], bool]  # every static edge out of the node goes to END
    rand: Callable[[], float]


_FIRST = Attempt()


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _log_update(
    ctx: NodeContext,
    step: int | None,
    state: Any,
    status: str,
    attempts: int,
    kind: str | None,
    output: Any,
) -> dict[str, Any]:
    now = time.time()
    entry: dict[str, Any] = {"status": status, "attempts": attempts, "completed_at": now}
    if kind is not None:
        entry["kind"] = kind
    update: dict[str, Any] = {"steps": {ctx.name: entry}}
    if status == "completed":
        update["completed_steps"] = [
            {
                "node": ctx.name,
                "step": step,
                "completed_at": now,
                "summary": run_log.summarize(output),
            }
        ]
    else:
        update["degraded_steps"] = [ctx.name]
    known = state.get("resilience") if isinstance(state, Mapping) else None
    if not (known or {}).get("task_spec") and isinstance(state, Mapping):
        update["task_spec"] = {k: v for k, v in state.items() if k != "resilience"}
    if ctx.is_terminal(ctx.name):
        update["status"] = "success"
    elif not (known or {}).get("status"):
        update["status"] = "running"
    return update


def _budget_pause(ctx: NodeContext, record: AttemptRecord) -> dict[str, Any]:
    """The interrupt of a node that raised `BudgetExhausted`."""
    return {
        "reason": "budget_exhausted",
        "node": ctx.name,
        "error": f"{record.error_type}: {record.reason}",
        "resume_with": "Command(resume=Budget(...)) with higher limits, or any value to retry",
    }


def _add_spend(log: dict[str, Any], spent: dict[str, float], topped: Budget | None) -> None:
    """What the node used (added up by the run log), and a top-up given to it."""
    log["usage"] = spent
    if topped is not None:
        log["budget"] = topped.to_dict()


def _with_log(output: Any, log: dict[str, Any]) -> Any:
    """The node's output with the run-log update added."""
    if output is None:
        return {"resilience": log}
    if isinstance(output, dict):
        own = output.get("resilience")
        merged = log if own is None else run_log.merge_run_log(own, log)  # type: ignore[arg-type]
        return {**output, "resilience": merged}
    if isinstance(output, Command):
        update = output.update
        if update is None:
            return replace(output, update={"resilience": log})
        if isinstance(update, dict):
            return replace(output, update=_with_log(update, log))
        return replace(output, update=[*update, ("resilience", log)])
    return output  # another state type: left as LangGraph would have it


def _compressed(policy: NodePolicy, state: Any) -> tuple[Any, dict[str, Any]]:
    """The state for the next try after a context overflow, and what was kept."""
    if policy.compress is not None:
        update = dict(policy.compress(state))
    else:
        update = default_compress(state)
    new_state = {**state, **update} if isinstance(state, Mapping) else state
    kept = {k: (len(v) if isinstance(v, list) else "changed") for k, v in update.items()}
    return new_state, {"at": time.time(), "kept": kept}


def default_compress(state: Any) -> dict[str, Any]:
    """Halve the ``messages`` key with langchain-core's trimming; keep the system message."""
    messages: Sequence[AnyMessage] = state.get("messages", []) if isinstance(state, Mapping) else []
    if not messages:
        raise ConfigError(
            "context overflow, but the state has no `messages` to trim; give the node "
            "NodePolicy(compress=...) that shrinks its context"
        )
    keep = max(1, len(messages) // 2)
    trimmed = trim_messages(
        list(messages),
        max_tokens=keep,
        token_counter=len,
        strategy="last",
        include_system=any(isinstance(m, SystemMessage) for m in messages),
        allow_partial=False,
    )
    return {"messages": trimmed}


def node_loop(ctx: NodeContext, state: Any, task: TaskContext) -> Generator[NodeOp, Any, Any]:
    """Run a node under its policy: yields I/O to do, returns the node's output.

    Raises `ResilienceRoute` to route to the fallback or the partial result, and
    lets LangGraph's control flow (interrupts, drains) through untouched.
    """
    policy = ctx.policy
    step = task.step
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
    overrides: Mapping[str, Any] = {}
    summaries: list[dict[str, Any]] = []
    spent: dict[str, float] = {"steps": 1}
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
        started = time.time()
        result: CallResult = yield CallNode(state, attempt)
        spent = add_usage(spent, result.usage)
        exc = result.error
        if exc is None and policy is not None and policy.validate is not None:
            exc = _validation_error(policy, result.output)
        if exc is None:
            kind = last.kind if last else None
            log = _log_update(ctx, step, state, "completed", number, kind, result.output)
            if summaries:
                log["context_summary"] = summaries
            _add_spend(log, spent, topped)
            return _with_log(result.output, log)
        if is_control_flow(exc) or isinstance(exc, LeaseLost) or policy is None:
            raise exc  # a lost lease ends this worker's part, it is no node failure
        failure = ctx.classifier(exc)
        decision = decide(
            policy, failure, [FailureKind(r.kind) for r in earlier if r.kind], ctx.rand()
        )
        record = AttemptRecord(
            attempt=number,
            node=ctx.name,
            kind=failure.kind.value,
            error_type=type(exc).__name__,
            reason=str(exc)[:500],
            finished_at=time.time(),
        )
        yield RecordAttempt(record, started)
        if decision.action is Action.PAUSE:
            # Raises until the run is resumed (Command(resume=...)); the resumed
            # node re-runs and, finding this try stored, takes the resume value
            # above, then tries again.
            interrupt(_budget_pause(ctx, record))
        earlier.append(record)
        if decision.action in (Action.RETRY, Action.PAUSE):
            if decision.adapt and policy.adapt is not None:
                overrides = dict(
                    policy.adapt(
                        replace(attempt, last_kind=failure.kind, last_error=_error_text(exc))
                    )
                )
            if decision.compress:
                state, summary = _compressed(policy, state)
                summaries.append({"node": ctx.name, **summary})
            if decision.delay > 0:
                yield Sleep(decision.delay)
            continue
        if decision.action is Action.DEGRADE:
            log = _log_update(ctx, step, state, "degraded", number, failure.kind.value, None)
            log["recovery_suggestions"] = [suggestion(ctx.name, failure, exc, number)]
            _add_spend(log, spent, topped)
            return {"resilience": log}
        route = _route(ctx, decision, failure, exc, number)
        # Where the step ran: retry_failed re-runs it as a new task, whose side
        # effects must keep this task's idempotency keys.
        route["task"] = task.task_scope
        raise ResilienceRoute(route)


def _validation_error(policy: NodePolicy, output: Any) -> BaseException | None:
    try:
        verdict = policy.validate(output)  # type: ignore[misc]
    except Exception as exc:  # a validator's own error counts as a rejection
        return exc if isinstance(exc, ValidationFailed) else ValidationFailed(str(exc))
    if verdict is False:
        return ValidationFailed("validate() returned False")
    return None


def _route(
    ctx: NodeContext, decision: Decision, failure: Classification, exc: BaseException, n: int
) -> dict[str, Any]:
    assert ctx.policy is not None
    target = ctx.policy.fallback if decision.action is Action.FALLBACK else PARTIAL_RESULT
    return {
        "route": decision.action.value,
        "target": target,
        "node": ctx.name,
        "kind": failure.kind.value,
        "reason": failure.reason,
        "error_type": type(exc).__name__,
        "message": str(exc)[:500],
        "attempts": n,
        "exhausted": decision.exhausted,
        "suggestion": suggestion(ctx.name, failure, exc, n),
    }


def suggestion(node: str, failure: Classification, exc: BaseException, attempts: int) -> str:
    """What to do next about a failed step, by kind."""
    error = _error_text(exc)
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
    return by_kind[failure.kind]


# ---------------------------------------------------------------------------
# Drivers: the only sync/async difference
# ---------------------------------------------------------------------------


def run_sync(ctx: NodeContext, state: Any, call: Callable[[Any], Any], task: TaskContext) -> Any:
    loop = node_loop(ctx, state, task)
    reply: Any = None
    while True:
        try:
            op = loop.send(reply)
        except StopIteration as stop:
            return stop.value
        if isinstance(op, CallNode):
            token = CURRENT_ATTEMPT.set(op.attempt)
            started = time.monotonic()
            with metering() as meter:
                try:
                    reply = CallResult(output=call(op.state))
                except Exception as exc:
                    reply = CallResult(error=exc)
                finally:
                    CURRENT_ATTEMPT.reset(token)
            reply.usage = meter.usage(time.monotonic() - started)
        elif isinstance(op, LoadAttempts):
            saver, key = task.saver, task.attempt_key
            reply = saver.node_attempts(key) if saver is not None and key is not None else []
        elif isinstance(op, RecordAttempt):
            saver, key = task.saver, task.attempt_key
            if saver is not None and key is not None:
                saver.record_attempt(key, op.record, op.started_at, task.fence)
            reply = None
        else:
            time.sleep(op.seconds)
            reply = None


async def run_async(
    ctx: NodeContext,
    state: Any,
    call: Callable[[Any], Awaitable[Any]],
    task: TaskContext,
    timeout: float | None,
) -> Any:
    loop = node_loop(ctx, state, task)
    reply: Any = None
    while True:
        try:
            op = loop.send(reply)
        except StopIteration as stop:
            return stop.value
        if isinstance(op, CallNode):
            token = CURRENT_ATTEMPT.set(op.attempt)
            started = time.monotonic()
            with metering() as meter:
                try:
                    reply = CallResult(output=await asyncio.wait_for(call(op.state), timeout))
                except asyncio.TimeoutError as exc:
                    late = TimeoutError(f"{ctx.name} took longer than {timeout}s")
                    late.__cause__ = exc
                    reply = CallResult(error=late)
                except Exception as exc:
                    reply = CallResult(error=exc)
                finally:
                    CURRENT_ATTEMPT.reset(token)
            reply.usage = meter.usage(time.monotonic() - started)
        elif isinstance(op, LoadAttempts):
            saver, key = task.async_saver, task.attempt_key
            reply = await saver.anode_attempts(key) if saver is not None and key is not None else []
        elif isinstance(op, RecordAttempt):
            saver, key = task.async_saver, task.attempt_key
            if saver is not None and key is not None:
                await saver.arecord_attempt(key, op.record, op.started_at, task.fence)
            reply = None
        else:
            await asyncio.sleep(op.seconds)
            reply = None


# ---------------------------------------------------------------------------
# The graph
# ---------------------------------------------------------------------------


def _error_handler(node: str) -> Callable[..., Command[Any]]:
    def handler(state: Any, error: NodeError) -> Command[Any]:
        route = read_route(error.error)
        if route is None:  # not a routing signal: fail as LangGraph would
            if isinstance(error.error, BaseException):
                raise error.error
            raise RuntimeError(f"node {node!r} failed: {error.error}")
        now = time.time()
        status = "fallback" if route["route"] == Action.FALLBACK.value else "failed"
        log: dict[str, Any] = {
            "steps": {
                node: {
                    "status": status,
                    "attempts": route["attempts"],
                    "kind": route["kind"],
                    "completed_at": now,
                }
            },
        }
        if status == "fallback":
            log["degraded_steps"] = [node]
        else:
            log["failed_step"] = {
                k: route.get(k)
                for k in ("node", "kind", "reason", "error_type", "message", "attempts", "task")
            }
            log["recovery_suggestions"] = [route["suggestion"]]
        return Command(goto=route["target"], update={"resilience": log})

    handler.__name__ = f"route_{node}"
    return handler


def partial_result(state: Any) -> dict[str, Any]:
    """The terminal node of a run that stopped short: the structured partial result."""
    log = (state.get("resilience") if isinstance(state, Mapping) else None) or {}
    return {
        "resilience": {
            "status": "partial_complete",
            "partial_output": {k: v for k, v in state.items() if k != "resilience"},
            "recovery_suggestions": list(log.get("recovery_suggestions") or []),
        }
    }


class ResilientCompiledStateGraph(CompiledStateGraph):  # type: ignore[type-arg]
    """A compiled `ResilientStateGraph`: draws its failure routes in `get_graph()`."""

    def get_graph(self, config: RunnableConfig | None = None, *, xray: int | bool = False) -> Any:
        drawing = super().get_graph(config, xray=xray)
        routes: dict[str, list[str]] = getattr(self.builder, "_routes", {})
        for name in [n for n in drawing.nodes if n.startswith("__error_handler__")]:
            drawing.remove_node(drawing.nodes[name])
        for source, targets in routes.items():
            for target in targets:
                if source in drawing.nodes and target in drawing.nodes:
                    label = "on failure" if target != PARTIAL_RESULT else "gives up"
                    drawing.add_edge(drawing.nodes[source], drawing.nodes[target], label, True)
        if PARTIAL_RESULT in drawing.nodes and END in drawing.nodes:
            ends = {(e.source, e.target) for e in drawing.edges}
            if (PARTIAL_RESULT, END) not in ends:
                drawing.add_edge(drawing.nodes[PARTIAL_RESULT], drawing.nodes[END])
        return drawing


class ResilientStateGraph(StateGraph):  # type: ignore[type-arg]
    """A `StateGraph` whose nodes answer failures by their `NodePolicy`.

    The state schema must extend `ResilientState`. Compiled graphs default to
    ``durability="sync"``, so task identities survive a crash.

    Example:
        >>> g = ResilientStateGraph(State)  # doctest: +SKIP
        >>> g.set_node_defaults(policy=NodePolicy(retry=Backoff(max_attempts=4)))
        >>> g.add_node("search", search, policy=NodePolicy(fallback="cache", critical=False))
    """

    def __init__(self, state_schema: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(state_schema, *args, **kwargs)
        self._policies: dict[str, NodePolicy | None] = {}
        self._default_policy: NodePolicy | None = None
        self._routes: dict[str, list[str]] = {}

    def set_node_defaults(self, *, policy: NodePolicy | None = _UNSET, **kwargs: Any) -> Any:
        """LangGraph's node defaults, plus a default `NodePolicy` for nodes added after.

        Raises:
            ConfigError: ``policy`` is not a NodePolicy, or nodes were already added.
        """
        if policy is not _UNSET:
            if policy is not None and not isinstance(policy, NodePolicy):
                raise ConfigError(f"policy must be a NodePolicy or None, got {policy!r}")
            if self._policies:
                raise ConfigError(
                    "set_node_defaults(policy=...) must come before add_node; nodes already "
                    f"added: {', '.join(sorted(self._policies))}"
                )
            self._default_policy = policy
        return super().set_node_defaults(**kwargs) if kwargs else self

    def add_node(
        self, node: Any, action: Any = None, *, policy: NodePolicy | None = _UNSET, **kwargs: Any
    ) -> Any:
        """LangGraph's `add_node`, plus ``policy=`` (default: the graph's default policy).

        Raises:
            ConfigError: ``policy`` is not a NodePolicy, or ``timeout`` on a sync node.
        """
        if action is None and not isinstance(node, str):
            node, action = getattr(node, "name", None) or node.__name__, node
        if policy is _UNSET:
            policy = self._default_policy
        elif policy is not None and not isinstance(policy, NodePolicy):
            raise ConfigError(f"policy for node {node!r} must be a NodePolicy, got {policy!r}")
        if policy is not None and policy.timeout is not None and not _is_async(action):
            raise ConfigError(
                f"NodePolicy(timeout=...) on node {node!r} needs an async node: LangGraph "
                "cannot stop a running sync function. Make it `async def`, or drop the timeout."
            )
        self._policies[node] = policy
        if policy is not None:
            kwargs.setdefault("error_handler", _error_handler(node))
        return super().add_node(node, self._wrap(node, action, policy), **kwargs)

    def _wrap(self, name: str, action: Any, policy: NodePolicy | None) -> Any:
        ctx = NodeContext(
            name=name,
            policy=policy,
            classifier=(policy.classifier if policy and policy.classifier else _DEFAULTS),
            is_terminal=lambda node: node in self._terminal,
            rand=random.random,
        )

        timeout = float(policy.timeout) if policy and policy.timeout else None  # type: ignore[arg-type]
        if isinstance(action, Runnable):

            def sync_runnable(state: Any, config: RunnableConfig) -> Any:
                call = lambda s: action.invoke(s, config)  # noqa: E731
                return run_sync(ctx, state, call, TaskContext.of(config))

            async def async_runnable(state: Any, config: RunnableConfig) -> Any:
                call = lambda s: action.ainvoke(s, config)  # noqa: E731
                return await run_async(ctx, state, call, TaskContext.of(config), timeout)

            return RunnableLambda(sync_runnable, afunc=async_runnable, name=name)
        if _is_async(action):

            @functools.wraps(action)
            async def async_node(state: Any, *args: Any, **kwargs: Any) -> Any:
                call = lambda s: action(s, *args, **kwargs)  # noqa: E731
                return await run_async(ctx, state, call, TaskContext.of(get_config()), timeout)

            return async_node

        @functools.wraps(action)
        def sync_node(state: Any, *args: Any, **kwargs: Any) -> Any:
            call = lambda s: action(s, *args, **kwargs)  # noqa: E731
            return run_sync(ctx, state, call, TaskContext.of(get_config()))

        return sync_node

    @property
    def _terminal(self) -> frozenset[str]:
        return getattr(self, "_terminal_nodes", frozenset())

    def compile(self, checkpointer: Any = None, *, budget: Any = None, **kwargs: Any) -> Any:
        """Compile; routes fallbacks and critical failures; defaults to ``durability="sync"``.

        ``budget``: the default `Budget` of every run (a run's
        ``config["configurable"]["budget"]`` overrides it).

        Raises:
            ConfigError: the state schema does not extend ResilientState, a
                fallback names a node that does not exist, or the budget is bad.
        """
        run_log.require_resilient_schema(self.state_schema)
        routes: dict[str, list[str]] = {}
        for name, policy in self._policies.items():
            if policy is None:
                continue
            if policy.fallback is not None:
                if policy.fallback not in self.nodes or policy.fallback == name:
                    known = ", ".join(sorted(n for n in self._policies if n != name)) or "none"
                    raise ConfigError(
                        f"node {name!r} falls back to {policy.fallback!r}, which is "
                        f"{'itself' if policy.fallback == name else 'not a node of this graph'}. "
                        f"Add it with add_node first, or pick one of: {known}."
                    )
                routes[name] = [policy.fallback]
            if policy.critical:
                routes.setdefault(name, []).append(PARTIAL_RESULT)
        if any(PARTIAL_RESULT in t for t in routes.values()) and PARTIAL_RESULT not in self.nodes:
            StateGraph.add_node(self, PARTIAL_RESULT, partial_result)
            StateGraph.add_edge(self, PARTIAL_RESULT, END)
        for name, targets in routes.items():
            handler = self.nodes.get(f"__error_handler__{name}")
            if handler is not None:
                handler.ends = tuple(targets)
        self._routes = routes
        out_edges: dict[str, set[str]] = {}
        for source, target in self.edges:
            out_edges.setdefault(source, set()).add(target)
        self._terminal_nodes = frozenset(
            n
            for n, targets in out_edges.items()
            if targets == {END} and n not in self.branches and n != START
        )
        default_budget = Budget.coerce(budget, where="compile(budget=...)")
        compiled = super().compile(checkpointer, **kwargs)
        compiled.__class__ = ResilientCompiledStateGraph
        defaults: dict[str, Any] = {DURABILITY_KEY: "sync"}
        if default_budget is not None:  # config["configurable"]["budget"] overrides it
            defaults[BUDGET_KEY] = default_budget
        return compiled.with_config(configurable=defaults)


def _is_async(action: Any) -> bool:
    # A callable object counts by its __call__ method.
    call = action if inspect.isfunction(action) else type(action).__dict__.get("__call__")
    return inspect.iscoroutinefunction(action) or inspect.iscoroutinefunction(call)


# ---------------------------------------------------------------------------
# retry_failed
# ---------------------------------------------------------------------------


def _retry_command(
    values: Mapping[str, Any], thread: str, update: Mapping[str, Any] | None
) -> Command[Any]:
    log = values.get("resilience") or {}
    failed = log.get("failed_step")
    if log.get("status") != "partial_complete" or not failed:
        raise ConfigError(
            f"thread {thread!r} has no failed step to retry (status: "
            f"{log.get('status', 'unknown')!r}); retry_failed is for runs that ended with "
            "a partial result"
        )
    reset: dict[str, Any] = {
        "status": "running",
        "failed_step": None,
        "partial_output": None,
        "recovery_suggestions": [],
    }
    return Command(goto=failed["node"], update={**(update or {}), "resilience": reset})


def _with_effect_scope(config: RunnableConfig, values: Mapping[str, Any]) -> RunnableConfig:
    """The config for re-running a failed step: its side effects keep their keys."""
    failed = (values.get("resilience") or {}).get("failed_step") or {}
    if not failed.get("task"):
        return config
    scope = {"node": failed["node"], "task": failed["task"]}
    return {**config, "configurable": {**config.get("configurable", {}), EFFECT_SCOPE_KEY: scope}}


def retry_failed(
    graph: Any, config: RunnableConfig, *, update: Mapping[str, Any] | None = None
) -> Any:
    """Re-run the step that ended a run with a partial result, and go on from there.

    Completed steps are not run again: their results are in the state. Pass
    ``update`` to correct the state first (the fix for a PERMANENT failure).

    Raises:
        ConfigError: the thread did not end with a partial result.

    Example:
        >>> out = retry_failed(graph, config, update={"query": "fixed"})  # doctest: +SKIP
    """
    values = graph.get_state(config).values
    command = _retry_command(values, config["configurable"]["thread_id"], update)
    return graph.invoke(command, _with_effect_scope(config, values))


async def aretry_failed(
    graph: Any, config: RunnableConfig, *, update: Mapping[str, Any] | None = None
) -> Any:
    """Async twin of `retry_failed`."""
    values = (await graph.aget_state(config)).values
    command = _retry_command(values, config["configurable"]["thread_id"], update)
    return await graph.ainvoke(command, _with_effect_scope(config, values))
