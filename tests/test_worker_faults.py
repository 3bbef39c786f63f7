"""A `Worker` under store faults and stalls (issue 12, the worker's part).

- No effect after the lease is gone: a worker SIGSTOPped right after storing an
  intent, whose run another worker took over meanwhile, does not call the effect
  once continued (``LGR_FAULT_TRIALS`` trials per dialect, default 3); in one
  process, an effect whose lease cannot be proven raises `LeaseLost` uncalled.
- A store outage never ends a run as ``error``: the run is released and run
  again, and a run's end that cannot be stored is tried again.
- Retried ``runs.submit`` / ``runs.claim`` whose first try committed (the reply
  lost) recognise their own run / claim: their statements are run twice.
- Renewals never wait behind a write that hangs holding the saver's lock, and a
  drain returns within ``drain_timeout`` while one hangs.
- A worker that loses its run through a refused write or a deleted run says so.
- The pure decisions: `check_lease`, `run_steps` after a store error, the loop's
  drain timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from graphs import pipeline
from helpers import emptied, run_worker, sql
from test_worker_crash import calls, finished_nothing, result, submit, wait_for, work

from langgraph_resilience import (
    ConfigError,
    LeaseLost,
    Worker,
    side_effect,
)
from langgraph_resilience.checkpoint import RunRecord
from langgraph_resilience.checkpoint.ledger import _runs
from langgraph_resilience.checkpoint.store._store import POSTGRES, SQLITE
from langgraph_resilience.errors import (
    RunStateError,
    StoreUnavailable,
)
from langgraph_resilience.graph._task import TaskContext
from langgraph_resilience.worker._leases import LEASES, Instant, Proof, check_lease
from langgraph_resilience.worker._steps import (
    Abandon,
    ClaimRuns,
    Finish,
    Held,
    Invoked,
    LoopSettings,
    Pause,
    Renew,
    Start,
    ThreadState,
    Wait,
    Where,
    run_steps,
    worker_loop,
)

TRIALS = int(os.environ.get("LGR_FAULT_TRIALS", "3"))
STEPS = ["a", "b", "c"]


@pytest.fixture
def fresh(store: tuple[str, str]) -> tuple[str, str]:
    """The store with no runs left by an earlier test (a worker waits on every open one)."""
    return emptied(store)


@pytest.fixture
def h(checkpointer: Any) -> Any:
    """The backend's saver, with no runs left by an earlier test."""
    if checkpointer.backend == "postgres":
        sql(checkpointer.backend, checkpointer.target, "DELETE FROM resilience_runs")
    return checkpointer


#: Where the Redis savers' own fault trials are (these files' tests kill workers and
#: break the Redis saver's writes through its keys and scripts).
REDIS_TRIALS = (
    "the Redis fault trials are tests/test_redis_worker_kills.py and test_redis_limit_faults.py"
)


def sql_only(h: Any, how: str) -> None:
    """Skip on Redis a test that injects its fault through the SQL savers' internals."""
    if h.backend == "redis":
        pytest.skip(f"{how}; {REDIS_TRIALS}")


async def submit_to(h: Any, worker: Worker) -> str:
    if h.is_async:
        return await worker.asubmit({"done": []})
    return await asyncio.to_thread(worker.submit, {"done": []})


