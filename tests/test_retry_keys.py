"""A step's records are keyed by the step that ran, through every recovery.

A failed `Send` branch re-run by `retry_failed` is that branch's next try: its
records are keyed ``work[2]`` (not the re-run's own ``work[0]#2``), so the step
map shows it completed and redone, and the recovery names it. A step inside a
subgraph node counts its own tries once: the parent's wrapper error
(`SubgraphStopped`) is not a try of it, nor a second failed row, nor what the
suggestion is about; a subgraph its parent calls again is at the same path.
"""

from __future__ import annotations

import asyncio
import operator
import uuid
from typing import Annotated, Any

from langgraph.types import Send

from langgraph_resilience import (
    Backoff,
    NodePolicy,
    PermanentError,
    ResilientState,
    ResilientStateGraph,
    TransientError,
    aretry_failed,
    arun_report,
    retry_failed,
    run_report,
)


class Fan(ResilientState, total=False):
    items: list[int]
    done: Annotated[list[int], operator.add]


def _fan_out(h: Any, broken: set[int]) -> Any:
    return _fan_out_graph(broken).compile(checkpointer=h.saver)


def _fan_out_graph(broken: set[int]) -> ResilientStateGraph:
    """``work`` sent once per item (``{"i": item}``); the items in ``broken`` fail."""

    def work(item: dict[str, Any]) -> dict[str, Any]:
        if item["i"] in broken:
            raise ValueError(f"item {item['i']} is bad")
        return {"done": [item["i"]]}

    g = ResilientStateGraph(Fan)
    g.add_node("work", work, policy=NodePolicy())
    g.add_conditional_edges(
        "__start__", lambda s: [Send("work", {"i": i}) for i in s["items"]], ["work"]
    )
    g.set_finish_point("work")
    return g


def _config(h: Any, label: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}-{h.id}-{uuid.uuid4().hex[:6]}"}}


async def _retry(h: Any, graph: Any, config: Any, **kw: Any) -> Any:
    if h.is_async:
        return await aretry_failed(graph, config, **kw)
    return await asyncio.to_thread(lambda: retry_failed(graph, config, **kw))


async def _report(h: Any, config: Any) -> Any:
    thread = config["configurable"]["thread_id"]
    if h.is_async:
        return await arun_report(h.saver, thread)
    return await asyncio.to_thread(run_report, h.saver, thread)


async def _rows(h: Any, config: Any) -> list[tuple[str, str]]:
    rows = await h.call("step_history", config["configurable"]["thread_id"])
    return [(r["path"], r["status"]) for r in rows]


def _assert_redone(report: Any, paths: list[str]) -> None:
    """The step map shows each re-run branch completed (its tries added up) and
    redone; the recovery names them; the console marks their node redone."""
    assert report.status == "success"
    steps = {s.path: s for s in report.steps}
    assert not [p for p in steps if "#" in p]  # no branch recorded as another's loop
    for path in paths:
        assert (steps[path].status, steps[path].attempts, steps[path].redone) == (
            "completed",
            2,
            1,
        ), steps[path]
    [recovery] = report.recoveries
    assert sorted(recovery["redone_paths"]) == sorted(paths)
    [line] = [t.describe() for t in report.timeline if t.event == "recovery"]
    assert all(p in line for p in paths), line
    assert {s.path for s in report.steps if s.redone} == set(paths)
    assert "failed" not in report.node_statuses().values()


async def test_a_retried_send_branch_is_that_branch_s_next_try(checkpointer: Any) -> None:
    h = checkpointer
    broken = {2}
    graph, config = _fan_out(h, broken), _config(h, "branch")
    out = await h.invoke(graph, {"items": [0, 1, 2], "done": []}, config)
    assert [f["path"] for f in out["resilience"]["failed_steps"]] == ["work[2]"]
    broken.clear()
    out = await _retry(h, graph, config)
    assert out["resilience"]["status"] == "success"
    assert sorted(out["done"]) == [0, 1, 2]
    assert await _rows(h, config) == [
        ("work[0]", "completed"),
        ("work[1]", "completed"),
        ("work[2]", "failed"),
        ("work[2]", "completed"),
    ]
    _assert_redone(await _report(h, config), ["work[2]"])


