"""A run report's tries and effects belong to their own branch and run: keyed by
the task that made them (the run ledger's rows), never matched by node name or
by time (issue 25)."""

from __future__ import annotations

import asyncio
import operator
import uuid
from typing import Annotated, Any

from langgraph.graph import END, START
from langgraph.types import Send

from langgraph_resilience import (
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    run_report,
    side_effect,
)
from langgraph_resilience.history._report import RunReport, arun_report


class State(ResilientState, total=False):
    items: list[int]
    results: Annotated[list[int], operator.add]
    item: int
    done: Annotated[list[str], operator.add]


def cfg(h: Any, label: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}-{h.id}-{uuid.uuid4().hex[:8]}"}}


async def report(h: Any, config: Any, run: int | None = None) -> RunReport:
    thread = config["configurable"]["thread_id"]
    if h.is_async:
        return await arun_report(h.saver, thread, run=run)
    return await asyncio.to_thread(lambda: run_report(h.saver, thread, run=run))


async def test_two_send_branches_that_fail_differently_each_show_their_own_tries(
    checkpointer: Any,
) -> None:
    h = checkpointer

    def work(state: dict[str, Any]) -> dict[str, Any]:
        item = state["item"]
        if item == 1:
            raise ValueError("item 1 is malformed")
        if item == 2:
            raise LookupError("item 2 is missing")
        return {"results": [item]}

    g = ResilientStateGraph(State)
    # One try each, not critical: each failing branch leaves its own failed try.
    g.add_node("work", work, policy=NodePolicy(retry=None, critical=False))
    g.add_node("reduce", lambda s: {"done": [f"reduced {len(s['results'])}"]})
    g.add_conditional_edges(START, lambda s: [Send("work", {"item": i}) for i in s["items"]])
    g.add_edge("work", "reduce")
    g.add_edge("reduce", END)
    graph = g.compile(checkpointer=h.saver)
    config = cfg(h, "branches")
    await h.invoke(graph, {"items": [0, 1, 2], "results": []}, config)
    found = await report(h, config)
    tries = [(e.path, e.error) for e in found.timeline if e.event == "failed"]
    assert sorted(p for p, _ in tries) == ["work[1]", "work[2]"], tries
    for path, error in tries:
        wanted = "item 1 is malformed" if path == "work[1]" else "item 2 is missing"
        assert error is not None and wanted in error, (path, error)


async def test_two_runs_less_than_a_second_apart_each_show_only_their_own_effect(
    checkpointer: Any,
) -> None:
    h = checkpointer

    @side_effect(name="notify")
    def notify(*, idempotency_key: str) -> str:
        return "sent"

    def a(state: dict[str, Any]) -> dict[str, Any]:
        notify()
        return {"done": ["a"]}

    g = ResilientStateGraph(State)
    g.add_node("a", a)
    g.add_node("b", lambda s: {"done": ["b"]})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    graph = g.compile(checkpointer=h.saver)
    config = cfg(h, "turns")
    await h.invoke(graph, {"done": []}, config)
    await h.invoke(graph, {"done": []}, config)  # well within a second
    first, second = await report(h, config, run=1), await report(h, config, run=2)
    assert [e.path for e in first.effects] == ["a"]
    assert [e.path for e in second.effects] == ["a"]
    assert first.effects[0].key != second.effects[0].key
    assert first.effects[0].intent_at < second.effects[0].intent_at
