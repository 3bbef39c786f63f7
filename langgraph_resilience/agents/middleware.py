"""`ResilienceMiddleware`: this package's policies for agents built with ``create_agent``.

LangChain's ``create_agent`` compiles its own graph (a ``model`` node, one
``tools`` task per tool call), so a `ResilientStateGraph`'s node policies never
reach it. This middleware brings them in through the agent's own hooks, and
composes with LangChain's middleware (summarization, human in the loop, ...):

- ``wrap_model_call`` / ``awrap_model_call``: the model call under its
  `CallPolicy` (classified, retried per kind, attempts stored through the
  resilient saver; a context overflow shrinks the request's messages to a valid
  shorter history and tries again); the run's `Budget` checked before it, and an
  exhausted budget pauses the agent with an ``interrupt`` until
  ``Command(resume=Budget(...))``; what it used (tokens, seconds, steps) added
  to ``state["resilience"]["usage"]``;
- ``wrap_tool_call`` / ``awrap_tool_call``: every tool call under its tool's
  `CallPolicy`; tools named in ``effects`` record an intent before the call and
  the resulting `ToolMessage` after it in the side-effect ledger (keyed by the
  tool call id), so a resumed or retried agent gets the stored message back
  instead of a second call; a tool that fails for good becomes an error
  `ToolMessage` (``on_failure="continue"``) or ends the run with the partial
  result (``"end"``); a call run again by `retry_failed` replaces its error
  `ToolMessage` (same id), and one that has its result is not made again: one
  `ToolMessage` per tool call id;
- ``before_agent``: a new input starts a new run in the run log (an agent
  that is a node of a running `ResilientStateGraph` run is part of that run);
- ``before_model``: a run that ended short does not call the model again;
- ``after_agent``: a run that reached its end otherwise is a ``success``.

The decisions are the package's own (`_engine.decide`, `Classifier`, `Backoff`);
the sync and async hooks differ in their I/O lines only.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    hook_config,
)
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from langgraph_resilience.agents._calls import CallTries, ModelTries
from langgraph_resilience.agents._outcome import (
    call_step,
    earlier_result,
    ended,
    in_parents_run,
    nested_short,
    partial_log,
    stopped_message,
    tool_error_message,
)
from langgraph_resilience.agents._policy import (
    CallPolicy,
    ToolEffect,
    node_policy,
)
from langgraph_resilience.agents._resumes import anote_agent_resume, note_agent_resume
from langgraph_resilience.agents._tool_effects import (
    recorded,
    tool_once_async,
    tool_once_sync,
    with_key,
)
from langgraph_resilience.budget import Budget, Meter, add_usage, metering
from langgraph_resilience.classify import Classifier
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.graph._drivers import run_async, run_sync
from langgraph_resilience.graph._step_log import nested_stop
from langgraph_resilience.graph._task import TaskContext
from langgraph_resilience.graph._tries import GaveUp, Tried
from langgraph_resilience.state import RunOutcome, merge_run_log, new_run_marker

__all__ = ["ResilienceMiddleware", "ResilienceState", "tool_idempotency_key"]

ToolResult = ToolMessage | Command[Any]

_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "langgraph_resilience_tool_key", default=None
)


def tool_idempotency_key() -> str:
    """Inside a recorded tool (named in ``ResilienceMiddleware(effects=...)`` or
    decorated with `side_effect`): the call's idempotency key, the same across
    retries, resumes and takeovers of the tool call, to pass to the service so
    that it can deduplicate too; ``reconcile`` is asked about this key.

    Raises:
        ConfigError: outside such a tool's call.

    Example:
        >>> @tool  # doctest: +SKIP
        ... def send_email(to: str, body: str) -> str:
        ...     return mailer.send(to, body, idempotency_key=tool_idempotency_key())
    """
    key = _KEY.get()
    if key is None:
        raise ConfigError(
            "tool_idempotency_key() works only inside a tool the agent's "
            "ResilienceMiddleware records (named in effects=[...], or decorated with "
            "@side_effect) while the agent calls it"
        )
    return key


class ResilienceState(AgentState[Any]):
    """The agent state with the run log, ``state["resilience"]`` (a `RunOutcome`)."""

    resilience: NotRequired[Annotated[RunOutcome, merge_run_log]]


def _tool_policies(
    tools: CallPolicy | Mapping[str, CallPolicy],
) -> tuple[dict[str, CallPolicy], CallPolicy]:
    if isinstance(tools, CallPolicy):
        return {}, _for_a_tool(tools)
    if not isinstance(tools, Mapping) or not all(isinstance(p, CallPolicy) for p in tools.values()):
        raise ConfigError(
            "ResilienceMiddleware tools must be a CallPolicy (for every tool) or a dict "
            'of tool name -> CallPolicy ("*" for the others), got ' + repr(tools)
        )
    named = {name: _for_a_tool(p) for name, p in tools.items()}
    return named, named.pop("*", _for_a_tool(CallPolicy()))


def _for_a_tool(policy: CallPolicy) -> CallPolicy:
    """A tool's policy with its give-up behaviour set (default: continue)."""
    return replace(policy, on_failure=policy.on_failure or "continue")


