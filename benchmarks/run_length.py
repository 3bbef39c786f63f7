"""The cost of a run as it grows: a `ResilientStateGraph` on a resilient saver
against a plain `StateGraph` on LangGraph's stock saver, at 10, 100 and 500 steps,
and a 300-iteration loop whose state is one integer.

The graph is a linear chain of N nodes over a state with a 2 KB payload; each
node bumps a counter. The variants run interleaved in one process, run by run,
on a fresh store each (a SQLite file; a scratch Postgres database),
``durability="sync"``. Reported per length and dialect:

- time: median seconds per run, ours / stock (target <= 1.15, issue 25), over
  ``repeats`` x max(1, 200 // N) runs of each;
- cpu: the same for the process's CPU time per run (all threads): steadier than
  the wall clock on a machine whose disk or network latency drifts;
- bytes: what the store holds after the same number of runs, ours / stock
  (target <= 1.2). SQLite: the file's pages after VACUUM; Postgres: the bytes
  of the rows of every table (LangGraph's and ours). ``B/step``: what each
  step added, net of the empty store (after ``setup()``), stock and ours.
- record (time, cpu, bytes): the floor the run log's storage rule sets. A
  plain `StateGraph` on the stock saver whose nodes also write one step record
  (a dict of the same fields and size as ours, kept in a plain channel) against
  stock: what any record stored with each step's writes costs in LangGraph,
  before anything of ours runs.
- saver (time, cpu, bytes): a plain `StateGraph` on our saver, against stock:
  what the store's own guarantees cost (checksums on every row, the fork and
  fencing checks, the run's row), before any policy, step row or node wrapper.

A per-step cost that grew with the run (the whole run log stored in every
checkpoint) shows as ratios growing with N.

The loop (``--loop 300``; 0 skips it): one node ``n -> n + 1`` that routes back
to itself until ``n`` reaches 300, on a state of one integer (no payload), run
``--loop-runs`` times on each store, interleaved. Reported: time ours / stock,
bytes ours / stock (whole store; target <= 1.3 on SQLite, issue 25), bytes
per iteration net of the empty store, and whether ``saver.step_history``
listed every iteration of every run (``loop``, ``loop#2`` ... ``loop#300``).
Run it from the repository root::

    .venv/bin/python benchmarks/run_length.py [--repeats 5] [--lengths 10,100,500] [--loop 300]
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
TIME_TARGET = 1.15
BYTES_TARGET = 1.2
LOOP_BYTES_TARGET = 1.3


class State(ResilientState, total=False):
    count: int
    payload: str


class LoopState(ResilientState, total=False):
    n: int


class PlainLoopState(TypedDict):
    n: int


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


def build_loop(cls: Any, n: int, saver: Any, schema: Any) -> Any:
    """One node, ``loop``, run ``n`` times: it routes back to itself until n is reached."""
    g = cls(schema)
    g.add_node("loop", lambda state: {"n": state["n"] + 1})
    g.add_edge(START, "loop")
    g.add_conditional_edges("loop", lambda state: END if state["n"] >= n else "loop", ["loop", END])
    return g.compile(checkpointer=saver)


def run_once(
    graph: Any, n: int, start: dict[str, Any] | None = None, key: str = "count"
) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process, thread) of one run."""
    thread = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread}, "recursion_limit": n + 10}
    started, cpu = time.perf_counter(), time.process_time()
    out = graph.invoke(start or {key: 0, "payload": PAYLOAD}, config, durability="sync")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if out[key] != n:
        raise RuntimeError(f"unexpected result {out[key]} != {n}")
    return elapsed, cpu, thread


