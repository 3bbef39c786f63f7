"""The Redis hot tier, measured: p50 and p99 of ``put``, ``put_writes`` and
``get_tuple`` on loopback, and a seven-step pipeline on Redis, SQLite and
Postgres side by side.

The latencies are taken on a private ``redis-server`` started for the run
(``appendonly yes``, ``appendfsync always``: every write is on disk before its
reply, a durable write) and on the machine's Redis (``LGR_REDIS_URL``, default
``redis://127.0.0.1:6379/9``; keeps what its config says). Each checkpoint
holds a ~1 KB state; ``put`` continues the thread's head (the fork check runs).

The pipeline: a `ResilientStateGraph` of seven nodes (each appends ~1 KB),
invoked ``--runs`` times on fresh threads; median and p95 wall time per run.
SQLite is a file in a tmp dir; Postgres a scratch database (``LGR_POSTGRES_URL``;
skipped with the reason when unreachable).

Run it from the repository root::

    .venv/bin/python benchmarks/redis_latency.py
    .venv/bin/python benchmarks/redis_latency.py --ops 200 --runs 5
"""

from __future__ import annotations

import argparse
import itertools
import operator
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import redis
from langgraph.checkpoint.base import empty_checkpoint

sys.path.insert(0, str(Path(__file__).parent))

from langgraph_resilience import ResilientState, ResilientStateGraph
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

STEPS = [f"s{i}" for i in range(1, 8)]
PAYLOAD = "x" * 1024


class State(ResilientState, total=False):
    done: Annotated[list[str], operator.add]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


@contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server with an AOF fsynced on every write, on a free port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
             "127.0.0.1", "--dir", tmp, "--appendonly", "yes", "--appendfsync", "always",
             "--save", ""],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        url = f"redis://127.0.0.1:{port}/0"
        try:
            for _ in range(200):
                try:
                    redis.Redis.from_url(url).ping()
                    break
                except redis.RedisError:
                    time.sleep(0.05)
            yield url
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


def latencies(url: str, ops: int) -> dict[str, tuple[float, float]]:
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    timed: dict[str, list[float]] = {"put": [], "put_writes": [], "get_tuple": []}
    with ResilientRedisSaver.from_conn_string(url, prefix=prefix) as saver:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            saver.setup()
        config: Any = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
        for i in range(ops):
            cp = empty_checkpoint()
            cp["channel_values"] = {"done": [PAYLOAD], "i": i}
            t0 = time.perf_counter()
            config = saver.put(config, cp, {"step": i, "source": "loop"}, {})
            t1 = time.perf_counter()
            saver.put_writes(config, [("done", [PAYLOAD]), ("i", i)], f"task-{i}")
            t2 = time.perf_counter()
            saver.get_tuple({"configurable": {"thread_id": "bench", "checkpoint_ns": ""}})
            t3 = time.perf_counter()
            timed["put"].append(t1 - t0)
            timed["put_writes"].append(t2 - t1)
            timed["get_tuple"].append(t3 - t2)
        saver.delete_thread("bench")
    return {k: (_pct(v, 0.5), _pct(v, 0.99)) for k, v in timed.items()}


def _graph() -> Any:
    g = ResilientStateGraph(State)
    for name in STEPS:
        g.add_node(name, lambda s, n=name: {"done": [n + PAYLOAD]})
    g.set_entry_point(STEPS[0])
    for a, b in itertools.pairwise(STEPS):
        g.add_edge(a, b)
    return g


def pipeline(saver: Any, runs: int) -> tuple[float, float]:
    graph = _graph().compile(checkpointer=saver)
    times = []
    for _ in range(runs + 1):
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        t0 = time.perf_counter()
        out = graph.invoke({"done": []}, config)
        times.append(time.perf_counter() - t0)
        assert out["resilience"]["status"] == "success"
    times = times[1:]  # the first compiles and warms up
    return statistics.median(times) * 1000, _pct(times, 0.95)


def _postgres(run: Callable[[Any], tuple[float, float]]) -> tuple[float, float] | str:
    try:
        from _pg import postgres_db, server_dsn

        from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver

        with postgres_db(server_dsn()) as dsn, ResilientPostgresSaver.from_conn_string(dsn) as s:
            s.setup()
            return run(s)
    except Exception as exc:  # the benchmark reports why a backend was skipped
        return f"skipped: {exc}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1000, help="operations of each kind")
    parser.add_argument("--runs", type=int, default=20, help="pipeline runs per backend")
    parser.add_argument("--url", default="redis://127.0.0.1:6379/9", help="the machine's Redis")
    args = parser.parse_args()

    print(f"Redis latencies, ms ({args.ops} of each, ~1 KB checkpoints, loopback)")
    print(f"{'server':<28}{'op':<12}{'p50':>8}{'p99':>8}")
    with private_redis() as durable:
        servers = [("private, appendfsync always", durable), ("machine's Redis", args.url)]
        for label, url in servers:
            for op, (p50, p99) in latencies(url, args.ops).items():
                print(f"{label:<28}{op:<12}{p50:>8.2f}{p99:>8.2f}")
        print(f"\nseven-step pipeline, ms per run ({args.runs} runs)")
        print(f"{'backend':<28}{'median':>8}{'p95':>8}")
        with ResilientRedisSaver.from_conn_string(durable, prefix="pipe") as r:
            r.setup()
            rows: list[tuple[str, tuple[float, float] | str]] = [
                ("redis (appendfsync always)", pipeline(r, args.runs))
            ]
        with (
            tempfile.TemporaryDirectory() as tmp,
            ResilientSqliteSaver.from_conn_string(f"{tmp}/bench.db") as s,
        ):
            s.setup()
            rows.append(("sqlite (file)", pipeline(s, args.runs)))
        rows.append(("postgres", _postgres(lambda s: pipeline(s, args.runs))))
    for label, row in rows:
        if isinstance(row, str):
            print(f"{label:<28}{row}")
        else:
            print(f"{label:<28}{row[0]:>8.2f}{row[1]:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
