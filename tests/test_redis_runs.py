"""The run queue on Redis (`checkpoint.redis.ledger._runs`): what the Worker tests do
not reach. A crash between a script and its queue index write loses no run, a
claim retried after a lost reply claims nothing more, a run id stays with its
thread, a deleted thread's runs go with it, and a run's record is in its
thread's slot (Redis Cluster).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import redis
from redis.crc import key_slot
from redis_servers import REDIS_DOWN, REDIS_URL, expire_run_lease, flush_prefix

import langgraph_resilience.checkpoint.redis.ledger._runs as _runs
from langgraph_resilience.checkpoint import Fence
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.store._keys import thread_keys
from langgraph_resilience.errors import ConfigError, LeaseLost

pytestmark = pytest.mark.skipif(REDIS_DOWN is not None, reason=REDIS_DOWN or "")


@pytest.fixture
def saver() -> Iterator[ResilientRedisSaver]:
    prefix = f"q{uuid_hex()}"
    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as s:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            s.setup()
        yield s
    flush_prefix(prefix)


def uuid_hex() -> str:
    import uuid

    return uuid.uuid4().hex[:10]


def index(saver: ResilientRedisSaver, which: str) -> list[bytes]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        return list(client.zrange(f"{saver.place.prefix}:runs:{which}", 0, -1))
    finally:
        client.close()


def test_a_claim_cut_off_before_its_index_write_loses_no_run(saver: ResilientRedisSaver) -> None:
    saver.runs.submit("r1", "t1", None, None)
    # The claim's script runs; its process dies before the index write after it.
    op = _runs.claim(saver.place, "dead", 1, 30.0, "tok")
    batch = next(op)
    batch = op.send(saver._run(_one(batch)))
    batch = op.send(saver._run(_one(batch)))
    claim_replies = saver._run(_one(batch))
    assert int(claim_replies[0][0]) == 1  # claimed, and the generator is dropped here
    assert index(saver, "queued") == [b"t1\0r1"] and index(saver, "leased") == []
    assert saver.runs.claim("live", 1, 30.0) == []  # held: the stale entry is only looked at
    assert index(saver, "leased") == [b"t1\0r1"]  # and repaired
    expire_run_lease(saver.place.prefix, "r1")
    [taken] = saver.runs.claim("live", 1, 30.0)
    assert (taken.owner, taken.fencing_token, taken.recoveries) == ("live", 2, 1)
    assert saver.runs.finish(Fence(run_id="r1", token=2), "success", None)
    assert saver.active_runs() == 0 and index(saver, "leased") == []


def _one(batch: list[tuple[object, ...]]) -> object:
    """An op that sends ``batch`` once and returns its replies."""

    def op() -> object:
        return (yield batch)

    return op()


def test_a_claim_retried_after_a_lost_reply_claims_nothing_more(
    saver: ResilientRedisSaver,
) -> None:
    """The driver sends a batch again after a lost reply: the claim's scripts,
    run twice, take the run once (the claim's token names it)."""
    saver.runs.submit("r1", "t1", None, None)
    saver.runs.submit("r2", "t2", None, None)
    op = _runs.claim(saver.place, "w", 1, 30.0, "one-claim")
    batch = next(op)
    batch = op.send(saver._run(_one(batch)))
    batch = op.send(saver._run(_one(batch)))
    saver._run(_one(batch))  # stored; its reply lost
    replies = saver._run(_one(batch))  # sent again
    with pytest.raises(StopIteration) as done:
        op.send(saver._run(_one(op.send(replies))))
    [first] = done.value.value
    assert (first.run_id, first.fencing_token, first.attempts) == ("r1", 1, 1)
    assert [r.status for r in saver.list_runs()] == ["running", "queued"]


def test_a_run_id_stays_with_its_thread(saver: ResilientRedisSaver) -> None:
    saver.runs.submit("r1", "t1", ("json", b"1"), None)
    saver.runs.submit("r1", "t1", ("json", b"1"), None)  # a retry of the same submit: a no-op
    with pytest.raises(ConfigError, match="already taken by a run of thread 't1'"):
        saver.runs.submit("r1", "t2", None, None)
    [run] = saver.list_runs()
    assert (run.run_id, run.thread_id, run.input) == ("r1", "t1", b"1")


def test_a_deleted_threads_runs_go_with_it(saver: ResilientRedisSaver) -> None:
    saver.runs.submit("r1", "t1", None, None)
    saver.runs.submit("r2", "t2", None, None)
    saver.delete_thread("t1")
    assert [r.run_id for r in saver.list_runs()] == ["r2"]
    assert saver.read_run("r1") is None and saver.active_runs() == 1
    [claimed] = saver.runs.claim("w", 5, 30.0)
    assert claimed.run_id == "r2"
    saver.prune(["t2"], strategy="delete")
    assert saver.list_runs() == [] and index(saver, "leased") == []
    saver.runs.submit("r3", "t1", None, None)  # the thread takes a new run


def test_a_run_is_fenced_in_its_threads_slot(saver: ResilientRedisSaver) -> None:
    keys = thread_keys(saver.place.prefix, "job-7")
    slots = {key_slot(k.encode()) for k in (*keys, _runs.runs_key(saver.place.prefix, "job-7"))}
    assert len(slots) == 1  # one script checks the fence and writes, on Redis Cluster too
    saver.runs.submit("r1", "job-7", None, None)
    [held] = saver.runs.claim("w", 1, 30.0)
    assert saver.runs.cancel("r1", ("json", b'"stop"')) == "running"
    config = {
        "configurable": {
            "thread_id": "job-7",
            "checkpoint_ns": "",
            "__lgr_fence": Fence(run_id="r1", token=held.fencing_token),
        }
    }
    from langgraph.checkpoint.base import empty_checkpoint

    with pytest.raises(LeaseLost, match=r"fencing token 1.*token is now 2"):
        saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    assert saver.get_tuple({"configurable": {"thread_id": "job-7"}}) is None
