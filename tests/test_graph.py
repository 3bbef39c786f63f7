"""The failure model's decision matrix (docs/failure-model.md), on SQLite and Postgres,
sync and async.

Each test builds its graph with sync nodes for the sync savers (``invoke``) and
async nodes for the async ones (``ainvoke``); side counters, not our own run log,
say which nodes ran.
"""

from __future__ import annotations

import asyncio
import operator
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from graphs import FAST, chain, one_node
from helpers import sql
from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage
from langgraph.graph import END, START
from langgraph.types import Command, RetryPolicy, Send

from langgraph_resilience import (
    BudgetExhausted,
    ConfigError,
    ContextOverflow,
    DegradableError,
    NodePolicy,
    PermanentError,
    ResilientState,
    ResilientStateGraph,
    TransientError,
    ValidationFailed,
    aretry_failed,
    current_attempt,
    retry_failed,
)
from langgraph_resilience._langgraph import DURABILITY_KEY
from langgraph_resilience.errors import (
    RunStateError,
)


class State(ResilientState, total=False):
    done: Annotated[list[str], operator.add]
    messages: list[AnyMessage]
    draft: str
    route: str
    item: int


Body = Callable[[dict[str, Any]], Any]


def node(h: Any, body: Body, name: str) -> Any:
    """The body as a sync node (sync savers) or an async node (async savers)."""
    if h.is_async:

        async def async_node(state: dict[str, Any]) -> Any:
            await asyncio.sleep(0)
            return body(state)

        async_node.__name__ = name
        return async_node

    def sync_node(state: dict[str, Any]) -> Any:
        return body(state)

    sync_node.__name__ = name
    return sync_node


class Script:
    """Counts calls per node and raises what a test scripts for each call."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.raises: dict[str, list[BaseException | None]] = {}

    def body(
        self, name: str, output: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    ) -> Body:
        def run(state: dict[str, Any]) -> Any:
            self.calls[name] += 1
            plan = self.raises.get(name)
            if plan:
                exc = plan.pop(0) if len(plan) > 1 else plan[0]
                if exc is not None:
                    raise exc
            return output(state) if output else {"done": [name]}

        return run


def retried_node(h: Any, name: str, body: Body) -> ResilientStateGraph:
    """A graph of one node, ``body`` as ``name``, retried by `FAST`."""
    policy = NodePolicy(retry=FAST)
    return one_node(ResilientStateGraph(State), name, node(h, body, name), policy=policy)


def with_fallback(
    h: Any, script: Script, name: str, fallback: str, error: BaseException
) -> ResilientStateGraph:
    """Nodes ``name`` (raising ``error`` each call, ``fallback`` its fallback) and
    ``fallback``, both of ``script``; the edges are the test's."""
    script.raises[name] = [error]
    g = ResilientStateGraph(State)
    policy = NodePolicy(retry=FAST, fallback=fallback)
    g.add_node(name, node(h, script.body(name), name), policy=policy)
    g.add_node(fallback, node(h, script.body(fallback), fallback))
    return g


def linear(
    h: Any,
    script: Script,
    names: list[str],
    policies: dict[str, NodePolicy | None] | None = None,
    default: NodePolicy | None = None,
) -> ResilientStateGraph:
    g = ResilientStateGraph(State)
    g.set_node_defaults(policy=default or NodePolicy(retry=FAST))
    chosen = policies or {}
    return chain(
        g,
        names,
        lambda name: node(h, script.body(name), name),
        lambda name: {"policy": chosen[name]} if name in chosen else {},
    )


def cfg(h: Any, label: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}-{h.id}-{uuid.uuid4().hex[:6]}"}}


async def steps_of(h: Any, config: Any) -> dict[str, Any]:
    """The stored step records of the thread's latest run, by path."""
    history = await h.call("step_history", config["configurable"]["thread_id"])
    last = max((r["run"] for r in history), default=0)
    return {r["path"]: r for r in history if r["run"] == last}


