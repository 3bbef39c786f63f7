"""Shared limits: throughput under a rate limit, and what an uncontended limit costs.

What it measures, per store (SQLite file, Postgres database):

- throughput: three processes (``tests/limit_worker.py``), each fanning out to
  ``--tries`` tries of one node under ``Limit(rate=RATE, per=1.0)``; the tries
  log their own start times. A rate limit admits ``RATE`` starts per window, so
  the starts after the first window, divided by the time from the first start
  to the last, against ``RATE`` is the share of the limit the fleet got
  (target >= 0.9);
- an acquire: what an uncontended ``Limit``'s admission costs a try (the
  store's answer included; its release is stored between acquires, off the
  clock), interleaved in one process with the units, medians over repeats; in
  units of one bare store round trip on the same saver (Postgres: one
  statement on its autocommit connection; SQLite: one transaction), beside a
  committed one-row write (its disk flush included; the acquire commits without
  waiting for it);
- in a graph: a chain of ``STEPS`` nodes (``durability="sync"``), each under an
  uncontended ``Limit`` (rate-only, concurrency-only) or none, run interleaved:
  the store round trips per try counted, not timed (Postgres: through the
  counting proxy of ``pg_round_trips.py``, the times the client sent after it
  heard from the server; SQLite: transactions begun), and the time per try,
  each minus the chain's without a limit, medians over runs.

Run it from the repository root::

    .venv/bin/python benchmarks/limits.py [--repeats 7] [--runs 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _pg import postgres_db, server_dsn
from langgraph.graph import END, START
from pg_round_trips import Proxy
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from langgraph_resilience import Limit, NodePolicy, ResilientState, ResilientStateGraph
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.store._store import Stmt
from langgraph_resilience.limits._admit import Admit, Held, Release
from langgraph_resilience.limits._drive import admit_sync, release_sync

ROOT = Path(__file__).parent.parent
WORKER = ROOT / "tests" / "limit_worker.py"
RATE = 20
INVOKES = 100
STEPS = 10
KINDS = ("none", "rate", "concurrency")


def throughput(backend: str, target: str, tries: int) -> dict[str, float]:
    """Three processes under one rate limit: the share of the limit they got."""
    ledger = Path(tempfile.mkdtemp()) / "tries.log"
    name = f"bench-{uuid.uuid4().hex[:8]}"
    options = ["--limit", name, "--rate", str(RATE), "--per", "1.0", "--tries", str(tries)]
    options += ["--hold", "0.01"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), backend, target, str(n), str(ledger), *options],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        for n in range(3)
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0
    lines = [line.split() for line in ledger.read_text().splitlines()]
    starts = sorted(float(w[3]) for w in lines if w[0] == "start")
    span = starts[-1] - starts[0]
    got = (len(starts) - RATE) / span
    return {"tries": len(starts), "seconds": span, "per_second": got, "of_limit": got / RATE}


def timed(fn: Callable[[], Any], n: int) -> float:
    began = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - began) / n


_SCRATCH = "CREATE TABLE IF NOT EXISTS bench_round_trip (k INTEGER PRIMARY KEY, v INTEGER)"
_BUMP = (
    "INSERT INTO bench_round_trip (k, v) VALUES (1, 1) "
    "ON CONFLICT (k) DO UPDATE SET v = bench_round_trip.v + 1 RETURNING v"
)


def round_trip(saver: Any, sql: str = "SELECT 1") -> None:
    """One store round trip on the saver: by default a bare one (Postgres: one
    statement on its autocommit connection; SQLite: one transaction); with
    ``_BUMP`` a committed one-row write (the disk flush included)."""
    if saver._dialect.procedures and sql == "SELECT 1":
        saver.conn.execute(sql).fetchall()
        return

    def one() -> Any:
        rows = yield Stmt(sql, fetch=True)
        return rows

    saver._write(one, pipeline=saver._dialect.procedures)


def cost(saver: Any, repeats: int) -> dict[str, float]:
    """Seconds an uncontended limit's acquire costs a try (the store's answer
    included), beside one bare round trip and a committed write. Each try's
    release is stored between acquires, outside the clock: in a node it rides
    the try's own writes (the chains below count that)."""
    tag = uuid.uuid4().hex[:8]

    def scratch() -> Any:
        yield Stmt(_SCRATCH)

    saver._write(scratch)
    limits = {
        # Uncontended: never refused; its window holds the last 0.1 s of starts.
        "rate": Limit(f"r-{tag}", rate=10**6, per=0.1),
        "concurrency": Limit(f"c-{tag}", concurrency=10**6),
    }

    def acquires(limit: Limit) -> float:
        spent = 0.0
        for _ in range(INVOKES):
            began = time.perf_counter()
            held = admit_sync(saver, "bench", Admit([limit], 60.0))
            spent += time.perf_counter() - began
            assert isinstance(held, Held)
            release_sync(Release(held))
            flush = getattr(held.io, "flush", None)  # a release waiting for a write
            if flush is not None:
                flush()
        return spent / INVOKES

    ops: dict[str, Callable[[], float]] = {
        **{kind: (lambda limit=limit: acquires(limit)) for kind, limit in limits.items()},
        "round_trip": lambda: timed(lambda: round_trip(saver), INVOKES),
        "write": lambda: timed(lambda: round_trip(saver, _BUMP), INVOKES),
    }
    runs: dict[str, list[float]] = {k: [] for k in ops}
    for _ in range(repeats + 1):
        for kind, op in ops.items():
            runs[kind].append(op())
    med = {k: statistics.median(v[1:]) for k, v in runs.items()}  # the first run warms up
    unit = med["round_trip"]
    return {
        "round_trip_ms": unit * 1e3,
        "committed_write_ms": med["write"] * 1e3,
        "rate_acquire_ms": med["rate"] * 1e3,
        "rate_acquire_in_round_trips": med["rate"] / unit,
        "concurrency_acquire_ms": med["concurrency"] * 1e3,
        "concurrency_acquire_in_round_trips": med["concurrency"] / unit,
    }


