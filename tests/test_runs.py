"""Real graphs: runs per input, steps per task path, on all four backends.

Send fan-outs, subgraphs, loops and multi-turn threads, each of which used to
give a wrong answer reported as success (issue 11).
"""

from __future__ import annotations

import operator
import uuid
from typing import Annotated, Any

import pytest
from graphs import one_node, quick
from langgraph.graph import END, START
from langgraph.types import Send

from langgraph_resilience import (
    Backoff,
    Budget,
    NodePolicy,
    PermanentError,
    ResilientState,
    ResilientStateGraph,
    aretry_failed,
    report_usage,
    retry_failed,
    side_effect,
)

FAST = quick(2)


class State(ResilientState, total=False):
    items: list[str]
    item: str
    results: Annotated[list[str], operator.add]
    n: int
    final: str
    topic: str


def cfg(h: Any, label: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}-{h.id}-{uuid.uuid4().hex[:6]}"}}


async def history(h: Any, config: dict[str, Any], run: int | None = None) -> list[Any]:
    return list(await h.call("step_history", config["configurable"]["thread_id"], run=run))


async def retry(h: Any, graph: Any, config: Any, **kwargs: Any) -> Any:
    if h.is_async:
        return await aretry_failed(graph, config, **kwargs)
    import asyncio

    return await asyncio.to_thread(lambda: retry_failed(graph, config, **kwargs))


def as_node(h: Any, fn: Any) -> Any:
    if not h.is_async:
        return fn

    async def anode(state: Any) -> Any:
        return fn(state)

    anode.__name__ = getattr(fn, "__name__", "node")
    return anode


def research_pipeline(
    h: Any, calls: list[str], broken: dict[str, bool], subgraph_policy: NodePolicy
) -> Any:
    """research (a subgraph: plan -> fetch) -> report; fetch fails while
    ``broken["on"]``; every node run is appended to ``calls``."""

    def step(name: str) -> Any:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            calls.append(name)
            if name == "fetch" and broken["on"]:
                raise PermanentError("source is down")
            return {"results": [name]}

        return as_node(h, run)

    sub = ResilientStateGraph(State)
    for name in ("plan", "fetch"):
        sub.add_node(name, step(name), policy=NodePolicy(retry=None))
    sub.add_edge(START, "plan")
    sub.add_edge("plan", "fetch")
    sub.add_edge("fetch", END)
    g = ResilientStateGraph(State)
    g.add_node("research", sub.compile(), policy=subgraph_policy)
    g.add_node("report", step("report"))
    g.add_edge(START, "research")
    g.add_edge("research", "report")
    g.add_edge("report", END)
    return g.compile(checkpointer=h.saver)


async def test_send_branch_is_retried_with_its_own_payload(checkpointer: Any) -> None:
    h = checkpointer
    broken = {"b"}

    def work(state: dict[str, Any]) -> dict[str, Any]:
        if state["item"] in broken:
            raise PermanentError(f"{state['item']} is broken")
        return {"results": [f"done:{state['item']}"]}

    g = ResilientStateGraph(State)
    g.add_node("work", as_node(h, work), policy=NodePolicy(retry=None))
    g.add_conditional_edges(START, lambda s: [Send("work", {"item": i}) for i in s["items"]])
    g.add_edge("work", END)
    graph = g.compile(checkpointer=h.saver)
    config = cfg(h, "send")
    out = await h.invoke(graph, {"items": ["a", "b", "c"], "results": []}, config)
    log = out["resilience"]
    assert log["status"] == "partial_complete"
    assert log["failed_step"]["path"] == "work[1]" and log["failed_step"]["send"] == {"item": "b"}
    broken.clear()
    out = await retry(h, graph, config)
    assert sorted(out["results"]) == ["done:a", "done:b", "done:c"]
    assert out["resilience"]["status"] == "success"
    assert not out["resilience"].get("failed_steps")
    paths = [(s["path"], s["status"]) for s in await history(h, config)]
    assert ("work[1]", "failed") in paths and ("work[0]", "completed") in paths