async def retry(h: Any, graph: Any, config: Any, **kwargs: Any) -> Any:
    if h.is_async:
        return await aretry_failed(graph, config, **kwargs)
    return await asyncio.to_thread(retry_failed, graph, config, **kwargs)


# -- TRANSIENT --------------------------------------------------------------------


async def test_transient_is_retried_in_place_and_attempts_are_stored(checkpointer: Any) -> None:
    script = Script()
    script.raises["b"] = [ConnectionError("blip"), TransientError("503", retry_after=0.001), None]
    graph = linear(checkpointer, script, ["a", "b", "c"]).compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "transient")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert out["done"] == ["a", "b", "c"]
    assert script.calls == {"a": 1, "b": 3, "c": 1}
    log = out["resilience"]
    assert log["status"] == "success"
    b = (await steps_of(checkpointer, config))["b"]
    assert b["attempts"] == 3 and b["kinds"] == ["transient", "transient"]
    assert "completed_steps" not in log  # the store lists them (saver.step_history)
    assert list(await steps_of(checkpointer, config)) == ["a", "b", "c"]
    rows = sql(
        checkpointer.backend,
        checkpointer.target,
        "SELECT attempt, kind, error_type FROM resilience_node_attempts "
        "WHERE thread_id = ? ORDER BY attempt",
        (config["configurable"]["thread_id"],),
    )
    assert rows == [(1, "transient", "ConnectionError"), (2, "transient", "TransientError")]


async def test_transient_exhausted_takes_the_fallback_edge(checkpointer: Any) -> None:
    script = Script()
    script.raises["search"] = [ConnectionError("down")]
    g = ResilientStateGraph(State)
    g.add_node(
        "search",
        node(checkpointer, script.body("search"), "search"),
        policy=NodePolicy(retry=FAST, fallback="cache"),
    )
    for name in ("cache", "write"):
        g.add_node(name, node(checkpointer, script.body(name), name))
    g.add_edge(START, "search")
    g.add_edge("search", "write")
    g.add_edge("cache", "write")
    g.add_edge("write", END)
    graph = g.compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "fallback")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert script.calls == {"search": 3, "cache": 1, "write": 1}
    assert out["done"] == ["cache", "write"]  # search's own edge never fired
    log = out["resilience"]
    assert (await steps_of(checkpointer, config))["search"]["status"] == "fallback"
    assert log["degraded_steps"] == ["search"]
    assert log["status"] == "success"


# -- VALIDATION -------------------------------------------------------------------


async def test_validation_failure_retries_with_adapted_parameters(checkpointer: Any) -> None:
    seen: list[tuple[int, dict[str, Any]]] = []

    def draft(state: dict[str, Any]) -> dict[str, Any]:
        attempt = current_attempt()
        seen.append((attempt.number, dict(attempt.overrides)))
        return {"draft": f"t={attempt.overrides.get('temperature', 1.0)}"}

    checked: list[str] = []

    def check(output: dict[str, Any]) -> None:
        checked.append(output["draft"])
        if output["draft"] != "t=0.2":
            raise ValidationFailed("too creative")

    g = ResilientStateGraph(State)
    g.add_node(
        "draft",
        node(checkpointer, draft, "draft"),
        policy=NodePolicy(validate=check, adapt=lambda a: {"temperature": 0.2}),
    )
    g.add_edge(START, "draft")
    g.add_edge("draft", END)
    graph = g.compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "validation")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert out["draft"] == "t=0.2"
    assert seen == [(1, {}), (2, {"temperature": 0.2})]
    assert checked == ["t=1.0", "t=0.2"]  # each output judged once
    draft = (await steps_of(checkpointer, config))["draft"]
    assert draft["kinds"] == ["validation"]


