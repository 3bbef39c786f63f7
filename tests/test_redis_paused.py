"""A paused run on Redis and its thread's TTL (issue 39: "a paused run's thread
is not lost to its TTL: it is demoted first").

A `Worker` run paused at an interrupt, left idle past the thread's TTL on the
machine's Redis (a key prefix of the test's own): with a cold tier it is demoted
by ``archive_idle()``, found there, and resumed by the worker at the step that
paused, nothing redone; without one, its thread's keys are kept without a TTL
while it is paused (on both twins, and for a plain ``invoke`` that paused too),
and get their TTL back once it is resumed and finished, or cancelled.
"""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from graphs import DoneState
from redis_servers import REDIS_DOWN, REDIS_URL, flush_prefix

from langgraph_resilience import Archive, ResilientStateGraph, Worker
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.aio import AsyncResilientRedisSaver
from langgraph_resilience.checkpoint.redis.store._keys import ledger_keys, thread_keys

pytestmark = pytest.mark.skipif(REDIS_DOWN is not None, reason=REDIS_DOWN or "")

TTL = 0.3


@pytest.fixture
def prefix() -> Iterator[str]:
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    flush_prefix(name)


def _approval(asked: list[str]) -> Any:
    from langgraph.types import interrupt

    def ask(state: DoneState) -> dict[str, list[str]]:
        asked.append("ask")
        return {"done": [str(interrupt("approve?"))]}

    g = ResilientStateGraph(DoneState)
    g.add_node("ask", ask)
    g.add_node("after", lambda s: {"done": ["after"]})
    g.set_entry_point("ask")
    g.add_edge("ask", "after")
    return g


def _paused(saver: ResilientRedisSaver, asked: list[str]) -> tuple[Worker, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the machine's Redis keeps nothing
        saver.setup()
    worker = Worker(_approval(asked), checkpointer=saver, lease_ttl=5)
    run_id = worker.submit({"done": []}, thread_id="paused")
    assert worker.run() == {run_id: "paused"}
    time.sleep(TTL * 2)  # idle past its TTL
    return worker, run_id


def _resumed(saver: ResilientRedisSaver, worker: Worker, run_id: str, asked: list[str]) -> None:
    worker.resume(run_id, "yes")
    assert worker.run() == {run_id: "success"}
    found = saver.get_tuple({"configurable": {"thread_id": "paused"}})
    assert found is not None and found.checkpoint["channel_values"]["done"] == ["yes", "after"]
    assert asked == ["ask", "ask"]  # paused once, resumed once: not run again from the start


def test_a_paused_worker_run_idle_past_its_ttl_is_demoted_and_resumes_from_the_cold_tier(
    prefix: str, tmp_path: Path
) -> None:
    archive = Archive(f"file://{tmp_path}/cold")
    asked: list[str] = []
    with ResilientRedisSaver.from_conn_string(
        REDIS_URL, prefix=prefix, ttl=TTL, archive=archive
    ) as saver:
        worker, run_id = _paused(saver, asked)
        assert saver.archive_idle().archived == ["paused"]  # found idle: demoted
        keys = thread_keys(prefix, "paused")
        client = redis.Redis.from_url(REDIS_URL)
        try:
            assert client.exists(keys.cp) == 0 and client.exists(keys.archived) == 1
        finally:
            client.close()
        assert archive.keys("redis/")  # in the cold tier
        found = saver.read_run(run_id)
        assert found is not None and found.status == "paused"
        _resumed(saver, worker, run_id, asked)  # restored, then resumed at "ask"


def _ttls(prefix: str, thread_id: str = "paused") -> dict[str, int]:
    """Each of the thread's keys that exists (its data and run-ledger keys) -> its
    PTTL in ms (-1: no TTL)."""
    keys = thread_keys(prefix, thread_id)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        names = [*keys.data, *ledger_keys(prefix, thread_id)]
        found = {k: int(client.pttl(k)) for k in names}
    finally:
        client.close()
    return {k.rsplit(":", 1)[1]: t for k, t in found.items() if t != -2}


def _kept(prefix: str) -> None:
    """The paused thread's keys are all there, none with a TTL."""
    ttls = _ttls(prefix)
    assert {"cp", "ix", "w", "wx", "rl"} <= ttls.keys()
    assert set(ttls.values()) == {-1}, ttls


def _expiring(prefix: str) -> None:
    """The thread's keys have their TTL again, and expire with it."""
    ttls = _ttls(prefix)
    assert ttls and all(0 < t <= TTL * 1000 for t in ttls.values()), ttls
    time.sleep(TTL * 2)
    assert _ttls(prefix) == {}


def test_a_paused_worker_runs_thread_is_not_lost_to_its_ttl_without_a_cold_tier(
    prefix: str,
) -> None:
    asked: list[str] = []
    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix, ttl=TTL) as saver:
        worker, run_id = _paused(saver, asked)
        _kept(prefix)
        assert saver.get_tuple({"configurable": {"thread_id": "paused"}}) is not None
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)].count(
            "paused"
        ) > 0  # still listed across threads, its last write older than its TTL
        _resumed(saver, worker, run_id, asked)
        _expiring(prefix)  # resumed and finished: it expires again


@asynccontextmanager
async def _async_saver(prefix: str) -> AsyncIterator[AsyncResilientRedisSaver]:
    async with AsyncResilientRedisSaver.from_conn_string(
        REDIS_URL, prefix=prefix, ttl=TTL
    ) as saver:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the machine's Redis keeps nothing
            await saver.setup()
        yield saver


async def test_an_async_paused_worker_runs_thread_is_not_lost_to_its_ttl(prefix: str) -> None:
    asked: list[str] = []
    async with _async_saver(prefix) as saver:
        worker = Worker(_approval(asked), checkpointer=saver, lease_ttl=5)
        run_id = await worker.asubmit({"done": []}, thread_id="paused")
        assert await worker.arun() == {run_id: "paused"}
        time.sleep(TTL * 2)  # idle past its TTL
        _kept(prefix)
        await worker.aresume(run_id, "yes")
        assert await worker.arun() == {run_id: "success"}
        found = await saver.aget_tuple({"configurable": {"thread_id": "paused"}})
        assert found is not None and found.checkpoint["channel_values"]["done"] == ["yes", "after"]
        assert asked == ["ask", "ask"]  # resumed at "ask", not run again from the start
        _expiring(prefix)


def test_a_cancelled_paused_run_gives_its_thread_its_ttl_back(prefix: str) -> None:
    asked: list[str] = []
    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix, ttl=TTL) as saver:
        worker, run_id = _paused(saver, asked)
        _kept(prefix)
        assert worker.cancel(run_id, "not wanted") == "paused"
        _expiring(prefix)


def test_a_plain_invoke_paused_past_its_ttl_resumes_where_it_paused(prefix: str) -> None:
    from langgraph.types import Command

    asked: list[str] = []
    config = {"configurable": {"thread_id": "paused"}}
    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix, ttl=TTL) as saver:
        graph = _approval(asked).compile(checkpointer=saver)
        graph.invoke({"done": []}, config)
        assert graph.get_state(config).next == ("ask",)
        time.sleep(TTL * 2)  # idle past its TTL
        _kept(prefix)
        out = graph.invoke(Command(resume="yes"), config)
        assert out["done"] == ["yes", "after"] and asked == ["ask", "ask"]
        _expiring(prefix)
