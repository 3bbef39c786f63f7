"""Resilient by default: a `ResilientStateGraph` node added without ``policy=`` runs
under ``NodePolicy()`` (transient failures retried, a failure for good ending in a
partial result), unless it carries LangGraph's own ``retry_policy`` or
``error_handler``, or is given ``policy=None``: those keep LangGraph's behaviour.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from graphs import chain
from langgraph.errors import NodeError
from langgraph.types import RetryPolicy
from test_graph import State, node

from langgraph_resilience import (
    PermanentError,
    ResilientStateGraph,
    TransientError,
)


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Full jitter draws each backoff wait from [0, cap]: a draw of 0 keeps the
    default policy's retries instant."""
    monkeypatch.setattr(random, "random", lambda: 0.0)


def cfg(h: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"default-{h.id}-{uuid.uuid4().hex[:6]}"}}


def failing(h: Any, calls: Counter[str], plan: list[BaseException | None]) -> Callable[[str], Any]:
    """Nodes counting their calls; node ``b`` raises the plan's errors in turn."""

    def make(name: str) -> Any:
        def body(state: Any) -> Any:
            calls[name] += 1
            if name == "b" and plan:
                exc = plan.pop(0)
                if exc is not None:
                    raise exc
            return {"done": [name]}

        return node(h, body, name)

    return make


async def test_a_node_without_a_policy_retries_a_transient_error(checkpointer: Any) -> None:
    calls: Counter[str] = Counter()
    g = chain(
        ResilientStateGraph(State),
        ["a", "b", "c"],
        failing(
            checkpointer,
            calls,
            [
                TransientError("blip"),
                None,
            ],
        ),
    )
    out = await checkpointer.invoke(
        g.compile(checkpointer=checkpointer.saver), {}, cfg(checkpointer)
    )
    assert out["done"] == ["a", "b", "c"]
    assert calls == {"a": 1, "b": 2, "c": 1}
    assert out["resilience"]["status"] == "success"


async def test_a_node_without_a_policy_ends_a_permanent_failure_in_a_partial_result(
    checkpointer: Any,
) -> None:
    calls: Counter[str] = Counter()
    plan: list[BaseException | None] = [PermanentError("403: token expired")]
    g = chain(ResilientStateGraph(State), ["a", "b", "c"], failing(checkpointer, calls, plan))
    out = await checkpointer.invoke(
        g.compile(checkpointer=checkpointer.saver), {}, cfg(checkpointer)
    )
    log = out["resilience"]
    assert log["status"] == "partial_complete"
    assert log["failed_step"]["node"] == "b"
    assert log["failed_step"]["error_type"] == "PermanentError"
    assert out["done"] == ["a"]
    assert calls == {"a": 1, "b": 1}  # no retry of a permanent failure; c never ran


@pytest.mark.parametrize("how", ["policy=None", "retry_policy", "graph retry_policy"])
async def test_policy_none_and_langgraph_retries_keep_langgraph_behaviour(
    checkpointer: Any, how: str
) -> None:
    calls: Counter[str] = Counter()
    plan: list[BaseException | None] = [TransientError("blip"), TransientError("blip")]
    native = RetryPolicy(max_attempts=2, initial_interval=0.001, jitter=False)
    g = ResilientStateGraph(State)
    if how == "graph retry_policy":
        g.set_node_defaults(retry_policy=native)

    def options(name: str) -> dict[str, Any]:
        if name != "b" or how == "graph retry_policy":
            return {}
        return {"policy": None} if how == "policy=None" else {"retry_policy": native}

    chain(g, ["a", "b", "c"], failing(checkpointer, calls, plan), options)
    with pytest.raises(TransientError, match="blip"):
        await checkpointer.invoke(g.compile(checkpointer=checkpointer.saver), {}, cfg(checkpointer))
    assert calls["b"] == (1 if how == "policy=None" else 2)  # LangGraph's tries, not ours
    assert calls["c"] == 0


async def test_a_node_with_its_own_error_handler_keeps_it(checkpointer: Any) -> None:
    calls: Counter[str] = Counter()
    plan: list[BaseException | None] = [TransientError("blip")]
    handled: list[str] = []

    def handler(state: Any, error: NodeError) -> dict[str, Any]:
        handled.append(type(error.error).__name__)
        return {"done": ["handled"]}

    g = chain(
        ResilientStateGraph(State),
        ["a", "b", "c"],
        failing(checkpointer, calls, plan),
        lambda name: {"error_handler": handler} if name == "b" else {},
    )
    out = await checkpointer.invoke(
        g.compile(checkpointer=checkpointer.saver), {}, cfg(checkpointer)
    )
    assert handled == ["TransientError"]  # LangGraph's handler, on the first failure
    assert calls["b"] == 1
    assert "handled" in out["done"]