async def test_each_retried_branch_keeps_its_own_index(checkpointer: Any) -> None:
    """Two failed branches re-run side by side: each is recorded as itself, not
    as the re-run's Sends 0 and 1 (which would name two other branches)."""
    h = checkpointer
    broken = {1, 3}
    graph, config = _fan_out(h, broken), _config(h, "branches")
    await h.invoke(graph, {"items": [0, 1, 2, 3], "done": []}, config)
    broken.clear()
    out = await _retry(h, graph, config)
    assert sorted(out["done"]) == [0, 1, 2, 3]
    rows = await _rows(h, config)
    assert sorted(rows[-2:]) == [("work[1]", "completed"), ("work[3]", "completed")]
    assert rows.count(("work[0]", "completed")) == 1
    _assert_redone(await _report(h, config), ["work[1]", "work[3]"])


async def test_a_branch_retried_with_a_new_payload_is_that_branch(checkpointer: Any) -> None:
    h = checkpointer
    graph, config = _fan_out(h, {2}), _config(h, "payload")
    await h.invoke(graph, {"items": [0, 1, 2], "done": []}, config)
    out = await _retry(h, graph, config, step="work[2]", payload={"i": 20})
    assert sorted(out["done"]) == [0, 1, 20]
    assert (await _rows(h, config))[-1] == ("work[2]", "completed")
    _assert_redone(await _report(h, config), ["work[2]"])


class Research(ResilientState, total=False):
    q: str
    found: str


_QUICK = Backoff(max_attempts=3, initial_interval=0.01, jitter="none")