class State(ResilientState, total=False):
    count: int


def chain(saver: Any, limit: Limit | None) -> Any:
    """``STEPS`` nodes in a row, each under ``limit`` (or none)."""
    g = ResilientStateGraph(State)
    names = [f"n{i}" for i in range(STEPS)]
    policy = NodePolicy(limits=[limit] if limit is not None else [])
    for name in names:
        g.add_node(name, lambda state: {"count": state["count"] + 1}, policy=policy)
    for a, b in zip([START, *names], [*names, END], strict=True):
        g.add_edge(a, b)
    return g.compile(checkpointer=saver)


def chains(saver: Any) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    return {
        "none": chain(saver, None),
        "rate": chain(saver, Limit(f"gr-{tag}", rate=10**6, per=0.1)),
        "concurrency": chain(saver, Limit(f"gc-{tag}", concurrency=10**6)),
    }


def run_chain(graph: Any) -> None:
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    out = graph.invoke({"count": 0}, config, durability="sync")
    assert out["count"] == STEPS, out


def graph_times(saver: Any, runs: int) -> dict[str, float]:
    """Milliseconds a limit adds to a try of the chain, medians over ``runs`` runs
    of each chain, interleaved."""
    graphs = chains(saver)
    seen: dict[str, list[float]] = {k: [] for k in KINDS}
    for i in range(runs + 2):
        for kind, graph in graphs.items():
            elapsed = timed(lambda graph=graph: run_chain(graph), 1)
            if i >= 2:  # two runs warm up
                seen[kind].append(elapsed)
    med = {k: statistics.median(v) for k, v in seen.items()}
    found = {"try_ms": med["none"] / STEPS * 1e3}
    for kind in KINDS[1:]:
        found[f"{kind}_ms"] = (med[kind] - med["none"]) / STEPS * 1e3
    return found


