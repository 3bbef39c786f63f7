"""A run that ends ``error`` names its error (as raised: type and message) in
its report and in `list_runs`, and its advice works when followed; the report
shows the run's input verbatim (its task specification). Every backend."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from langgraph.graph import END, START

from langgraph_resilience import ResilientState, ResilientStateGraph, arun_report, run_report
from langgraph_resilience.history import alist_runs, list_runs


class State(ResilientState, total=False):
    n: int
    question: str


async def _report(h: Any, thread: str) -> Any:
    if h.is_async:
        return await arun_report(h.saver, thread)
    return await asyncio.to_thread(run_report, h.saver, thread)


async def _listed(h: Any, thread: str) -> Any:
    runs = await (alist_runs(h.saver) if h.is_async else asyncio.to_thread(list_runs, h.saver))
    [mine] = [r for r in runs if r.thread_id == thread]
    return mine


def _loop(h: Any, until: int) -> Any:
    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"n": state.get("n", 0) + 1}

    g = ResilientStateGraph(State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= until else "step")
    return g.compile(checkpointer=h.saver)


async def test_a_recursion_limit_error_is_named_and_its_advice_works(checkpointer: Any) -> None:
    h = checkpointer
    graph = _loop(h, until=8)
    thread = f"loop-{h.id}-{uuid.uuid4().hex[:6]}"
    config: dict[str, Any] = {"configurable": {"thread_id": thread}, "recursion_limit": 4}
    spec = {"n": 0, "question": "find the cheapest flight to Lisbon"}
    try:
        await h.invoke(graph, spec, config)
    except Exception as exc:
        assert type(exc).__name__ == "GraphRecursionError"
    else:
        raise AssertionError("the run should hit its recursion limit")
    report = await _report(h, thread)
    assert report.status == "error"
    assert report.error is not None and report.error.startswith("GraphRecursionError: ")
    assert "Recursion limit of 4" in report.error
    assert f"error: {report.error.splitlines()[0]}" in report.to_text()
    assert report.task_spec == spec  # verbatim
    assert "find the cheapest flight to Lisbon" in report.to_text()
    assert report.to_dict()["task_spec"] == spec
    [advice] = report.suggestions
    assert "recursion_limit" in advice and "Worker run's outcome" not in advice
    listed = await _listed(h, thread)
    assert listed.status == "error" and listed.error == report.error
    # Following the advice: the same thread goes on with a higher limit.
    out = await h.invoke(graph, None, {**config, "recursion_limit": 50})
    assert out["n"] == 8 and out["resilience"]["status"] == "success"


async def test_an_error_past_the_policies_is_named_as_raised(checkpointer: Any) -> None:
    h = checkpointer
    broken = {"yes": True}

    def route(state: dict[str, Any]) -> str:  # an edge: no node policy covers it
        if broken["yes"]:
            raise LookupError("no such order: 42")
        return END

    g = ResilientStateGraph(State)
    g.add_node("fetch", lambda s: {"n": 1})
    g.add_edge(START, "fetch")
    g.add_conditional_edges("fetch", route)
    graph = g.compile(checkpointer=h.saver)
    thread = f"raise-{h.id}-{uuid.uuid4().hex[:6]}"
    config = {"configurable": {"thread_id": thread}}
    with contextlib.suppress(LookupError):
        await h.invoke(graph, {"n": 0}, config)
    report = await _report(h, thread)
    assert (report.status, report.error) == ("error", "LookupError: no such order: 42")
    [advice] = report.suggestions
    assert "LookupError: no such order: 42" in advice and "graph.invoke(None, config)" in advice
    assert (await _listed(h, thread)).error == "LookupError: no such order: 42"
    # get_state reads the status the run's row stores, as the report (issue 37;
    # before: ``running`` while the report said ``error``).
    assert (await _status(h, graph, config)) == "error"
    broken["yes"] = False  # fix the cause, then follow the advice
    out = await h.invoke(graph, None, config)
    assert out["n"] == 1
    # The output, get_state and the report read one status, the row's.
    stored = (await _report(h, thread)).status
    assert (out["resilience"]["status"], await _status(h, graph, config)) == (stored, stored)


async def _status(h: Any, graph: Any, config: Any) -> Any:
    if h.is_async:
        return (await graph.aget_state(config)).values["resilience"]["status"]
    return await asyncio.to_thread(lambda: graph.get_state(config).values["resilience"]["status"])


def test_show_prints_the_runs_error_and_input(tmp_path: Any) -> None:
    import sys as _sys
    from pathlib import Path as _Path

    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    db = str(tmp_path / "show.db")

    class Sync:
        is_async = False
        id = "sqlite"

    with ResilientSqliteSaver.from_conn_string(db) as saver:
        h = Sync()
        h.saver = saver  # type: ignore[attr-defined]
        graph = _loop(h, until=8)
        config: dict[str, Any] = {"configurable": {"thread_id": "shown"}, "recursion_limit": 3}
        with contextlib.suppress(Exception):
            graph.invoke({"n": 0, "question": "find the cheapest flight to Lisbon"}, config)
    import subprocess

    cli = _Path(__file__).parent.parent / "langgraph_resilience" / "cli" / "__main__.py"
    done = subprocess.run(
        [_sys.executable, "-m", "langgraph_resilience.cli", "show", "shown", "--db", db],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(cli.parent.parent.parent),
    )
    assert done.returncode == 0, done.stderr
    assert "error: GraphRecursionError: Recursion limit of 3" in done.stdout
    assert "input: {'n': 0, 'question': 'find the cheapest flight to Lisbon'}" in done.stdout


async def test_a_worker_run_that_ends_error_names_its_error(checkpointer: Any) -> None:
    """A run under a `Worker` that hits its recursion limit (an error past the
    policies) names it in its report and in `list_runs`, as a plain invoke does."""
    from helpers import sql

    from langgraph_resilience import Worker

    h = checkpointer
    if h.backend == "postgres":  # a worker waits for every open run of the database
        sql(h.backend, h.target, "DELETE FROM resilience_runs")
    g = ResilientStateGraph(State)
    g.add_node("step", lambda s: {"n": s.get("n", 0) + 1})
    g.add_edge(START, "step")
    g.add_edge("step", "step")  # loops for ever: the recursion limit ends it
    # LangGraph's default recursion limit is 10,007 steps: a small one keeps the test short
    looping = g.compile(checkpointer=h.saver).with_config(recursion_limit=5)
    worker = Worker(looping, checkpointer=h.saver, worker_id="w-err", poll_interval=0.05)
    thread = f"wloop-{h.id}-{uuid.uuid4().hex[:6]}"
    if h.is_async:
        run_id = await worker.asubmit({"n": 0}, thread_id=thread)
        done = await worker.arun()
    else:
        run_id = await asyncio.to_thread(worker.submit, {"n": 0}, thread_id=thread)
        done = await asyncio.to_thread(worker.run)
    assert done == {run_id: "error"}
    report = await _report(h, thread)
    assert report.status == "error"
    assert report.error is not None and report.error.startswith("GraphRecursionError: ")
    assert f"error: {report.error.splitlines()[0]}" in report.to_text()
    [advice] = report.suggestions
    assert "recursion_limit" in advice and "Worker run's outcome" not in advice
    listed = await _listed(h, thread)
    assert (listed.status, listed.error, listed.run_id) == ("error", report.error, run_id)
