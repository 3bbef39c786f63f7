"""Status from facts (issue 25): a run reads what happened, on every backend.

- A `Send` fan-out whose branches fan in (``add_edge("work", "reduce")``): a
  branch that fails for good at a critical node ends the run
  ``partial_complete``; the fan-in does not run on the branches that finished;
  the partial result names every failed branch; `retry_failed` re-runs each
  with its own payload, then the fan-in once.
- A resilient graph nested in a run (invoked inside a node function: the
  supervisor pattern; or added as a node without a policy) that ends short
  fails the step that ran it: the run ends ``partial_complete`` naming the
  inner step's path, and nothing after that step runs.
- ``retry_failed(step="work[1]")`` on a degraded `Send` branch, as its
  suggestion says, re-runs it with its own payload.
"""

from __future__ import annotations

import asyncio
import operator
import uuid
from collections import Counter
from typing import Annotated, Any

import pytest
from langgraph.graph import END, START
from langgraph.types import Send

from langgraph_resilience import (
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    aretry_failed,
    recovery_metrics,
    retry_failed,
    run_report,
)

ONCE = NodePolicy(retry=None)


class State(ResilientState, total=False):
    items: list[int]
    results: Annotated[list[int], operator.add]
    done: Annotated[list[str], operator.add]
    total: int
    item: int


def cfg(h: Any, label: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}-{h.id}-{uuid.uuid4().hex[:8]}"}}


def config_thread(config: dict[str, Any]) -> str:
    return str(config["configurable"]["thread_id"])


async def retry(h: Any, graph: Any, config: Any, **kwargs: Any) -> Any:
    if h.is_async:
        return await aretry_failed(graph, config, **kwargs)
    return await asyncio.to_thread(lambda: retry_failed(graph, config, **kwargs))


async def stored(h: Any, graph: Any, config: Any) -> dict[str, Any]:
    if h.is_async:
        return dict((await graph.aget_state(config)).values)
    return dict((await asyncio.to_thread(graph.get_state, config)).values)