async def test_validation_exhausted_ends_with_partial_result(checkpointer: Any) -> None:
    g = ResilientStateGraph(State)
    g.add_node(
        "draft",
        node(checkpointer, lambda s: {"draft": "bad"}, "draft"),
        policy=NodePolicy(validate=lambda out: False, max_validation_attempts=2),
    )
    g.add_edge(START, "draft")
    g.add_edge("draft", END)
    graph = g.compile(checkpointer=checkpointer.saver)
    out = await checkpointer.invoke(graph, {"done": []}, cfg(checkpointer, "validation-out"))
    failed = out["resilience"]["failed_step"]
    assert (failed["node"], failed["kind"], failed["attempts"]) == ("draft", "validation", 2)
    assert out["resilience"]["status"] == "partial_complete"


# -- CONTEXT_OVERFLOW ---------------------------------------------------------------


async def test_context_overflow_compresses_then_retries(checkpointer: Any) -> None:
    lengths: list[int] = []

    def chat(state: dict[str, Any]) -> dict[str, Any]:
        messages = state["messages"]
        lengths.append(len(messages))
        if len(messages) > 4:
            raise ContextOverflow("maximum context length exceeded")
        assert isinstance(messages[0], SystemMessage)
        return {"draft": messages[-1].content}

    g = retried_node(checkpointer, "chat", chat)
    graph = g.compile(checkpointer=checkpointer.saver)
    history = [SystemMessage("be brief")] + [HumanMessage(f"m{i}") for i in range(7)]
    out = await checkpointer.invoke(graph, {"messages": history}, cfg(checkpointer, "overflow"))
    assert lengths == [8, 4]
    assert out["draft"] == "m6"  # the latest message is kept
    summary = out["resilience"]["context_summary"]
    assert summary[0]["node"] == "chat" and summary[0]["kept"] == {"messages": 4}


# -- DEGRADABLE ---------------------------------------------------------------------


async def test_degradable_goes_straight_to_the_fallback(checkpointer: Any) -> None:
    script = Script()
    g = with_fallback(checkpointer, script, "live", "snapshot", DegradableError("feed stale"))
    g.add_edge(START, "live")
    g.add_edge("live", END)
    g.add_edge("snapshot", END)
    graph = g.compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "degradable")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert script.calls == {"live": 1, "snapshot": 1}  # no retry
    stored = await checkpointer.call("step_history", config["configurable"]["thread_id"])
    assert [s["status"] for s in stored if s["path"] == "live"] == ["fallback"]
    assert out["resilience"]["degraded_steps"] == ["live"]


# -- PERMANENT ------------------------------------------------------------------------


async def test_permanent_on_a_critical_node_gives_a_full_partial_result(checkpointer: Any) -> None:
    script = Script()
    script.raises["c"] = [PermanentError("schema mismatch in upstream data")]
    graph = linear(checkpointer, script, ["a", "b", "c", "d"]).compile(
        checkpointer=checkpointer.saver
    )
    config = cfg(checkpointer, "partial")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert script.calls == {"a": 1, "b": 1, "c": 1}
    log = out["resilience"]
    assert log["status"] == "partial_complete"
    assert [s["path"] for s in log["completed_steps"]] == ["a", "b"]
    assert all(s["ended_at"] and s["summary"] for s in log["completed_steps"])
    failed = dict(log["failed_step"])
    assert failed.pop("task").startswith("c:")  # the task whose effect keys a retry keeps
    assert failed == {
        "path": "c",
        "node": "c",
        "kind": "permanent",
        "reason": "raised PermanentError",
        "error_type": "PermanentError",
        "message": "schema mismatch in upstream data",
        "attempts": 1,
    }
    assert log["partial_output"] == {"done": ["a", "b"]}
    assert log["run"] == 1 and not log.get("degraded_steps")
    assert any("retry_failed" in s and "'c'" in s for s in log["recovery_suggestions"])
    assert (await steps_of(checkpointer, config))["c"]["status"] == "failed"

    # After fixing the cause, only the failed step and what follows run.
    script.raises["c"] = [None]
    out = await retry(checkpointer, graph, config)
    assert out["done"] == ["a", "b", "c", "d"]
    assert out["resilience"]["status"] == "success"
    assert out["resilience"]["failed_step"] is None
    assert script.calls == {"a": 1, "b": 1, "c": 2, "d": 1}