async def test_critical_failure_in_a_subgraph_ends_the_parent_partial(checkpointer: Any) -> None:
    h = checkpointer
    calls: list[str] = []
    graph = research_pipeline(h, calls, {"on": True}, NodePolicy(retry=None))
    out = await h.invoke(graph, {"results": []}, cfg(h, "subgraph"))
    log = out["resilience"]
    assert calls == ["plan", "fetch"]  # report never ran
    assert log["status"] == "partial_complete"
    assert log["failed_step"]["path"] == "research/fetch"
    assert log["failed_step"]["kind"] == "permanent"

    # critical=False on the subgraph node: degraded, the parent carries on.
    graph = research_pipeline(h, calls, {"on": True}, NodePolicy(retry=None, critical=False))
    out = await h.invoke(graph, {"results": []}, cfg(h, "sub2"))
    assert out["resilience"]["status"] == "success"
    assert out["resilience"]["degraded_steps"] == ["research"]
    assert calls[-1] == "report"


async def test_a_new_input_on_a_thread_is_a_new_run(checkpointer: Any) -> None:
    h = checkpointer
    fail = {"on": True}

    def work(state: dict[str, Any]) -> dict[str, Any]:
        if fail["on"]:
            raise PermanentError("first turn fails")
        return {"results": [f"answer:{state['topic']}"]}

    g = one_node(
        ResilientStateGraph(State), "work", as_node(h, work), policy=NodePolicy(retry=None)
    )
    graph = g.compile(checkpointer=h.saver)
    config = cfg(h, "turns")
    first = await h.invoke(graph, {"topic": "one", "results": []}, config)
    assert first["resilience"]["status"] == "partial_complete"
    assert first["resilience"]["run"] == 1
    fail["on"] = False
    second = await h.invoke(graph, {"topic": "two"}, config)
    log = second["resilience"]
    assert log["status"] == "success" and log["run"] == 2
    assert log["failed_step"] is None and log.get("partial_output") is None
    assert not log.get("failed_steps") and not log.get("recovery_suggestions")
    second_steps = await h.call("step_history", config["configurable"]["thread_id"], run=2)
    assert [s["path"] for s in second_steps] == ["work"]
    # Earlier runs' records stay readable.
    assert [(s["run"], s["status"]) for s in await history(h, config)] == [
        (1, "failed"),
        (2, "completed"),
    ]
    assert [s["run"] for s in await history(h, config, run=1)] == [1]


async def test_loop_iterations_have_their_own_paths_and_the_run_ends_success(
    checkpointer: Any,
) -> None:
    h = checkpointer

    def review(state: dict[str, Any]) -> dict[str, Any]:
        return {"n": state.get("n", 0) + 1}

    g = ResilientStateGraph(State)
    g.add_node("review", as_node(h, review))
    g.add_edge(START, "review")
    g.add_conditional_edges("review", lambda s: END if s["n"] >= 5 else "review", ["review", END])
    graph = g.compile(checkpointer=h.saver)
    config = cfg(h, "loop")
    out = await h.invoke(graph, {"n": 0}, config)
    assert out["n"] == 5
    assert out["resilience"]["status"] == "success"
    state = await graph.aget_state(config) if h.is_async else graph.get_state(config)
    assert state.values["resilience"]["status"] == "success"
    paths = [s["path"] for s in await history(h, config)]
    assert paths == ["review", "review#2", "review#3", "review#4", "review#5"]


async def test_usage_inside_a_subgraph_is_counted_once(checkpointer: Any) -> None:
    h = checkpointer

    def spend(state: dict[str, Any]) -> dict[str, Any]:
        report_usage(tokens=100)
        return {"results": ["spent"]}

    sub = one_node(ResilientStateGraph(State), "call", as_node(h, spend))
    g = ResilientStateGraph(State)
    g.add_node("before", as_node(h, spend))
    g.add_node("inner", sub.compile())
    g.add_edge(START, "before")
    g.add_edge("before", "inner")
    g.add_edge("inner", END)
    graph = g.compile(checkpointer=h.saver, budget=Budget(max_tokens=250))
    out = await h.invoke(graph, {"results": []}, cfg(h, "budget"))
    assert out["resilience"]["usage"]["tokens"] == 200
    assert out["resilience"]["status"] == "success"


