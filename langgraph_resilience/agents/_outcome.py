"""What a call that failed for good becomes in the agent's state (pure, no I/O).

- `tool_error_message`: the error `ToolMessage` a model reads and can react to
  (``on_failure="continue"``, as LangChain's ``on_failure="continue"``);
- `partial_log`: the run log update that ends the run with the structured
  partial result (``on_failure="end"``): ``status: "partial_complete"``, the
  failed step, what was done (the run's completed tool calls), the partial
  output and what to do next. It has the shape of ``state["resilience"]`` in a
  `ResilientStateGraph` (`RunOutcome`), so a `Worker` and `run_report` read an
  agent's outcome as any other run's;
- `earlier_result`: the result a tool call already has in the history (a
  re-run of the ``tools`` node, by `retry_failed`): an error result is
  replaced by the new one (same message id, so LangGraph's ``add_messages``
  replaces it in place), a success is kept and the call not made again, so
  the history keeps one `ToolMessage` per tool call, as providers require;
- `nested_short`: a tool call whose result carries the run log of an agent
  it invoked that ended short (deepagents' ``task`` tool returns its
  subagent's state in a `Command`): the call itself failed, so that
  `retry_failed` re-runs it rather than reading the run as ended;
- `call_step`: the step record of a model or tool call that ran, as a node's
  (``model``, ``model#2``, ``tools/search[0]``), so ``saver.step_history`` and
  `run_report` list an agent's steps, and map its tries and effects to them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from langgraph_resilience.checkpoint import AttemptRecord
from langgraph_resilience.classify import FailureKind
from langgraph_resilience.graph._routes import error_text
from langgraph_resilience.graph._step_log import log_update
from langgraph_resilience.graph._task import TaskContext
from langgraph_resilience.graph._tries import GaveUp
from langgraph_resilience.state import summarize

__all__ = [
    "call_step",
    "earlier_result",
    "ended",
    "in_parents_run",
    "nested_short",
    "partial_log",
    "stopped_message",
    "tool_error_message",
]

_NEXT = {
    FailureKind.TRANSIENT: "the service kept failing; check it, then resume the thread",
    FailureKind.PERMANENT: "a retry cannot fix this; fix the cause (input, code, configuration)",
    FailureKind.VALIDATION: "the output kept failing validation; fix the prompt or schema",
    FailureKind.CONTEXT_OVERFLOW: "the context stayed too long after compression; keep less",
    FailureKind.DEGRADABLE: "the dependency is down; try again once it is back",
    FailureKind.BUDGET_EXHAUSTED: "the budget ran out; resume with a larger Budget",
}


def tool_error_message(name: str, call_id: str, gave_up: GaveUp) -> ToolMessage:
    """The error result of a tool call that failed for good, for the model to read."""
    tries = gave_up.attempts
    return ToolMessage(
        content=(
            f"Error: tool {name!r} failed after {tries} attempt{'s' if tries != 1 else ''} "
            f"({gave_up.failure.kind.value}: {error_text(gave_up.error)}). Do not call it "
            "again with the same arguments; continue without it or try another way."
        ),
        tool_call_id=call_id,
        name=name,
        status="error",
    )


def earlier_result(state: Any, call_id: str) -> ToolMessage | None:
    """The `ToolMessage` answering tool call ``call_id`` in the state's history
    after the model message that made the call, if there is one."""
    messages = state.get("messages") if isinstance(state, Mapping) else None
    for m in reversed(messages or ()):
        if isinstance(m, ToolMessage) and m.tool_call_id == call_id:
            return m
        if isinstance(m, AIMessage) and any(c.get("id") == call_id for c in m.tool_calls):
            return None  # the call that is being made: not answered yet
    return None


def _since_question(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages of the current turn: after the last human message."""
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            return list(messages[i + 1 :])
    return list(messages)


