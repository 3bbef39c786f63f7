"""Durable waits and human approval under a `Worker`.

A service that asks for a wait longer than the node's ``Backoff.max_wait``
(``Retry-After: 3600``) does not hold a worker slot: the run is released with a
not-before time, any worker takes it after that time, and a crash of every
worker meanwhile loses nothing. The tests move the clock through the store (the
``not_before`` column is the database's clock), never by sleeping.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import read_ledger, sql
from langgraph.types import Command
from spawn import Process, spawn
from test_worker import h, outcome, run_worker, submit  # noqa: F401  (h: a fixture)
from test_worker_crash import fresh, wait_for  # noqa: F401  (fresh: a fixture)
from wait_worker import pipeline

from langgraph_resilience import Worker
from langgraph_resilience.checkpoint import RunRecord

SCRIPT = Path(__file__).parent / "scripts" / "wait_worker.py"


def make_due(backend: str, target: str, run_id: str) -> None:
    """Let a waiting run's hour pass, in the store's clock (on Redis ``target`` is
    the saver's key prefix)."""
    if backend == "redis":
        from redis_servers import shift_not_before

        shift_not_before(target, run_id, 3600)
        return
    sql(
        backend,
        target,
        "UPDATE resilience_runs SET not_before = not_before - 3600 WHERE run_id = ?",
        (run_id,),
    )


def node_log(service: Path, thread: str, node: str) -> list[list[str]]:
    return [r for r in read_ledger(service / "nodes.log") if r[0] == thread and r[1] == node]


async def test_a_long_retry_after_releases_the_run_and_frees_the_worker(
    h: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    worker = Worker(pipeline(tmp_path), checkpointer=h.saver, lease_ttl=5, poll_interval=0.05)
    waiting_thread = f"wait-{uuid.uuid4()}"
    waiting = await submit(h, worker, {"kind": "wait"}, thread_id=waiting_thread)
    other = await submit(h, worker, {"kind": "plain"})
    began = time.monotonic()
    # The worker is free at once: the other run finishes, the waiting one is queued.
    assert await run_worker(h, worker) == {waiting: "queued", other: "success"}
    assert time.monotonic() - began < 10
    record: RunRecord = await h.call("read_run", waiting)
    assert record.status == "queued" and record.owner is None
    assert record.not_before is not None and record.not_before > time.time() + 3500
    paused = outcome(h, record)
    assert paused["paused"] == "retry_after"
    assert paused["interrupts"][0]["value"]["wait"] == 3600
    assert paused["interrupts"][0]["value"]["node"] == "fetch"
    # Not due: a worker leaves it alone (and counts it as no work now).
    assert await run_worker(h, worker) == {}
    assert len(node_log(tmp_path, waiting_thread, "fetch")) == 1
    # Its hour passes in the store: the next worker runs it, from the failed step.
    make_due(h.backend, h.target, waiting)
    assert await run_worker(h, worker) == {waiting: "success"}
    assert [r[3] for r in node_log(tmp_path, waiting_thread, "fetch")] == ["try1", "try2"]
    final = await h.call("read_run", waiting)
    assert final.not_before is None and final.attempts == 2 and final.recoveries == 0
    assert outcome(h, final)["values"]["done"] == ["fetch", "approve", "finish"]


def test_without_a_worker_a_long_retry_after_ends_the_try_with_a_suggestion(
    tmp_path: Path,
) -> None:
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "runs.db")) as saver:
        graph = pipeline(tmp_path).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "t"}}
        out = graph.invoke({"kind": "wait"}, config)
    outcome_ = out["resilience"]
    assert outcome_["status"] == "partial_complete"
    assert outcome_["failed_step"]["node"] == "fetch"
    assert "3600" in outcome_["recovery_suggestions"][0]
    assert len(node_log(tmp_path, "t", "fetch")) == 1  # no wait in place, no second try


# -- in worker processes --------------------------------------------------------------------


def start(store: tuple[str, str], service: Path, *args: str) -> Process:
    backend, target = store
    return spawn(SCRIPT, backend, target, str(service), *args)


def call(store: tuple[str, str], service: Path, *args: str) -> Any:
    proc = start(store, service, *args)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out) if out.strip() else None


def status_of(store: tuple[str, str], run_id: str) -> str:
    rows = sql(*store, "SELECT status FROM resilience_runs WHERE run_id = ?", (run_id,))
    return str(rows[0][0])


def kill(proc: Process) -> None:
    if proc.poll() is None:
        proc.kill()  # SIGKILL
    proc.wait(timeout=30)


