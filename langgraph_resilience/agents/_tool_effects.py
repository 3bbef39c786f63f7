"""A tool call that acts on the world, recorded once in the side-effect ledger.

The ledger, its decision and its drivers are `side_effect`'s
(`effects.drive_sync`/`drive_async`: the saver's intent and outcome records,
the run-lease checks, the replay and reconcile events); only the key differs.
A `side_effect` call is keyed by its task, which is right inside a graph node;
a tool call is keyed by its **tool call id** (and the tool's name), per thread,
because that id is what stays the same when the ``tools`` task does not: a
model step whose checkpoint was not yet stored when the process died is run
again by the next one, and that new step dispatches the same tool calls (the
model's message is replayed from the step's writes, or, for a deterministic
model, produced again) under new task ids.

The outcome stored is the tool's `ToolMessage`; a replay returns it as it was.
The key is handed to the tool (`tool_idempotency_key`, or its
``idempotency_key`` argument if it has one) and to ``reconcile``.

A tool is recorded when it is named in ``ResilienceMiddleware(effects=...)``,
or when its function is decorated with `side_effect` (`recorded`): then the
decorator's settings apply, keyed by the tool call as above, and the tool runs
its undecorated function, so the call is not recorded twice under two keys.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from langgraph.prebuilt.tool_node import ToolCallRequest
from pydantic import BaseModel

from langgraph_resilience.agents._policy import ToolEffect, effect_spec
from langgraph_resilience.effects._side_effect import (
    EffectCall,
    _no_saver,
    drive_async,
    drive_sync,
    task_thread,
)
from langgraph_resilience.effects._steps import EffectSpec
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.graph._task import TaskContext

__all__ = ["recorded", "tool_key", "tool_once_async", "tool_once_sync", "with_key"]


def tool_key(spec: EffectSpec, call_id: str) -> str:
    """The idempotency key of one tool call: the tool and the model's call id."""
    return f"{spec.name}|{call_id}"


def recorded(
    request: ToolCallRequest, effects: Mapping[str, ToolEffect]
) -> tuple[EffectSpec | None, ToolCallRequest]:
    """How the ledger records this tool call (None: not at all), and the request
    to run it with (a `side_effect` tool's undecorated function: recorded here)."""
    name = request.tool_call["name"]
    tool = request.tool
    marker: EffectSpec | None = None
    undecorated: dict[str, Any] = {}
    for attr in ("func", "coroutine"):
        fn = getattr(tool, attr, None)
        found = getattr(fn, "effect_spec", None)
        if isinstance(found, EffectSpec) and hasattr(fn, "__wrapped__"):
            marker, undecorated[attr] = found, fn.__wrapped__  # type: ignore[union-attr]
    if undecorated and isinstance(tool, BaseModel):
        request = request.override(tool=tool.model_copy(update=undecorated))
    effect = effects.get(name)
    if effect is not None:
        return effect_spec(effect, name), request
    if marker is None:
        return None, request
    return replace(marker, name=effect_spec(ToolEffect(), name).name, key=None), request


def with_key(spec: EffectSpec, request: ToolCallRequest, key: str) -> ToolCallRequest:
    """The request a tool with an ``idempotency_key`` parameter is called with."""
    if not spec.passes_key:
        return request
    call = request.tool_call
    return request.override(tool_call={**call, "args": {**call["args"], "idempotency_key": key}})


def _where(spec: EffectSpec, task: TaskContext | None) -> tuple[TaskContext, str]:
    return task_thread(
        task,
        lambda: ConfigError(
            f"tool {spec.name!r} is named in ResilienceMiddleware(effects=...), so its calls "
            "are recorded, which needs a checkpointer: create_agent(..., checkpointer="
            "ResilientSqliteSaver(...)) and a thread_id in config['configurable']."
        ),
    )


def _tool_call(
    spec: EffectSpec, call_id: str, task: TaskContext | None
) -> tuple[EffectCall, TaskContext]:
    task, thread = _where(spec, task)
    key = tool_key(spec, call_id)
    call = EffectCall(spec=spec, task=task, thread=thread, key=key, fresh=False, digest=None)
    return call, task


def tool_once_sync(
    spec: EffectSpec, call_id: str, task: TaskContext | None, call: Callable[[str], Any]
) -> Any:
    """``call(key)`` at most once for this tool call (a stored outcome is returned)."""
    effect, found = _tool_call(spec, call_id, task)
    saver = found.ledger
    if saver is None:
        raise _no_saver(spec, found)
    return drive_sync(effect, saver, call)


async def tool_once_async(
    spec: EffectSpec,
    call_id: str,
    task: TaskContext | None,
    call: Callable[[str], Awaitable[Any]],
) -> Any:
    """The async twin of `tool_once_sync`."""
    effect, found = _tool_call(spec, call_id, task)
    saver = found.async_ledger
    if saver is None:
        raise _no_saver(spec, found)
    return await drive_async(effect, saver, call)
