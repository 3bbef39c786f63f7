"""The state carries the outcome, the store carries the log (issue 25), on all
four backends: a completed step that changes nothing in ``state["resilience"]``
writes no run-log write (its record is its step row, stored with its writes),
so the run log gets a new version only when the run starts and ends; loop
iterations and usage are counted per invoke and, when an invoke goes on with a
run, read back from the run's step rows.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from graphs import CountState as State
from helpers import tasks_written
from langgraph.graph import END, START

from langgraph_resilience import Budget, ResilientStateGraph
from langgraph_resilience._langgraph import INTERRUPT_CHANNEL


def cfg(h: Any, label: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}-{h.id}-{uuid.uuid4().hex[:6]}"}}


def as_node(h: Any, fn: Any) -> Any:
    if not h.is_async:
        return fn

    async def anode(state: Any) -> Any:
        return fn(state)

    return anode


async def checkpoints(h: Any, config: dict[str, Any]) -> list[Any]:
    if h.is_async:
        return [c async for c in h.saver.alist(config)]
    return list(h.saver.list(config))


async def test_a_run_log_is_written_when_the_run_starts_and_ends_not_at_each_step(
    checkpointer: Any,
) -> None:
    h = checkpointer
    g = ResilientStateGraph(State)
    for name in ("a", "b", "c", "d"):
        g.add_node(name, as_node(h, lambda s, name=name: {"done": [name]}))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", "d")
    g.add_edge("d", END)
    graph = g.compile(checkpointer=h.saver)
    config = cfg(h, "lean")
    thread = config["configurable"]["thread_id"]
    out = await h.invoke(graph, {"done": []}, config)
    assert out["done"] == ["a", "b", "c", "d"]
    assert out["resilience"]["status"] == "success"
    assert out["resilience"]["usage"]["steps"] == 4
    # Only the last step (the run's end) wrote the run log; a, b, c handed their
    # records to the saver, which stored them as their rows with their writes.
    stepped = tasks_written(h.backend, h.target, thread, "done")
    logged = tasks_written(h.backend, h.target, thread, "resilience")
    assert len(stepped) == 4 and len(stepped & logged) == 1
    steps = await h.call("step_history", thread)
    assert [(s["path"], s["status"], s["usage"]["steps"]) for s in steps] == [
        ("a", "completed", 1),
        ("b", "completed", 1),
        ("c", "completed", 1),
        ("d", "completed", 1),
    ]
    assert {(s["checkpoint_id"], s["task_id"]) for s in steps} == {t[1:] for t in stepped}
    # The run log's channel: one version as the run starts, one as it ends.
    versions = {
        c.checkpoint["channel_versions"]["resilience"]
        for c in await checkpoints(h, config)
        if "resilience" in c.checkpoint["channel_versions"]
    }
    assert len(versions) == 2
    state = await graph.aget_state(config) if h.is_async else graph.get_state(config)
    assert state.values["resilience"]["usage"]["steps"] == 4
    assert "counts" not in state.values["resilience"]


def loop_graph(h: Any, fail_at: int, calls: list[int]) -> Any:
    def review(state: dict[str, Any]) -> dict[str, Any]:
        calls.append(state["n"])
        if len(calls) == fail_at:
            raise RuntimeError("the process died here")
        return {"n": state["n"] + 1}

    g = ResilientStateGraph(State)
    g.add_node("review", as_node(h, review), policy=None)  # LangGraph's own: it raises
    g.add_edge(START, "review")
    g.add_conditional_edges("review", lambda s: END if s["n"] >= 6 else "review", ["review", END])
    return g.compile(checkpointer=h.saver, budget=Budget(max_steps=5))


async def test_a_resumed_loop_counts_its_iterations_and_usage_from_the_rows(
    checkpointer: Any,
) -> None:
    h = checkpointer
    calls: list[int] = []
    graph = loop_graph(h, fail_at=3, calls=calls)
    config = cfg(h, "loop")
    thread = config["configurable"]["thread_id"]
    try:
        await h.invoke(graph, {"n": 0}, config)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the third iteration raised")
    # A new invoke goes on with the run: its tally is read from the run's rows.
    out = await h.invoke(graph, None, config)
    paths = [s["path"] for s in await h.call("step_history", thread)]
    assert paths == ["review", "review#2", "review#3", "review#4", "review#5"]
    # Five steps used: the budget pauses the run before a sixth.
    (paused,) = out[INTERRUPT_CHANNEL]
    assert paused.value["reason"] == "budget_exhausted"
    assert paused.value["used"]["steps"] == 5
    assert out["resilience"]["usage"]["steps"] == 5
    out = await h.invoke(graph, _resume(Budget(max_steps=10)), config)
    assert out["n"] == 6 and out["resilience"]["status"] == "success"
    assert out["resilience"]["usage"]["steps"] == 6
    paths = [s["path"] for s in await h.call("step_history", thread)]
    assert paths[-1] == "review#6" and len(paths) == 6


def _resume(value: Any) -> Any:
    from langgraph.types import Command

    return Command(resume=value)


async def test_a_run_gone_on_from_an_earlier_checkpoint_numbers_past_all_its_iterations(
    checkpointer: Any,
) -> None:
    """Time travel: the run's tally is its stored rows, the left branch's among
    them, so the branch's iterations take paths of their own (no two steps of a
    run share one) and its usage counts what the left branch spent."""
    h = checkpointer

    def review(state: dict[str, Any]) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    g = ResilientStateGraph(State)
    g.add_node("review", as_node(h, review))
    g.add_edge(START, "review")
    g.add_conditional_edges("review", lambda s: END if s["n"] >= 4 else "review", ["review", END])
    graph = g.compile(checkpointer=h.saver)
    config = cfg(h, "fork")
    thread = config["configurable"]["thread_id"]
    await h.invoke(graph, {"n": 0}, config)
    if h.is_async:
        states = [s async for s in graph.aget_state_history(config)]
    else:
        states = list(graph.get_state_history(config))
    (fork,) = [s for s in states if s.values.get("n") == 2 and s.next == ("review",)]
    out = await h.invoke(graph, None, fork.config)
    assert out["n"] == 4
    assert out["resilience"]["usage"]["steps"] == 6  # four on the left branch, two on this
    paths = [s["path"] for s in await h.call("step_history", thread)]
    assert paths == ["review", "review#2", "review#3", "review#4", "review#5", "review#6"]


async def test_two_steps_that_end_a_run_side_by_side_leave_its_whole_usage(
    checkpointer: Any,
) -> None:
    from langgraph_resilience import report_usage

    h = checkpointer

    def spend(name: str) -> Any:
        # c ends first, so its total is the smallest, and its update is applied
        # last (LangGraph applies a step's writes in the order of the task paths).
        wait = 0.0 if name == "c" else 0.1

        def run(state: dict[str, Any]) -> dict[str, Any]:
            time.sleep(wait)
            report_usage(tokens=10)
            return {"done": [name]}

        async def arun(state: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(wait)
            report_usage(tokens=10)
            return {"done": [name]}

        return arun if h.is_async else run

    g = ResilientStateGraph(State)
    for name in ("a", "b", "c"):  # a, b and c all end the run, in one step
        g.add_node(name, spend(name))
        g.add_edge(START, name)
        g.add_edge(name, END)
    graph = g.compile(checkpointer=h.saver)
    config = cfg(h, "ends")
    out = await h.invoke(graph, {"done": []}, config)
    assert sorted(out["done"]) == ["a", "b", "c"]
    state = await graph.aget_state(config) if h.is_async else graph.get_state(config)
    for usage in (out["resilience"]["usage"], state.values["resilience"]["usage"]):
        assert (usage["tokens"], usage["steps"]) == (30, 3)
    row = await h.call("history.run_row", config["configurable"]["thread_id"], 1)
    assert row.status == "success" and json.loads(row.usage)["tokens"] == 30
