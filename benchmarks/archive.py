"""The cold tier, measured: hot database size and ``get_tuple`` latency with 10,000
threads before and after archiving the idle ones, archival throughput, and the
latency of a restore from a local-filesystem archive.

Each thread holds a three-step history (input, two nodes) of a small graph whose
state is ~1 KB of text. The idle threads are written first; then ``--hot`` threads
are written a second later, so ``archive_idle`` (with the gap as its TTL) moves the
idle ones and leaves those. Reported per backend:

- hot size: the SQLite file (after VACUUM), the Postgres tables (after VACUUM FULL)
  or the Redis keys of the threads written (``MEMORY USAGE`` summed) before and
  after archiving;
- ``get_tuple`` of a hot thread: median and p95 over the hot threads, before and
  after archiving the rest;
- archival: threads per second, and the archive's bytes on disk (gzip);
- restore: ``get_tuple`` of an archived thread (restores it, then reads it),
  median and p95 over ``--restores`` threads.

Run it from the repository root (Postgres from ``LGR_POSTGRES_URL``, skipped with the
reason when unreachable)::

    .venv/bin/python benchmarks/archive.py
    .venv/bin/python benchmarks/archive.py --threads 2000 --backend sqlite
    .venv/bin/python benchmarks/archive.py --threads 2000 --backend redis  # LGR_REDIS_URL
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, TypedDict

import psycopg
from _pg import postgres_db, server_dsn
from langgraph.graph import END, START, StateGraph

from langgraph_resilience import Archive
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

TEXT = "lorem ipsum dolor sit amet " * 40  # ~1 KB of state


class State(TypedDict):
    notes: str
    n: int


def graph_of(saver: Any) -> Any:
    g = StateGraph(State)
    g.add_node("a", lambda s: {"notes": s["notes"] + "a", "n": s["n"] + 1})
    g.add_node("b", lambda s: {"notes": s["notes"] + "b", "n": s["n"] + 1})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g.compile(checkpointer=saver)


def fill(graph: Any, ids: list[str]) -> None:
    for thread_id in ids:
        graph.invoke({"notes": TEXT, "n": 0}, {"configurable": {"thread_id": thread_id}})


def latencies(saver: Any, ids: list[str]) -> list[float]:
    found = []
    for thread_id in ids:
        start = time.perf_counter()
        assert saver.get_tuple({"configurable": {"thread_id": thread_id}}) is not None
        found.append(time.perf_counter() - start)
    return found


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered) * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms"


def redis_size(saver: Any, ids: list[str]) -> int:
    """The memory of every key the threads ``ids`` have on the server (known by name:
    the savers never list the keyspace)."""
    from langgraph_resilience.checkpoint.redis.store._keys import (
        counts_key,
        ledger_keys,
        thread_keys,
    )

    prefix = saver.place.prefix
    keys = [k for t in ids for k in (*thread_keys(prefix, t), *ledger_keys(prefix, t))]
    keys += [counts_key(prefix, t) for t in ids] + [f"{prefix}:threads", f"{prefix}:runlog"]
    pipe = saver.conn.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key)
    return sum(int(n or 0) for n in pipe.execute())


def hot_size(backend: str, saver: Any, target: str, ids: list[str]) -> int:
    if backend == "redis":
        return redis_size(saver, ids)
    if backend == "sqlite":
        saver.conn.commit()
        saver.conn.execute("VACUUM")
        saver.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = Path(target + "-wal")
        return os.path.getsize(target) + (wal.stat().st_size if wal.exists() else 0)
    with psycopg.connect(target, autocommit=True) as conn:
        tables = ("checkpoints", "checkpoint_writes", "checkpoint_blobs")
        for table in tables:
            conn.execute(f"VACUUM FULL {table}")
        rows = conn.execute(
            "SELECT sum(pg_total_relation_size(t)) FROM unnest(%s::regclass[]) t",
            (list(tables),),
        ).fetchone()
        return int(rows[0]) if rows else 0


def directory_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(backend: str, target: str, args: argparse.Namespace, workdir: Path) -> None:
    cls: Any = {
        "sqlite": ResilientSqliteSaver,
        "postgres": ResilientPostgresSaver,
        "redis": ResilientRedisSaver,
    }[backend]
    archive_dir = workdir / f"archive-{backend}"
    archive = Archive(f"file://{archive_dir}")
    idle = [f"idle-{i}-{uuid.uuid4().hex[:6]}" for i in range(args.threads - args.hot)]
    hot = [f"hot-{i}-{uuid.uuid4().hex[:6]}" for i in range(args.hot)]
    options: dict[str, Any] = (
        {"prefix": f"bench{uuid.uuid4().hex[:6]}"} if backend == "redis" else {}
    )
    with cls.from_conn_string(target, archive=archive, **options) as saver:
        saver.setup()
        graph = graph_of(saver)
        start = time.perf_counter()
        fill(graph, idle)
        time.sleep(args.gap / 2)
        boundary = time.time()  # idle threads ended before it, hot ones start after
        time.sleep(args.gap / 2)
        fill(graph, hot)
        print(f"[{backend}] wrote {args.threads} threads in {time.perf_counter() - start:.1f} s")
        size_before = hot_size(backend, saver, target, idle + hot)
        before = latencies(saver, hot)

        start = time.perf_counter()
        archived = 0
        while True:
            report = saver.archive_idle(time.time() - boundary, limit=1000)
            archived += len(report.archived)
            if report.failed:
                raise RuntimeError(f"archival failed: {report.failed}")
            if not report.archived:
                break
        took = time.perf_counter() - start

        size_after = hot_size(backend, saver, target, idle + hot)
        after = latencies(saver, hot)
        restores = latencies(saver, idle[: args.restores])
        print(f"[{backend}] hot size: {size_before / 1e6:.1f} MB -> {size_after / 1e6:.2f} MB")
        print(f"[{backend}] get_tuple of a hot thread before archiving: {summary(before)}")
        print(f"[{backend}] get_tuple of a hot thread after archiving:  {summary(after)}")
        print(
            f"[{backend}] archived {archived} threads in {took:.1f} s "
            f"({archived / took:.0f} threads/s); archive on disk "
            f"{directory_size(archive_dir) / 1e6:.1f} MB"
        )
        print(f"[{backend}] restore (get_tuple of an archived thread): {summary(restores)}")
        if backend == "redis":
            for thread_id in idle + hot:
                saver.delete_thread(thread_id)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--hot", type=int, default=200, help="threads kept hot")
    parser.add_argument("--restores", type=int, default=200)
    parser.add_argument("--gap", type=float, default=1.5, help="seconds between idle and hot")
    parser.add_argument(
        "--backend", choices=["sqlite", "postgres", "redis", "both"], default="both"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if args.backend in ("sqlite", "both"):
            run("sqlite", str(workdir / "bench.db"), args, workdir)
        if args.backend == "redis":
            url = os.environ.get("LGR_REDIS_URL", "redis://127.0.0.1:6379/9")
            run("redis", url, args, workdir)
        if args.backend in ("postgres", "both"):
            try:
                psycopg.connect(server_dsn(), connect_timeout=3).close()
            except psycopg.Error as exc:
                print(f"[postgres] skipped: {exc}")
                return 0
            with postgres_db(server_dsn()) as dsn:
                run("postgres", dsn, args, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
