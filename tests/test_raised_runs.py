"""A top-level run whose ``invoke`` / ``stream`` raised ends ``error`` in the run
ledger (`graph._closing.failed`), on every backend: never ``running`` for ever,
never ``success`` because another branch reached the end.

Before: a node without a policy that raised left the run's row ``running``; a
fan-out ``a -> (b, c)``, ``c -> d`` whose b's error handler re-raised ran d to
the end (its step wrote ``success``) before LangGraph raised b's error, and
``list_runs``, ``run_report`` and ``recovery_metrics`` read a success.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from graphs import DoneState as State
from langgraph.errors import NodeError
from langgraph.graph import END, START

from langgraph_resilience import NodePolicy, ResilientStateGraph, run_report
from langgraph_resilience.history import alist_runs, list_runs
from langgraph_resilience.history._report import arun_report


def reraise(state: Any, error: NodeError) -> Any:
    """A user's error handler that re-raises what it was handed."""
    raise error.error


ONCE = NodePolicy(retry=None, critical=True)


def graph_of(h: Any, edges: list[tuple[str, str]], broken: list[bool], *, handler: bool) -> Any:
    """Nodes a, b, c, d on ``edges``; b raises while ``broken[0]``: without a
    policy (``handler``: with an error handler that re-raises)."""

    def make(step: str) -> Any:
        def node(state: State) -> dict[str, Any]:
            if step == "b" and broken[0]:
                raise ValueError("b broke")
            return {"done": [step]}

        return node

    g = ResilientStateGraph(State)
    for step in "abcd":
        if step != "b":
            g.add_node(step, make(step), policy=ONCE)
        elif handler:
            g.add_node(step, make(step), policy=None, error_handler=reraise)
        else:
            g.add_node(step, make(step), policy=None)
    g.add_edge(START, "a")
    for start, end in edges:
        g.add_edge(start, end)
    g.add_edge("d", END)
    return g.compile(checkpointer=h.saver)


CHAIN = [("a", "b"), ("b", "c"), ("c", "d")]
FAN_OUT = [("a", "b"), ("a", "c"), ("c", "d")]


async def runs_of(h: Any, thread: str) -> list[tuple[int, str]]:
    found = await alist_runs(h.saver) if h.is_async else list_runs(h.saver)
    return sorted(((r.run, r.status) for r in found if r.thread_id == thread), reverse=True)


async def consume(h: Any, graph: Any, value: Any, config: Any) -> None:
    """Read ``graph.stream`` (``astream``) to its end."""
    if h.is_async:
        async for _ in graph.astream(value, config):
            pass
    else:
        for _ in graph.stream(value, config):
            pass


async def report_status(h: Any, thread: str) -> str:
    if h.is_async:
        return str((await arun_report(h.saver, thread)).status)
    return str((await asyncio.to_thread(run_report, h.saver, thread)).status)


@pytest.mark.parametrize("how", ["invoke", "stream"])
async def test_a_run_that_raised_is_error_until_a_resume_ends_it(
    checkpointer: Any, how: str
) -> None:
    h, broken = checkpointer, [True]
    graph = graph_of(h, CHAIN, broken, handler=False)
    thread = f"raised-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    with pytest.raises(ValueError, match="b broke"):
        if how == "invoke":
            await h.invoke(graph, {"done": []}, config)
        else:
            await consume(h, graph, {"done": []}, config)
    assert await runs_of(h, thread) == [(1, "error")]
    assert await report_status(h, thread) == "error"
    broken[0] = False  # fixed: the run is resumed where it stopped
    out = await h.invoke(graph, None, config)
    assert out["done"] == ["a", "b", "c", "d"]
    assert await runs_of(h, thread) == [(1, "success")]


async def test_a_fan_out_whose_other_branch_failed_unrecovered_is_not_a_success(
    checkpointer: Any,
) -> None:
    h = checkpointer
    graph = graph_of(h, FAN_OUT, [True], handler=True)
    thread = f"fan-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    with pytest.raises(ValueError, match="b broke"):
        await h.invoke(graph, {"done": []}, config)
    # d reached the end beside b's failure (its step wrote success), then LangGraph raised.
    state = await graph.aget_state(config) if h.is_async else graph.get_state(config)
    assert sorted(state.values["done"]) == ["a", "c", "d"]
    assert await runs_of(h, thread) == [(1, "error")]
    assert await report_status(h, thread) == "error"


async def test_a_later_run_that_raised_leaves_the_earlier_runs_row(checkpointer: Any) -> None:
    h = checkpointer
    graph = graph_of(h, CHAIN, [False], handler=False)
    thread = f"two-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    await h.invoke(graph, {"done": []}, config)
    with pytest.raises(TypeError):  # the input itself cannot be applied
        await h.invoke(graph, {"done": 5}, config)
    assert await runs_of(h, thread) == [(2, "error"), (1, "success")]
