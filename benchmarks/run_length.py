"""The cost of a run as it grows: a `ResilientStateGraph` on a resilient saver
against a plain `StateGraph` on LangGraph's stock saver, at 10, 100 and 500 steps.

The graph is a linear chain of N nodes over a state with a 2 KB payload; each
node bumps a counter. The variants run interleaved in one process, run by run,
on a fresh store each (a SQLite file; a scratch Postgres database),
``durability="sync"``. Reported per length and dialect:

- time: median seconds per run, ours / stock (target <= 1.05), over
  ``repeats`` x max(1, 200 // N) runs of each;
- cpu: the same for the process's CPU time per run (all threads): steadier than
  the wall clock on a machine whose disk or network latency drifts;
- bytes: what the store holds after the same number of runs, ours / stock
  (target <= 1.2). SQLite: the file's pages after VACUUM; Postgres: the bytes
  of the threads' rows in LangGraph's tables and ours.
- record (time, cpu, bytes): the floor the run log's storage rule sets. A
  plain `StateGraph` on the stock saver whose nodes also write one step record
  (a dict of the same fields and size as ours, kept in a plain channel) against
  stock: what any record stored with each step's writes costs in LangGraph,
  before anything of ours runs.

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
from typing import Any, NamedTuple, TypedDict

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


class RecordState(TypedDict, total=False):
    count: int
    payload: str
    record: dict[str, Any]


def bump(state: State) -> dict[str, Any]:
    return {"count": state["count"] + 1}


def bump_and_record(state: RecordState) -> dict[str, Any]:
    """The floor: the same step, and a record of it shaped as our step records."""
    now = time.time()
    record = {
        "run": 1,
        "path": "n1",
        "node": "n1",
        "status": "completed",
        "attempts": 1,
        "kinds": [],
        "started_at": now,
        "ended_at": now,
        "summary": f"count={state['count'] + 1}",
    }
    return {"count": state["count"] + 1, "record": record}


def build(cls: Any, n: int, saver: Any, schema: Any = State, node: Any = bump) -> Any:
    g = cls(schema)
    names = [f"n{i}" for i in range(n)]
    for name in names:
        g.add_node(name, node)
    for a, b in zip([START, *names], [*names, END], strict=True):
        g.add_edge(a, b)
    return g.compile(checkpointer=saver)


def run_once(graph: Any, n: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process) of one run."""
    config = {"configurable": {"thread_id": str(uuid.uuid4())}, "recursion_limit": n + 10}
    started, cpu = time.perf_counter(), time.process_time()
    out = graph.invoke({"count": 0, "payload": PAYLOAD}, config, durability="sync")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if out["count"] != n:
        raise RuntimeError(f"unexpected result {out['count']} != {n}")
    return elapsed, cpu


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


VARIANTS = ("stock", "record", "ours")


class Measured(NamedTuple):
    wall: dict[str, float]  # median seconds per run, by variant
    cpu: dict[str, float]
    size: dict[str, int]  # bytes stored


def measure(n: int, repeats: int, runs: int, open_stores: Callable[[], Any]) -> Measured:
    with open_stores() as (savers, sizes):
        graphs = {
            "stock": build(StateGraph, n, savers["stock"]),
            "record": build(StateGraph, n, savers["record"], RecordState, bump_and_record),
            "ours": build(ResilientStateGraph, n, savers["ours"]),
        }
        for _ in range(max(2, runs // 2)):  # warm up: connections, caches
            for graph in graphs.values():
                run_once(graph, n)
        wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
        cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(repeats):
            for _ in range(runs):  # interleaved run by run: all see the same machine
                for label, graph in graphs.items():
                    w, c = run_once(graph, n)
                    wall[label].append(w)
                    cpu[label].append(c)
        size = sizes()
    median = statistics.median
    return Measured(
        {v: median(wall[v]) for v in VARIANTS}, {v: median(cpu[v]) for v in VARIANTS}, size
    )


class Stores:
    """One fresh store per variant of a dialect, its saver open: the stock saver
    for ``stock`` and ``record``, ours for ``ours``."""

    stock: Any
    ours: Any

    def targets(self) -> dict[str, str]:  # where each variant's store lives
        raise NotImplementedError

    def size(self, target: str) -> int:
        raise NotImplementedError

    def __enter__(self) -> tuple[dict[str, Any], Callable[[], dict[str, int]]]:
        self.where = self.targets()
        self.cms = {
            v: (self.ours if v == "ours" else self.stock).from_conn_string(target)
            for v, target in self.where.items()
        }
        savers = {v: cm.__enter__() for v, cm in self.cms.items()}
        for saver in savers.values():
            saver.setup()
        return savers, self.sizes

    def sizes(self) -> dict[str, int]:
        return {v: self.size(target) for v, target in self.where.items()}

    def __exit__(self, *exc: object) -> None:
        for cm in self.cms.values():
            cm.__exit__(None, None, None)


class SqliteStores(Stores):
    stock, ours = SqliteSaver, ResilientSqliteSaver

    def targets(self) -> dict[str, str]:
        folder = tempfile.mkdtemp(prefix="lgr-runlen-")
        return {v: os.path.join(folder, f"{v}.db") for v in VARIANTS}

    def size(self, target: str) -> int:
        return sqlite_bytes(target)


class PostgresStores(Stores):
    stock, ours = PostgresSaver, ResilientPostgresSaver

    def targets(self) -> dict[str, str]:
        server = server_dsn()
        self.dbs = [postgres_db(server) for _ in VARIANTS]
        return {v: db.__enter__() for v, db in zip(VARIANTS, self.dbs, strict=True)}

    def size(self, target: str) -> int:
        return postgres_bytes(target)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for db in self.dbs:
            db.__exit__(None, None, None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lengths", default="10,100,500")
    parser.add_argument("--dialects", default="sqlite,postgres")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    print(f"run length: linear chains, 2 KB payload, {args.repeats} repeats, medians")
    print(
        f"{'store':9s} {'steps':>5s} {'stock ms':>9s} {'ours ms':>9s} {'time':>6s} "
        f"{'cpu':>6s} {'bytes':>6s} | {'record: time':>12s} {'cpu':>6s} {'bytes':>6s}"
    )
    for dialect in args.dialects.split(","):
        stores = SqliteStores if dialect == "sqlite" else PostgresStores
        for n in lengths:
            m = measure(n, args.repeats, max(1, 200 // n), stores)
            stock = m.wall["stock"]
            print(
                f"{dialect:9s} {n:5d} {stock * 1000:9.1f} {m.wall['ours'] * 1000:9.1f} "
                f"{m.wall['ours'] / stock:6.3f} {m.cpu['ours'] / m.cpu['stock']:6.3f} "
                f"{m.size['ours'] / m.size['stock']:6.3f} | "
                f"{m.wall['record'] / stock:12.3f} {m.cpu['record'] / m.cpu['stock']:6.3f} "
                f"{m.size['record'] / m.size['stock']:6.3f}"
            )
    print(f"targets: time <= {TIME_TARGET}, bytes <= {BYTES_TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
