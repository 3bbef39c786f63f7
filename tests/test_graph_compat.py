"""`ResilientStateGraph` against LangGraph features a plain `StateGraph` has:
compiling without a checkpointer, node caching, and xray drawings."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from graphs import DoneState, one_node
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.types import CachePolicy

from langgraph_resilience import (
    NodePolicy,
    PermanentError,
    ResilientStateGraph,
)
from langgraph_resilience._langgraph import DURABILITY_KEY


class State(DoneState, total=False):
    x: int


def thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": uuid.uuid4().hex}}


def durability_probe(seen: list[Any], name: str = "a") -> Callable[[Any], dict[str, Any]]:
    """A node that records the durability its run was given."""

    def probe(state: Any) -> dict[str, Any]:
        seen.append(get_config()["configurable"].get(DURABILITY_KEY))
        return {"done": [name]}

    probe.__name__ = name
    return probe


def chain(seen: list[Any], graph_cls: Any = ResilientStateGraph) -> Any:
    g = graph_cls(State)
    kwargs = {"policy": NodePolicy()} if graph_cls is ResilientStateGraph else {}
    g.add_node("a", durability_probe(seen, "a"), **kwargs)
    g.add_node("b", durability_probe(seen, "b"))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g


# -- compile() without a checkpointer --------------------------------------------------


def test_compile_without_a_checkpointer_invokes() -> None:
    seen: list[Any] = []
    out = chain(seen).compile().invoke({"done": []})
    assert out["done"] == ["a", "b"]
    assert seen == [None, None]  # no saver: no durability forced on the run


async def test_compile_without_a_checkpointer_ainvokes() -> None:
    seen: list[Any] = []
    out = await chain(seen).compile().ainvoke({"done": []})
    assert out["done"] == ["a", "b"]


def test_compile_with_checkpointer_false_invokes() -> None:
    seen: list[Any] = []
    assert chain(seen).compile(checkpointer=False).invoke({"done": []})["done"] == ["a", "b"]


def test_with_a_checkpointer_runs_default_to_sync_durability() -> None:
    seen: list[Any] = []
    saver = InMemorySaver()
    config = thread()
    out = chain(seen).compile(checkpointer=saver).invoke({"done": []}, config)
    assert out["done"] == ["a", "b"]
    assert seen == ["sync", "sync"]
    # every step was checkpointed: input, a, b
    assert len(list(saver.list(config))) >= 3


@pytest.mark.parametrize("durability", ["exit", "async"])
def test_an_explicit_durability_wins(durability: Any) -> None:
    seen: list[Any] = []
    saver = InMemorySaver()
    config = thread()
    graph = chain(seen).compile(checkpointer=saver)
    out = graph.invoke({"done": []}, config, durability=durability)
    assert out["done"] == ["a", "b"]
    assert seen == [durability, durability]
    if durability == "exit":  # only the run's end was stored
        assert len(list(saver.list(config))) == 1


def test_the_budget_default_is_kept_without_a_checkpointer() -> None:
    seen: list[Any] = []

    def budget_probe(state: Any) -> dict[str, Any]:
        seen.append(get_config()["configurable"].get("budget"))
        return {}

    g = ResilientStateGraph(State)
    g.add_node("a", budget_probe)
    g.add_edge(START, "a")
    graph = g.compile(budget={"max_steps": 5})
    graph.invoke({"done": []})
    assert seen and seen[0] is not None


def _subgraph(seen: list[Any], checkpointer: Any = None) -> Any:
    sub = one_node(
        ResilientStateGraph(State), "inner", durability_probe(seen, "inner"), policy=NodePolicy()
    )
    return sub.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("sub_checkpointer", [None, True])
@pytest.mark.parametrize("parent_cls", [StateGraph, ResilientStateGraph])
def test_a_resilient_subgraph_under_a_parent_with_a_checkpointer(
    parent_cls: Any, sub_checkpointer: Any
) -> None:
    seen: list[Any] = []
    parent = parent_cls(State)
    parent.add_node("sub", _subgraph(seen, sub_checkpointer))
    parent.add_edge(START, "sub")
    graph = parent.compile(checkpointer=InMemorySaver())
    out = graph.invoke({"done": []}, thread())
    assert out["done"] == ["inner"]
    assert seen == ["sync"]  # the parent's saver is present: sync by default


@pytest.mark.parametrize("parent_cls", [StateGraph, ResilientStateGraph])
def test_subgraphs_without_any_checkpointer(parent_cls: Any) -> None:
    seen: list[Any] = []
    plain = StateGraph(State)
    plain.add_node("plain", durability_probe(seen, "plain"))
    plain.add_edge(START, "plain")
    parent = parent_cls(State)
    parent.add_node("sub", _subgraph(seen))
    parent.add_node("plain_sub", plain.compile())
    parent.add_edge(START, "sub")
    parent.add_edge("sub", "plain_sub")
    parent.compile().invoke({"done": []})
    assert seen == [None, None]  # both subgraphs ran, with no durability forced


# -- node caching ----------------------------------------------------------------------


def cached_chain(graph_cls: Any, calls: Counter[str], **node_kwargs: Any) -> Any:
    g = graph_cls(State)

    def step(name: str) -> Callable[[Any], dict[str, Any]]:
        def run(state: Any) -> dict[str, Any]:
            calls[name] += 1
            return {"done": [name], "x": state.get("x", 0) + 1}

        return run

    for name in ("a", "b", "c"):
        g.add_node(name, step(name), cache_policy=CachePolicy(), **node_kwargs)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g.compile(checkpointer=InMemorySaver(), cache=InMemoryCache())


@pytest.mark.parametrize(
    ("graph_cls", "node_kwargs"),
    [
        (StateGraph, {}),
        (ResilientStateGraph, {}),
        (ResilientStateGraph, {"policy": NodePolicy()}),
    ],
)
def test_a_second_identical_run_is_served_from_the_cache(
    graph_cls: Any, node_kwargs: dict[str, Any]
) -> None:
    calls: Counter[str] = Counter()
    graph = cached_chain(graph_cls, calls, **node_kwargs)
    first = graph.invoke({"done": [], "x": 0}, thread())
    assert calls == {"a": 1, "b": 1, "c": 1}
    second = graph.invoke({"done": [], "x": 0}, thread())
    assert calls == {"a": 1, "b": 1, "c": 1}  # every node was a cache hit
    assert second["done"] == first["done"] == ["a", "b", "c"]
    assert second["x"] == first["x"] == 3


def _times(value: Any, key: str = "") -> Iterator[float]:
    """Every epoch time (``*_at``) in a run log."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _times(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _times(v, key)
    elif key.endswith("_at") and isinstance(value, float):
        yield value