def graph_trips(take: Callable[[], float], saver: Any) -> dict[str, float]:
    """Round trips (``take``) a limit adds to a try of the chain, medians."""
    graphs = chains(saver)
    seen: dict[str, list[float]] = {k: [] for k in KINDS}
    for i in range(5):
        for kind, graph in graphs.items():
            take()
            run_chain(graph)
            time.sleep(0.1)  # a release still waiting for a write (none should) is counted
            if i >= 2:
                seen[kind].append(take())
    med = {k: statistics.median(v) for k, v in seen.items()}
    found = {"try": med["none"] / STEPS}
    for kind in KINDS[1:]:
        found[kind] = (med[kind] - med["none"]) / STEPS
    return found


def sqlite_trips(path: str) -> dict[str, float]:
    """Transactions per try on SQLite, counted (BEGIN statements on the saver's connection)."""
    with ResilientSqliteSaver.from_conn_string(path) as saver:
        begun = [0]

        def traced(sql: str) -> None:
            if sql.startswith("BEGIN"):
                begun[0] += 1

        saver.conn.set_trace_callback(traced)

        def take() -> float:
            n, begun[0] = begun[0], 0
            return float(n)

        return graph_trips(take, saver)


def postgres_trips(dsn: str) -> dict[str, float]:
    """Round trips per try on Postgres, counted by the proxy of ``pg_round_trips.py``."""
    server = conninfo_to_dict(dsn)
    proxy = Proxy(str(server.get("host", "127.0.0.1")), int(server.get("port", 5432)))
    via = make_conninfo(dsn, host="127.0.0.1", port=proxy.port, sslmode="disable")
    with ResilientPostgresSaver.from_conn_string(via) as saver:
        return graph_trips(lambda: float(proxy.take()[0]["trips"]), saver)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--tries", type=int, default=20, help="tries per process")
    p.add_argument("--runs", type=int, default=30, help="runs of each chain, timed")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.db")
        with ResilientSqliteSaver.from_conn_string(path) as saver:
            saver.setup()
            results["sqlite"] = {
                "throughput": throughput("sqlite", path, args.tries),
                "cost": cost(saver, args.repeats),
                "graph_ms": graph_times(saver, args.runs),
            }
        results["sqlite"]["graph_trips"] = sqlite_trips(path)
    with (
        postgres_db(server_dsn()) as dsn,
        ResilientPostgresSaver.from_conn_string(dsn) as saver,
    ):
        saver.setup()
        results["postgres"] = {
            "throughput": throughput("postgres", dsn, args.tries),
            "cost": cost(saver, args.repeats),
            "graph_ms": graph_times(saver, args.runs),
        }
        results["postgres"]["graph_trips"] = postgres_trips(dsn)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for store, found in results.items():
        t, c = found["throughput"], found["cost"]
        print(
            f"{store:8}  throughput: {t['tries']} tries in {t['seconds']:.2f} s, "
            f"{t['per_second']:.1f}/s of {RATE}/s = {t['of_limit']:.2f} of the limit"
        )
        print(
            f"{'':8}  an acquire: rate limit {c['rate_acquire_ms']:.3f} ms = "
            f"{c['rate_acquire_in_round_trips']:.2f} bare round trips; concurrency limit "
            f"{c['concurrency_acquire_ms']:.3f} ms = "
            f"{c['concurrency_acquire_in_round_trips']:.2f} (one bare round trip "
            f"{c['round_trip_ms']:.3f} ms, a committed one-row write "
            f"{c['committed_write_ms']:.3f} ms)"
        )
        g, n = found["graph_ms"], found["graph_trips"]
        unit = "transactions" if store == "sqlite" else "round trips"
        print(
            f"{'':8}  in a {STEPS}-node chain, per try: without a limit {g['try_ms']:.3f} ms, "
            f"{n['try']:.1f} {unit}; a rate limit adds {g['rate_ms']:.3f} ms, "
            f"{n['rate']:.1f} {unit}; a concurrency limit adds {g['concurrency_ms']:.3f} ms, "
            f"{n['concurrency']:.1f} {unit}"
        )


if __name__ == "__main__":
    main()