async def test_permanent_on_a_non_critical_node_continues_along_its_edges(
    checkpointer: Any,
) -> None:
    script = Script()
    script.raises["enrich"] = [KeyError("missing field")]
    g = ResilientStateGraph(State)
    g.add_node(
        "enrich",
        node(checkpointer, script.body("enrich"), "enrich"),
        policy=NodePolicy(retry=FAST, critical=False),
    )
    for name in ("short", "long"):
        g.add_node(name, node(checkpointer, script.body(name), name))
    g.add_edge(START, "enrich")
    g.add_conditional_edges("enrich", lambda s: s.get("route", "short"), ["short", "long"])
    g.add_edge("short", END)
    g.add_edge("long", END)
    graph = g.compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "degrade")
    out = await checkpointer.invoke(graph, {"done": [], "route": "long"}, config)
    assert script.calls == {"enrich": 1, "long": 1}
    assert out["done"] == ["long"]
    log = out["resilience"]
    assert (await steps_of(checkpointer, config))["enrich"]["status"] == "degraded"
    assert log["degraded_steps"] == ["enrich"]
    assert log["status"] == "success"


# -- BUDGET_EXHAUSTED ---------------------------------------------------------------------


async def test_budget_exhausted_pauses_and_resumes(checkpointer: Any) -> None:
    script = Script()
    script.raises["think"] = [BudgetExhausted("tokens used 1200 of 1000"), None]
    graph = linear(checkpointer, script, ["plan", "think", "answer"]).compile(
        checkpointer=checkpointer.saver
    )
    config = cfg(checkpointer, "budget")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert out["__interrupt__"][0].value["reason"] == "budget_exhausted"
    assert "tokens used 1200" in out["__interrupt__"][0].value["error"]
    out = await checkpointer.invoke(graph, Command(resume={"max_tokens": 5000}), config)
    assert out["done"] == ["plan", "think", "answer"]
    assert script.calls == {"plan": 1, "think": 2, "answer": 1}


async def test_budget_exhausted_again_on_resume_pauses_again(checkpointer: Any) -> None:
    script = Script()
    script.raises["think"] = [
        BudgetExhausted("used 1"),
        BudgetExhausted("used 2"),
        BudgetExhausted("used 3"),
        None,
    ]
    graph = linear(checkpointer, script, ["think", "answer"]).compile(
        checkpointer=checkpointer.saver
    )
    config = cfg(checkpointer, "budget-twice")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert "__interrupt__" in out
    # Resumed, the node takes the top-up and tries again; that try runs out
    # again and pauses anew, saying why...
    out = await checkpointer.invoke(graph, Command(resume={"max_tokens": 10}), config)
    assert "used 2" in out["__interrupt__"][0].value["error"]
    # ...and the next top-up lets it finish.
    out = await checkpointer.invoke(graph, Command(resume={"max_tokens": 9000}), config)
    assert out["done"] == ["think", "answer"]
    assert script.calls == {"think": 4, "answer": 1}


# -- the headline scenario and recovery ------------------------------------------------------

SEVEN = ["fetch", "clean", "embed", "search", "rank", "draft", "publish"]


async def test_seven_step_pipeline_failing_at_step_four(checkpointer: Any) -> None:
    script = Script()
    script.raises["search"] = [ConnectionError("index offline")]
    graph = linear(checkpointer, script, SEVEN).compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "seven")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert out["resilience"]["status"] == "partial_complete"
    assert out["resilience"]["failed_step"]["node"] == "search"
    script.raises["search"] = [None]
    out = await retry(checkpointer, graph, config)
    assert out["done"] == SEVEN
    assert [script.calls[n] for n in SEVEN[:3]] == [1, 1, 1]  # never executed again
    assert script.calls["search"] == 3 + 1
    assert [script.calls[n] for n in SEVEN[4:]] == [1, 1, 1]