def _research(h: Any, error: Exception, *, inner_policy: bool = True) -> Any:
    """A parent whose node ``research`` is a compiled subgraph; its node ``fetch``
    raises ``error`` on its first call only."""
    calls = []

    def fetch(state: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return {"found": "it"}

    sub = ResilientStateGraph(Research)
    sub.add_node("fetch", fetch, policy=NodePolicy(retry=_QUICK) if inner_policy else None)
    sub.set_entry_point("fetch")
    sub.set_finish_point("fetch")
    g = ResilientStateGraph(Research)
    g.add_node("research", sub.compile(), policy=NodePolicy(retry=_QUICK))
    g.add_node("write", lambda s: {"q": s["q"] + "!"})
    g.set_entry_point("research")
    g.add_edge("research", "write")
    g.set_finish_point("write")
    return g.compile(checkpointer=h.saver)


def _tries(report: Any) -> list[str]:
    return [t.describe() for t in report.timeline if t.event == "failed"]


async def test_a_subgraph_step_that_failed_for_good_is_told_as_itself(checkpointer: Any) -> None:
    """The inner step failed once for good, then `retry_failed` re-ran it: one
    failed row, its own error in its suggestion, two tries (not three)."""
    h = checkpointer
    graph, config = _research(h, PermanentError("401 bad key")), _config(h, "stopped")
    out = await h.invoke(graph, {"q": "x"}, config)
    log = out["resilience"]
    assert log["status"] == "partial_complete"
    [failed] = log["failed_steps"]
    assert (failed["path"], failed["error_type"], failed["attempts"]) == (
        "research/fetch",
        "PermanentError",
        1,
    )
    [advice] = log["recovery_suggestions"]
    assert "PermanentError: 401 bad key" in advice and "SubgraphStopped" not in advice
    assert await _rows(h, config) == [("research/fetch", "failed")]
    report = await _report(h, config)
    assert [(s.path, s.status, s.attempts) for s in report.steps] == [
        ("research/fetch", "failed", 1)
    ]
    assert [t for t in _tries(report) if "SubgraphStopped" in t] == []
    assert all("SubgraphStopped" not in s for s in report.suggestions)

    out = await _retry(h, graph, config)
    assert out["resilience"]["status"] == "success"
    assert await _rows(h, config) == [
        ("research/fetch", "failed"),
        ("research/fetch", "completed"),
        ("write", "completed"),
    ]
    report = await _report(h, config)
    fetch = {s.path: s for s in report.steps}["research/fetch"]
    assert (fetch.status, fetch.attempts, fetch.redone) == ("completed", 2, 1)
    [try_] = _tries(report)
    assert try_.startswith("research/fetch try 1 failed (permanent: PermanentError: 401 bad key)")
    assert report.node_statuses().get("research") != "failed"


async def test_a_subgraph_its_parent_retries_keeps_its_steps_paths(checkpointer: Any) -> None:
    """The inner node has no policy: its error fails the parent's node, which
    retries the subgraph; the second call's steps are at ``research/fetch``
    (not ``research/1/fetch``: LangGraph's numeric namespace segment)."""
    h = checkpointer
    graph = _research(h, TransientError("503 busy"), inner_policy=False)
    config = _config(h, "outer")
    out = await h.invoke(graph, {"q": "x"}, config)
    assert out["resilience"]["status"] == "success"
    assert sorted(await _rows(h, config)) == [
        ("research", "completed"),
        ("research/fetch", "completed"),
        ("write", "completed"),
    ]
    report = await _report(h, config)
    steps = {s.path: s for s in report.steps}
    assert sorted(steps) == ["research", "research/fetch", "write"]
    # fetch ran twice: its failure was the parent's try 1 of research, then it completed
    assert (steps["research"].attempts, steps["research/fetch"].attempts) == (2, 1)
    [try_] = _tries(report)
    assert try_.startswith("research try 1 failed (transient: TransientError: 503 busy)")
    assert "research<br/><small>retried (2 tries)</small>" in report.to_mermaid()


async def test_a_subgraph_node_re_run_by_retry_failed_is_completed(checkpointer: Any) -> None:
    """The inner node has no policy: its error fails the parent's node for
    good; `retry_failed` re-runs that node, which completes: the step map shows
    ``research`` completed and redone, not ``failed`` under a ``success``."""
    h = checkpointer
    graph = _research(h, PermanentError("401 bad key"), inner_policy=False)
    config = _config(h, "node")
    out = await h.invoke(graph, {"q": "x"}, config)
    assert [f["path"] for f in out["resilience"]["failed_steps"]] == ["research"]
    out = await _retry(h, graph, config)
    assert out["resilience"]["status"] == "success"
    report = await _report(h, config)
    steps = {s.path: s for s in report.steps}
    assert (steps["research"].status, steps["research"].attempts, steps["research"].redone) == (
        "completed",
        2,
        1,
    )
    assert steps["research/fetch"].status == "completed"
    assert report.recoveries[0]["redone_paths"] == ["research"]
    assert "failed" not in report.node_statuses().values()


async def test_a_retried_branch_inside_a_subgraph_is_that_branch(checkpointer: Any) -> None:
    """A fan-out inside a subgraph node: `retry_failed` re-enters the subgraph and
    re-runs ``research/work[1]`` as that branch, not as ``research/work[0]``."""
    h = checkpointer
    broken = {1}
    sub = _fan_out_graph(broken)
    g = ResilientStateGraph(Fan)
    g.add_node("research", sub.compile())
    g.add_node("write", lambda s: {})
    g.set_entry_point("research")
    g.add_edge("research", "write")
    g.set_finish_point("write")
    graph, config = g.compile(checkpointer=h.saver), _config(h, "nested")
    out = await h.invoke(graph, {"items": [0, 1, 2], "done": []}, config)
    assert [f["path"] for f in out["resilience"]["failed_steps"]] == ["research/work[1]"]
    broken.clear()
    out = await _retry(h, graph, config)
    assert sorted(out["done"]) == [0, 1, 2]
    report = await _report(h, config)
    steps = {s.path: s for s in report.steps}
    assert (steps["research/work[0]"].attempts, steps["research/work[0]"].redone) == (1, 0)
    fixed = steps["research/work[1]"]
    assert (fixed.status, fixed.attempts, fixed.redone) == ("completed", 2, 1)
    assert report.recoveries[0]["redone_paths"] == ["research/work[1]"]
    assert [t for t in _tries(report) if "SubgraphStopped" in t] == []


async def test_a_subgraph_step_that_ran_out_of_tries_names_them(checkpointer: Any) -> None:
    """The inner step failed three tries: the run's failed step says 3 (not the
    parent's one try of the subgraph node), as the step map does."""
    h = checkpointer

    def fetch(state: dict[str, Any]) -> dict[str, Any]:
        raise TransientError("503 busy")

    sub = ResilientStateGraph(Research)
    sub.add_node("fetch", fetch, policy=NodePolicy(retry=_QUICK))
    sub.set_entry_point("fetch")
    sub.set_finish_point("fetch")
    g = ResilientStateGraph(Research)
    g.add_node("research", sub.compile(), policy=NodePolicy(retry=_QUICK))
    g.set_entry_point("research")
    g.set_finish_point("research")
    graph, config = g.compile(checkpointer=h.saver), _config(h, "tries")
    out = await h.invoke(graph, {"q": "x"}, config)
    failed = out["resilience"]["failed_step"]
    assert (failed["path"], failed["attempts"]) == ("research/fetch", 3)
    report = await _report(h, config)
    assert [(s.path, s.status, s.attempts) for s in report.steps] == [
        ("research/fetch", "failed", 3)
    ]
    assert len(_tries(report)) == 3
