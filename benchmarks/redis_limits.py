"""Shared limits on Redis: what an uncontended acquire costs, what a limit adds
to a try in a graph, and the throughput of three processes under a rate limit.

- an acquire: one uncontended ``Limit``'s admission (rate-only,
  concurrency-only, both), the server's answer included, beside a bare ``PING``
  on the same client, interleaved, p50 and p99 (ms); each hold is freed
  between acquires, off the clock (in a node it rides the try's own writes);
- in a graph: a chain of ``STEPS`` nodes (``durability="sync"``), each under an
  uncontended limit or none, run interleaved: the round trips per try (the
  pipelines the client sent) and the time per try, minus the chain's without
  a limit, medians over runs;
- throughput: three processes (``tests/scripts/limit_worker.py``) under
  ``Limit(rate=20, per=1.0)``, as ``benchmarks/limits.py`` measures it on SQL.

Run it from the repository root (the machine's Redis, or ``LGR_REDIS_URL``)::

    .venv/bin/python benchmarks/redis_limits.py [--acquires 2000] [--runs 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
import warnings
from typing import Any

import redis
from langgraph.graph import END, START
from limits import STEPS, throughput

from langgraph_resilience import Limit, NodePolicy, ResilientState, ResilientStateGraph
from langgraph_resilience._util._process import process_id
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.store._keys import limit_keys
from langgraph_resilience.limits._admit import asks_of

URL = os.environ.get("LGR_REDIS_URL", "redis://127.0.0.1:6379/9")
KINDS = {
    "rate": lambda n: Limit(n, rate=10**6, per=0.1),
    "concurrency": lambda n: Limit(n, concurrency=1000),
    "both": lambda n: Limit(n, concurrency=1000, rate=10**6, per=0.1),
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


def acquires(saver: Any, n: int) -> dict[str, dict[str, float]]:
    limits = {kind: make(f"bench-{kind}-{uuid.uuid4().hex[:6]}") for kind, make in KINDS.items()}
    times: dict[str, list[float]] = {kind: [] for kind in [*limits, "ping"]}
    me = process_id()
    for i in range(n):
        for kind, limit in limits.items():
            hold = f"h{i}"
            began = time.perf_counter()
            assert saver.limits.acquire(asks_of([limit]), hold, me, 30.0).admitted
            times[kind].append(time.perf_counter() - began)
            saver.conn.hdel(limit_keys(saver.place.prefix, limit.name).holds, hold)
        began = time.perf_counter()
        saver.conn.ping()
        times["ping"].append(time.perf_counter() - began)
    return {k: {"p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99)} for k, v in times.items()}


class State(ResilientState, total=False):
    n: int


def chain(saver: Any, limit: Limit | None) -> Any:
    g = ResilientStateGraph(State)
    policy = NodePolicy(limits=[limit] if limit else [])
    names = [f"s{i}" for i in range(STEPS)]
    for name in names:
        g.add_node(name, lambda s: {"n": s.get("n", 0) + 1}, policy=policy)
    for a, b in zip([START, *names], [*names, END], strict=True):
        g.add_edge(a, b)
    return g.compile(checkpointer=saver)


def counting(saver: Any) -> list[int]:
    """Count the pipelines the saver's client sends from now on."""
    seen = [0]
    make = saver.conn.pipeline

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        return make(*args, **kwargs)

    saver.conn.pipeline = pipeline
    return seen


def graphs(saver: Any, runs: int) -> dict[str, dict[str, float]]:
    graphs = {"none": chain(saver, None)}
    graphs |= {
        k: chain(saver, make(f"chain-{k}-{uuid.uuid4().hex[:6]}")) for k, make in KINDS.items()
    }
    sent = counting(saver)
    per_try: dict[str, list[float]] = {k: [] for k in graphs}
    trips: dict[str, list[float]] = {k: [] for k in graphs}
    for _ in range(runs):
        for kind, graph in graphs.items():
            config = {"configurable": {"thread_id": uuid.uuid4().hex}}
            sent[0] = 0
            began = time.perf_counter()
            graph.invoke({"n": 0}, config, durability="sync")
            per_try[kind].append((time.perf_counter() - began) / STEPS)
            trips[kind].append(sent[0] / STEPS)
    base = statistics.median(per_try["none"])
    return {
        k: {
            "round_trips_per_try": statistics.median(trips[k]),
            "ms_per_try": statistics.median(per_try[k]) * 1000,
            "ms_added": (statistics.median(per_try[k]) - base) * 1000,
        }
        for k in graphs
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--acquires", type=int, default=2000)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--tries", type=int, default=20, help="tries per process")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a Redis that keeps no disk
            with ResilientRedisSaver.from_conn_string(URL, prefix=prefix) as saver:
                saver.setup()
                results: dict[str, Any] = {
                    "acquire": acquires(saver, args.acquires),
                    "graph": graphs(saver, args.runs),
                }
        results["throughput"] = throughput("redis", f"{URL}#{prefix}", args.tries)
    finally:
        client = redis.Redis.from_url(URL)
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))  # the bench's only
        if keys:
            client.delete(*keys)
        client.close()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for kind, r in results["acquire"].items():
        print(f"acquire {kind:12} p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms")
    for kind, r in results["graph"].items():
        print(
            f"chain {kind:12} {r['round_trips_per_try']:.1f} round trips a try, "
            f"{r['ms_per_try']:.2f} ms a try ({r['ms_added']:+.2f} ms)"
        )
    t = results["throughput"]
    print(f"throughput: {t['per_second']:.1f} starts/s of 20 ({t['of_limit']:.2f})")


if __name__ == "__main__":
    main()