async def test_fail_at_each_step_redoes_only_that_step_and_what_follows(checkpointer: Any) -> None:
    for failing in SEVEN:
        script = Script()
        script.raises[failing] = [PermanentError("injected")]
        graph = linear(checkpointer, script, SEVEN).compile(checkpointer=checkpointer.saver)
        config = cfg(checkpointer, f"each-{failing}")
        await checkpointer.invoke(graph, {"done": []}, config)
        before = Counter(script.calls)
        script.raises[failing] = [None]
        out = await retry(checkpointer, graph, config)
        assert out["done"] == SEVEN, failing
        rerun = {n for n in SEVEN if script.calls[n] > before[n]}
        position = SEVEN.index(failing)
        assert rerun == set(SEVEN[position:]), (failing, rerun)
        assert all(script.calls[n] == 1 for n in SEVEN if n != failing)


async def test_double_recovery_starts_from_the_later_checkpoint(checkpointer: Any) -> None:
    script = Script()
    script.raises["embed"] = [PermanentError("first")]
    script.raises["draft"] = [PermanentError("second")]
    graph = linear(checkpointer, script, SEVEN).compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "double")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert out["resilience"]["failed_step"]["node"] == "embed"
    script.raises["embed"] = [None]
    out = await retry(checkpointer, graph, config)
    assert out["resilience"]["failed_step"]["node"] == "draft"
    script.raises["draft"] = [None]
    out = await retry(checkpointer, graph, config)
    assert out["done"] == SEVEN and out["resilience"]["status"] == "success"
    assert script.calls == {
        "fetch": 1,
        "clean": 1,
        "embed": 2,
        "search": 1,
        "rank": 1,
        "draft": 2,
        "publish": 1,
    }


async def test_retry_failed_applies_the_correction(checkpointer: Any) -> None:
    def divide(state: dict[str, Any]) -> dict[str, Any]:
        if state.get("item", 0) == 0:
            raise ZeroDivisionError("item is 0")
        return {"done": [f"1/{state['item']}"]}

    g = retried_node(checkpointer, "divide", divide)
    graph = g.compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "correct")
    out = await checkpointer.invoke(graph, {"done": [], "item": 0}, config)
    assert out["resilience"]["failed_step"]["error_type"] == "ZeroDivisionError"
    out = await retry(checkpointer, graph, config, update={"item": 4})
    assert out["done"] == ["1/4"]
    with pytest.raises(RunStateError, match="no failed step to retry"):
        await retry(checkpointer, graph, config)


# -- shapes of graphs ----------------------------------------------------------------------


