"""Shared limits: throughput under a rate limit, and what an uncontended limit costs.

What it measures, per store (SQLite file, Postgres database):

- throughput: three processes (``tests/limit_worker.py``), each fanning out to
  ``--tries`` tries of one node under ``Limit(rate=RATE, per=1.0)``; the tries
  log their own start times. A rate limit admits ``RATE`` starts per window, so
  the starts after the first window, divided by the time from the first start
  to the last, against ``RATE`` is the share of the limit the fleet got
  (target >= 0.9);
- cost per try: what an uncontended ``Limit`` adds to a try, its admission and
  release as the try loop's driver runs them (a rate-only limit: one acquire; a
  concurrency one: an acquire and a release), interleaved in one process with
  the units, medians over repeats; in units of one store round trip on the
  same saver (Postgres: one pipelined statement, as the acquire is;
  SQLite: one transaction), beside a committed one-row write (its disk flush
  included; the limit's acquire and release commit without waiting for it).

Run it from the repository root::

    .venv/bin/python benchmarks/limits.py [--repeats 7] [--json]
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

from langgraph_resilience import Limit
from langgraph_resilience.checkpoint._store import Stmt
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.limits._admit import Admit, Held, Release
from langgraph_resilience.limits._drive import admit_sync, release_sync

ROOT = Path(__file__).parent.parent
WORKER = ROOT / "tests" / "limit_worker.py"
RATE = 20
INVOKES = 100


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
    pipelined statement; SQLite: one transaction); with ``_BUMP`` a committed
    one-row write (the disk flush included)."""

    def one() -> Any:
        rows = yield Stmt(sql, fetch=True)
        return rows

    saver._write(one, pipeline=saver._dialect.procedures)


def cost(saver: Any, repeats: int) -> dict[str, float]:
    """Seconds an uncontended limit costs a try (its admission and release, as the
    try loop's driver runs them), beside one store round trip and a committed write."""
    tag = uuid.uuid4().hex[:8]

    def scratch() -> Any:
        yield Stmt(_SCRATCH)

    saver._write(scratch)
    limits = {
        # Uncontended: never refused; its window holds the last 0.1 s of starts.
        "rate": Limit(f"r-{tag}", rate=10**6, per=0.1),
        "concurrency": Limit(f"c-{tag}", concurrency=10**6),
    }

    def one_try(limit: Limit) -> None:
        held = admit_sync(saver, "bench", Admit([limit], 60.0))
        assert isinstance(held, Held)
        release_sync(Release(held))

    ops: dict[str, Callable[[], Any]] = {
        **{kind: (lambda limit=limit: one_try(limit)) for kind, limit in limits.items()},
        "round_trip": lambda: round_trip(saver),
        "write": lambda: round_trip(saver, _BUMP),
    }
    runs: dict[str, list[float]] = {k: [] for k in ops}
    for _ in range(repeats + 1):
        for kind, op in ops.items():
            runs[kind].append(timed(op, INVOKES))
    med = {k: statistics.median(v[1:]) for k, v in runs.items()}  # the first run warms up
    unit = med["round_trip"]
    return {
        "round_trip_ms": unit * 1e3,
        "committed_write_ms": med["write"] * 1e3,
        "rate_limit_ms": med["rate"] * 1e3,
        "rate_limit_in_round_trips": med["rate"] / unit,
        "rate_limit_in_writes": med["rate"] / med["write"],
        "concurrency_limit_ms": med["concurrency"] * 1e3,
        "concurrency_limit_in_round_trips": med["concurrency"] / unit,
        "concurrency_limit_in_writes": med["concurrency"] / med["write"],
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--tries", type=int, default=20, help="tries per process")
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
            }
    with (
        postgres_db(server_dsn()) as dsn,
        ResilientPostgresSaver.from_conn_string(dsn) as saver,
    ):
        saver.setup()
        results["postgres"] = {
            "throughput": throughput("postgres", dsn, args.tries),
            "cost": cost(saver, args.repeats),
        }
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
            f"{'':8}  per try: rate limit {c['rate_limit_ms']:.3f} ms = "
            f"{c['rate_limit_in_round_trips']:.2f} round trips = "
            f"{c['rate_limit_in_writes']:.2f} committed writes; concurrency limit "
            f"{c['concurrency_limit_ms']:.3f} ms = {c['concurrency_limit_in_round_trips']:.2f} "
            f"round trips = {c['concurrency_limit_in_writes']:.2f} committed writes (one round "
            f"trip {c['round_trip_ms']:.3f} ms, a committed one-row write "
            f"{c['committed_write_ms']:.3f} ms)"
        )


if __name__ == "__main__":
    main()