def test_a_cache_hit_writes_no_run_log_of_another_run() -> None:
    calls: Counter[str] = Counter()
    graph = cached_chain(ResilientStateGraph, calls, policy=NodePolicy())
    graph.invoke({"done": [], "x": 0}, thread())
    time.sleep(0.01)
    started = time.time()
    second = graph.invoke({"done": [], "x": 0}, thread())
    assert calls == {"a": 1, "b": 1, "c": 1}
    log = second.get("resilience") or {}
    assert all(t >= started for t in _times(log)), log  # nothing stamped by the first run
    assert not (log.get("usage") or {}).get("steps")  # the hits used nothing


def test_a_degraded_step_is_not_cached() -> None:
    calls: Counter[str] = Counter()

    def flaky(state: Any) -> dict[str, Any]:
        calls["flaky"] += 1
        raise PermanentError("down")

    g = one_node(
        ResilientStateGraph(State),
        "flaky",
        flaky,
        policy=NodePolicy(critical=False),
        cache_policy=CachePolicy(),
    )
    graph = g.compile(checkpointer=InMemorySaver(), cache=InMemoryCache())
    graph.invoke({"done": []}, thread())
    graph.invoke({"done": []}, thread())
    assert calls["flaky"] == 2  # a skipped step is tried again, not served from the cache


def test_the_default_cache_policy_ignores_the_run_log_too() -> None:
    calls: Counter[str] = Counter()
    g = ResilientStateGraph(State)
    g.set_node_defaults(cache_policy=CachePolicy())

    def step(name: str) -> Callable[[Any], dict[str, Any]]:
        def run(state: Any) -> dict[str, Any]:
            calls[name] += 1
            return {"done": [name]}

        return run

    g.add_node("a", step("a"))
    g.add_node("b", step("b"), policy=NodePolicy())
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    graph = g.compile(checkpointer=InMemorySaver(), cache=InMemoryCache())
    graph.invoke({"done": []}, thread())
    graph.invoke({"done": []}, thread())
    assert calls == {"a": 1, "b": 1}


# -- xray drawings -----------------------------------------------------------------------


