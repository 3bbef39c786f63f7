"""The cost of a run as it grows: a `ResilientStateGraph` on a resilient saver
against a plain `StateGraph` on LangGraph's stock saver, at 10, 100 and 500 steps.

The graph is a linear chain of N nodes over a state with a 2 KB payload; each
node bumps a counter. Both variants run interleaved in one process (stock, ours,
stock, ours ...) on a fresh store per dialect (a SQLite file; a scratch Postgres
database), ``durability="sync"``. Reported per length and dialect:

- time ratio: median seconds per run, ours / stock (target <= 1.05), over
  ``repeats`` x max(1, 200 // N) runs of each, run alternately;
- bytes ratio: what the store holds after the same number of runs, ours /
  stock (target <= 1.2). SQLite: the file's pages after VACUUM; Postgres: the
  bytes of the threads' rows in LangGraph's tables and ours.

A per-step cost that grew with the run (the whole run log stored in every
checkpoint) shows as ratios growing with N. Run it from the repository root::

    .venv/bin/python benchmarks/run_length.py [--repeats 5] [--lengths 10,100,500]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from _pg import postgres_db, server_dsn
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from langgraph_resilience import ResilientState, ResilientStateGraph
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

PAYLOAD = "x" * 2048
TIME_TARGET = 1.05
BYTES_TARGET = 1.2


class State(ResilientState, total=False):
    count: int
    payload: str


def bump(state: State) -> dict[str, Any]:
    return {"count": state["count"] + 1}


def build(cls: Any, n: int, saver: Any) -> Any:
    g = cls(State)
    names = [f"n{i}" for i in range(n)]
    for name in names:
        g.add_node(name, bump)
    for a, b in zip([START, *names], [*names, END], strict=True):
        g.add_edge(a, b)
    return g.compile(checkpointer=saver)


def run_once(graph: Any, n: int) -> float:
    config = {"configurable": {"thread_id": str(uuid.uuid4())}, "recursion_limit": n + 10}
    started = time.perf_counter()
    out = graph.invoke({"count": 0, "payload": PAYLOAD}, config, durability="sync")
    elapsed = time.perf_counter() - started
    if out["count"] != n:
        raise RuntimeError(f"unexpected result {out['count']} != {n}")
    return elapsed


def sqlite_bytes(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        conn.execute("VACUUM")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int(pages * size)
    finally:
        conn.close()


_PG_BYTES = (
    "SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {table} t",
    ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "resilience_steps"),
)


def postgres_bytes(dsn: str) -> int:
    total = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in _PG_BYTES[1]:
            exists = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
            if exists and exists[0]:
                total += int(conn.execute(_PG_BYTES[0].format(table=table)).fetchone()[0])
    return total


def measure(
    n: int, repeats: int, runs: int, open_pair: Callable[[], Any]
) -> tuple[float, float, int, int]:
    """(median stock s/run, median ours s/run, stock bytes, ours bytes)."""
    with open_pair() as (stock_saver, ours_saver, sizes):
        stock = build(StateGraph, n, stock_saver)
        ours = build(ResilientStateGraph, n, ours_saver)
        for _ in range(max(2, runs // 2)):  # warm up: connections, caches
            run_once(stock, n), run_once(ours, n)
        times: dict[str, list[float]] = {"stock": [], "ours": []}
        for _ in range(repeats):
            for _ in range(runs):  # interleaved run by run: both see the same machine
                times["stock"].append(run_once(stock, n))
                times["ours"].append(run_once(ours, n))
        stock_bytes, ours_bytes = sizes()
    return (
        statistics.median(times["stock"]),
        statistics.median(times["ours"]),
        stock_bytes,
        ours_bytes,
    )


class SqlitePair:
    def __enter__(self) -> tuple[Any, Any, Callable[[], tuple[int, int]]]:
        self.dir = tempfile.mkdtemp(prefix="lgr-runlen-")
        self.paths = [os.path.join(self.dir, f"{k}.db") for k in ("stock", "ours")]
        self.stock_cm = SqliteSaver.from_conn_string(self.paths[0])
        self.ours_cm = ResilientSqliteSaver.from_conn_string(self.paths[1])
        stock, ours = self.stock_cm.__enter__(), self.ours_cm.__enter__()
        stock.setup()
        ours.setup()
        return stock, ours, self.sizes

    def sizes(self) -> tuple[int, int]:
        return sqlite_bytes(self.paths[0]), sqlite_bytes(self.paths[1])

    def __exit__(self, *exc: object) -> None:
        self.ours_cm.__exit__(None, None, None)
        self.stock_cm.__exit__(None, None, None)


class PostgresPair:
    def __enter__(self) -> tuple[Any, Any, Callable[[], tuple[int, int]]]:
        server = server_dsn()
        self.dbs = [postgres_db(server), postgres_db(server)]
        self.dsns = [cm.__enter__() for cm in self.dbs]
        self.stock_cm = PostgresSaver.from_conn_string(self.dsns[0])
        self.ours_cm = ResilientPostgresSaver.from_conn_string(self.dsns[1])
        stock, ours = self.stock_cm.__enter__(), self.ours_cm.__enter__()
        stock.setup()
        ours.setup()
        return stock, ours, self.sizes

    def sizes(self) -> tuple[int, int]:
        return postgres_bytes(self.dsns[0]), postgres_bytes(self.dsns[1])

    def __exit__(self, *exc: object) -> None:
        self.ours_cm.__exit__(None, None, None)
        self.stock_cm.__exit__(None, None, None)
        for cm in reversed(self.dbs):
            cm.__exit__(None, None, None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lengths", default="10,100,500")
    parser.add_argument("--dialects", default="sqlite,postgres")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    print(f"run length: linear chains, 2 KB payload, {args.repeats} repeats, medians")
    print(f"{'store':9s} {'steps':>5s} {'stock ms':>9s} {'ours ms':>9s} {'time':>6s} {'bytes':>6s}")
    worst = 0.0
    for dialect in args.dialects.split(","):
        pair = SqlitePair if dialect == "sqlite" else PostgresPair
        for n in lengths:
            runs = max(1, 200 // n)  # short runs are noisy: more of them
            stock, ours, sb, ob = measure(n, args.repeats, runs, pair)
            ratio, bytes_ratio = ours / stock, ob / sb
            worst = max(worst, ratio)
            print(
                f"{dialect:9s} {n:5d} {stock * 1000:9.1f} {ours * 1000:9.1f} "
                f"{ratio:6.3f} {bytes_ratio:6.3f}"
            )
    print(f"targets: time <= {TIME_TARGET}, bytes <= {BYTES_TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