async def test_parallel_branch_failure_keeps_the_siblings(checkpointer: Any) -> None:
    script = Script()
    script.raises["flaky"] = [PermanentError("no")]

    def slow(state: dict[str, Any]) -> dict[str, Any]:
        script.calls["slow"] += 1
        return {"done": ["slow"]}

    g = ResilientStateGraph(State)
    g.add_node(
        "flaky",
        node(checkpointer, script.body("flaky"), "flaky"),
        policy=NodePolicy(retry=FAST, critical=False),
    )
    if checkpointer.is_async:

        async def slow_node(state: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(0.2)  # still running when flaky fails
            return slow(state)

        g.add_node("slow", slow_node)
    else:
        g.add_node("slow", slow)
    g.add_node("join", node(checkpointer, script.body("join"), "join"))
    g.add_edge(START, "flaky")
    g.add_edge(START, "slow")
    g.add_edge(["flaky", "slow"], "join")
    g.add_edge("join", END)
    graph = g.compile(checkpointer=checkpointer.saver)
    out = await checkpointer.invoke(graph, {"done": []}, cfg(checkpointer, "parallel"))
    assert script.calls == {"flaky": 1, "slow": 1, "join": 1}
    assert sorted(out["done"]) == ["join", "slow"]
    assert out["resilience"]["degraded_steps"] == ["flaky"]


async def test_send_fan_out_handles_one_failing_payload(checkpointer: Any) -> None:
    calls: Counter[int] = Counter()

    def work(state: dict[str, Any]) -> dict[str, Any]:
        calls[state["item"]] += 1
        if state["item"] == 2 and calls[2] == 1:
            raise ConnectionError("item 2 blip")
        return {"done": [f"item{state['item']}"]}

    g = ResilientStateGraph(State)
    g.add_node("work", node(checkpointer, work, "work"), policy=NodePolicy(retry=FAST))
    g.add_conditional_edges(START, lambda s: [Send("work", {"item": i}) for i in (1, 2, 3)])
    g.add_edge("work", END)
    graph = g.compile(checkpointer=checkpointer.saver)
    out = await checkpointer.invoke(graph, {"done": []}, cfg(checkpointer, "send"))
    assert sorted(out["done"]) == ["item1", "item2", "item3"]
    assert calls == {1: 1, 2: 2, 3: 1}


async def test_subgraph_used_as_a_node_is_retried(checkpointer: Any) -> None:
    script = Script()
    script.raises["inner"] = [ConnectionError("blip"), None]
    sub = one_node(
        ResilientStateGraph(State),
        "inner",
        node(checkpointer, script.body("inner"), "inner"),
        policy=None,
    )
    g = one_node(ResilientStateGraph(State), "outer", sub.compile(), policy=NodePolicy(retry=FAST))
    graph = g.compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "subgraph")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert out["done"] == ["inner"]
    assert script.calls == {"inner": 2}
    assert (await steps_of(checkpointer, config))["outer"]["attempts"] == 2


async def test_stream_yields_updates_of_retried_nodes(checkpointer: Any) -> None:
    script = Script()
    script.raises["b"] = [ConnectionError("blip"), None]
    graph = linear(checkpointer, script, ["a", "b"]).compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "stream")
    if checkpointer.is_async:
        chunks = [c async for c in graph.astream({"done": []}, config, stream_mode="updates")]
    else:
        chunks = await asyncio.to_thread(
            lambda: list(graph.stream({"done": []}, config, stream_mode="updates"))
        )
    assert [next(iter(c)) for c in chunks] == ["a", "b"]
    assert chunks[1]["b"]["resilience"]["step"]["attempts"] == 2


async def test_policy_none_and_a_retry_policy_keep_langgraph_behaviour(checkpointer: Any) -> None:
    script = Script()
    script.raises["plain"] = [ValueError("bad input")]
    script.raises["native"] = [ConnectionError("blip"), None]
    g = ResilientStateGraph(State)
    g.add_node(
        "native",
        node(checkpointer, script.body("native"), "native"),
        retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.001, jitter=False),
    )
    g.add_node("plain", node(checkpointer, script.body("plain"), "plain"), policy=None)
    g.add_edge(START, "native")
    g.add_edge("native", "plain")
    g.add_edge("plain", END)
    graph = g.compile(checkpointer=checkpointer.saver)
    with pytest.raises(ValueError, match="bad input"):
        await checkpointer.invoke(graph, {"done": []}, cfg(checkpointer, "plain"))
    assert script.calls == {"native": 2, "plain": 1}


# -- bad input ------------------------------------------------------------------------------


def test_schema_must_extend_resilient_state() -> None:
    from typing import TypedDict

    class Plain(TypedDict):
        done: list[str]

    g = ResilientStateGraph(Plain)
    g.add_node("a", lambda s: {})
    g.add_edge(START, "a")
    with pytest.raises(ConfigError, match=r"class Plain\(ResilientState\)"):
        g.compile()