def xray_parent(graph_cls: Any = ResilientStateGraph) -> Any:
    resilient = graph_cls is ResilientStateGraph
    policy: dict[str, Any] = {"policy": NodePolicy()} if resilient else {}
    sub = graph_cls(State)
    sub.add_node("fetch", lambda s: {}, **policy)  # critical by default
    sub.add_node("parse", lambda s: {})
    sub.add_edge(START, "fetch")
    sub.add_edge("fetch", "parse")
    sub.add_edge("parse", END)
    parent = graph_cls(State)
    parent.add_node("prep", lambda s: {}, **policy)
    fallback = {"policy": NodePolicy(fallback="cache")} if resilient else {}
    parent.add_node("sub", sub.compile(), **fallback)
    parent.add_node("cache", lambda s: {})
    parent.add_node("post", lambda s: {})
    parent.add_edge(START, "prep")
    parent.add_edge("prep", "sub")
    parent.add_edge("sub", "post")
    parent.add_edge("cache", "post")
    parent.add_edge("post", END)
    return parent.compile()


def edges_of(drawing: Any) -> set[tuple[str, str, Any, bool]]:
    return {(e.source, e.target, e.data, e.conditional) for e in drawing.edges}


def test_xray_drawing_of_a_resilient_subgraph() -> None:
    drawing = xray_parent().get_graph(xray=True)
    nodes = set(drawing.nodes)
    assert nodes == {
        "__start__",
        "prep",
        "cache",
        "post",
        "partial_result",
        "__end__",
        "sub:fetch",
        "sub:parse",
        "sub:partial_result",
    }
    edges = edges_of(drawing)
    # the subgraph's own failure routes, prefixed
    assert ("sub:fetch", "sub:partial_result", "gives up", True) in edges
    # the parent's routes: from a node, and from the expanded subgraph's last nodes
    assert ("prep", "partial_result", "gives up", True) in edges
    assert ("sub:parse", "cache", "on failure", True) in edges
    assert ("sub:parse", "partial_result", "gives up", True) in edges
    # LangGraph's own edges, through the subgraph
    assert ("prep", "sub:fetch", None, False) in edges
    assert ("sub:parse", "post", None, False) in edges
    # a node only a failure route reaches keeps its edges
    assert ("cache", "post", None, False) in edges
    assert ("partial_result", "__end__", None, False) in edges
    # nothing dangles: one first and one last node, styled as LangGraph styles them
    sources = {e.source for e in drawing.edges}
    targets = {e.target for e in drawing.edges}
    assert nodes - targets == {"__start__"}
    assert nodes - sources == {"__end__"}
    first, last = drawing.first_node(), drawing.last_node()
    assert first is not None and first.id == "__start__"
    assert last is not None and last.id == "__end__"
    mermaid = drawing.draw_mermaid()
    assert ":::first" in mermaid and ":::last" in mermaid
    assert "__error_handler__" not in mermaid


def test_xray_drawing_keeps_what_a_plain_graph_draws() -> None:
    plain = xray_parent(StateGraph).get_graph(xray=True)
    ours = xray_parent().get_graph(xray=True)
    assert set(plain.nodes) <= set(ours.nodes)
    assert {(e.source, e.target) for e in plain.edges} <= {(e.source, e.target) for e in ours.edges}


@pytest.mark.parametrize("xray", [False, True, 1, 2])
def test_no_error_handler_is_drawn_at_any_level(xray: Any) -> None:
    drawing = xray_parent().get_graph(xray=xray)
    assert not any("__error_handler__" in n for n in drawing.nodes)
    assert not any(n.endswith((":__end__", ":__start__")) for n in drawing.nodes)
    assert drawing.first_node() is not None and drawing.last_node() is not None


def test_the_plain_drawing_is_unchanged() -> None:
    drawing = xray_parent().get_graph()
    assert set(drawing.nodes) == {
        "__start__",
        "prep",
        "sub",
        "cache",
        "post",
        "partial_result",
        "__end__",
    }
    edges = edges_of(drawing)
    assert ("sub", "cache", "on failure", True) in edges
    assert ("sub", "partial_result", "gives up", True) in edges
    assert ("prep", "partial_result", "gives up", True) in edges
    assert ("cache", "post", None, False) in edges


async def test_aget_graph_draws_the_same() -> None:
    graph = xray_parent()
    drawn = await graph.aget_graph(xray=True)
    assert set(drawn.nodes) == set(graph.get_graph(xray=True).nodes)
    assert edges_of(drawn) == edges_of(graph.get_graph(xray=True))