def _effects(effects: Mapping[str, ToolEffect] | Sequence[str]) -> dict[str, ToolEffect]:
    if isinstance(effects, Mapping):
        if all(isinstance(e, ToolEffect) for e in effects.values()):
            return dict(effects)
    elif not isinstance(effects, str) and all(isinstance(e, str) for e in effects):
        return {name: ToolEffect() for name in effects}
    raise ConfigError(
        "ResilienceMiddleware effects must name the tools that act on the world: a list "
        "of tool names, or a dict of tool name -> ToolEffect(reconcile=...), got " + repr(effects)
    )


def _tool_message(value: Any, request: ToolCallRequest) -> ToolResult:
    """A reconciled or replayed outcome as the tool call's result."""
    if isinstance(value, (ToolMessage, Command)):
        return value
    call = request.tool_call
    return ToolMessage(content=str(value), tool_call_id=call["id"] or "", name=call["name"])


def _replacing(result: Command[Any], earlier: ToolMessage) -> Command[Any]:
    """A re-made call's `Command` whose `ToolMessage` replaces its error result
    in place (same message id: one `ToolMessage` per tool call id)."""
    update = result.update
    if not isinstance(update, Mapping):
        return result
    said = [
        m.model_copy(update={"id": earlier.id})
        if isinstance(m, ToolMessage) and m.tool_call_id == earlier.tool_call_id
        else m
        for m in update.get("messages") or ()
    ]
    return Command(
        graph=result.graph,
        goto=result.goto,
        resume=result.resume,
        update={**update, "messages": said},
    )


def _earlier(request: ToolCallRequest) -> ToolMessage | None:
    """The result the tool call already has in the history (`earlier_result`)."""
    call_id = request.tool_call["id"]
    return earlier_result(request.state, call_id) if call_id else None


def _call_id(request: ToolCallRequest, task: TaskContext | None) -> str:
    """The tool call's id; a call without one (rare) is keyed by its task."""
    found = request.tool_call["id"]
    return found or (f"task:{task.task_scope}" if task is not None else "")


def _tokens(response: ModelResponse[Any]) -> int:
    """Tokens a response reports, when no callback counted them."""
    total = 0
    for message in response.result:
        usage = getattr(message, "usage_metadata", None)
        if usage:
            total += int(usage.get("total_tokens") or 0)
    return total


def _said(response: Any) -> dict[str, Any]:
    """What a model call's step summary shows: the tools it called, or its reply."""
    messages = getattr(response, "result", None) or []
    reply = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    if reply is None:
        return {}
    if reply.tool_calls:
        return {"calls": ", ".join(str(c.get("name")) for c in reply.tool_calls)}
    return {"reply": reply.text}


