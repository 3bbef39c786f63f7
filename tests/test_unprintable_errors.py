"""A node's exception whose ``__str__`` raises is classified and kept as it is,
quoted in the records as ``<Type: unprintable>``: never replaced by the
package's own formatting error (plain LangGraph propagates the user's error)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from graphs import FAST, one_node
from langgraph.graph import END, START

from langgraph_resilience import (
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    TransientError,
    side_effect,
)
from langgraph_resilience.errors import describe, message_of, repr_of


class Unprintable(ValueError):
    def __str__(self) -> str:
        raise RuntimeError("this exception's __str__ is broken")


class FlakyUnprintable(TransientError):
    def __str__(self) -> str:
        raise RuntimeError("this exception's __str__ is broken")


class State(ResilientState, total=False):
    out: str


def graph(h: Any, node: Any, policy: NodePolicy | None) -> Any:
    g = ResilientStateGraph(State)
    if h.is_async:

        async def anode(state: State) -> dict[str, Any]:
            return node()  # type: ignore[no-any-return]

        g.add_node("work", anode, policy=policy)
    else:
        g.add_node("work", lambda state: node(), policy=policy)
    g.add_edge(START, "work")
    g.add_edge("work", END)
    return g.compile(checkpointer=h.saver)


def cfg(h: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"unprintable-{h.id}-{uuid.uuid4().hex[:6]}"}}


def test_the_quoting_helpers_never_raise() -> None:
    bad = Unprintable("secret")
    assert message_of(bad) == describe(bad) == "<Unprintable: unprintable>"
    assert describe(ValueError("fine")) == "ValueError: fine"

    class BadRepr(Exception):
        def __repr__(self) -> str:
            raise RuntimeError("broken repr")

    assert repr_of(BadRepr()) == "<BadRepr: unprintable>"


async def test_an_unprintable_permanent_error_ends_in_a_partial_result(checkpointer: Any) -> None:
    h = checkpointer

    def node() -> dict[str, Any]:
        raise Unprintable("secret")

    config = cfg(h)
    out = await h.invoke(graph(h, node, NodePolicy(retry=FAST)), {}, config)
    failed = out["resilience"]["failed_step"]
    assert out["resilience"]["status"] == "partial_complete"
    assert (failed["error_type"], failed["kind"]) == ("Unprintable", "permanent")
    assert failed["message"] == "<Unprintable: unprintable>"
    attempts = await h.call("history.attempts", config["configurable"]["thread_id"])
    assert [(a.error_type, a.reason) for a in attempts] == [
        ("Unprintable", "<Unprintable: unprintable>")
    ]


async def test_an_unprintable_transient_error_is_retried(checkpointer: Any) -> None:
    h = checkpointer
    raised = []

    def node() -> dict[str, Any]:
        if not raised:
            raised.append(1)
            raise FlakyUnprintable()
        return {"out": "done"}

    out = await h.invoke(graph(h, node, NodePolicy(retry=FAST)), {}, cfg(h))
    assert out["out"] == "done" and out["resilience"]["status"] == "success"


async def test_without_a_policy_the_users_unprintable_error_propagates(checkpointer: Any) -> None:
    h = checkpointer

    def node() -> dict[str, Any]:
        raise Unprintable("secret")

    with pytest.raises(Unprintable):
        await h.invoke(graph(h, node, None), {}, cfg(h))


async def test_an_effect_that_raises_an_unprintable_error_records_it(checkpointer: Any) -> None:
    h = checkpointer
    if h.is_async:

        @side_effect(name="pay")
        async def pay() -> str:
            raise Unprintable("secret")

        async def anode(state: State) -> dict[str, Any]:
            return {"out": await pay()}

        node: Any = anode
    else:

        @side_effect(name="pay")
        def pay_sync() -> str:
            raise Unprintable("secret")

        node = lambda state: {"out": pay_sync()}  # noqa: E731
    g = one_node(ResilientStateGraph(State), "work", node, policy=None)
    config = cfg(h)
    with pytest.raises(Unprintable):
        await h.invoke(g.compile(checkpointer=h.saver), {}, config)
    [effect] = await h.call("list_effects", config["configurable"]["thread_id"])
    assert (effect.status, effect.error) == ("failed", "<Unprintable: unprintable>")
