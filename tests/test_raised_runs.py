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


# -- which run a call that raised ends: by number, never by clock --------------------


async def state_status(h: Any, graph: Any, config: Any) -> str:
    state = await graph.aget_state(config) if h.is_async else graph.get_state(config)
    return str(state.values["resilience"]["status"])


@pytest.mark.parametrize("skew", [-3600.0, 3600.0])
@pytest.mark.parametrize("edges", [CHAIN, FAN_OUT], ids=["chain", "fan-out"])
async def test_skewed_clocks_change_nothing(
    checkpointer: Any, monkeypatch: pytest.MonkeyPatch, skew: float, edges: Any
) -> None:
    # Before: fail_run ended the run only if its row's start (the marker's
    # clock) or end (the saver's clock) was at or after the call's start (the
    # driver's clock): an hour behind, the raised chain stayed 'running' and the
    # fan-out 'success'.
    import time as real_time
    from types import SimpleNamespace

    import langgraph_resilience.checkpoint.runlog._run_log as run_log
    import langgraph_resilience.graph._lifecycle as lifecycle

    skewed = SimpleNamespace(time=lambda: real_time.time() + skew)
    monkeypatch.setattr(run_log, "time", skewed)
    monkeypatch.setattr(lifecycle, "time", skewed)
    h = checkpointer
    graph = graph_of(h, edges, [True], handler=edges is FAN_OUT)
    thread = f"skew-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    with pytest.raises(ValueError, match="b broke"):
        await h.invoke(graph, {"done": []}, config)
    assert await runs_of(h, thread) == [(1, "error")]
    assert await report_status(h, thread) == "error"
    assert await state_status(h, graph, config) == "error"


class _RaisesAtTheEnd:
    """A callback handler (``raise_error``: LangChain raises what it raises) that
    fails the top-level call once the graph returned: after the run's end."""

    raise_error = True
    run_inline = True
    ignore_chain = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("ignore_"):
            return False
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def on_chain_end(self, outputs: Any, *, parent_run_id: Any = None, **kwargs: Any) -> None:
        if parent_run_id is None:
            raise RuntimeError("the callback broke after the run")


async def test_a_run_the_saver_ended_is_not_overwritten(checkpointer: Any) -> None:
    # Before: the call raised after the ending checkpoint was stored, and
    # fail_run, seeing an end written during the call, overwrote 'success'.
    from langchain_core.callbacks import BaseCallbackHandler

    class RaisesAtTheEnd(_RaisesAtTheEnd, BaseCallbackHandler):
        pass

    h = checkpointer
    graph = graph_of(h, CHAIN, [False], handler=False)
    thread = f"ended-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}, "callbacks": [RaisesAtTheEnd()]}
    with pytest.raises(RuntimeError, match="the callback broke"):
        await h.invoke(graph, {"done": []}, config)
    plain = {"configurable": {"thread_id": thread}}
    assert (await graph.aget_state(plain) if h.is_async else graph.get_state(plain)).next == ()
    assert await runs_of(h, thread) == [(1, "success")]
    assert await report_status(h, thread) == "success"
    assert await state_status(h, graph, plain) == "success"