def fan_in(h: Any, bad: set[int], calls: Counter[str], *, policy: NodePolicy = ONCE) -> Any:
    """``Send`` fan-out over ``items`` to ``work`` (which fails on ``bad``
    items), fanning in to ``reduce``."""

    def work_body(state: dict[str, Any]) -> dict[str, Any]:
        calls[f"work{state['item']}"] += 1
        if state["item"] in bad:
            raise ValueError(f"bad item {state['item']}")
        return {"results": [state["item"] * 10]}

    def reduce_body(state: dict[str, Any]) -> dict[str, Any]:
        calls["reduce"] += 1
        return {"total": sum(state["results"]), "done": [f"reduced {len(state['results'])}"]}

    if h.is_async:

        async def work(state: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(0)
            return work_body(state)

        async def reduce(state: dict[str, Any]) -> dict[str, Any]:
            return reduce_body(state)
    else:
        work, reduce = work_body, reduce_body  # type: ignore[assignment]
    g = ResilientStateGraph(State)
    g.add_node("work", work, policy=policy)
    g.add_node("reduce", reduce)
    g.add_conditional_edges(START, lambda s: [Send("work", {"item": i}) for i in s["items"]])
    g.add_node("publish", lambda s: {"done": ["published"]})
    g.add_edge("work", "reduce")
    g.add_edge("reduce", "publish")
    g.add_edge("publish", END)
    return g.compile(checkpointer=h.saver)


@pytest.mark.parametrize("failing", [{1}, {0, 2}], ids=["one-branch", "two-branches"])
async def test_a_failed_branch_stops_the_fan_in(checkpointer: Any, failing: set[int]) -> None:
    calls: Counter[str] = Counter()
    bad = set(failing)
    graph = fan_in(checkpointer, bad, calls)
    config = cfg(checkpointer, "fan-in")
    out = await checkpointer.invoke(graph, {"items": [0, 1, 2]}, config)
    log = out["resilience"]
    assert log["status"] == "partial_complete"
    assert calls["reduce"] == 0  # the fan-in did not run on the branches that finished
    assert "total" not in out
    assert sorted(f["path"] for f in log["failed_steps"]) == [f"work[{i}]" for i in sorted(bad)]
    assert log["failed_step"]["path"] in {f"work[{i}]" for i in bad}
    assert sorted(out["results"]) == [i * 10 for i in (0, 1, 2) if i not in bad]
    assert (await stored(checkpointer, graph, config))["resilience"]["status"] == (
        "partial_complete"
    )
    report = await asyncio.to_thread(run_report, checkpointer.saver, config_thread(config))
    assert report.status == "partial_complete"  # the report and metrics read it too

    bad.clear()  # the cause is fixed
    out = await retry(checkpointer, graph, config)
    assert out["resilience"]["status"] == "success"
    assert out["total"] == 30  # every branch's result, each once
    assert sorted(out["results"]) == [0, 10, 20]
    assert out["done"] == ["reduced 3", "published"]
    assert calls["reduce"] == 1  # the fan-in, once
    # each failed branch re-ran once more, with its own payload; the others never re-ran
    assert calls == Counter(
        {"reduce": 1, **{f"work{i}": 2 if i in failing else 1 for i in (0, 1, 2)}}
    )
    assert not out["resilience"].get("failed_steps")
    assert out["resilience"].get("failed_step") is None


async def test_nothing_after_a_failed_step_runs_beside_the_partial_result(
    checkpointer: Any,
) -> None:
    """A step due after the failure on another path (fed by a step that finished
    beside the failed one) does not run either, and the run does not read
    success; `retry_failed` runs it after the failed step is fixed."""
    calls: Counter[str] = Counter()
    broken = [True]

    def body(name: str) -> Any:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            calls[name] += 1
            if name == "a" and broken[0]:
                raise ValueError("a broke")
            return {"done": [name]}

        if checkpointer.is_async:

            async def arun(state: dict[str, Any]) -> dict[str, Any]:
                return run(state)

            return arun
        return run

    g = ResilientStateGraph(State)
    g.add_node("a", body("a"), policy=ONCE)
    for name in ("b", "c", "d", "e"):
        g.add_node(name, body(name))
    g.add_edge(START, "a")
    g.add_edge(START, "b")
    g.add_edge("a", "c")
    g.add_edge("b", "d")  # d is due beside the partial result; it leads on to e
    g.add_edge("c", END)
    g.add_edge("d", "e")
    g.add_edge("e", END)  # e is terminal: it would write success
    graph = g.compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "beside")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert out["resilience"]["status"] == "partial_complete"
    assert out["done"] == ["b"]
    assert calls == Counter({"a": 1, "b": 1})
    broken[0] = False
    out = await retry(checkpointer, graph, config)
    assert out["resilience"]["status"] == "success"
    assert sorted(out["done"]) == ["a", "b", "c", "d", "e"]
    assert calls == Counter({"a": 2, "b": 1, "c": 1, "d": 1, "e": 1})


def inner_graph(h: Any, broken: list[bool], calls: Counter[str]) -> Any:
    def fetch_body(state: dict[str, Any]) -> dict[str, Any]:
        calls["fetch"] += 1
        return {"done": ["fetch"]}

    def inner_step_body(state: dict[str, Any]) -> dict[str, Any]:
        calls["inner_step"] += 1
        if broken[0]:
            raise ValueError("inner broke")
        return {"done": ["inner_step"]}

    sub = ResilientStateGraph(State)
    if h.is_async:

        async def fetch(state: dict[str, Any]) -> dict[str, Any]:
            return fetch_body(state)

        async def inner_step(state: dict[str, Any]) -> dict[str, Any]:
            return inner_step_body(state)

        sub.add_node("fetch", fetch, policy=ONCE)
        sub.add_node("inner_step", inner_step, policy=ONCE)
    else:
        sub.add_node("fetch", fetch_body, policy=ONCE)
        sub.add_node("inner_step", inner_step_body, policy=ONCE)
    sub.add_edge(START, "fetch")
    sub.add_edge("fetch", "inner_step")
    sub.add_edge("inner_step", END)
    return sub.compile()