async def until(check: Any, timeout: float = 15, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def lease_left(h: Any, run_id: str) -> float | None:
    """Seconds the run's lease has left by the store's clock (None: not running)."""
    now = (SQLITE if h.backend == "sqlite" else POSTGRES).now
    rows = sql(
        h.backend,
        h.target,
        f"SELECT lease_expires_at - {now} FROM resilience_runs "
        "WHERE run_id = ? AND status = 'running'",
        (run_id,),
    )
    return float(rows[0][0]) if rows else None


def hang_puts(h: Any, monkeypatch: pytest.MonkeyPatch, seconds: float) -> dict[str, Any]:
    """Make the saver's next checkpoint write, once ``armed``, hold the saver's lock
    for ``seconds`` (or until ``release``) before it is stored: a write that hangs."""
    hold: dict[str, Any] = {"armed": False, "began": None, "release": threading.Event()}
    if h.is_async:
        aput = h.saver.aput
        hold["arelease"] = asyncio.Event()

        async def slow_aput(*args: Any, **kwargs: Any) -> Any:
            if hold["armed"]:
                hold["armed"] = False
                async with h.saver.lock:
                    hold["began"] = time.monotonic()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(hold["arelease"].wait(), seconds)
            return await aput(*args, **kwargs)

        monkeypatch.setattr(h.saver, "aput", slow_aput)
    else:
        put = h.saver.put

        def slow_put(*args: Any, **kwargs: Any) -> Any:
            if hold["armed"]:
                hold["armed"] = False
                with h.saver.lock:
                    hold["began"] = time.monotonic()
                    hold["release"].wait(seconds)
            return put(*args, **kwargs)

        monkeypatch.setattr(h.saver, "put", slow_put)
    return hold


# -- 1. no effect after the lease is gone ---------------------------------------------


def stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP), by its state in /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.crash
@pytest.mark.timeout(600)
def test_a_worker_stalled_after_an_intent_does_not_call_once_its_run_was_taken_over(
    fresh: tuple[str, str], tmp_path: Path
) -> None:
    """A worker stopped right after it stored s2's intent (a partition, a frozen VM)
    loses its lease; another worker takes the run over and settles the effect. The
    first, continued, must not call: every effect is performed exactly once."""
    duplicated: dict[int, dict[str, int]] = {}
    for trial in range(TRIALS):
        service = tmp_path / f"trial-{trial}"
        service.mkdir()
        extra = ["--async"] if trial % 2 else []
        [run_id] = submit(fresh, service, 1, f"stall-{uuid.uuid4().hex[:8]}")
        stalled = work(fresh, service, "--stop-after-intent", "s2", *extra)
        try:
            wait_for(
                lambda log=service / "stopped.log", pid=stalled.pid: log.exists() and stopped(pid),
                what="the worker to stop right after s2's intent",
            )
            rescuer = work(fresh, service, *extra)
            assert result(rescuer) == {run_id: "success"}
        finally:
            os.kill(stalled.pid, signal.SIGCONT)
        err = finished_nothing(stalled)
        assert f"run {run_id} lost by this worker" in err, err
        counted = Counter(calls(service))
        if any(n != 1 for n in counted.values()):
            duplicated[trial] = {k: n for k, n in counted.items() if n != 1}
        assert len(counted) == 5  # every step's effect delivered
    assert duplicated == {}, f"effects repeated in {len(duplicated)} of {TRIALS} trials"


