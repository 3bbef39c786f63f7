"""Workers as real processes on one Redis (the machine's, under a key prefix of
the test's own): a worker SIGKILLed mid-run is taken over after its lease, the
steps it finished are not run again, and a SIGSTOPped worker (a zombie) whose
run was taken over can no longer write when it wakes (its fenced writes are
refused by the saver's scripts: `LeaseLost`), its effects and failed tries as
its checkpoints.

The worker is ``tests/scripts/lease_worker.py`` (five steps, one outside call
each, a ``side_effect`` on the Redis savers' effect ledger): every call is made
once, the step in flight when its worker died too, and no finished step is redone.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import assert_no_fork
from lease_worker import STEPS
from redis_servers import REDIS_DOWN, REDIS_URL, expire_run_lease, flush_prefix, run_record
from test_worker_crash import (
    POLL,
    TTL,
    assert_each_effect_once,
    calls,
    finished_nothing,
    result,
    steps,
    submit,
    wait_for,
    work,
)

from langgraph_resilience.checkpoint import AttemptRecord, EffectRecord, Fence, OutcomeFields
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.aio import AsyncResilientRedisSaver
from langgraph_resilience.errors import LeaseLost

pytestmark = [pytest.mark.crash, pytest.mark.skipif(REDIS_DOWN is not None, reason=str(REDIS_DOWN))]


@pytest.fixture
def store() -> Iterator[tuple[str, str]]:
    """("redis", a key prefix of this test's own), flushed after it."""
    prefix = f"k{uuid.uuid4().hex[:12]}"
    try:
        yield "redis", prefix
    finally:
        flush_prefix(prefix)


def record(store: tuple[str, str], run_id: str) -> dict[str, object]:
    found = run_record(store[1], run_id)
    assert found is not None, run_id
    return found[1]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_killed_workers_run_is_taken_over_on_redis_and_its_steps_not_redone(
    store: tuple[str, str], tmp_path: Path, mode: str
) -> None:
    runs = 2
    ids = submit(store, tmp_path, runs, "kill")
    extra = ["--async"] if mode == "async" else []
    workers = [work(store, tmp_path, "--step-sleep", "0.3", *extra) for _ in range(2)]
    victim_pid = wait_for(
        lambda: next(
            (p for _, s, what, p, _ in steps(tmp_path) if what == "start" and s == "s3"), None
        ),
        what="a worker to reach s3",
    )
    victim = next(w for w in workers if w.pid == victim_pid)
    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.time()
    victim.wait()
    [survivor] = [w for w in workers if w is not victim]
    left = result(survivor)
    assert set(left.values()) == {"success"}
    records = {r: record(store, r) for r in ids}
    assert {r["status"] for r in records.values()} == {"success"}
    taken = [r for r in records.values() if int(str(r["recoveries"])) > 0]
    assert len(taken) == 1, records  # the victim's run, and only it
    [run] = taken
    assert int(str(run["fencing_token"])) == 2 and int(str(run["attempts"])) == 2
    thread = str(run["thread_id"])
    log = steps(tmp_path)
    resumed = min(at for t, _, _, p, at in log if t == thread and p != victim_pid)
    assert resumed - killed_at < TTL + POLL + 2.0, resumed - killed_at  # after the lease
    by_victim = {s for t, s, what, p, _ in log if t == thread and what == "end" and p == victim_pid}
    by_peer = [s for t, s, what, p, _ in log if t == thread and what == "end" and p != victim_pid]
    assert {"s1", "s2"} <= by_victim  # it died in s3
    assert len(by_victim & set(by_peer)) <= 1  # at most the step in flight, again
    assert len(by_peer) == len(set(by_peer)) and by_victim | set(by_peer) == set(STEPS)
    assert_each_effect_once(tmp_path, [f"kill-{i}" for i in range(runs)])  # s3's too
    for i in range(runs):
        assert_no_fork(*store, f"kill-{i}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_zombie_worker_cannot_write_on_redis_after_its_run_was_taken_over(
    store: tuple[str, str], tmp_path: Path, mode: str
) -> None:
    from redis_servers import checkpoint_parents, expire_run_lease

    extra = ["--async"] if mode == "async" else []
    [run_id] = submit(store, tmp_path, 1, "zombie")
    thread = "zombie-0"
    zombie = work(store, tmp_path, "--slow", "s2:3", *extra)
    wait_for(
        lambda: any(s == "s2" for _, s, *_ in steps(tmp_path)) and len(calls(tmp_path)) >= 2,
        what="the zombie to make s2's call",
    )
    os.kill(zombie.pid, signal.SIGSTOP)
    try:
        expire_run_lease(store[1], run_id)  # while it sleeps, its lease runs out
        rescuer = work(store, tmp_path, *extra)
        assert result(rescuer) == {run_id: "success"}
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    heads = set(checkpoint_parents(store[1], thread))
    err = finished_nothing(zombie)
    assert "lost by this worker" in err or "LeaseLost" in err, err
    # Woken, it stored nothing: its checkpoint after s2 was refused by the fence.
    assert set(checkpoint_parents(store[1], thread)) == heads
    assert int(str(record(store, run_id)["fencing_token"])) == 2
    by_step: dict[str, list[int]] = {}
    for _, s, what, p, _ in steps(tmp_path):
        if what == "end":
            by_step.setdefault(s, []).append(p)
    assert rescuer.pid in by_step["s2"] and by_step["s2"].count(zombie.pid) <= 1
    assert all(by_step[s] == [rescuer.pid] for s in ("s3", "s4", "s5"))
    assert_each_effect_once(tmp_path, [thread])  # s2's call, made by the zombie, not again
    assert_no_fork(*store, thread)


@pytest.mark.timeout(300)
def test_a_worker_killed_on_this_machine_is_taken_over_on_redis_at_the_next_poll(
    store: tuple[str, str], tmp_path: Path
) -> None:
    """As test_takeover's: the claim names its process, and a peer on the same
    machine that finds it gone takes the run over at its next poll, fenced as for
    an expired lease, long before the 30 s lease ends."""
    from test_takeover import PROMPT
    from test_worker_crash import start

    [run_id] = submit(store, tmp_path, 1, "prompt")
    default = ("--lease-ttl", "30", "--step-sleep", "1.5")
    victim = start(store, tmp_path, "work", *default)
    wait_for(
        lambda: any(s == "s2" and what == "start" for _, s, what, *_ in steps(tmp_path)),
        what="the victim to reach s2",
    )
    go = tmp_path / "go"
    go.touch()
    peer = start(store, tmp_path, "work", *default, "--go", str(go))
    wait_for(lambda: (tmp_path / "ready.log").exists(), what="the peer to start")
    time.sleep(1.2)  # it polls once at least: it runs beside the victim

    def token() -> int:
        return int(str(record(store, run_id)["fencing_token"]))

    assert token() == 1
    os.kill(victim.pid, signal.SIGKILL)
    killed = time.monotonic()
    victim.wait()
    wait_for(lambda: token() == 2, timeout=40, what="a takeover")
    latency = time.monotonic() - killed
    assert latency < PROMPT, latency
    assert result(peer) == {run_id: "success"}
    assert int(str(record(store, run_id)["recoveries"])) == 1
    by_peer = [s for _, s, what, p, _ in steps(tmp_path) if what == "start" and p == peer.pid]
    assert by_peer and by_peer[0] in ("s2", "s3")  # resumed, not started over


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_worker_rides_out_its_redis_sigkilled_and_restarted_from_its_aof(
    tmp_path: Path, mode: str
) -> None:
    """A private ``redis-server`` (``appendfsync always``) SIGKILLed while a Worker
    runs a run, and started again from its AOF: the worker's calls are retried
    until it answers, the run ends ``success``, and every step ran once."""
    import shutil

    from redis_servers import PrivateRedis

    from langgraph_resilience.checkpoint.redis import ResilientRedisSaver

    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server on PATH")
    (tmp_path / "redis").mkdir()
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    try:
        store = ("redis", f"{server.url}#aof")
        [run_id] = submit(store, tmp_path, 1, "aof")
        extra = ["--async"] if mode == "async" else []
        worker = work(store, tmp_path, "--lease-ttl", "5", "--step-sleep", "0.3", *extra)
        wait_for(
            lambda: any(s == "s3" and what == "start" for _, s, what, *_ in steps(tmp_path)),
            what="the worker to reach s3",
        )
        server.kill()
        killed = time.time()
        time.sleep(0.5)
        server.start()  # replays its AOF
        assert result(worker) == {run_id: "success"}
        # Mid-run: its steps s3..s5 ended (and were stored) after the kill.
        assert {s for _, s, what, _, at in steps(tmp_path) if what == "end" and at > killed} >= {
            "s4",
            "s5",
        }
        ended = [s for _, s, what, *_ in steps(tmp_path) if what == "end"]
        assert sorted(ended) == sorted(STEPS)  # each step once: none redone
        assert_each_effect_once(tmp_path, ["aof-0"])
        with ResilientRedisSaver.from_conn_string(server.url, prefix="aof") as saver:
            found = saver.read_run(run_id)
            assert found is not None and (found.status, found.recoveries) == ("success", 0)
    finally:
        server.kill()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_worker_stalled_after_an_intent_on_redis_does_not_call_once_taken_over(
    store: tuple[str, str], tmp_path: Path, mode: str
) -> None:
    """As test_worker_faults': a worker SIGSTOPped right after it stored s2's intent
    loses its run; a peer takes it over and settles the effect; the first, woken,
    does not call: every effect once."""
    from test_worker_faults import stopped

    extra = ["--async"] if mode == "async" else []
    [run_id] = submit(store, tmp_path, 1, "stall")
    stalled = work(store, tmp_path, "--stop-after-intent", "s2", *extra)
    try:
        wait_for(
            lambda: (tmp_path / "stopped.log").exists() and stopped(stalled.pid),
            what="the worker to stop right after s2's intent",
        )
        rescuer = work(store, tmp_path, *extra)  # claims the run once its lease ran out
        assert result(rescuer) == {run_id: "success"}
    finally:
        os.kill(stalled.pid, signal.SIGCONT)
    err = finished_nothing(stalled)
    assert f"run {run_id} lost by this worker" in err, err
    assert_each_effect_once(tmp_path, ["stall-0"])


# -- a stale worker's effects and failed tries, refused by the fence -----------------------

TRY = ("job", "", "c1", "task")


def _intent(key: str) -> EffectRecord:
    return EffectRecord(idempotency_key=key, name="charge", status="intent", intent_at=time.time())


def _done() -> OutcomeFields:
    return OutcomeFields("done", time.time(), "json", b'"charged"', None, "called")


def _failed() -> AttemptRecord:
    return AttemptRecord(attempt=1, node="n", finished_at=time.time())


def test_a_stale_workers_effects_and_failed_tries_are_refused_on_redis(
    store: tuple[str, str],
) -> None:
    """A worker whose run was taken over (its lease ran out, a peer claimed it: the
    token is now 2) can store no intent, no outcome and no failed try under its
    old fence: each is refused in the script that would write it, nothing stored;
    the new holder's are stored."""
    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=store[1]) as saver:
        saver.runs.submit("r1", "job", None, None)
        [held] = saver.runs.claim("w1", 1, 30.0)
        stale = Fence(run_id="r1", token=held.fencing_token)
        assert saver.effects.claim("job", _intent("k1"), None, 30.0, fence=stale).verdict == "new"
        expire_run_lease(store[1], "r1")
        [taken] = saver.runs.claim("w2", 1, 30.0)
        fresh = Fence(run_id="r1", token=taken.fencing_token)
        assert fresh.token == stale.token + 1
        with pytest.raises(LeaseLost, match=r"fencing token 1.*token is now 2"):
            saver.effects.record("job", "k1", _done(), fence=stale)
        with pytest.raises(LeaseLost):
            saver.effects.claim("job", _intent("k2"), None, 30.0, fence=stale)
        with pytest.raises(LeaseLost):
            saver.attempts.record(TRY, _failed(), time.time(), fence=stale)
        found = saver.effects.read("job", "k1")
        assert found is not None and found.status == "intent"  # the stale outcome: not stored
        assert saver.effects.read("job", "k2") is None and saver.attempts.read(TRY) == []
        saver.effects.record("job", "k1", _done(), fence=fresh)
        saver.attempts.record(TRY, _failed(), time.time(), fence=fresh)
        found = saver.effects.read("job", "k1")
        assert found is not None and found.status == "done"
        assert [a.attempt for a in saver.attempts.read(TRY)] == [1]