def outer_graph(h: Any, supervisor: Any, calls: Counter[str], policy: Any) -> Any:
    def after_body(state: dict[str, Any]) -> dict[str, Any]:
        calls["after"] += 1
        return {"done": ["after"]}

    if h.is_async:

        async def after(state: dict[str, Any]) -> dict[str, Any]:
            return after_body(state)
    else:
        after = after_body  # type: ignore[assignment]
    g = ResilientStateGraph(State)
    g.add_node("supervisor", supervisor, policy=policy)
    g.add_node("after", after)
    g.add_edge(START, "supervisor")
    g.add_edge("supervisor", "after")
    g.add_edge("after", END)
    return g.compile(checkpointer=h.saver)


def last_status(chunks: list[Any]) -> str:
    """The nested run's status, as the chunks it streamed tell it."""
    for chunk in reversed(chunks):
        for part in (chunk, *chunk.values()):
            if isinstance(part, dict) and isinstance(part.get("resilience"), dict):
                return str(part["resilience"]["status"])
    raise AssertionError(f"no run log in {chunks}")


@pytest.mark.parametrize("how", ["invoke", "values", "updates"])
@pytest.mark.parametrize("policy", [ONCE, None], ids=["policy", "no-policy"])
async def test_a_graph_invoked_inside_a_node_that_ends_short_fails_the_step(
    checkpointer: Any, policy: NodePolicy | None, how: str
) -> None:
    """Invoked, or streamed (a supervisor forwarding its worker graph's chunks)."""
    calls: Counter[str] = Counter()
    broken = [True]
    inner = inner_graph(checkpointer, broken, calls)
    seen: list[str] = []

    if checkpointer.is_async:

        async def supervisor(state: dict[str, Any]) -> dict[str, Any]:
            if how == "invoke":
                out = await inner.ainvoke({"done": []})
                seen.append(out["resilience"]["status"])
            else:
                chunks = [c async for c in inner.astream({"done": []}, stream_mode=how)]
                seen.append(last_status(chunks))
            return {"done": ["supervisor"]}
    else:

        def supervisor(state: dict[str, Any]) -> dict[str, Any]:
            if how == "invoke":
                out = inner.invoke({"done": []})
                seen.append(out["resilience"]["status"])
            else:
                seen.append(last_status(list(inner.stream({"done": []}, stream_mode=how))))
            return {"done": ["supervisor"]}

    graph = outer_graph(checkpointer, supervisor, calls, policy)
    config = cfg(checkpointer, "supervisor")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    log = out["resilience"]
    assert seen == ["partial_complete"]  # the nested run's own result, as it was
    assert log["status"] == "partial_complete"
    assert log["failed_step"]["path"] == "supervisor/inner_step"
    assert log["failed_step"]["node"] == "supervisor"
    assert log["failed_step"]["error_type"] == "ValueError"
    assert [f["path"] for f in log["failed_steps"]] == ["supervisor/inner_step"]
    assert "after" not in calls  # nothing after the failed step ran
    assert "supervisor" not in out.get("done", [])  # the failed step wrote nothing

    broken[0] = False
    out = await retry(checkpointer, graph, config)
    assert out["resilience"]["status"] == "success"
    assert out["done"] == ["supervisor", "after"]
    assert calls["after"] == 1


