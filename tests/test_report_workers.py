"""`run_report`'s timeline names a worker only for what ran under that worker's
run: a step `retry_failed` re-ran in another process after a takeover is
nobody's, not the worker that took the run over."""

from __future__ import annotations

from typing import Any

from helpers import DoneState, appending, chain

from langgraph_resilience import (
    NodePolicy,
    PermanentError,
    ResilientStateGraph,
    Worker,
    retry_failed,
    run_report,
)
from langgraph_resilience.checkpoint.runlog._events import StoredAttempt
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.history._entries import timeline_of
from langgraph_resilience.history._scan import Recovery, ThreadRun


def _step(path: str, ended: float, run_id: str | None) -> dict[str, Any]:
    step: dict[str, Any] = {
        "run": 1,
        "path": path,
        "node": path,
        "status": "completed",
        "attempts": 1,
        "started_at": ended - 0.5,
        "ended_at": ended,
        # The key of its task, which its tries share (each step its own task here).
        "checkpoint_ns": "",
        "checkpoint_id": "c",
        "task_id": path,
    }
    if run_id is not None:
        step["run_id"] = run_id
    return step


def test_a_step_retried_by_hand_after_a_takeover_is_not_the_workers() -> None:
    run = ThreadRun(thread_id="t", run=1, status="success", run_id="r1", owner=None)
    run.steps = [
        _step("draft", 10.0, "r1"),  # by the first worker
        _step("review", 12.0, "r1"),  # by worker-2, after it took the run over
        _step("publish", 21.0, None),  # by retry_failed, in the operator's process
    ]
    run.recoveries = [
        Recovery(kind="takeover", thread_id="t", at=11.0, run=1, run_id="r1", owner="worker-2"),
        Recovery(kind="retry_failed", thread_id="t", at=20.0, run=1),
    ]
    by_path = {e.path: e.worker for e in timeline_of(run, []) if e.event == "completed"}
    assert by_path == {"draft": None, "review": "worker-2", "publish": None}
    lines = [e.describe() for e in timeline_of(run, [])]
    assert "review completed [worker-2]" in lines
    assert "publish completed" in lines


def test_worker_steps_name_the_worker_and_a_retry_failed_step_does_not(tmp_path: Any) -> None:
    fixed = {"publish": False}

    def behaviour(name: str) -> None:
        if name == "publish" and not fixed["publish"]:
            raise PermanentError("the publisher rejected the draft")

    builder = chain(
        ResilientStateGraph(DoneState),
        ["draft", "publish"],
        appending(behaviour),
        lambda name: {"policy": NodePolicy(retry=None)},
    )
    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "runs.db")) as saver:
        worker = Worker(builder, checkpointer=saver, lease_ttl=5.0, worker_id="worker-1")
        run_id = worker.submit({"done": []}, thread_id="pub")
        assert worker.run() == {run_id: "partial_complete"}
        during = run_report(saver, "pub")
        fixed["publish"] = True
        graph = builder.compile(checkpointer=saver)
        out = retry_failed(graph, {"configurable": {"thread_id": "pub"}})
        assert out["resilience"]["status"] == "success"
        after = run_report(saver, "pub")
    steps = [(e.path, e.event, e.worker) for e in after.timeline if e.path]
    assert ("draft", "completed", "worker-1") in steps  # named after the run ended too
    assert ("publish", "completed", None) in steps  # retry_failed ran it, here
    assert all(w in (None, "worker-1") for _, _, w in steps)
    assert [e.worker for e in during.timeline if e.path == "draft"] == [
        e.worker for e in after.timeline if e.path == "draft" and e.event == "completed"
    ]


def test_the_first_workers_tries_and_steps_are_named_after_a_takeover() -> None:
    """Worker-1 ran draft (its first try failed), then died; worker-2 took the
    run over and ran review (a try failed there too). The records name their
    workers, so the timeline names worker-1 for what it did, though the run's
    record names nobody once it ended."""
    run = ThreadRun(thread_id="t", run=1, status="success", run_id="r1", owner=None)
    run.steps = [
        {**_step("draft", 10.0, "r1"), "worker": "worker-1", "attempts": 2},
        {**_step("review", 13.0, "r1"), "worker": "worker-2", "attempts": 2},
    ]
    run.recoveries = [
        Recovery(kind="takeover", thread_id="t", at=12.0, run=1, run_id="r1", owner="worker-2")
    ]

    def failed(node: str, at: float) -> StoredAttempt:
        return StoredAttempt(
            checkpoint_ns="",
            checkpoint_id="c",
            task_id=node,
            attempt=1,
            node=node,
            kind="transient",
            error_type="TimeoutError",
            reason="slow",
            started_at=at,
            finished_at=at + 0.1,
            wait=0.1,
        )

    named = [
        (e.path, e.event, e.worker)
        for e in timeline_of(run, [failed("draft", 9.6), failed("review", 12.6)])
    ]
    assert named == [
        ("draft", "failed", "worker-1"),
        ("draft", "completed", "worker-1"),
        ("", "recovery", "worker-2"),
        ("review", "failed", "worker-2"),
        ("review", "completed", "worker-2"),
    ]