@pytest.mark.crash
@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_durable_wait_survives_every_worker_killed(
    fresh: tuple[str, str],  # noqa: F811
    tmp_path: Path,
    mode: str,
) -> None:
    store = fresh
    flags = ["--async"] if mode == "async" else []
    waiting = call(store, tmp_path, "submit", "wait", "--thread", "waiting")
    other = call(store, tmp_path, "submit", "plain", "--thread", "other")
    first = start(store, tmp_path, "work", *flags)
    try:
        wait_for(lambda: status_of(store, other) == "success", what="the other run to end")
        wait_for(
            lambda: (
                status_of(store, waiting) == "queued" and node_log(tmp_path, "waiting", "fetch")
            ),
            what="the waiting run to be released",
        )
    finally:
        kill(first)  # every worker dies while the run waits
    second = start(store, tmp_path, "work", *flags)
    try:
        time.sleep(1.0)  # ten polls: the run is not due, so nobody takes it
        assert status_of(store, waiting) == "queued"
        assert len(node_log(tmp_path, "waiting", "fetch")) == 1
        make_due(*store, waiting)
        wait_for(lambda: status_of(store, waiting) == "success", what="the waiting run to end")
    finally:
        kill(second)
    assert [r[3] for r in node_log(tmp_path, "waiting", "fetch")] == ["try1", "try2"]
    assert len(node_log(tmp_path, "waiting", "finish")) == 1


@pytest.mark.crash
@pytest.mark.timeout(180)
def test_human_approval_in_worker_processes(
    fresh: tuple[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    store = fresh
    worker = start(store, tmp_path, "work")
    try:
        # Paused, answered through Worker.resume from another process.
        run_id = call(store, tmp_path, "submit", "human", "--thread", "approved")
        wait_for(lambda: status_of(store, run_id) == "paused", what="the run to pause")
        call(store, tmp_path, "resume", run_id, json.dumps({"approved": True}))
        wait_for(lambda: status_of(store, run_id) == "success", what="the resumed run to end")
        answers = [json.loads(r[3]) for r in node_log(tmp_path, "approved", "approve")]
        assert answers == [{"approved": True}]  # the node got the value, once

        # Paused, then resumed by hand: the record ends right, the thread takes a new run.
        by_hand = call(store, tmp_path, "submit", "human", "--thread", "by-hand")
        wait_for(lambda: status_of(store, by_hand) == "paused", what="the run to pause")
        _resume_by_hand(store, tmp_path, "by-hand", {"approved": False})
        again = call(store, tmp_path, "submit", "plain", "--thread", "by-hand")
        wait_for(lambda: status_of(store, again) == "success", what="the new turn to end")
        assert status_of(store, by_hand) == "success"
    finally:
        kill(worker)


def _resume_by_hand(store: tuple[str, str], service: Path, thread: str, value: Any) -> None:
    from contextlib import ExitStack

    backend, target = store
    with ExitStack() as stack:
        if backend == "sqlite":
            from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

            saver = stack.enter_context(ResilientSqliteSaver.from_conn_string(target))
        else:
            from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver

            saver = stack.enter_context(ResilientPostgresSaver.from_conn_string(target))
        graph = pipeline(service).compile(checkpointer=saver)
        out = graph.invoke(Command(resume=value), {"configurable": {"thread_id": thread}})
    assert out["answer"] == value


# -- the worker's decision, apart from I/O ---------------------------------------------------


def _held() -> Any:
    from langgraph_resilience.worker._leases import Instant, Proof
    from langgraph_resilience.worker._steps import Held

    record = RunRecord(
        run_id="r",
        thread_id="t",
        status="running",
        owner="w",
        fencing_token=2,
        lease_expires_at=None,
        attempts=2,
        recoveries=1,
        input_type=None,
        input=None,
        budget_type=None,
        budget=None,
        outcome_type=None,
        outcome=None,
        created_at=0.0,
        updated_at=0.0,
    )
    return Held(record, proof=Proof(deadline=Instant.now().after(5), margin=1))


def test_a_run_taken_over_before_its_release_was_stored_waits_on() -> None:
    from langgraph_resilience.worker._steps import Finish, Invoke, ThreadState, Where, run_steps

    # Its worker died between the wait's interrupt and storing the release: the
    # claim came from an expired lease, not from the store's not_before.
    steps = run_steps(_held(), None, None, 3, released=frozenset())
    assert isinstance(next(steps), ThreadState)
    op = steps.send(Where("interrupted", ("i1",), (), wait_left=1800.0))
    assert isinstance(op, Finish) and op.status == "queued" and op.wait == 1800.0
    assert op.outcome == {"paused": "retry_after", "interrupts": [{"id": "i1"}]}

    # Released for that very wait and claimed when due: it runs now, whatever the
    # node's own clock said.
    steps = run_steps(_held(), None, None, 3, released=frozenset({"i1"}))
    next(steps)
    assert isinstance(steps.send(Where("interrupted", ("i1",), (), wait_left=1800.0)), Invoke)
