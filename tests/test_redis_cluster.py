"""The Redis savers on a real Redis Cluster (three masters of the test's own,
`redis_servers.PrivateCluster`), through redis-py's ``RedisCluster`` client: a
resilient graph whose step fails, `retry_failed`, then `run_report` and
`list_runs` reading across threads (whose keys are in different slots), sync and
async, after every master forgot the scripts; a `Worker` under a `Limit`.
Skipped only where there is no ``redis-server`` (never under ``CI=true``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis_servers import PrivateCluster, private_redis_cluster
from test_limits import one_node_graph
from test_redis_runlog import config, pipeline

from langgraph_resilience import (
    Limit,
    NodePolicy,
    Worker,
    aretry_failed,
    arun_report,
    retry_failed,
    run_report,
)
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.aio import AsyncResilientRedisSaver
from langgraph_resilience.checkpoint.redis.store._keys import ledger_keys
from langgraph_resilience.errors import LimitBusy
from langgraph_resilience.history._runs import alist_runs, list_runs
from langgraph_resilience.limits import limit_states
from langgraph_resilience.limits._admit import Admit, Held, Release
from langgraph_resilience.limits._drive import admit_sync, release_sync


def forget_scripts(cluster: PrivateCluster) -> None:
    """``SCRIPT FLUSH`` on every master (as a restarted or promoted node has none):
    the savers must load them again on the cluster (a pipeline cannot)."""
    for port in cluster.ports:
        node = redis.Redis(host="127.0.0.1", port=port)
        node.script_flush()
        node.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    yield from private_redis_cluster(tmp_path_factory.mktemp("cluster"))


THREADS = ["t1", "t2", "t3", "t4"]


def cluster_saver(cluster: PrivateCluster, prefix: str) -> ResilientRedisSaver:
    saver = ResilientRedisSaver(RedisCluster.from_url(cluster.url), prefix=prefix)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # appendonly no
        saver.setup()
    return saver


def test_a_worker_runs_limited_steps_queued_on_a_cluster(cluster: PrivateCluster) -> None:
    """Runs submitted on threads in different slots, a Worker under a Limit: every run
    ends in success, the limit's holds and the run queue (keys of their own slots)
    are left clean, and a second admit on a full limit is refused."""
    saver = cluster_saver(cluster, "cw")
    try:
        limit = Limit("api", concurrency=1)
        calls: list[float] = []
        graph = one_node_graph(NodePolicy(limits=[limit]), calls)
        worker = Worker(graph, checkpointer=saver)
        ids = [worker.submit({"n": 0}, thread_id=t) for t in THREADS]
        done = worker.run(until_idle=True)
        assert sorted(done) == sorted(ids) and set(done.values()) == {"success"}, done
        assert len(calls) == len(THREADS)
        assert {r.status for r in saver.list_runs()} == {"success"}
        (state,) = [s for s in limit_states(saver) if s.name == "api"]
        assert not state.holders
        held = admit_sync(saver, "a", Admit([limit, Limit("db", concurrency=1)], 1.0))
        assert isinstance(held, Held)
        busy = admit_sync(saver, "b", Admit([limit], 0.1))
        assert isinstance(busy, LimitBusy) and busy.why == "full"
        release_sync(Release(held))
        again = admit_sync(saver, "b", Admit([limit], 0.1))
        assert isinstance(again, Held)
        release_sync(Release(again))
    finally:
        saver.conn.close()


def test_failed_runs_retried_and_read_across_slots_on_a_cluster(cluster: PrivateCluster) -> None:
    conn = RedisCluster.from_url(cluster.url)
    try:
        assert len({conn.get_node_from_key(ledger_keys("c", t).rl).port for t in THREADS}) > 1
        saver = ResilientRedisSaver(conn, prefix="c")
        assert saver.target.startswith("cluster 127.0.0.1:")  # as errors name it
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # appendonly no
            saver.setup()
        forget_scripts(cluster)
        for thread in THREADS:
            broken = {"on": True}
            graph = pipeline(broken, saver)
            out = graph.invoke({"done": []}, config(thread))
            assert out["resilience"]["status"] == "partial_complete"
            broken["on"] = False
            out = retry_failed(graph, config(thread))
            assert out["done"] == ["a", "b", "c", "d"]
            report = run_report(graph, thread).to_dict()
            assert report["status"] == "success"
            assert [r["kind"] for r in report["recoveries"]] == ["retry_failed"]
        runs = [r.to_dict() for r in list_runs(graph)]
        assert sorted(r["thread_id"] for r in runs) == THREADS
        assert {(r["status"], r["recoveries"]) for r in runs} == {("success", 1)}
    finally:
        conn.close()


async def test_failed_runs_retried_and_read_on_a_cluster_async(cluster: PrivateCluster) -> None:
    conn = AsyncRedisCluster.from_url(cluster.url)
    try:
        saver = AsyncResilientRedisSaver(conn, prefix="ca")
        assert saver.target.startswith("cluster 127.0.0.1:")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            await saver.setup()
        forget_scripts(cluster)
        for thread in THREADS:
            broken = {"on": True}
            graph = pipeline(broken, saver)
            out = await graph.ainvoke({"done": []}, config(thread))
            assert out["resilience"]["status"] == "partial_complete"
            broken["on"] = False
            out = await aretry_failed(graph, config(thread))
            assert out["done"] == ["a", "b", "c", "d"]
            report = (await arun_report(graph, thread)).to_dict()
            assert report["status"] == "success"
        runs = [r.to_dict() for r in await alist_runs(graph)]
        assert sorted(r["thread_id"] for r in runs) == THREADS
        assert {(r["status"], r["recoveries"]) for r in runs} == {("success", 1)}
    finally:
        await conn.aclose()