class _ModelCall:
    """One model call's state across its tries: the request of the last try
    (shrunk after a context overflow) and what the tries used."""

    def __init__(self, request: ModelRequest[Any]) -> None:
        self.request = request
        self.spent: dict[str, float] = {}

    def count(self, meter: Meter, seconds: float, response: ModelResponse[Any] | None) -> None:
        usage = meter.usage(seconds)
        if response is not None and "tokens" not in usage:
            found = _tokens(response)
            if found:
                usage["tokens"] = found
        self.spent = add_usage(self.spent, usage)


class ResilienceMiddleware(AgentMiddleware[ResilienceState, Any, Any]):
    """Persisted retries, exactly-once tools, budgets and partial results for agents.

    Add it to ``create_agent(..., middleware=[...], checkpointer=saver)`` with one
    of this package's savers (their attempt and side-effect ledgers are where the
    tries and tool outcomes are kept; with another saver retries still work, in
    memory, and ``effects`` raise `ConfigError`). Put it before LangChain's own
    middleware in the list to make it the outermost layer, except after
    ``ModelFallbackMiddleware``: listed after it, the primary model's failures
    are retried and recorded before the fallback answers (docs/agents.md).

    Args:
        model: how model calls are retried and given up on; ``on_failure`` is
            ``"raise"`` (default) or ``"end"`` (the partial result).
        tools: one `CallPolicy` for every tool, or a dict of tool name ->
            `CallPolicy` (``"*"``: the others). Default: up to 3 tries of a
            transient failure, then an error `ToolMessage` for the model.
        effects: tools that act on the world: a list of names, or a dict of name
            -> `ToolEffect` (``reconcile``, ``on_unknown``). A tool whose function
            is decorated with `side_effect` needs no entry: it is recorded the
            same way, with the decorator's ``reconcile`` and ``on_unknown``.
        classifier: how failures are classified (default: the package's rules);
            a `CallPolicy`'s own classifier goes in front of it.
        budget: the run's budget when its config gives none
            (``config["configurable"]["budget"]``).
        sleep: how to wait before a retry (tests pass a fake clock).
        asleep: the same, for async calls.
        rand: uniform in [0, 1), for the backoff's jitter.

    Example:
        >>> agent = create_agent(  # doctest: +SKIP
        ...     model, tools=[search, send_email],
        ...     middleware=[ResilienceMiddleware(
        ...         tools={"search": CallPolicy(retry=Backoff(max_attempts=4)),
        ...                "send_email": CallPolicy(on_failure="end")},
        ...         effects={"send_email": ToolEffect(reconcile=mailer.lookup)},
        ...         budget=Budget(max_tokens=50_000))],
        ...     checkpointer=saver)
    """

    state_schema = ResilienceState

    def __init__(
        self,
        *,
        model: CallPolicy | None = None,
        tools: CallPolicy | Mapping[str, CallPolicy] | None = None,
        effects: Mapping[str, ToolEffect] | Sequence[str] = (),
        classifier: Classifier | None = None,
        budget: Budget | None = None,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        super().__init__()
        model = model if model is not None else CallPolicy()
        if not isinstance(model, CallPolicy):
            raise ConfigError(f"ResilienceMiddleware model must be a CallPolicy, got {model!r}")
        self.model_policy = replace(model, on_failure=model.on_failure or "raise")
        if self.model_policy.on_failure == "continue":
            raise ConfigError(
                'ResilienceMiddleware model on_failure must be "raise" or "end" (a model '
                'call has no ToolMessage to continue with), got "continue"'
            )
        self.tool_policies, self.default_tool_policy = _tool_policies(
            tools if tools is not None else CallPolicy()
        )
        self.effects = _effects(effects)
        if classifier is not None and not isinstance(classifier, Classifier):
            raise ConfigError(
                f"ResilienceMiddleware classifier must be a Classifier, got {classifier!r}"
            )
        self.classifier = classifier or Classifier()
        if budget is not None and not isinstance(budget, Budget):
            raise ConfigError(f"ResilienceMiddleware budget must be a Budget, got {budget!r}")
        self.budget = budget
        self._sleep, self._asleep, self._rand = sleep, asleep, rand

    # -- the run log ---------------------------------------------------------------

    def before_agent(self, state: ResilienceState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """A new input starts a new run: its usage, failures and status reset.

        An agent that is a node of a running `ResilientStateGraph` run (its
        state's run log is that run's) is part of that run: it starts none, and
        its steps, usage and step counts go on in the run's log."""
        if in_parents_run(state, TaskContext.current()):
            return None
        return {"resilience": new_run_marker(time.time())}

    async def abefore_agent(
        self, state: ResilienceState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    def after_agent(self, state: ResilienceState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """A run that reached its end without failing for good is a success. One
        that ended short, invoked inside a graph's step (``agent.invoke`` in a
        node's function, as a hand-written supervisor does), fails that step
        naming the agent's failed step under its place (``mail/bob/tools/x``: a
        swarm's agent invoked in node ``mail``), as a resilient graph invoked
        so does."""
        if not ended(state):
            return {"resilience": {"status": "success"}}
        task = TaskContext.current()
        nested_stop(state, task.graph_path if task is not None else "")
        return None

    async def aafter_agent(
        self, state: ResilienceState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self.after_agent(state, runtime)

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: ResilienceState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """A run that ended with the partial result goes to the end, not the model."""
        return {"jump_to": "end"} if ended(state) else None

    @hook_config(can_jump_to=["end"])
    async def abefore_model(
        self, state: ResilienceState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self.before_model(state, runtime)

    # -- the model call ------------------------------------------------------------------

    def _classifier(self, policy: CallPolicy) -> Classifier:
        if policy.classifier is None:
            return self.classifier
        return Classifier((*policy.classifier.rules, *self.classifier.rules))  # its rules first

    def _model_tries(self) -> ModelTries:
        policy = self.model_policy
        return ModelTries(
            name="model",
            policy=node_policy(policy),
            classifier=self._classifier(policy),
            rand=self._rand,
            budget=self.budget,  # when the run's config gives none
        )

    def _tool_tries(self, name: str) -> CallTries:
        policy = self._tool_policy(name)
        return CallTries(
            name=f"tool:{name}",
            step=f"tools/{name}",
            policy=node_policy(policy),
            classifier=self._classifier(policy),
            rand=self._rand,
        )

    def _model_result(self, tried: Tried, call: _ModelCall) -> ExtendedModelResponse[Any]:
        result, end = tried
        log: dict[str, Any] = {"usage": {**call.spent, "steps": 1}}
        if not isinstance(result, GaveUp):
            state, said = call.request.state, _said(result)
            log.update(
                call_step(
                    "model", end.tries, end.task, state, "model", result, said, end.started_at
                )
            )
        if end.topped is not None:
            log["budget"] = end.topped.to_dict()
        if end.summaries:
            log["context_summary"] = end.summaries
        if isinstance(result, GaveUp):
            if self.model_policy.on_failure == "raise":
                raise result.error
            log.update(partial_log("model", "model", result, call.request.messages))
            response: ModelResponse[Any] = ModelResponse(result=[stopped_message(log)])
        else:
            response = result
        return ExtendedModelResponse(
            model_response=response, command=Command(update={"resilience": log})
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        call = _ModelCall(request)

        def once(shrunk: ModelRequest[Any]) -> ModelResponse[Any]:
            call.request = shrunk  # the request of this try (compressed, maybe)
            started = time.monotonic()
            response = None
            with metering() as meter:
                try:
                    response = handler(shrunk)
                    return response
                finally:
                    call.count(meter, time.monotonic() - started, response)

        task = TaskContext.current()
        note_agent_resume(task)  # the first call after a crash: a recovery
        what = self._model_tries()
        tried = run_sync(what, request.state, request, once, task, sleep=self._sleep)
        return self._model_result(tried, call)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        call = _ModelCall(request)

        async def once(shrunk: ModelRequest[Any]) -> ModelResponse[Any]:
            call.request = shrunk  # the request of this try (compressed, maybe)
            started = time.monotonic()
            response = None
            with metering() as meter:
                try:
                    response = await handler(shrunk)
                    return response
                finally:
                    call.count(meter, time.monotonic() - started, response)

        task = TaskContext.current()
        await anote_agent_resume(task)
        what = self._model_tries()
        tried = await run_async(what, request.state, request, once, task, sleep=self._asleep)
        return self._model_result(tried, call)

    # -- tool calls ------------------------------------------------------------------

    def _tool_policy(self, name: str) -> CallPolicy:
        return self.tool_policies.get(name, self.default_tool_policy)

    def _tool_result(
        self,
        tried: Tried,
        label: str,
        request: ToolCallRequest,
        meter: Meter,
        earlier: ToolMessage | None,
    ) -> ToolResult:
        result, end = tried
        call = request.tool_call
        name, call_id = call["name"], call["id"] or ""
        # Cost (and tokens) the tool reported with report_usage, for the run's budget;
        # the call is a step of the run, as the model's call is (usage.steps).
        spent = {k: v for k, v in meter.usage(0.0).items() if k != "seconds" and v}
        log: dict[str, Any] = {"usage": {**spent, "steps": 1}}
        policy = self._tool_policy(name)
        state = request.state if isinstance(request.state, Mapping) else {}
        short = nested_short(result, name, call_id, state.get("messages", []))
        if short is not None:  # an agent it invoked ended short: this call failed
            return short if earlier is None else _replacing(short, earlier)
        if earlier is not None and isinstance(result, Command):
            result = _replacing(result, earlier)
        if not isinstance(result, GaveUp):
            message = _tool_message(result, request)
        elif policy.on_failure == "raise":
            raise result.error
        else:
            message = tool_error_message(name, call_id, result)
        if earlier is not None and isinstance(message, ToolMessage):
            # The call's error result is replaced in place (add_messages, by id).
            message = message.model_copy(update={"id": earlier.id})
        if not (isinstance(result, GaveUp) and policy.on_failure == "end"):
            said = {"result": getattr(message, "content", message)}
            step = call_step(
                label,
                end.tries,
                end.task,
                request.state,
                f"tools/{name}",
                result,
                said,
                end.started_at,
            )
            log.update(step)
        else:
            messages = [*state.get("messages", []), message]
            extra = {"tool": name, "tool_call_id": call_id}
            log.update(partial_log(f"tools/{name}", "tools", result, messages, extra))
        if not log or not isinstance(message, ToolMessage):
            return message
        return Command(update={"messages": [message], "resilience": log})

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        earlier = _earlier(request)
        if earlier is not None and earlier.status != "error":
            return earlier  # answered (the tools node re-run): not called again
        task = TaskContext.current()
        note_agent_resume(task)
        spec, run = recorded(request, self.effects)

        def keyed(key: str) -> ToolResult:
            assert spec is not None
            token = _KEY.set(key)
            try:
                return handler(with_key(spec, run, key))
            finally:
                _KEY.reset(token)

        def once(_: ToolCallRequest) -> Any:  # a tool call's tries all take ``run``
            if spec is None:
                return handler(run)
            return tool_once_sync(spec, _call_id(request, task), task, keyed)

        what = self._tool_tries(request.tool_call["name"])
        with metering() as meter:
            tried = run_sync(what, request.state, request, once, task, sleep=self._sleep)
        return self._tool_result(tried, what.name, request, meter, earlier)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        earlier = _earlier(request)
        if earlier is not None and earlier.status != "error":
            return earlier  # answered (the tools node re-run): not called again
        task = TaskContext.current()
        await anote_agent_resume(task)
        spec, run = recorded(request, self.effects)

        async def keyed(key: str) -> ToolResult:
            assert spec is not None
            token = _KEY.set(key)
            try:
                return await handler(with_key(spec, run, key))
            finally:
                _KEY.reset(token)

        async def once(_: ToolCallRequest) -> Any:  # a tool call's tries all take ``run``
            if spec is None:
                return await handler(run)
            return await tool_once_async(spec, _call_id(request, task), task, keyed)

        what = self._tool_tries(request.tool_call["name"])
        with metering() as meter:
            tried = await run_async(what, request.state, request, once, task, sleep=self._asleep)
        return self._tool_result(tried, what.name, request, meter, earlier)