def test_a_long_loop_stores_bytes_like_a_plain_graph(tmp_path: Any) -> None:
    """300 loop iterations on SQLite (2 KB of state): stored bytes within 1.3x of
    a plain StateGraph on LangGraph's stock SqliteSaver, every iteration listed."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import StateGraph

    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    n = 300

    def build(cls: Any) -> Any:
        g = cls(State)
        g.add_node("review", lambda s: {"n": s["n"] + 1})
        g.add_edge(START, "review")
        g.add_conditional_edges(
            "review", lambda s: END if s["n"] >= n else "review", ["review", END]
        )
        return g

    def stored(path: str) -> int:
        conn = sqlite3.connect(path)
        try:
            conn.execute("VACUUM")
            return int(conn.execute("PRAGMA page_count").fetchone()[0])
        finally:
            conn.close()

    config = {"configurable": {"thread_id": "loop"}, "recursion_limit": n + 10}
    sizes = {}
    for label, cls, saver_cls in (
        ("stock", StateGraph, SqliteSaver),
        ("ours", ResilientStateGraph, ResilientSqliteSaver),
    ):
        path = str(tmp_path / f"{label}.db")
        with saver_cls.from_conn_string(path) as saver:
            saver.setup()
            graph = build(cls).compile(checkpointer=saver)
            graph.invoke({"n": 0, "final": "x" * 2000}, config)
            if label == "ours":
                paths = [s["path"] for s in saver.step_history("loop")]
        sizes[label] = stored(path)
    assert paths == ["review", *[f"review#{i}" for i in range(2, n + 1)]]
    assert sizes["ours"] <= 1.3 * sizes["stock"], sizes


async def test_a_degraded_step_is_retried_by_the_call_its_suggestion_shows(
    checkpointer: Any,
) -> None:
    h = checkpointer
    down = {"on": True}

    def enrich(state: dict[str, Any]) -> dict[str, Any]:
        if down["on"]:
            raise PermanentError("enrichment service is down")
        return {"results": ["enriched"]}

    g = ResilientStateGraph(State)
    g.add_node("enrich", as_node(h, enrich), policy=NodePolicy(retry=None, critical=False))
    g.add_node("report", as_node(h, lambda s: {"results": ["report"]}))
    g.add_edge(START, "enrich")
    g.add_edge("enrich", "report")
    g.add_edge("report", END)
    graph = g.compile(checkpointer=h.saver)
    config = cfg(h, "degraded")
    out = await h.invoke(graph, {"results": []}, config)
    log = out["resilience"]
    assert log["status"] == "success" and log["degraded_steps"] == ["enrich"]
    [hint] = log["recovery_suggestions"]
    assert "retry_failed(graph, config, step='enrich'" in hint
    down["on"] = False
    out = await retry(h, graph, config, step="enrich")
    assert out["results"][-2:] == ["enriched", "report"]
    assert out["resilience"]["degraded_steps"] == []


async def test_model_tokens_inside_a_subgraph_are_counted_once(checkpointer: Any) -> None:
    import itertools

    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    h = checkpointer
    usage = {"input_tokens": 60, "output_tokens": 40, "total_tokens": 100}
    model = GenericFakeChatModel(
        messages=itertools.repeat(AIMessage(content="ok", usage_metadata=usage))  # type: ignore[arg-type]
    )

    if h.is_async:

        async def call(state: dict[str, Any]) -> dict[str, Any]:
            return {"results": [(await model.ainvoke("hi")).content]}
    else:

        def call(state: dict[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
            return {"results": [model.invoke("hi").content]}

    sub = one_node(ResilientStateGraph(State), "call", call)
    g = one_node(ResilientStateGraph(State), "inner", sub.compile())
    graph = g.compile(checkpointer=h.saver, budget=Budget(max_tokens=150))
    out = await h.invoke(graph, {"results": []}, cfg(h, "tokens"))
    assert out["resilience"]["usage"]["tokens"] == 100
    assert out["results"] == ["ok"]


async def test_retry_failed_re_enters_a_subgraph_at_its_failed_step(checkpointer: Any) -> None:
    h = checkpointer
    calls: list[str] = []
    broken = {"on": True}
    graph = research_pipeline(h, calls, broken, NodePolicy(retry=None))
    config = cfg(h, "reenter")
    out = await h.invoke(graph, {"results": []}, config)
    assert out["resilience"]["failed_step"]["path"] == "research/fetch"
    broken["on"] = False
    out = await retry(h, graph, config)
    assert calls == ["plan", "fetch", "fetch", "report"]  # plan is not run again
    assert out["results"] == ["plan", "fetch", "report"]
    log = out["resilience"]
    assert log["status"] == "success" and not log.get("failed_steps")
    assert log["failed_step"] is None
    stored = [(s["path"], s["status"]) for s in await history(h, config)]
    assert stored.count(("research/fetch", "completed")) == 1


async def test_every_failed_try_is_logged_with_what_comes_of_it(
    checkpointer: Any, caplog: Any
) -> None:
    import logging

    h = checkpointer
    tries = {"n": 0}

    def flaky(state: dict[str, Any]) -> dict[str, Any]:
        tries["n"] += 1
        if tries["n"] < 3:
            raise ConnectionError("blip")
        return {"results": ["ok"]}

    def broken(state: dict[str, Any]) -> dict[str, Any]:
        raise PermanentError("schema mismatch")

    g = ResilientStateGraph(State)
    g.add_node(
        "flaky",
        as_node(h, flaky),
        policy=NodePolicy(retry=Backoff(max_attempts=3, initial_interval=0.001)),
    )
    g.add_node("broken", as_node(h, broken), policy=NodePolicy(retry=None))
    g.add_edge(START, "flaky")
    g.add_edge("flaky", "broken")
    g.add_edge("broken", END)
    graph = g.compile(checkpointer=h.saver)
    config = cfg(h, "logs")
    with caplog.at_level(logging.INFO, logger="langgraph_resilience"):
        out = await h.invoke(graph, {"results": []}, config)
    assert out["resilience"]["status"] == "partial_complete"
    records = [r for r in caplog.records if hasattr(r, "path")]
    assert [(r.path, r.attempt, r.kind, r.action) for r in records] == [
        ("flaky", 1, "transient", "retry"),
        ("flaky", 2, "transient", "retry"),
        ("broken", 1, "permanent", "partial"),
    ]
    assert all(r.thread_id == config["configurable"]["thread_id"] and r.run == 1 for r in records)
    assert records[-1].levelname == "ERROR" and "partial result" in records[-1].getMessage()


async def test_an_unstorable_node_output_names_the_state_key(checkpointer: Any) -> None:
    import threading

    h = checkpointer

    class LockState(ResilientState, total=False):
        client: Any

    g = one_node(
        ResilientStateGraph(LockState),
        "connect",
        as_node(h, lambda s: {"client": threading.Lock()}),
    )
    graph = g.compile(checkpointer=h.saver)
    with pytest.raises(TypeError, match=r"'client'.*cannot store.*lock"):
        await h.invoke(graph, {}, cfg(h, "unstorable"))


@pytest.mark.parametrize("result", ["a client object", "too large"])
async def test_an_effect_whose_result_cannot_be_stored_is_called_once(
    checkpointer: Any, result: str
) -> None:
    import threading

    h = checkpointer
    charges: list[str] = []

    def made() -> Any:  # a client object, not data; or 2 KB against a 1 KB limit
        return threading.Lock() if result == "a client object" else "x" * 2048

    if h.is_async:

        @side_effect(name="charge", max_outcome_bytes=1024)
        async def acharge(*, idempotency_key: str) -> Any:
            charges.append(idempotency_key)
            return made()

        async def pay(state: dict[str, Any]) -> dict[str, Any]:
            await acharge()
            return {"results": ["paid"]}
    else:

        @side_effect(name="charge", max_outcome_bytes=1024)
        def charge(*, idempotency_key: str) -> Any:
            charges.append(idempotency_key)
            return made()

        def pay(state: dict[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
            charge()
            return {"results": ["paid"]}

    g = one_node(ResilientStateGraph(State), "pay", pay, policy=NodePolicy(retry=FAST))
    graph = g.compile(checkpointer=h.saver)
    config = cfg(h, "unstorable-effect")
    out = await h.invoke(graph, {"results": []}, config)
    failed = out["resilience"]["failed_step"]
    assert failed["error_type"] == "TypeError" and "'charge'" in failed["message"]
    assert "not called again" in failed["message"]
    fix = "cannot store" if result == "a client object" else "more than its max_outcome_bytes"
    assert fix in failed["message"]
    out = await retry(h, graph, config)
    assert out["resilience"]["status"] == "partial_complete"
    assert len(charges) == 1  # once, across the tries and retry_failed
