"""Budgets: token, cost, time and step limits pause a run at a step boundary, and a
top-up (``Command(resume=Budget(...))``) continues it with nothing redone; on every
backend, directly and under a `Worker`."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from graphs import DoneState, chain, one_node
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START
from langgraph.types import Command

from langgraph_resilience import (
    Budget,
    BudgetExhausted,
    ConfigError,
    NodePolicy,
    ResilientStateGraph,
    Worker,
    report_usage,
)
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.errors import (
    RunStateError,
)

STEPS = ["s1", "s2", "s3", "s4", "s5"]
TOKENS_PER_CALL = 40


def model() -> GenericFakeChatModel:
    usage = {"input_tokens": 30, "output_tokens": 10, "total_tokens": TOKENS_PER_CALL}
    return GenericFakeChatModel(
        messages=itertools.repeat(AIMessage(content="ok", usage_metadata=usage))  # type: ignore[arg-type]
    )


def pipeline(ran: Counter[str], spend: str, is_async: bool, **compile_kwargs: Any) -> Any:
    """Five steps; each spends what ``spend`` names: a model call, cost, time, nothing."""
    llm = model()

    def spend_sync() -> None:
        if spend == "tokens":
            llm.invoke("hello")
        elif spend == "cost":
            report_usage(cost=0.5)
        elif spend == "seconds":
            time.sleep(0.1)

    async def spend_async() -> None:
        if spend == "tokens":
            await llm.ainvoke("hello")
        elif spend == "seconds":
            await asyncio.sleep(0.1)
        else:
            spend_sync()

    def make(name: str) -> Any:
        if is_async:

            async def anode(state: DoneState) -> dict[str, Any]:
                ran[name] += 1
                await spend_async()
                return {"done": [name]}

            return anode

        def node(state: DoneState) -> dict[str, Any]:
            ran[name] += 1
            spend_sync()
            return {"done": [name]}

        return node

    return chain(ResilientStateGraph(DoneState), STEPS, make)


async def invoke(h: Any, graph: Any, value: Any, config: Any) -> Any:
    return await h.invoke(graph, value, config)


def pause_of(out: dict[str, Any]) -> dict[str, Any]:
    [found] = out["__interrupt__"]
    return dict(found.value)


CASES = {
    # spend, budget that runs out, where it pauses (the step that did not run), what ran out
    "tokens": ("tokens", Budget(max_tokens=100), "s4", "max_tokens"),  # 3 x 40 >= 100
    "cost": ("cost", Budget(max_cost=1.0), "s3", "max_cost"),  # 2 x 0.5 >= 1.0
    "steps": ("none", Budget(max_steps=2), "s3", "max_steps"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_spent_budget_pauses_and_a_top_up_resumes(checkpointer: Any, case: str) -> None:
    h = checkpointer
    spend, budget, paused_at, limit = CASES[case]
    ran: Counter[str] = Counter()
    graph = pipeline(ran, spend, h.is_async).compile(checkpointer=h.saver)
    config = {"configurable": {"thread_id": f"budget-{case}-{uuid.uuid4()}", "budget": budget}}
    out = await invoke(h, graph, {"done": []}, config)
    pause = pause_of(out)
    assert pause["reason"] == "budget_exhausted" and pause["exhausted"] == [limit]
    assert pause["node"] == paused_at and pause["limits"] == budget.to_dict()
    done = STEPS[: STEPS.index(paused_at)]
    assert out["done"] == done and set(ran) == set(done)
    if case == "tokens":
        assert pause["used"]["tokens"] == TOKENS_PER_CALL * len(done)
    # Resuming without more budget pauses again, at the same step.
    out = await invoke(h, graph, Command(resume="go on"), config)
    assert pause_of(out)["node"] == paused_at and set(ran) == set(done)
    out = await invoke(
        h, graph, Command(resume=Budget(max_tokens=10**6, max_cost=100, max_steps=100)), config
    )
    assert "__interrupt__" not in out
    assert out["done"] == STEPS and out["resilience"]["status"] == "success"
    assert all(n == 1 for n in ran.values()), ran  # nothing redone
    assert out["resilience"]["usage"]["steps"] == len(STEPS)
    assert out["resilience"]["budget"]["max_steps"] == 100  # the top-up stays in force


async def test_a_time_budget_counts_the_time_steps_ran(checkpointer: Any) -> None:
    h = checkpointer
    ran: Counter[str] = Counter()
    graph = pipeline(ran, "seconds", h.is_async).compile(checkpointer=h.saver)
    config = {
        "configurable": {"thread_id": f"time-{uuid.uuid4()}", "budget": Budget(max_seconds=0.25)}
    }
    out = await invoke(h, graph, {"done": []}, config)
    pause = pause_of(out)
    done = out["done"]
    assert pause["exhausted"] == ["max_seconds"] and pause["node"] == STEPS[len(done)]
    assert pause["used"]["seconds"] >= 0.25 and len(done) >= 3  # each step takes >= 0.1 s
    out = await invoke(h, graph, Command(resume=Budget(max_seconds=60)), config)
    assert out["done"] == STEPS and all(n == 1 for n in ran.values())


async def test_compile_budget_is_the_default_and_config_overrides_it(checkpointer: Any) -> None:
    h = checkpointer
    ran: Counter[str] = Counter()
    graph = pipeline(ran, "none", h.is_async).compile(
        checkpointer=h.saver, budget=Budget(max_steps=1)
    )
    out = await invoke(h, graph, {"done": []}, {"configurable": {"thread_id": f"d-{uuid.uuid4()}"}})
    assert pause_of(out)["node"] == "s2"
    roomy = {"configurable": {"thread_id": f"o-{uuid.uuid4()}", "budget": {"max_steps": 50}}}
    out = await invoke(h, graph, {"done": []}, roomy)
    assert out["done"] == STEPS


async def test_a_worker_marks_a_spent_run_paused_and_resume_tops_it_up(checkpointer: Any) -> None:
    h = checkpointer
    if h.backend == "postgres":
        from helpers import sql

        sql(h.backend, h.target, "DELETE FROM resilience_runs")
    ran: Counter[str] = Counter()
    worker = Worker(pipeline(ran, "cost", h.is_async), checkpointer=h.saver, lease_ttl=5)

    async def run() -> dict[str, str]:
        return await worker.arun() if h.is_async else await asyncio.to_thread(worker.run)

    if h.is_async:
        run_id = await worker.asubmit({"done": []}, budget=Budget(max_cost=1.5))
    else:
        run_id = await asyncio.to_thread(worker.submit, {"done": []}, budget=Budget(max_cost=1.5))
    assert await run() == {run_id: "paused"}
    assert (await h.call("read_run", run_id)).status == "paused"
    assert set(ran) == {"s1", "s2", "s3"}
    with pytest.raises(RunStateError, match="only a paused run"):
        if h.is_async:
            await worker.aresume("no-such-run")
        else:
            await asyncio.to_thread(worker.resume, "no-such-run")
    if h.is_async:
        await worker.aresume(run_id, Budget(max_cost=10))
    else:
        await asyncio.to_thread(worker.resume, run_id, Budget(max_cost=10))
    assert await run() == {run_id: "success"}
    assert all(n == 1 for n in ran.values()) and set(ran) == set(STEPS)


def test_a_node_raising_budget_exhausted_uses_the_budget_it_is_resumed_with(
    tmp_path: Any,
) -> None:
    calls = Counter[str]()

    def pay(state: DoneState) -> dict[str, Any]:
        calls["pay"] += 1
        if calls["pay"] == 1:
            raise BudgetExhausted("the provider says the quota is spent")
        return {"done": ["pay"]}

    g = one_node(ResilientStateGraph(DoneState), "pay", pay, policy=NodePolicy())
    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "b.db")) as saver:
        graph = g.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "quota"}}
        out = graph.invoke({"done": []}, config)
        assert pause_of(out)["reason"] == "budget_exhausted"
        out = graph.invoke(Command(resume=Budget(max_cost=3)), config)
        assert out["done"] == ["pay"] and out["resilience"]["budget"] == {"max_cost": 3}


def test_a_raised_and_a_spent_budget_pause_with_one_shape() -> None:
    def pay(state: DoneState) -> dict[str, Any]:
        raise BudgetExhausted("the provider says the quota is spent")

    g = one_node(ResilientStateGraph(DoneState), "pay", pay, policy=NodePolicy())
    graph = g.compile(checkpointer=InMemorySaver())
    raised = pause_of(graph.invoke({"done": []}, {"configurable": {"thread_id": "raised"}}))
    ran = Counter[str]()
    spent = pipeline(ran, "tokens", False).compile(
        checkpointer=InMemorySaver(), budget=Budget(max_tokens=1)
    )
    boundary = pause_of(spent.invoke({"done": []}, {"configurable": {"thread_id": "spent"}}))
    assert set(raised) == set(boundary)
    assert raised["exhausted"] == [] and "quota is spent" in raised["error"]
    assert boundary["exhausted"] == ["max_tokens"] and boundary["error"] is None


def test_bad_budgets_and_report_usage_outside_a_node_are_refused() -> None:
    with pytest.raises(ConfigError, match="max_tokens must be an int"):
        Budget(max_tokens=1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_cost"):
        Budget(max_cost=-1)
    with pytest.raises(ConfigError, match="unknown budget field"):
        Budget.coerce({"tokens": 5}, where="budget")
    with pytest.raises(ConfigError, match="compile"):
        pipeline(Counter(), "none", False).compile(checkpointer=InMemorySaver(), budget="lots")
    with pytest.raises(ConfigError, match="inside a node"):
        report_usage(cost=1.0)


async def test_parallel_branches_paused_by_a_budget_resume_together_under_a_worker(
    checkpointer: Any,
) -> None:
    """Both branches of a fan-out pause at their start; one top-up answers both."""
    h = checkpointer
    if h.backend == "postgres":
        from helpers import sql

        sql(h.backend, h.target, "DELETE FROM resilience_runs")
    ran: Counter[str] = Counter()

    def make(name: str) -> Any:
        def node(state: DoneState) -> dict[str, Any]:
            ran[name] += 1
            return {"done": [name]}

        return node

    g = ResilientStateGraph(DoneState)
    for name in ("a", "b1", "b2", "c"):
        g.add_node(name, make(name))
    g.add_edge(START, "a")
    g.add_edge("a", "b1")
    g.add_edge("a", "b2")
    g.add_edge(["b1", "b2"], "c")
    g.add_edge("c", END)
    worker = Worker(g, checkpointer=h.saver, lease_ttl=5)

    async def call(method: str, *args: Any, **kwargs: Any) -> Any:
        if h.is_async:
            return await getattr(worker, "a" + method)(*args, **kwargs)
        return await asyncio.to_thread(getattr(worker, method), *args, **kwargs)

    run_id = await call("submit", {"done": []}, budget=Budget(max_steps=1))
    assert await call("run") == {run_id: "paused"}
    thread = (await h.call("read_run", run_id)).thread_id
    config = {"configurable": {"thread_id": thread}}
    if h.is_async:
        snapshot = await worker.graph.aget_state(config)
    else:
        snapshot = await asyncio.to_thread(worker.graph.get_state, config)
    assert sorted(i.value["node"] for i in snapshot.interrupts) == ["b1", "b2"]
    await call("resume", run_id, Budget(max_steps=10))
    assert await call("run") == {run_id: "success"}
    assert ran == {"a": 1, "b1": 1, "b2": 1, "c": 1}