def _done(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The turn's tool calls that returned a result (what was done)."""
    return [
        {
            "path": f"tools/{m.name}",
            "node": "tools",
            "tool_call_id": m.tool_call_id,
            "status": "completed",
            "summary": summarize(m.content),
        }
        for m in _since_question(messages)
        if isinstance(m, ToolMessage) and m.status != "error"
    ]


def _suggestion(where: str, gave_up: GaveUp) -> str:
    text = f"{where} failed for good ({error_text(gave_up.error)}): {_NEXT[gave_up.failure.kind]}"
    if gave_up.retry_after is not None:
        text += f"; the service asked to wait {gave_up.retry_after:.0f} s before a retry"
    return text + (
        ". Then retry_failed(agent, config) makes the failed call again on the thread "
        "(calls that have their result are not made again), or start a new turn."
    )


def partial_log(
    where: str,
    node: str,
    gave_up: GaveUp,
    messages: Sequence[BaseMessage],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The run log update of a run that ends short at ``where`` (``tools/<name>``,
    ``model``)."""
    failed = {
        "path": where,
        "node": node,
        "kind": gave_up.failure.kind.value,
        "reason": gave_up.failure.reason,
        "error_type": type(gave_up.error).__name__,
        "message": error_text(gave_up.error),
        "attempts": gave_up.attempts,
        **(extra or {}),
    }
    last_answer = next(
        (m.text for m in reversed(messages) if isinstance(m, AIMessage) and m.text), None
    )
    done = _done(messages)
    return {
        "status": "partial_complete",
        "failed_step": failed,
        "failed_steps": [failed],
        "completed_steps": done,
        "partial_output": {"tool_results": len(done), "last_answer": last_answer},
        "recovery_suggestions": [_suggestion(where, gave_up)],
    }


def nested_short(
    result: Any, name: str, call_id: str, messages: Sequence[BaseMessage]
) -> Command[Any] | None:
    """The tool call's result as a failed call of this agent, if it is a `Command`
    carrying the run log of an agent it invoked that ended with a partial result
    (none otherwise). Its `ToolMessage` becomes an error result, so a re-run of
    the ``tools`` node (`retry_failed`) makes the call again, and the failed
    step is this call, naming the nested one (``nested``)."""
    update = result.update if isinstance(result, Command) else None
    log = update.get("resilience") if isinstance(update, Mapping) else None
    if not isinstance(log, Mapping) or log.get("status") != "partial_complete":
        return None
    assert isinstance(update, Mapping)
    inner = dict(log.get("failed_step") or {})
    said = [
        m.model_copy(update={"status": "error"})
        if isinstance(m, ToolMessage) and m.tool_call_id == call_id
        else m
        for m in update.get("messages") or ()
    ]
    failed = {
        **{
            k: inner[k]
            for k in ("kind", "reason", "error_type", "message", "attempts")
            if k in inner
        },
        "path": f"tools/{name}",
        "node": "tools",
        "tool": name,
        "tool_call_id": call_id,
        "nested": inner.get("path"),
    }
    done = _done([*messages, *said])
    where = f"tools/{name} (its agent's step {inner.get('path')!r})"
    ran = {
        "status": "partial_complete",
        "failed_step": failed,
        "failed_steps": [failed],
        "completed_steps": done,
        "partial_output": {"tool_results": len(done), "last_answer": None},
        "recovery_suggestions": [
            f"{where} failed for good ({inner.get('message', '')}); fix the cause, then "
            "retry_failed(agent, config) makes the call again"
        ],
    }
    return Command(update={**update, "messages": said, "resilience": ran})


def stopped_message(log: Mapping[str, Any]) -> AIMessage:
    """The agent's last message when the model's call ended the run."""
    failed = log.get("failed_step") or {}
    return AIMessage(
        content=f"Stopped: {failed.get('path', 'a step')} failed ({failed.get('message', '')})."
    )


def in_parents_run(state: Any, task: TaskContext | None) -> bool:
    """Whether the agent runs nested in a graph (a subgraph node) whose run is
    under way in the state it shares: the run log it was given is running."""
    log = state.get("resilience") if isinstance(state, Mapping) else None
    nested = task is not None and bool(task.graph_path)
    return nested and isinstance(log, Mapping) and log.get("status") == "running"


def ended(state: Mapping[str, Any]) -> bool:
    """Whether the run ended with the partial result (the loop must not go on)."""
    log = state.get("resilience")
    return isinstance(log, Mapping) and log.get("status") == "partial_complete"


def call_step(
    label: str,
    tries: Sequence[AttemptRecord],
    task: TaskContext | None,
    state: Any,
    name: str,
    result: Any,
    output: Mapping[str, Any],
    started_at: float,
) -> dict[str, Any]:
    """The run-log update recording a call that ran (none outside a graph task).

    ``name``: the step's name in its path (``model``, ``tools/search``; the
    path adds the tool call's `Send` index and, from the second call on, the
    iteration); its ``node`` is the call's label in the attempt ledger
    (``model``, ``tool:search``), as its failed ``tries`` are stored. A call that
    failed for good and goes on (a tool's error message) is ``degraded``;
    ``output``: what its summary shows.
    """
    if task is None:
        return {}
    status = "degraded" if isinstance(result, GaveUp) else "completed"
    update = log_update(name, False, task, state, status, tries, output, started_at)
    update["step"]["node"] = label
    return update
