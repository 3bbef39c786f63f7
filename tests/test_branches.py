"""Intended branches are stored as stock LangGraph stores them, on every backend.

The fork check refuses a writer whose view of a thread is stale (see
`test_savers.test_a_stale_continuation_is_refused` and the two-process race in
`test_crash`); an explicitly addressed older checkpoint is a branch the user
asked for: (A) new input on it, (B) ``Command(resume=)`` to it, (C) a replay
with ``durability="exit"``, (D) ``update_state(..., as_node="__input__")`` and
``bulk_update_state`` on it, (E) time travel in a graph with a stateful
subgraph (``checkpointer=True``), whose namespace follows its parent's fork.
"""

from __future__ import annotations

import asyncio
import operator
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from conftest import Harness
from graphs import linear_graph
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, StateSnapshot, StateUpdate, interrupt

STEPS = ["a", "b", "c"]


def cfg(label: str, h: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}-{h.id}-{uuid.uuid4().hex[:6]}"}}


def stock(h: Any) -> Harness:
    """LangGraph's own in-memory saver, driven as ``h`` is (sync or async)."""
    return Harness("memory", h.is_async, InMemorySaver(), "")


async def history(h: Any, graph: Any, config: Any) -> list[StateSnapshot]:
    if h.is_async:
        return [s async for s in graph.aget_state_history(config)]
    return await asyncio.to_thread(lambda: list(graph.get_state_history(config)))


async def state(h: Any, graph: Any, config: Any) -> StateSnapshot:
    if h.is_async:
        return await graph.aget_state(config)
    return await asyncio.to_thread(graph.get_state, config)


async def after(h: Any, graph: Any, config: Any, done: list[str]) -> dict[str, Any]:
    """The config of the checkpoint whose state has ``done`` so far."""
    snapshots = await history(h, graph, config)
    return next(s.config for s in snapshots if s.values.get("done") == done)


async def new_input_on_older(h: Any) -> list[Any]:
    graph = linear_graph(STEPS).compile(checkpointer=h.saver)
    config = cfg("input", h)
    await h.invoke(graph, {"done": []}, config, durability="sync")
    older = await after(h, graph, config, ["a"])
    out = await h.invoke(graph, {"done": ["new"]}, older, durability="sync")
    return [out, (await state(h, graph, config)).values]


async def test_a_new_input_on_an_older_checkpoint(checkpointer: Any) -> None:
    assert await new_input_on_older(checkpointer) == await new_input_on_older(stock(checkpointer))


class Approval(TypedDict, total=False):
    done: Annotated[list[str], operator.add]


def approval_graph(h: Any) -> Any:
    def ask(state: Approval) -> dict[str, Any]:
        return {"done": [f"answer:{interrupt('approve?')}"]}

    g = StateGraph(Approval)
    g.add_node("ask", ask)
    g.add_node("after", lambda s: {"done": ["after"]})
    g.add_edge(START, "ask")
    g.add_edge("ask", "after")
    g.add_edge("after", END)
    return g.compile(checkpointer=h.saver)


async def resume_to_older(h: Any) -> list[Any]:
    graph = approval_graph(h)
    config = cfg("resume", h)
    await h.invoke(graph, {"done": []}, config, durability="sync")
    paused = (await state(h, graph, config)).config
    first = await h.invoke(graph, Command(resume="yes"), config, durability="sync")
    again = await h.invoke(graph, Command(resume="no"), paused, durability="sync")
    return [first, again, (await state(h, graph, config)).values]


async def test_b_resume_sent_to_a_checkpoint_the_thread_moved_past(checkpointer: Any) -> None:
    ours = await resume_to_older(checkpointer)
    assert ours[0]["done"] == ["answer:yes", "after"]
    assert ours == await resume_to_older(stock(checkpointer))


async def replay_with_exit(h: Any) -> list[Any]:
    graph = linear_graph(STEPS).compile(checkpointer=h.saver)
    config = cfg("exit", h)
    await h.invoke(graph, {"done": []}, config, durability="sync")
    older = await after(h, graph, config, ["a"])
    out = await h.invoke(graph, None, older, durability="exit")
    return [out, (await state(h, graph, config)).values]


async def test_c_a_replay_with_exit_durability(checkpointer: Any) -> None:
    ours = await replay_with_exit(checkpointer)
    assert ours[0]["done"] == STEPS
    assert ours == await replay_with_exit(stock(checkpointer))


async def input_update_on_older(h: Any, how: str) -> list[Any]:
    graph = linear_graph(STEPS).compile(checkpointer=h.saver)
    config = cfg(how, h)
    await h.invoke(graph, {"done": []}, config, durability="sync")
    older = await after(h, graph, config, ["a", "b"])
    if how == "update_state":
        call, args = "update_state", (older, {"done": ["x"]}, "__input__")
    else:
        call, args = "bulk_update_state", (older, [[StateUpdate({"done": ["x"]}, "__input__")]])
    if h.is_async:
        updated = await getattr(graph, "a" + call)(*args)
    else:
        updated = await asyncio.to_thread(getattr(graph, call), *args)
    out = await h.invoke(graph, None, updated, durability="sync")
    return [out, (await state(h, graph, config)).values]


@pytest.mark.parametrize("how", ["update_state", "bulk_update_state"])
async def test_d_input_updates_on_an_older_checkpoint(checkpointer: Any, how: str) -> None:
    ours = await input_update_on_older(checkpointer, how)
    assert ours == await input_update_on_older(stock(checkpointer), how)


class Outer(TypedDict, total=False):
    done: Annotated[list[str], operator.add]


async def subgraph_time_travel(h: Any) -> list[Any]:
    inner = linear_graph(["s1", "s2"]).compile(checkpointer=True)
    g = StateGraph(Outer)
    g.add_node("before", lambda s: {"done": ["before"]})
    g.add_node("sub", inner)
    g.add_node("last", lambda s: {"done": ["last"]})
    g.add_edge(START, "before")
    g.add_edge("before", "sub")
    g.add_edge("sub", "last")
    g.add_edge("last", END)
    graph = g.compile(checkpointer=h.saver)
    config = cfg("subgraph", h)
    first = await h.invoke(graph, {"done": []}, config, durability="sync")
    again = await h.invoke(graph, {"done": []}, config, durability="sync")  # the sub has state
    older = await after(h, graph, config, first["done"][:1])
    replayed = await h.invoke(graph, None, older, durability="sync")
    forked = await h.invoke(graph, {"done": ["fork"]}, older, durability="sync")
    return [first, again, replayed, forked, (await state(h, graph, config)).values]


async def test_e_time_travel_with_a_stateful_subgraph(checkpointer: Any) -> None:
    ours = await subgraph_time_travel(checkpointer)
    assert ours[0]["done"][-1] == "last"
    assert ours == await subgraph_time_travel(stock(checkpointer))