def test_fallback_must_name_a_node() -> None:
    g = ResilientStateGraph(State)
    g.add_node("a", lambda s: {}, policy=NodePolicy(fallback="a_cache"))
    g.add_node("b", lambda s: {})
    g.add_edge(START, "a")
    with pytest.raises(ConfigError, match="'a_cache', which is not a node of this graph"):
        g.compile()


def test_wiring_mistakes_are_clear() -> None:
    g = ResilientStateGraph(State)
    g.add_node("a", lambda s: {})
    with pytest.raises(ConfigError, match="must come before add_node"):
        g.set_node_defaults(policy=NodePolicy())
    with pytest.raises(ConfigError, match="must be a NodePolicy"):
        g.add_node("b", lambda s: {}, policy={"retry": 3})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs an async node"):
        g.add_node("c", lambda s: {}, policy=NodePolicy(timeout=1.0))
    with pytest.raises(ConfigError, match="only inside a node"):
        current_attempt()


def test_compiled_graphs_default_to_sync_durability() -> None:
    g = ResilientStateGraph(State)
    g.add_node("a", lambda s: {})
    g.add_edge(START, "a")
    assert g.compile().config["configurable"][DURABILITY_KEY] == "sync"


def test_failure_routes_are_drawn() -> None:
    g = ResilientStateGraph(State)
    g.add_node("search", lambda s: {}, policy=NodePolicy(fallback="cache"))
    g.add_node("cache", lambda s: {})
    g.add_node("write", lambda s: {}, policy=None)
    g.add_edge(START, "search")
    g.add_edge("search", "write")
    g.add_edge("cache", "write")
    g.add_edge("write", END)
    drawing = g.compile().get_graph()
    edges = {(e.source, e.target, e.conditional) for e in drawing.edges}
    assert ("search", "cache", True) in edges
    assert ("search", "write", False) in edges
    assert ("search", "partial_result", True) in edges  # critical by default
    assert not any(e[0] == "write" and e[1] == "partial_result" for e in edges)  # no policy
    assert not any(n.startswith("__error_handler__") for n in drawing.nodes)


async def test_parallel_branch_routed_to_fallback_does_not_cancel_siblings(
    checkpointer: Any,
) -> None:
    """The failing branch raises to its router while a sibling is still running."""
    script = Script()
    g = with_fallback(checkpointer, script, "flaky", "cache", PermanentError("no"))
    if checkpointer.is_async:

        async def slow(state: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(0.3)
            script.calls["slow"] += 1
            return {"done": ["slow"]}
    else:

        def slow(state: dict[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
            script.calls["slow"] += 1
            return {"done": ["slow"]}

    g.add_node("slow", slow)
    g.add_edge(START, "flaky")
    g.add_edge(START, "slow")
    g.add_edge("cache", END)
    g.add_edge("slow", END)
    graph = g.compile(checkpointer=checkpointer.saver)
    out = await checkpointer.invoke(graph, {"done": []}, cfg(checkpointer, "parallel-fb"))
    assert script.calls == {"flaky": 1, "cache": 1, "slow": 1}
    assert sorted(out["done"]) == ["cache", "slow"]


async def test_async_node_timeout_is_a_transient_failure(checkpointer: Any) -> None:
    if not checkpointer.is_async:
        pytest.skip("a timeout needs an async node (LangGraph cannot stop a sync function)")
    tries: list[int] = []

    async def slow_then_fast(state: dict[str, Any]) -> dict[str, Any]:
        tries.append(current_attempt().number)
        if len(tries) == 1:
            await asyncio.sleep(5)
        return {"done": ["ok"]}

    g = one_node(
        ResilientStateGraph(State),
        "call",
        slow_then_fast,
        policy=NodePolicy(retry=FAST, timeout=0.05),
    )
    graph = g.compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "timeout")
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert out["done"] == ["ok"] and tries == [1, 2]
    assert (await steps_of(checkpointer, config))["call"]["kinds"] == ["transient"]
