"""The effect ledger and the attempts ledger on Redis: what a user relies on.

The behaviour tests (`test_effects`, `test_effect_claims`, `test_effect_how`,
`test_settle`) run on the Redis savers too (conftest's ``REDIS_FILES``); here are
what only Redis has: the records' keys under the thread's hash tag, their TTL
and their move to the cold tier and back with the thread, and a crash of the
process and of a Redis server with an AOF (``LGR_FAULT_RUNS`` trials).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from graphs import DoneState
from redis.crc import key_slot
from redis_servers import REDIS_DOWN, REDIS_URL, PrivateRedis, flush_prefix, private_redis_server

from langgraph_resilience import NodePolicy, ResilientStateGraph, side_effect
from langgraph_resilience.checkpoint import EffectRecord, OutcomeFields
from langgraph_resilience.checkpoint.ledger._ledger import AttemptRecord
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.store._keys import thread_keys
from langgraph_resilience.errors import CheckpointCorrupt
from langgraph_resilience.policy import Backoff

needs_redis = pytest.mark.skipif(REDIS_DOWN is not None, reason=REDIS_DOWN or "")

FAULT_RUNS = int(os.environ.get("LGR_FAULT_RUNS", "3"))


@pytest.fixture
def prefix() -> Iterator[str]:
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    flush_prefix(name)


def _saver(prefix: str, **options: Any) -> Any:
    return ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix, **options)


def _intent(key: str) -> EffectRecord:
    return EffectRecord(idempotency_key=key, name="email", status="intent", intent_at=time.time())


def _done(value: bytes = b'"sent"') -> OutcomeFields:
    return OutcomeFields("done", time.time(), "json", value, None, "called")


@needs_redis
def test_a_side_effect_in_a_graph_on_redis_is_called_once_across_a_retry(prefix: str) -> None:
    calls: list[str] = []

    @side_effect
    def send(*, idempotency_key: str) -> str:
        calls.append(idempotency_key)
        return "sent"

    failed: list[bool] = []

    def notify(state: Any) -> dict[str, Any]:
        out = send()
        if not failed:
            failed.append(True)
            raise TimeoutError("after sending")  # transient: retried
        return {"done": [out]}

    g = ResilientStateGraph(DoneState)
    fast = Backoff(max_attempts=3, initial_interval=0.001, max_interval=0.01)
    g.add_node("notify", notify, policy=NodePolicy(retry=fast))
    g.set_entry_point("notify")
    with _saver(prefix) as saver:
        graph = g.compile(checkpointer=saver)
        out = graph.invoke({"done": []}, {"configurable": {"thread_id": "fx"}})
        assert out["done"] == ["sent"] and len(calls) == 1
        [record] = saver.list_effects("fx")
        assert (record.status, record.how, record.idempotency_key) == ("done", "called", calls[0])


@needs_redis
def test_effect_and_attempt_records_share_the_threads_slot_and_ttl(prefix: str) -> None:
    keys = thread_keys(prefix, "job-7")
    assert {key_slot(k.encode()) for k in keys} == {key_slot(keys.cp.encode())}
    client = redis.Redis.from_url(REDIS_URL)
    with _saver(prefix, ttl=30) as saver:
        saver.effects.claim("job-7", _intent("k1"), None, 30.0)
        saver.attempts.record(
            ("job-7", "", "c1", "task"), AttemptRecord(attempt=1, node="n"), time.time()
        )
        assert 0 < client.pttl(keys.fx) <= 30_000
        assert 0 < client.pttl(keys.at) <= 30_000
        client.pexpire(keys.fx, 1000)  # nearly expired ...
        saver.effects.record("job-7", "k1", _done())  # ... each write renews the thread's TTL
        assert client.pttl(keys.fx) > 20_000 and client.pttl(keys.at) > 20_000
        assert [a.node for a in saver.attempts.read(("job-7", "", "c1", "task"))] == ["n"]
        saver.delete_thread("job-7")  # the ledger goes with its thread
        assert client.exists(keys.fx, keys.at) == 0 and saver.list_effects("job-7") == []
    client.close()


@needs_redis
def test_effect_records_move_to_the_cold_tier_and_back_with_their_thread(
    prefix: str, tmp_path: Path
) -> None:
    from langgraph_resilience import Archive

    client = redis.Redis.from_url(REDIS_URL)
    keys = thread_keys(prefix, "paused")
    archive = Archive(f"file://{tmp_path}/cold")
    with _saver(prefix, ttl=0.2, archive=archive) as saver:
        saver.effects.claim("paused", _intent("k1"), None, 30.0)
        saver.effects.record("paused", "k1", _done())
        saver.attempts.record(
            ("paused", "", "c1", "t"), AttemptRecord(attempt=1, node="n"), time.time()
        )
        assert client.pttl(keys.fx) == -1  # with a cold tier, nothing expires
        time.sleep(0.3)
        assert saver.archive_idle().archived == ["paused"]
        assert client.exists(keys.fx, keys.at) == 0 and client.exists(keys.archived) == 1
        # a read of the ledger restores the thread first
        found = saver.effects.read("paused", "k1")
        assert found is not None and found.status == "done" and found.outcome == b'"sent"'
        assert client.exists(keys.archived) == 0
        assert [a.attempt for a in saver.attempts.read(("paused", "", "c1", "t"))] == [1]
        # and a claim on a demoted thread restores it too, finding the outcome
        time.sleep(0.3)
        assert saver.archive_idle().archived == ["paused"]
        assert saver.effects.claim("paused", _intent("k1"), None, 30.0).verdict == "done"
    client.close()


@needs_redis
def test_an_outcome_changed_in_redis_is_reported_corrupt(prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    with _saver(prefix) as saver:
        saver.effects.claim("t", _intent("k1"), None, 30.0)
        saver.effects.record("t", "k1", _done(b'"paid 10"'))
        keys = thread_keys(prefix, "t")
        record = json.loads(client.hget(keys.fx, "k1") or b"{}")
        record["outcome"] = "InBhaWQgOTAi"  # base64 of '"paid 90"'
        client.hset(keys.fx, "k1", json.dumps(record))
        with pytest.raises(CheckpointCorrupt, match="k1"):
            saver.effects.read("t", "k1")
    client.close()


# -- a private Redis with an AOF, SIGKILLed with the process ------------------------------


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    yield from private_redis_server(tmp_path)


@pytest.mark.faults
@pytest.mark.parametrize("trial", range(FAULT_RUNS))
def test_an_effect_survives_its_process_and_its_redis_sigkilled(
    private_redis: PrivateRedis, tmp_path: Path, trial: int
) -> None:
    """A seven-step pipeline charging a card in step 4; its process SIGKILLed right
    after the charge returned (or, every other pair of trials, during the call,
    after the outside system charged: before the outcome is stored), the Redis
    server SIGKILLed and restarted from its AOF; the resume replays the charge
    (or reconciles it): called once, the run a success. Odd trials run the async
    saver."""
    from helpers import read_ledger
    from spawn import spawn

    script = str(Path(__file__).parent / "scripts" / "redis_effect_pipeline.py")
    ledger, charges = tmp_path / "ledger", tmp_path / "charges"
    in_call = bool(trial // 2 % 2)
    mode = (["--async"] if trial % 2 else []) + (["--in-call"] if in_call else [])
    proc = spawn(script, private_redis.url, "job", str(ledger), str(charges), *mode)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL  # killed itself right after the charge
    assert [line[0] for line in read_ledger(charges)] == ["charge"]
    assert [line[0] for line in read_ledger(ledger)] == ["s1", "s2", "s3", "s4"]
    private_redis.kill()
    private_redis.start()  # from its AOF
    resumed = spawn(script, private_redis.url, "job", str(ledger), str(charges), *mode, "--resume")
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err[-2000:]
    result = json.loads(out.strip().splitlines()[-1])
    steps = [f"s{i}" for i in range(1, 8)]
    assert result["status"] == "success" and result["done"] == steps
    assert result["effects"] == [["charge", "done", "reconciled" if in_call else "called"]]
    assert len(read_ledger(charges)) == 1  # the charge was made once
    ran = [line[0] for line in read_ledger(ledger)]
    assert ran == ["s1", "s2", "s3", "s4", "s4", "s5", "s6", "s7"]  # s4 again, replaying


@needs_redis
def test_a_prune_drops_the_ledger_of_the_checkpoints_it_drops(prefix: str) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    def intent(key: str, checkpoint_id: str) -> EffectRecord:
        return EffectRecord(
            idempotency_key=key,
            name="email",
            status="intent",
            intent_at=time.time(),
            checkpoint_id=checkpoint_id,
        )

    with _saver(prefix) as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        ids = []
        for _ in range(2):
            config = saver.put(config, empty_checkpoint(), {}, {})
            ids.append(config["configurable"]["checkpoint_id"])
        for i, cid in enumerate(ids):
            saver.effects.claim("t", intent(f"k{i}", cid), None, 30.0)
            record = AttemptRecord(attempt=1, node="n")
            saver.attempts.record(("t", "", cid, "task"), record, time.time())
        saver.prune(["t"], strategy="keep_latest")
        assert [e.idempotency_key for e in saver.list_effects("t")] == ["k1"]
        assert saver.attempts.read(("t", "", ids[0], "task")) == []
        assert len(saver.attempts.read(("t", "", ids[1], "task"))) == 1


@needs_redis
def test_an_outcome_written_behind_rides_with_the_next_write_or_the_close(prefix: str) -> None:
    with _saver(prefix) as saver:
        saver.effects.claim("t", _intent("k1"), None, 30.0)
        saver.effects.defer("t", "k1", _done())
        with _saver(prefix) as other:  # not stored yet: another saver sees the intent
            assert [e.status for e in other.list_effects("t")] == ["intent"]
        assert saver.effects.read("t", "k1").status == "done"  # type: ignore[union-attr]
        saver.effects.claim("t", _intent("k2"), None, 30.0)  # the next write carries it
        with _saver(prefix) as other:
            assert [e.status for e in other.list_effects("t")] == ["done", "intent"]
        saver.effects.defer("t", "k2", _done())
    with _saver(prefix) as other:  # closing the saver stored the last one
        assert [e.status for e in other.list_effects("t")] == ["done", "done"]