def sqlite_bytes(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        conn.execute("VACUUM")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int(pages * size)
    finally:
        conn.close()


def postgres_bytes(dsn: str) -> int:
    """The bytes of the rows of every table (LangGraph's and ours)."""
    total = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
        for (table,) in tables:
            row = conn.execute(f'SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM "{table}" t')
            total += int(row.fetchone()[0])
    return total


VARIANTS = ("stock", "record", "saver", "ours")


class Measured(NamedTuple):
    wall: dict[str, float]  # median seconds per run, by variant
    cpu: dict[str, float]
    size: dict[str, int]  # bytes stored
    per_step: dict[str, float]  # bytes each step added (net of the empty store)
    history: bool = True  # step_history listed every step of ours (the loop)


def timed(
    graphs: dict[str, Any], n: int, repeats: int, runs: int, warmup: int, **options: Any
) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """Median (wall, CPU) seconds per run by variant, the variants interleaved run
    by run, and the threads of ours."""
    ours: list[str] = []
    for _ in range(warmup):  # connections, caches
        for graph in graphs.values():
            run_once(graph, n, **options)
    wall: dict[str, list[float]] = {v: [] for v in graphs}
    cpu: dict[str, list[float]] = {v: [] for v in graphs}
    for _ in range(repeats):
        for _ in range(runs):  # interleaved run by run: all see the same machine
            for label, graph in graphs.items():
                w, c, thread = run_once(graph, n, **options)
                wall[label].append(w)
                cpu[label].append(c)
                if label == "ours":
                    ours.append(thread)
    median = statistics.median
    return {v: median(wall[v]) for v in graphs}, {v: median(cpu[v]) for v in graphs}, ours


def net_per_step(size: dict[str, int], empty: dict[str, int], steps: int) -> dict[str, float]:
    return {v: (size[v] - empty[v]) / steps for v in size}


def measure(n: int, repeats: int, runs: int, open_stores: Callable[[], Any]) -> Measured:
    with open_stores() as (savers, sizes):
        empty = sizes()
        graphs = {
            "stock": build(StateGraph, n, savers["stock"]),
            "record": build(StateGraph, n, savers["record"], RecordState, bump_and_record),
            "saver": build(StateGraph, n, savers["saver"]),
            "ours": build(ResilientStateGraph, n, savers["ours"]),
        }
        warmup = max(2, runs // 2)
        wall, cpu, _ = timed(graphs, n, repeats, runs, warmup)
        size = sizes()
    return Measured(wall, cpu, size, net_per_step(size, empty, n * (warmup + repeats * runs)))


def measure_loop(n: int, runs: int, open_stores: Callable[[], Any]) -> Measured:
    """The loop of ``n`` iterations on a one-integer state, ``runs`` times (no warm-up:
    the bytes are of exactly these runs)."""
    with open_stores(("stock", "ours")) as (savers, sizes):
        empty = sizes()
        graphs = {
            "stock": build_loop(StateGraph, n, savers["stock"], PlainLoopState),
            "ours": build_loop(ResilientStateGraph, n, savers["ours"], LoopState),
        }
        wall, cpu, threads = timed(graphs, n, 1, runs, 0, start={"n": 0}, key="n")
        size = sizes()
        want = ["loop", *(f"loop#{i}" for i in range(2, n + 1))]
        history = all([s["path"] for s in savers["ours"].step_history(t)] == want for t in threads)
    return Measured(wall, cpu, size, net_per_step(size, empty, n * runs), history)


class Stores:
    """One fresh store per variant of a dialect, its saver open: the stock saver
    for ``stock`` and ``record``, ours for ``saver`` and ``ours``."""

    stock: Any
    ours: Any

    def __init__(self, variants: tuple[str, ...] = VARIANTS) -> None:
        self.variants = variants

    def targets(self) -> dict[str, str]:  # where each variant's store lives
        raise NotImplementedError

    def size(self, target: str) -> int:
        raise NotImplementedError

    def __enter__(self) -> tuple[dict[str, Any], Callable[[], dict[str, int]]]:
        self.where = self.targets()
        self.cms = {
            v: (self.ours if v in ("saver", "ours") else self.stock).from_conn_string(target)
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
        return {v: os.path.join(folder, f"{v}.db") for v in self.variants}

    def size(self, target: str) -> int:
        return sqlite_bytes(target)


class PostgresStores(Stores):
    stock, ours = PostgresSaver, ResilientPostgresSaver

    def targets(self) -> dict[str, str]:
        server = server_dsn()
        self.dbs = [postgres_db(server) for _ in self.variants]
        return {v: db.__enter__() for v, db in zip(self.variants, self.dbs, strict=True)}

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
    parser.add_argument("--runs", type=int, default=0, help="runs per repeat (0: 200 // steps)")
    parser.add_argument("--dialects", default="sqlite,postgres")
    parser.add_argument("--loop", type=int, default=300, help="loop iterations (0: no loop)")
    parser.add_argument("--loop-runs", type=int, default=3)
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",") if x]
    dialects = [
        (d, SqliteStores if d == "sqlite" else PostgresStores) for d in args.dialects.split(",")
    ]
    print(f"run length: linear chains, 2 KB payload, {args.repeats} repeats, medians")
    print(
        f"{'store':9s} {'steps':>5s} {'stock ms':>9s} {'ours ms':>9s} {'time':>6s} "
        f"{'cpu':>6s} {'bytes':>6s} {'B/step':>13s} | {'record: time':>12s} {'cpu':>6s} "
        f"{'bytes':>6s} | {'saver: time':>11s} {'cpu':>6s} {'bytes':>6s}"
    )
    for dialect, stores in dialects:
        for n in lengths:
            m = measure(n, args.repeats, args.runs or max(1, 200 // n), stores)
            stock = m.wall["stock"]
            print(
                f"{dialect:9s} {n:5d} {stock * 1000:9.1f} {m.wall['ours'] * 1000:9.1f} "
                f"{m.wall['ours'] / stock:6.3f} {m.cpu['ours'] / m.cpu['stock']:6.3f} "
                f"{m.size['ours'] / m.size['stock']:6.3f} "
                f"{m.per_step['stock']:6.0f}/{m.per_step['ours']:<6.0f} | "
                f"{m.wall['record'] / stock:12.3f} {m.cpu['record'] / m.cpu['stock']:6.3f} "
                f"{m.size['record'] / m.size['stock']:6.3f} | "
                f"{m.wall['saver'] / stock:11.3f} {m.cpu['saver'] / m.cpu['stock']:6.3f} "
                f"{m.size['saver'] / m.size['stock']:6.3f}"
            )
    print(f"targets: time <= {TIME_TARGET}, bytes <= {BYTES_TARGET}")
    if not args.loop:
        return 0
    print(f"\nloop: {args.loop} iterations on a one-integer state, {args.loop_runs} runs, medians")
    print(
        f"{'store':9s} {'stock ms':>9s} {'ours ms':>9s} {'time':>6s} {'bytes':>6s} "
        f"{'stock KB':>9s} {'ours KB':>8s} {'B/iter':>13s} {'history':>8s}"
    )
    for dialect, stores in dialects:
        m = measure_loop(args.loop, args.loop_runs, stores)
        print(
            f"{dialect:9s} {m.wall['stock'] * 1000:9.1f} {m.wall['ours'] * 1000:9.1f} "
            f"{m.wall['ours'] / m.wall['stock']:6.3f} {m.size['ours'] / m.size['stock']:6.3f} "
            f"{m.size['stock'] / 1024:9.0f} {m.size['ours'] / 1024:8.0f} "
            f"{m.per_step['stock']:6.0f}/{m.per_step['ours']:<6.0f} "
            f"{'all' if m.history else 'MISSING':>8s}"
        )
    print(f"target: bytes <= {LOOP_BYTES_TARGET} (SQLite); step_history lists every iteration")
    return 0


if __name__ == "__main__":
    sys.exit(main())