async def test_the_policy_of_the_step_that_ran_a_nested_graph_decides(
    checkpointer: Any,
) -> None:
    """``critical=False``: the step is degraded, the run goes on and succeeds."""
    calls: Counter[str] = Counter()
    inner = inner_graph(checkpointer, [True], calls)

    if checkpointer.is_async:

        async def supervisor(state: dict[str, Any]) -> dict[str, Any]:
            await inner.ainvoke({"done": []})
            return {"done": ["supervisor"]}
    else:

        def supervisor(state: dict[str, Any]) -> dict[str, Any]:
            inner.invoke({"done": []})
            return {"done": ["supervisor"]}

    policy = NodePolicy(retry=None, critical=False)
    graph = outer_graph(checkpointer, supervisor, calls, policy)
    out = await checkpointer.invoke(graph, {"done": []}, cfg(checkpointer, "degrade"))
    assert out["resilience"]["status"] == "success"
    assert out["resilience"]["degraded_steps"] == ["supervisor"]
    assert out["done"] == ["after"]
    assert calls["inner_step"] == 1  # a nested run that stopped short is not retried


async def test_a_subgraph_node_without_a_policy_that_ends_short(checkpointer: Any) -> None:
    calls: Counter[str] = Counter()
    broken = [True]
    sub = inner_graph(checkpointer, broken, calls)
    graph = outer_graph(checkpointer, sub, calls, None)
    config = cfg(checkpointer, "subgraph")
    out = await checkpointer.invoke(graph, {"done": []}, config)  # no private error escapes
    log = out["resilience"]
    assert log["status"] == "partial_complete"
    assert log["failed_step"]["path"] == "supervisor/inner_step"
    assert log["failed_step"]["error_type"] == "ValueError"
    assert "after" not in calls
    assert (await stored(checkpointer, graph, config))["resilience"]["status"] == (
        "partial_complete"
    )
    broken[0] = False
    out = await retry(checkpointer, graph, config)
    assert out["resilience"]["status"] == "success"
    assert calls == Counter({"fetch": 1, "inner_step": 2, "after": 1})  # fetch never re-ran


async def test_retry_of_a_degraded_send_branch_keeps_its_payload(checkpointer: Any) -> None:
    calls: Counter[str] = Counter()
    bad = {1}
    graph = fan_in(checkpointer, bad, calls, policy=NodePolicy(retry=None, critical=False))
    config = cfg(checkpointer, "degraded")
    out = await checkpointer.invoke(graph, {"items": [0, 1, 2]}, config)
    log = out["resilience"]
    assert log["status"] == "success"  # a degraded step does not stop the run
    assert log["degraded_steps"] == ["work[1]"]
    assert "step='work[1]'" in log["recovery_suggestions"][0]
    assert out["total"] == 20
    bad.clear()
    out = await retry(checkpointer, graph, config, step="work[1]")
    assert calls["work1"] == 2  # re-ran, with its own payload
    assert sorted(out["results"]) == [0, 10, 20]
    assert out["resilience"]["status"] == "success"
    assert not out["resilience"].get("degraded_steps")


async def test_retry_failed_through_a_subgraph_is_counted_as_retry_failed(
    checkpointer: Any,
) -> None:
    """Not as a crash resume that redid the step after the subgraph (which never
    ran before): one retry_failed recovery, which redid the inner failed step."""
    calls: Counter[str] = Counter()
    broken = [True]
    sub = inner_graph(checkpointer, broken, calls)
    graph = outer_graph(checkpointer, sub, calls, ONCE)
    config = cfg(checkpointer, "sub-retry")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert out["resilience"]["failed_step"]["path"] == "supervisor/inner_step"
    broken[0] = False
    out = await retry(checkpointer, graph, config)
    assert out["resilience"]["status"] == "success"
    assert calls == Counter({"fetch": 1, "inner_step": 2, "after": 1})

    report = await asyncio.to_thread(run_report, checkpointer.saver, config_thread(config))
    kinds = [(r["kind"], r["redone_paths"]) for r in report.recoveries]
    assert kinds == [("retry_failed", ["supervisor/inner_step"])]
    metrics = await asyncio.to_thread(recovery_metrics, checkpointer.saver)
    by_kind = metrics.to_dict()["recoveries_by_kind"]
    assert by_kind["crash"] == 0
    assert by_kind["retry_failed"] >= 1