async def test_an_effect_whose_lease_cannot_be_proven_is_not_called(
    h: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[str] = []

    @side_effect
    def send(step: str) -> str:
        sent.append(step)
        return step

    def behaviour(name: str, state: Any) -> None:
        if name == "b":
            task = TaskContext.current()
            assert task is not None and task.fence is not None
            proof = LEASES.get(task.fence)
            assert proof is not None
            # As if this process had been stalled past its lease since its last renewal.
            proof.deadline = Instant.now().after(-0.5)
        send(name)

    worker = Worker(pipeline(behaviour), checkpointer=h.saver, lease_ttl=30)
    run_id = await submit_to(h, worker)
    task = asyncio.ensure_future(run_worker(h, worker))
    await until(lambda: f"run {run_id} lost by this worker" in caplog.text, what="the loss")
    worker.drain()  # the run is left to its lease: until_idle would wait for it
    assert await asyncio.wait_for(task, 10) == {}
    assert sent == ["a"]
    assert "'send'" in caplog.text and "was not called" in caplog.text
    assert "its lease ran out" in caplog.text


def test_check_lease_calls_only_with_a_margin_left_on_the_boot_clock() -> None:
    at = Instant(monotonic=100.0, wall=1_000.0)
    proof = Proof(deadline=at.after(10), margin=3)
    assert check_lease(proof, at).verdict == "call"
    assert check_lease(proof, at.after(6.9)).verdict == "call"
    waiting = check_lease(proof, at.after(8))
    assert waiting.verdict == "wait" and 0 < waiting.seconds <= 0.05
    assert check_lease(proof, at.after(10)).verdict == "lost"
    # A wall clock stepped forward moves no store's lease (SQLite judges by the boot
    # clock too), so it ends no proof; a step back does not stretch it either.
    assert check_lease(proof, Instant(100.0, 1_011.0)).verdict == "call"
    assert check_lease(proof, Instant(110.5, 900.0)).verdict == "lost"
    assert check_lease(None, at).verdict == "lost"
    proof.lost = "another worker took the lease over"
    assert check_lease(proof, at) == ("lost", 0.0, "another worker took the lease over")


# -- 2. a store outage never ends a run as error ----------------------------------------


async def test_a_run_cut_off_from_the_store_is_released_and_run_again(
    h: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cut = {"left": 0, "failed": 0}

    def behaviour(name: str, state: Any) -> None:
        if name == "b" and not cut["failed"]:
            cut["left"] = 1  # the checkpoint after b cannot be stored

    def refuse() -> None:
        cut["left"] -= 1
        cut["failed"] += 1
        raise StoreUnavailable("the store is down (test)", target="test", attempts=8)

    if h.is_async:
        aput = h.saver.aput

        async def failing_aput(*args: Any, **kwargs: Any) -> Any:
            if cut["left"]:
                refuse()
            return await aput(*args, **kwargs)

        monkeypatch.setattr(h.saver, "aput", failing_aput)
    else:
        put = h.saver.put

        def failing_put(*args: Any, **kwargs: Any) -> Any:
            if cut["left"]:
                refuse()
            return put(*args, **kwargs)

        monkeypatch.setattr(h.saver, "put", failing_put)
    worker = Worker(pipeline(behaviour), checkpointer=h.saver, lease_ttl=5, poll_interval=0.05)
    run_id = await submit_to(h, worker)
    assert await run_worker(h, worker) == {run_id: "success"}
    record = await h.call("read_run", run_id)
    assert (record.status, record.attempts, record.recoveries) == ("success", 2, 0)
    values = h.saver.serde.loads_typed((record.outcome_type, record.outcome))["values"]
    assert values["done"] == STEPS
    assert cut["failed"] == 1
    assert f"run {run_id}: the store was unreachable" in caplog.text


async def test_a_runs_end_that_cannot_be_stored_is_tried_again_not_turned_into_an_error(
    h: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sql_only(h, "refuses the run's end through the SQL run statements (_runs.finish_run)")
    finish = _runs.finish_run
    refused: list[str] = []

    def flaky_finish(d: Any, fence: Any, status: str, outcome: Any, wait: Any = None) -> Any:
        if len(refused) < 2:
            refused.append(status)
            raise StoreUnavailable("the store is down (test)", target="test", attempts=8)
        return finish(d, fence, status, outcome, wait)

    monkeypatch.setattr(_runs, "finish_run", flaky_finish)
    worker = Worker(pipeline(), checkpointer=h.saver, lease_ttl=5)
    run_id = await submit_to(h, worker)
    assert await run_worker(h, worker) == {run_id: "success"}
    assert refused == ["success", "success"]
    record = await h.call("read_run", run_id)
    assert (record.status, record.attempts, record.recoveries) == ("success", 1, 0)


def held_run(**record: Any) -> Held:
    fields: dict[str, Any] = {
        "run_id": "r1",
        "thread_id": "t1",
        "status": "running",
        "owner": "w",
        "fencing_token": 1,
        "lease_expires_at": 0.0,
        "attempts": 1,
        "recoveries": 0,
        "input_type": None,
        "input": None,
        "budget_type": None,
        "budget": None,
        "outcome_type": None,
        "outcome": None,
        "created_at": 0.0,
        "updated_at": 0.0,
        **record,
    }
    return Held(RunRecord(**fields), proof=Proof(deadline=Instant.now().after(30), margin=10))


@pytest.mark.parametrize(
    "error",
    [
        StoreUnavailable("down", target="db", attempts=8),
        sqlite3.OperationalError("database is locked"),
        psycopg.OperationalError("server closed the connection unexpectedly"),
    ],
    ids=["StoreUnavailable", "sqlite-locked", "psycopg-closed"],
)
def test_run_steps_release_a_run_the_store_cut_off(error: BaseException) -> None:
    held = held_run()
    steps = run_steps(held, {"done": []}, None, 3)
    assert isinstance(next(steps), ThreadState)
    steps.send(Where("new"))
    op = steps.send(Invoked(error=error))
    assert isinstance(op, Finish) and op.status == "queued"
    assert "store was unreachable" in op.outcome["released"]
    assert steps.send(None) == Pause(0.1)  # the store still cannot be reached
    assert isinstance(steps.send(None), Finish)
    with pytest.raises(StopIteration) as stop:
        steps.send(True)
    assert stop.value.value == "queued"


def test_run_steps_end_other_errors_and_lost_leases_as_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    held = held_run()
    steps = run_steps(held, None, None, 3)
    next(steps)
    steps.send(Where("resume"))
    op = steps.send(Invoked(error=ValueError("a bug")))
    assert isinstance(op, Finish) and op.status == "error"
    held = held_run(run_id="r2")
    steps = run_steps(held, None, None, 3)
    next(steps)
    steps.send(Where("resume"))
    with pytest.raises(StopIteration) as stop:
        steps.send(Invoked(error=LeaseLost("refused (test)")))
    assert stop.value.value is None and held.taken
    assert "run r2 lost by this worker: its write or side effect was refused" in caplog.text


# -- 3. idempotent retries ------------------------------------------------------------


async def twice(h: Any, statements: Any) -> list[Any]:
    """Run a store operation's statements twice, each in its own transaction: a
    retry after a commit whose reply was lost with the connection."""
    if h.is_async:
        return [await h.saver._write(statements) for _ in range(2)]
    return [await asyncio.to_thread(h.saver._write, statements) for _ in range(2)]


async def test_a_retried_submit_whose_first_try_committed_finds_its_own_run(h: Any) -> None:
    sql_only(h, "replays the SQL statements of a submit twice, each in a transaction")
    d = h.saver._dialect
    run_id, thread = str(uuid.uuid4()), f"retried-{uuid.uuid4()}"
    assert await twice(h, lambda: _runs.submit_run(d, run_id, thread, None, None)) == [None, None]
    assert [r.run_id for r in await h.call("list_runs") if r.thread_id == thread] == [run_id]
    with pytest.raises(RunStateError, match="already has an open run"):
        await h.call("runs.submit", str(uuid.uuid4()), thread, None, None)
    with pytest.raises(ConfigError, match="already taken"):
        await h.call("runs.submit", run_id, f"other-{uuid.uuid4()}", None, None)


async def test_a_retried_claim_whose_first_try_committed_returns_its_own_runs(h: Any) -> None:
    sql_only(h, "replays the SQL statements of a claim twice, each in a transaction")
    d = h.saver._dialect
    worker = Worker(pipeline(), checkpointer=h.saver)
    ids = {await submit_to(h, worker) for _ in range(2)}
    token = uuid.uuid4().hex
    first, retried = await twice(h, lambda: _runs.claim_runs(d, "worker-a", 5, 30.0, token))
    assert {r.run_id for r in first} == ids == {r.run_id for r in retried}
    for record in await h.call("list_runs"):
        assert (record.fencing_token, record.attempts, record.recoveries) == (1, 1, 0)
        assert (record.owner, record.claim_token) == ("worker-a", token)
    assert await h.call("runs.claim", "worker-b", 5, 30.0) == []  # held, not claimable


async def test_claims_take_expired_leases_before_queued_runs(h: Any) -> None:
    worker = Worker(pipeline(), checkpointer=h.saver)
    queued = await submit_to(h, worker)  # the older one
    await asyncio.sleep(0.01)
    expired = await submit_to(h, worker)
    if h.backend == "redis":  # the same edit, of the saver's keys
        from redis_servers import patch_run

        patch_run(
            h.target, expired, status="running", fencing_token=1, owner="dead", lease_expires_at=0
        )
    else:
        sql(
            h.backend,
            h.target,
            "UPDATE resilience_runs SET status = 'running', "
            "fencing_token = 1, owner = 'dead', lease_expires_at = 0 WHERE run_id = ?",
            (expired,),
        )
    [first] = await h.call("runs.claim", "worker-a", 1, 30.0)
    assert (first.run_id, first.recoveries) == (expired, 1)
    [second] = await h.call("runs.claim", "worker-a", 1, 30.0)
    assert (second.run_id, second.recoveries) == (queued, 0)


# -- 4. renewals never wait behind a hung write; a drain is bounded ----------------------


async def test_renewals_go_on_while_a_write_hangs_holding_the_savers_lock(
    h: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sql_only(h, "hangs a write holding the SQL saver's connection lock, reads the lease by SQL")
    hold = hang_puts(h, monkeypatch, seconds=1.5)  # more than twice the lease

    def behaviour(name: str, state: Any) -> None:
        if name == "b":
            hold["armed"] = True  # the checkpoint after b hangs

    worker = Worker(pipeline(behaviour), checkpointer=h.saver, lease_ttl=0.6)
    run_id = await submit_to(h, worker)
    task = asyncio.ensure_future(run_worker(h, worker))
    left: list[tuple[float, float]] = []  # (since the hang began, lease left)
    while not task.done():
        found = await asyncio.to_thread(lease_left, h, run_id)
        if found is not None and hold["began"] is not None:
            left.append((time.monotonic() - hold["began"], found))
        await asyncio.sleep(0.03)
    assert await task == {run_id: "success"}
    during = [lease for since, lease in left if since < 1.4]
    assert len(during) >= 10, left
    assert min(during) > 0, f"the lease ran out while the write hung: {left}"
    assert "could not be renewed" not in caplog.text


async def test_a_drain_returns_within_its_timeout_while_a_write_hangs(
    h: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sql_only(h, "hangs a write holding the SQL saver's connection lock")
    hold = hang_puts(h, monkeypatch, seconds=30)

    def behaviour(name: str, state: Any) -> None:
        if name == "b":
            hold["armed"] = True

    worker = Worker(pipeline(behaviour), checkpointer=h.saver, lease_ttl=3, drain_timeout=0.5)
    run_id = await submit_to(h, worker)
    task = asyncio.ensure_future(run_worker(h, worker))
    try:
        await until(lambda: hold["began"] is not None, what="the write to hang")
        began = time.monotonic()
        worker.drain("test")
        # given back (queued, for another worker) within drain_timeout + one store call
        assert await asyncio.wait_for(task, 10) == {run_id: "queued"}
        assert time.monotonic() - began < 0.5 + 1.0
        proof_gone = LEASES.get(held_fence(h, run_id))
        assert proof_gone is None or proof_gone.lost is not None  # its effects would not call
    finally:
        hold["release"].set()
        if "arelease" in hold:
            hold["arelease"].set()
    # The run was given back at once (the worker's lease saver reached the store
    # while the step's write hung): another worker may claim it now, not after its lease.
    assert (await h.call("read_run", run_id)).status == "queued"
    await until(lambda: not any(t.name == f"lgr-run-{run_id}" for t in threading.enumerate()))


def held_fence(h: Any, run_id: str) -> Any:
    [(token,)] = sql(
        h.backend, h.target, "SELECT fencing_token FROM resilience_runs WHERE run_id = ?", (run_id,)
    )
    return _runs.Fence(run_id=run_id, token=int(token))


@pytest.mark.parametrize("given_back", [True, False], ids=["given-back", "store-down"])
def test_the_loop_abandons_runs_a_drain_waited_for_too_long(given_back: bool) -> None:
    now = [Instant(0.0, 0.0)]
    settings = LoopSettings(
        lease_ttl=3.0, poll_interval=0.1, concurrency=1, until_idle=True, drain_timeout=1.0
    )
    held: dict[str, Held] = {}
    draining = [False]
    asked: list[float | None] = [None]
    loop = worker_loop(settings, held, lambda: draining[0], lambda: now[0], lambda: asked[0])
    assert next(loop) == ClaimRuns(1)
    run = held_run()
    assert isinstance(loop.send([run.record]), Start)
    proof = held["r1"].proof
    assert proof.deadline == pytest.approx((3.0, 3.0)) and proof.margin == 1.0
    assert isinstance(loop.send(None), Wait)
    now[0] = now[0].after(1.1)  # a beat is due: the renewal is sent at 1.1
    assert isinstance(loop.send([]), Renew)
    now[0] = now[0].after(0.2)
    draining[0] = True  # the renewal came back (kept), and a drain began
    asked[0] = now[0].monotonic
    assert isinstance(loop.send(["r1"]), Wait)
    assert proof.deadline == pytest.approx((4.1, 4.1))  # from when the renewal was sent
    now[0] = now[0].after(0.5)
    assert isinstance(loop.send([]), Wait)  # waited 0.5 s of its 1 s
    now[0] = now[0].after(0.6)  # a beat is due too, but no renewal begins past the drain
    fence = held["r1"].fence
    assert loop.send([]) == Abandon(("r1",), (fence,))
    assert proof.lost is not None and "drain waited" in proof.lost
    with pytest.raises(StopIteration) as stop:
        loop.send(["r1"] if given_back else None)  # None: the store could not take it back
    assert stop.value.value == {"r1": "queued" if given_back else "running"}


# -- 5. a lost run is logged --------------------------------------------------------------


@pytest.mark.parametrize("how", ["taken", "deleted"])
async def test_a_worker_that_loses_its_run_through_a_refused_write_says_so(
    h: Any, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    ids: list[str] = []

    def behaviour(name: str, state: Any) -> None:
        if name == "b" and h.backend == "redis":  # the same edits, of the saver's keys
            from redis_servers import drop_runs_of, patch_run, run_record

            if how == "taken":
                found = run_record(h.target, ids[0])
                assert found is not None
                patch_run(h.target, ids[0], fencing_token=int(str(found[1]["fencing_token"])) + 1)
            else:
                drop_runs_of(h.target, ids[0])
        elif name == "b":
            if how == "taken":
                query = "UPDATE resilience_runs SET fencing_token = fencing_token + 1 "
                query += "WHERE run_id = ?"
            else:  # as delete_thread does
                query = "DELETE FROM resilience_runs WHERE run_id = ?"
            sql(h.backend, h.target, query, (ids[0],))

    # A long lease: the heartbeat does not notice first; the refused write does.
    worker = Worker(pipeline(behaviour), checkpointer=h.saver, lease_ttl=30)
    ids.append(await submit_to(h, worker))
    task = asyncio.ensure_future(run_worker(h, worker))
    await until(lambda: f"run {ids[0]} lost by this worker" in caplog.text, what="the log line")
    worker.drain()
    assert await asyncio.wait_for(task, 10) == {}
    reason = "token is now 2" if how == "taken" else "the run is gone"
    assert "refused" in caplog.text and reason in caplog.text
    assert any(r.levelname == "WARNING" and ids[0] in r.getMessage() for r in caplog.records)
