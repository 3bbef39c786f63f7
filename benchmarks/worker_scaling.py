"""Worker throughput, 1 process against 4, and takeover latency after a SIGKILL (Postgres).

What it measures:

- throughput: ``RUNS`` runs of a five-step graph whose steps each wait 20 ms
  (an I/O-bound model call), queued in a fresh Postgres database, then run by 1
  worker process and by 4 (each ``concurrency=1``), timed from the moment every
  process is ready (imports done, connected) to the end of the last run.
  The two are interleaved over repeats; ratio = median throughput with 4 /
  median with 1. Target: at least 3.5.
- takeover latency: two workers (``lease_ttl`` 2 s) run long runs; one is
  SIGKILLed; the time until its run is claimed by the survivor, as a multiple
  of ``lease_ttl``. Target: at most 1.2 (the worst case, a kill right after a
  renewal, waits one whole ``lease_ttl`` and then up to one poll, ``lease_ttl / 10``).

Run it from the repository root (needs the Postgres server; ``LGR_POSTGRES_URL``)::

    .venv/bin/python benchmarks/worker_scaling.py [--runs 200] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from _pg import postgres_db, server_dsn

STEPS = 5
STEP_WAIT = 0.02
THROUGHPUT_TARGET = 3.5
TAKEOVER_TARGET = 1.2
TAKEOVER_TTL = 2.0


# -- the worker process ------------------------------------------------------------------


def build() -> Any:
    from langgraph.graph import END, START

    from langgraph_resilience import ResilientState, ResilientStateGraph

    class State(ResilientState, total=False):
        n: int

    def step(state: State) -> dict[str, Any]:
        time.sleep(float(os.environ.get("LGR_STEP_WAIT", STEP_WAIT)))
        return {"n": state.get("n", 0) + 1}

    g = ResilientStateGraph(State)
    names = [f"s{i}" for i in range(1, STEPS + 1)]
    for name in names:
        g.add_node(name, step)
    g.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        g.add_edge(a, b)
    g.add_edge(names[-1], END)
    return g


def work(dsn: str, go: str, worker_id: str, lease_ttl: float) -> int:
    from langgraph_resilience import Worker
    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver

    with ResilientPostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        worker = Worker(build(), checkpointer=saver, lease_ttl=lease_ttl, worker_id=worker_id)
        Path(go + f".ready-{worker_id}").touch()
        while not os.path.exists(go):
            time.sleep(0.002)
        worker.run()
    return 0


# -- the measurements --------------------------------------------------------------------


def submit(dsn: str, runs: int) -> None:
    from langgraph_resilience import Worker
    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver

    with ResilientPostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        with psycopg.connect(dsn, autocommit=True) as conn:  # start from an empty queue
            conn.execute("DELETE FROM resilience_runs")
        worker = Worker(build(), checkpointer=saver)
        for _ in range(runs):
            worker.submit({"n": 0})


def spawn(
    dsn: str, go: str, worker_id: str, lease_ttl: float, **env: str
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, __file__, "--work", dsn, go, worker_id, str(lease_ttl)],
        env={**os.environ, **env},
    )


def start_together(
    dsn: str, n: int, lease_ttl: float, tmp: str, **env: str
) -> tuple[list[Any], float]:
    go = os.path.join(tmp, f"go-{uuid.uuid4().hex[:6]}")
    ids = [f"w{i}-{uuid.uuid4().hex[:4]}" for i in range(n)]
    procs = [spawn(dsn, go, wid, lease_ttl, **env) for wid in ids]
    deadline = time.monotonic() + 120
    while not all(os.path.exists(f"{go}.ready-{wid}") for wid in ids):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError("a worker did not start")
        time.sleep(0.01)
    Path(go).touch()
    return list(zip(procs, ids, strict=True)), time.time()


def throughput(dsn: str, workers: int, runs: int, tmp: str) -> float:
    submit(dsn, runs)
    procs, start = start_together(dsn, workers, 30.0, tmp)
    for proc, _ in procs:
        if proc.wait() != 0:
            raise RuntimeError("a worker failed")
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*), max(updated_at) FROM resilience_runs WHERE status = 'success'"
        ).fetchone()
    assert row is not None
    finished, last_end = int(row[0]), float(row[1])
    if finished != runs:
        raise RuntimeError(f"only {finished} of {runs} runs succeeded")
    # Until the last run ended (the database's clock, this machine's): an idle
    # worker's last poll before it exits is not part of the work.
    return runs / (last_end - start)


def takeover(dsn: str, tmp: str) -> float:
    """Seconds from a SIGKILL to the claim of the killed worker's run."""
    submit(dsn, 1)
    # One worker takes the single run; its steps are long so it is mid-run when killed.
    procs, _ = start_together(dsn, 2, TAKEOVER_TTL, tmp, LGR_STEP_WAIT="3")
    with psycopg.connect(dsn, autocommit=True) as conn:
        owner = None
        while owner is None:
            row = conn.execute(
                "SELECT owner FROM resilience_runs WHERE status = 'running'"
            ).fetchone()
            owner = row[0] if row else None
            time.sleep(0.005)
        time.sleep(random.uniform(0.1, TAKEOVER_TTL))  # anywhere in the renewal cycle
        victim = next(p for p, wid in procs if wid == owner)
        os.kill(victim.pid, signal.SIGKILL)
        killed = time.perf_counter()
        while True:
            row = conn.execute("SELECT owner FROM resilience_runs").fetchone()
            if row and row[0] not in (None, owner):
                claimed = time.perf_counter()
                break
            time.sleep(0.005)
    for proc, _ in procs:
        proc.kill()
        proc.wait()
    return claimed - killed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--work":
        return work(argv[1], argv[2], argv[3], float(argv[4]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--takeovers", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    dsn = server_dsn()
    rates: dict[int, list[float]] = {1: [], 4: []}
    latencies: list[float] = []
    with tempfile.TemporaryDirectory(prefix="lgr_bench_") as tmp, postgres_db(dsn) as target:
        for _ in range(args.repeats):
            for workers in (1, 4):
                rates[workers].append(throughput(target, workers, args.runs, tmp))
        for _ in range(args.takeovers):
            latencies.append(takeover(target, tmp))
    one, four = statistics.median(rates[1]), statistics.median(rates[4])
    result = {
        "runs": args.runs,
        "throughput_1_runs_per_s": one,
        "throughput_4_runs_per_s": four,
        "throughput_ratio": four / one,
        "throughput_target": THROUGHPUT_TARGET,
        "lease_ttl_s": TAKEOVER_TTL,
        "takeover_s": latencies,
        "takeover_ratio_median": statistics.median(latencies) / TAKEOVER_TTL,
        "takeover_ratio_max": max(latencies) / TAKEOVER_TTL,
        "takeover_target": TAKEOVER_TARGET,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"{args.runs} runs x {STEPS} steps of {STEP_WAIT * 1e3:.0f} ms, Postgres, "
        f"{args.repeats} repeats interleaved"
    )
    for n, median in ((1, one), (4, four)):
        each = ", ".join(f"{r:.2f}" for r in rates[n])
        label = f"{n} worker{'s' if n > 1 else ' '}"
        print(f"  {label}: {median:7.2f} runs/s   (each repeat: {each})")
    verdict = "ok" if four / one >= THROUGHPUT_TARGET else "BELOW"
    print(f"  ratio    : {four / one:7.2f}         target >= {THROUGHPUT_TARGET}  {verdict}")
    worst = max(latencies) / TAKEOVER_TTL
    verdict = "ok" if worst <= TAKEOVER_TARGET else "ABOVE"
    print(
        f"takeover after SIGKILL, lease_ttl {TAKEOVER_TTL:.0f} s: "
        f"{', '.join(f'{t:.2f} s' for t in latencies)}"
    )
    print(
        f"  median {statistics.median(latencies) / TAKEOVER_TTL:.2f} x lease_ttl, "
        f"worst {worst:.2f} x   target <= {TAKEOVER_TARGET}  {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
