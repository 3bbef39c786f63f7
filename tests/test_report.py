"""`run_report` and `list_runs`: the step map, the timeline, effects, the
coloured graph, the text form and a JSON round trip, on SQLite and Postgres.

One run meets every fate: ``a`` completes (and sends an email through
``side_effect``), ``b`` fails once (transient) and is retried, ``c`` fails and
takes its fallback ``c_fb``, ``d`` fails and is skipped (degraded), ``e`` fails
for good (the run ends with a partial result) and ``f`` is never reached.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from typing import Any

import pytest
from conftest import open_saver
from graphs import DoneState
from helpers import emptied, saver_for
from langgraph.graph import END, START

from langgraph_resilience import (
    Backoff,
    NodePolicy,
    PermanentError,
    ResilientStateGraph,
    RunReport,
    TransientError,
    Worker,
    arun_report,
    retry_failed,
    run_report,
    side_effect,
)
from langgraph_resilience.errors import (
    RunStateError,
    UnknownThread,
)
from langgraph_resilience.history._report import alist_runs, list_runs


@pytest.fixture
def fresh(store: tuple[str, str]) -> tuple[str, str]:
    """The store without the runs of earlier tests (Postgres is the module's)."""
    ledger = ("resilience_run_log", "resilience_steps", "resilience_recoveries")
    return emptied(store, "checkpoints", "checkpoint_writes", "resilience_runs", *ledger)


def every_fate(saver: Any, fixed: dict[str, bool]) -> Any:
    calls = fixed.setdefault("calls", [])  # type: ignore[arg-type]
    tried: dict[str, int] = {}

    @side_effect(name="email")
    def email(*, idempotency_key: str) -> str:
        calls.append(idempotency_key)
        return "sent"

    def node(name: str) -> Any:
        def run(state: DoneState) -> dict[str, Any]:
            tried[name] = tried.get(name, 0) + 1
            if name == "a":
                email()
            if name == "b" and tried[name] == 1:
                raise TransientError("the search service timed out")
            if name in ("c", "d"):
                raise PermanentError(f"{name} cannot be done")
            if name == "e" and not fixed["e"]:
                raise PermanentError("e needs a fix")
            return {"done": [name]}

        return run

    g = ResilientStateGraph(DoneState)
    one = NodePolicy(retry=None)
    g.add_node("a", node("a"), policy=one)
    g.add_node("b", node("b"), policy=NodePolicy(retry=Backoff(initial_interval=0.01)))
    g.add_node("c", node("c"), policy=NodePolicy(retry=None, fallback="c_fb"))
    g.add_node("c_fb", node("c_fb"))
    g.add_node("d", node("d"), policy=NodePolicy(retry=None, critical=False))
    g.add_node("e", node("e"), policy=one)
    g.add_node("f", node("f"))
    for a, b in [(START, "a"), ("a", "b"), ("b", "c"), ("c", "d"), ("c_fb", "d")]:
        g.add_edge(a, b)
    for a, b in [("d", "e"), ("e", "f"), ("f", END)]:
        g.add_edge(a, b)
    return g.compile(checkpointer=saver)


CONFIG = {"configurable": {"thread_id": "fates"}}


def test_the_report_maps_every_step_and_draws_what_happened(fresh: tuple[str, str]) -> None:
    fixed = {"e": False}
    with saver_for(fresh) as saver:
        graph = every_fate(saver, fixed)
        out = graph.invoke({"done": []}, CONFIG)
        assert out["resilience"]["status"] == "partial_complete"
        report = run_report(saver, "fates")

    assert (report.thread_id, report.run, report.status) == ("fates", 1, "partial_complete")
    by_path = {s.path: s for s in report.steps}
    assert {p: (s.status, s.attempts) for p, s in by_path.items()} == {
        "a": ("completed", 1),
        "b": ("completed", 2),
        "c": ("fallback", 1),
        "c_fb": ("completed", 1),
        "d": ("degraded", 1),
        "e": ("failed", 1),
    }
    assert by_path["b"].kinds == ("transient",)
    for s in report.steps:
        assert s.started_at is not None and s.ended_at is not None
        assert s.duration == pytest.approx(s.ended_at - s.started_at)
    # The timeline: b's failed try, with its kind and error, then every step's end.
    failed = [t for t in report.timeline if t.event == "failed"]
    assert [(t.path, t.attempt, t.kind) for t in failed if t.path == "b"] == [("b", 1, "transient")]
    assert "timed out" in (failed[0].error or "")
    ends = [(t.path, t.event) for t in report.timeline if t.event != "failed"]
    assert ends == [
        ("a", "completed"),
        ("b", "completed"),
        ("c", "fallback"),
        ("c_fb", "completed"),
        ("d", "degraded"),
        ("e", "gave_up"),
    ]
    times = [t.at for t in report.timeline]
    assert times == sorted(times)
    # The email, sent once, by a.
    assert [(e.name, e.path, e.status, e.replayed) for e in report.effects] == [
        ("email", "a", "done", False)
    ]
    assert [f["path"] for f in report.failed_steps] == ["e"]
    assert report.degraded_steps == ("c", "d")  # a fallback replaced c
    assert report.suggestions and "retry_failed" in " ".join(report.suggestions)
    assert report.usage and report.usage["steps"] >= 1  # as the run log counts them

    # Colours: with the graph, every node, f and the error route's end included.
    assert report.node_statuses() == {
        "a": "completed",
        "b": "retried",
        "c": "fallback",
        "c_fb": "completed",
        "d": "degraded",
        "e": "failed",
    }
    drawn = report.to_mermaid(graph)
    for node, status in [
        ("a", "completed"),
        ("b", "retried"),
        ("c", "fallback"),
        ("d", "degraded"),
        ("e", "failed"),
        ("f", "not_reached"),
    ]:
        assert f'    n_{node}["{node}<br/>' in drawn
        line = next(x for x in drawn.splitlines() if x.strip().startswith(f"n_{node}["))
        assert line.endswith(f":::{status}")
    assert "classDef retried fill:" in drawn and "n_b --> n_c" in drawn
    assert "n_c -.->|on failure| n_c_fb" in drawn
    # Without the graph: the nodes reached, in the order they ran.
    seen = report.to_mermaid()
    assert "n_f" not in seen and seen.index("n_a[") < seen.index("n_e[")

    # JSON round trip, and the text form.
    data = report.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["steps"][1]["path"] == "b" and data["timeline"][0]["event"] == "completed"
    text = str(report)
    assert text.startswith("thread fates · run 1 · partial_complete")
    assert "b try 1 failed (transient" in text and "next:" in text


def test_retry_failed_shows_as_a_recovery_and_the_step_redone(fresh: tuple[str, str]) -> None:
    fixed = {"e": False}
    with saver_for(fresh) as saver:
        graph = every_fate(saver, fixed)
        graph.invoke({"done": []}, CONFIG)
        fixed["e"] = True
        out = retry_failed(graph, CONFIG)
        assert out["resilience"]["status"] == "success"
        report = run_report(saver, "fates", run=1)
    assert report.status == "success"
    e = next(s for s in report.steps if s.path == "e")
    assert (e.status, e.runs, e.redone, e.attempts) == ("completed", 2, 1, 2)
    assert [r["kind"] for r in report.recoveries] == ["retry_failed"]
    assert report.recoveries[0]["redone_paths"] == ["e"]
    kinds = [t.kind for t in report.timeline if t.event == "recovery"]
    assert kinds == ["retry_failed"]
    assert "f" in report.node_statuses() and report.node_statuses()["e"] == "retried"
    assert len(fixed["calls"]) == 1  # type: ignore[arg-type]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_unknown_threads_and_runs_are_lookup_errors(
    fresh: tuple[str, str], is_async: bool
) -> None:
    with saver_for(fresh) as saver:
        every_fate(saver, {"e": True}).invoke({"done": []}, CONFIG)
        with pytest.raises(UnknownThread, match="no run 2"):
            run_report(saver, "fates", run=2)
        with pytest.raises(LookupError, match="not in this store"):
            run_report(saver, "nobody")
        assert issubclass(UnknownThread, RunStateError)
    if is_async:
        async with AsyncExitStack() as stack:
            asaver = await open_saver(fresh[0], True, fresh[1], stack)
            with pytest.raises(UnknownThread):
                await arun_report(asaver, "nobody")
            report = await arun_report(asaver, "fates")
            assert isinstance(report, RunReport) and report.status == "success"


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_list_runs_covers_worker_runs_and_plain_threads(
    fresh: tuple[str, str], is_async: bool
) -> None:
    with saver_for(fresh) as saver:
        graph = every_fate(saver, {"e": False})
        graph.invoke({"done": []}, CONFIG)
        worker = Worker(every_fate(saver, {"e": True}), checkpointer=saver, lease_ttl=5.0)
        run_id = worker.submit({"done": []}, thread_id="by-worker", budget={"max_tokens": 1000})
        assert worker.run() == {run_id: "success"}
        runs = list_runs(saver)
        succeeded = list_runs(saver, status="success")
        report = run_report(saver, "by-worker")
    if is_async:
        async with AsyncExitStack() as stack:
            asaver = await open_saver(fresh[0], True, fresh[1], stack)
            assert await alist_runs(asaver) == runs
    listed = {r.thread_id: r for r in runs}
    assert listed["fates"].status == "partial_complete" and listed["fates"].run_id is None
    worker_run = listed["by-worker"]
    assert (worker_run.run_id, worker_run.status, worker_run.attempts) == (run_id, "success", 1)
    assert worker_run.recoveries == 0
    assert [r.thread_id for r in succeeded] == ["by-worker"]
    assert json.loads(json.dumps([r.to_dict() for r in runs])) == [r.to_dict() for r in runs]
    assert (report.run_id, report.claims, report.status) == (run_id, 1, "success")
    assert report.budget is not None and report.budget["max_tokens"] == 1000


def test_an_earlier_run_is_reported_from_its_step_records(fresh: tuple[str, str]) -> None:
    fixed = {"e": False}
    with saver_for(fresh) as saver:
        graph = every_fate(saver, fixed)
        graph.invoke({"done": []}, CONFIG)
        fixed["e"] = True
        graph.invoke({"done": []}, CONFIG)  # a second run on the thread: it succeeds
        first, latest = run_report(saver, "fates", run=1), run_report(saver, "fates")
    assert (first.run, first.status, latest.run, latest.status) == (
        1,
        "partial_complete",
        2,
        "success",
    )
    assert [f["path"] for f in first.failed_steps] == ["e"] and latest.failed_steps == ()
    assert first.degraded_steps == ("c", "d") and first.runs_on_thread == 2
    assert {s.path for s in latest.steps} == {"a", "b", "c", "c_fb", "d", "e", "f"}