async def test_a_stale_workers_effects_and_failed_tries_are_refused_on_async_redis(
    store: tuple[str, str],
) -> None:
    async with AsyncResilientRedisSaver.from_conn_string(REDIS_URL, prefix=store[1]) as saver:
        await saver.runs.asubmit("r1", "job", None, None)
        [held] = await saver.runs.aclaim("w1", 1, 30.0)
        stale = Fence(run_id="r1", token=held.fencing_token)
        verdict = await saver.effects.aclaim("job", _intent("k1"), None, 30.0, fence=stale)
        assert verdict.verdict == "new"
        expire_run_lease(store[1], "r1")
        [taken] = await saver.runs.aclaim("w2", 1, 30.0)
        fresh = Fence(run_id="r1", token=taken.fencing_token)
        with pytest.raises(LeaseLost, match=r"fencing token 1.*token is now 2"):
            await saver.effects.arecord("job", "k1", _done(), fence=stale)
        with pytest.raises(LeaseLost):
            await saver.effects.aclaim("job", _intent("k2"), None, 30.0, fence=stale)
        with pytest.raises(LeaseLost):
            await saver.attempts.arecord(TRY, _failed(), time.time(), fence=stale)
        found = await saver.effects.aread("job", "k1")
        assert found is not None and found.status == "intent"
        assert await saver.effects.aread("job", "k2") is None
        assert await saver.attempts.aread(TRY) == []
        await saver.effects.arecord("job", "k1", _done(), fence=fresh)
        await saver.attempts.arecord(TRY, _failed(), time.time(), fence=fresh)
        found = await saver.effects.aread("job", "k1")
        assert found is not None and found.status == "done"
