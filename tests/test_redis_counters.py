"""The save counters on Redis (`checkpoint.redis.store._counts`), side by side with SQLite.

- the same graph counts the same checkpoint and write tries on Redis as on
  SQLite, and `recovery_metrics` reads the same save success rate (sync and
  async);
- a try whose pipeline failed (a lost connection) is counted failed, rides with
  the next write into its script, and is read by another saver on the server;
- a refused put (a fork) counts nothing, and the failures waiting stay waiting;
- ``since`` reads the hours that end after it, as on SQL (counts are kept per
  hour).
"""

from __future__ import annotations

import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint
from redis_servers import REDIS_DOWN, REDIS_URL, flush_prefix
from test_redis_runlog import config, pipeline, two_async_savers, two_savers

import langgraph_resilience.checkpoint.redis.store._driver as _driver
from langgraph_resilience import arecovery_metrics, recovery_metrics
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.store._keys import counts_key
from langgraph_resilience.checkpoint.redis.store._scripts import PUT_WRITES
from langgraph_resilience.checkpoint.saver import _threads
from langgraph_resilience.checkpoint.store._counters import (
    CHECKPOINT_FAILED,
    CHECKPOINT_OK,
    WRITES_FAILED,
    WRITES_OK,
)
from langgraph_resilience.errors import CheckpointConflict

pytestmark = pytest.mark.skipif(REDIS_DOWN is not None, reason=REDIS_DOWN or "")


def _rate(m: Any) -> tuple[Any, ...]:
    return (
        m.checkpoint_save_success_rate,
        m.checkpoint_writes_tried,
        m.checkpoint_writes_succeeded,
        m.checkpoint_writes_failed,
    )


def test_a_run_counts_the_same_tries_on_redis_as_on_sqlite(tmp_path: Path) -> None:
    with two_savers(tmp_path) as (sql, red):
        seen = []
        for saver in (sql, red):
            graph = pipeline({"on": False}, saver)
            assert graph.invoke({"done": []}, config("t1"))["resilience"]["status"] == "success"
            seen.append((saver.read_counters(), _rate(recovery_metrics(saver))))
    on_sqlite, on_redis = seen
    assert on_redis[0][CHECKPOINT_OK] > 0 and on_redis[0][WRITES_OK] > 0
    assert on_redis[1][0] == 1.0
    assert on_redis == on_sqlite


async def test_a_run_counts_the_same_tries_on_async_redis(tmp_path: Path) -> None:
    async with two_async_savers(tmp_path) as (sql, red):
        seen = []
        for saver in (sql, red):
            graph = pipeline({"on": False}, saver)
            await graph.ainvoke({"done": []}, config("t1"))
            seen.append((await saver.aread_counters(), _rate(await arecovery_metrics(saver))))
    on_sqlite, on_redis = seen
    assert on_redis[0][CHECKPOINT_OK] > 0 and on_redis == on_sqlite


class _LoseOnce:
    """`_driver._run`, losing the connection once for the first batch that runs
    ``sha`` (the write's pipeline fails before the server sees it)."""

    def __init__(self, sha: str) -> None:
        self.sha, self.lost, self.real = sha, 0, _driver._run

    def __call__(self, conn: Any, batch: list[Any]) -> list[Any]:
        if not self.lost and any(c[0] == "EVALSHA" and c[1] == self.sha for c in batch):
            self.lost += 1
            raise redis.ConnectionError("lost (test)")
        return self.real(conn, batch)


def test_a_failed_try_is_counted_and_rides_with_the_next_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix = f"cn{uuid.uuid4().hex[:10]}"
    try:
        with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as red:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                red.setup()
            lose = _LoseOnce(PUT_WRITES.sha)
            monkeypatch.setattr(_driver, "_run", lose)
            graph = pipeline({"on": False}, red)
            assert graph.invoke({"done": []}, config("t1"))["resilience"]["status"] == "success"
            assert lose.lost == 1  # retried: the run went on
            mine = red.read_counters()
            assert mine[WRITES_FAILED] == 1 and mine[CHECKPOINT_FAILED] == 0
            with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as other:
                # stored on the server (another saver reads it), not only in memory
                assert other.read_counters() == mine
            m = recovery_metrics(red)
            assert m.checkpoint_writes_failed == 1
            assert m.checkpoint_save_success_rate == pytest.approx(
                1 - 1 / m.checkpoint_writes_tried
            )
    finally:
        flush_prefix(prefix)


def test_a_refused_put_counts_nothing_and_keeps_the_failures_waiting() -> None:
    prefix = f"cn{uuid.uuid4().hex[:10]}"
    try:
        with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as red:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                red.setup()
            head = red.put(config("f"), empty_checkpoint(), {}, {})
            _threads._VIEWS.set(None)
            red.put(head, empty_checkpoint(), {}, {})  # another writer advances the head
            before = red.read_counters()
            red._state.counters.add(CHECKPOINT_FAILED)  # a failed try waiting
            _threads.saw_head("f", "", head["configurable"]["checkpoint_id"])
            with pytest.raises(CheckpointConflict):
                red.put(head, empty_checkpoint(), {}, {})
            with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as other:
                assert other.read_counters() == before  # the refused try stored no count
            assert red.read_counters()[CHECKPOINT_FAILED] == 1  # still waiting here
            _threads._VIEWS.set(None)
            red.put(head, empty_checkpoint(), {}, {})  # a branch: stored, and counted
            with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as other:
                after = other.read_counters()
            assert after[CHECKPOINT_FAILED] == 1  # rode with it
            assert after[CHECKPOINT_OK] == before[CHECKPOINT_OK] + 1
    finally:
        flush_prefix(prefix)


def test_since_reads_the_hours_that_end_after_it(tmp_path: Path) -> None:
    with two_savers(tmp_path) as (_, red):
        pipeline({"on": False}, red).invoke({"done": []}, config("t1"))
        now = red.read_counters()
        hour = (int(time.time()) // 3600 - 3) * 3600  # three hours ago, as a field keeps it
        client = redis.Redis.from_url(REDIS_URL)
        client.hset(counts_key(red.place.prefix, "t1"), f"{CHECKPOINT_OK}@{hour}", 7)
        client.close()
        assert red.read_counters()[CHECKPOINT_OK] == now[CHECKPOINT_OK] + 7
        assert red.read_counters(since=time.time() - 60) == now  # that hour ended before
        assert red.read_counters(since=hour + 1)[CHECKPOINT_OK] == now[CHECKPOINT_OK] + 7
