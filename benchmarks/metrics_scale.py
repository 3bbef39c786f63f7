"""What `recovery_metrics` and `run_report` cost as the store grows: 1,000,
10,000 and 100,000 runs, SQLite and Postgres.

The store is built fast but as real runs leave it. A sample of real runs is
run first (a five-step resilient graph): most succeed; some retry a transient
failure, end ``partial_complete``, are fixed by `retry_failed`, stop mid-run
(the process "dies") and are resumed, pause for a human, call a side effect,
run under a `Worker`, take two turns on one thread; one `Worker` run is taken
over from a SIGKILLed worker process. Then every row of the sample's threads
is cloned in bulk with SQL (every table with a ``thread_id`` column, found in
the database, so tables added later are cloned too; ``thread_id`` and
``run_id`` / ``*_run_id`` columns get a suffix per copy, an autonumbered key is
numbered afresh) until the store holds N runs. Last, one
more sample of real runs is run: ``since`` is the moment before it, so all
but those ~20 runs are outside ``since``.

Timed (medians over ``--repeats``, each call on the open saver):

- ``metrics``: ``recovery_metrics(saver)``, over everything;
- ``since``: ``recovery_metrics(saver, since=...)``, the last sample only
  (target: independent of N);
- ``report``: ``run_report(saver, thread)`` of a cloned thread fixed by
  ``retry_failed`` (with a side effect).

Target (issue 25): ``metrics`` under 1 s at 100,000 runs on both dialects.
Run it from the repository root::

    .venv/bin/python benchmarks/metrics_scale.py [--runs 1000,10000] [--repeats 3]
    .venv/bin/python benchmarks/metrics_scale.py --runs 100000 --repeats 1
"""

from __future__ import annotations

import argparse
import logging
import operator
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import psycopg
from _pg import postgres_db, server_dsn
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, interrupt

from langgraph_resilience import (
    Backoff,
    NodePolicy,
    PermanentError,
    ResilientState,
    ResilientStateGraph,
    TransientError,
    Worker,
    recovery_metrics,
    retry_failed,
    run_report,
    side_effect,
)
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

STEPS = ("a", "b", "c", "d", "e")
TARGET = 1.0
#: One sample: (kind, threads). A thread's name is ``<kind>-<i>``; its kind
#: says what its nodes do. ``turns`` threads hold two runs each.
MIX = (
    ("ok", 10),
    ("retried", 2),
    ("partial", 1),
    ("fixed", 1),
    ("crash", 1),
    ("human", 1),
    ("effect", 1),
    ("worker", 2),
    ("turns", 1),
)
SAVERS = {"sqlite": ResilientSqliteSaver, "postgres": ResilientPostgresSaver}


class State(ResilientState, total=False):
    done: Annotated[list[str], operator.add]


class Died(BaseException):
    """The process "dies" in a node: nothing of the node is stored."""


healed: set[str] = set()  # threads whose failure is over (tried once, or fixed)


@side_effect(name="notify")
def notify(thread: str, *, idempotency_key: str) -> str:
    return f"sent {thread}"


def node(step: str, marker: str | None = None) -> Any:
    def run(state: State, config: RunnableConfig) -> dict[str, Any]:
        thread = config["configurable"]["thread_id"]
        kind = thread.split("-")[0]
        if (kind, step) in (("effect", "b"), ("fixed", "c")):
            notify(thread)  # fixed: replayed when retry_failed runs c again
        failing = kind in ("retried", "fixed", "crash", "partial") and thread not in healed
        if failing and step == "c":
            if kind == "retried":
                healed.add(thread)
                raise TransientError("503, try again")
            if kind == "crash":
                healed.add(thread)
                raise Died
            raise PermanentError("c cannot be done yet")
        if kind == "human" and step == "b":
            interrupt("approve?")
        if kind == "takeover" and step == "c" and marker and not os.path.exists(marker):
            Path(marker).touch()
            time.sleep(60)  # killed here
        return {"done": [step]}

    return run


def build(saver: Any, marker: str | None = None) -> Any:
    g = ResilientStateGraph(State)
    g.set_node_defaults(policy=NodePolicy(retry=Backoff(initial_interval=0.001, jitter="none")))
    for a, b in zip(("__start__", *STEPS), (*STEPS, "__end__"), strict=True):
        if b != "__end__":
            g.add_node(b, node(b, marker))
        g.add_edge(a, b)
    return g.compile(checkpointer=saver)


def sample(graph: Any, saver: Any, tag: str) -> None:
    """One sample of real runs, on threads ``<kind>-<tag><i>``."""
    start = {"done": []}
    submitted = False
    for kind, count in MIX:
        for i in range(count):
            cfg = {"configurable": {"thread_id": f"{kind}-{tag}{i}"}}
            if kind == "worker":
                Worker(graph, checkpointer=saver).submit(start, thread_id=f"{kind}-{tag}{i}")
                submitted = True
                continue
            try:
                graph.invoke(start, cfg)
            except Died:
                graph.invoke(None, cfg)  # the resume after the "crash"
            if kind == "human":
                graph.invoke(Command(resume="yes"), cfg)
            if kind == "fixed":
                healed.add(cfg["configurable"]["thread_id"])
                retry_failed(graph, cfg)
            if kind == "turns":
                graph.invoke(start, cfg)
    if submitted:
        Worker(graph, checkpointer=saver, poll_interval=0.05).run(until_idle=True)


def takeover(dialect: str, target: str, folder: str) -> None:
    """A `Worker` run whose worker process is SIGKILLed in step c, taken over here."""
    marker = os.path.join(folder, "in-c")
    child = subprocess.Popen([sys.executable, __file__, "--child", dialect, target, marker])
    deadline = time.monotonic() + 60
    while not os.path.exists(marker):
        if time.monotonic() > deadline or child.poll() is not None:
            child.kill()
            raise RuntimeError("the takeover's worker process did not reach step c")
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    with SAVERS[dialect].from_conn_string(target) as saver:
        Worker(build(saver), checkpointer=saver, lease_ttl=1.0, poll_interval=0.05).run()


def child(dialect: str, target: str, marker: str) -> None:
    with SAVERS[dialect].from_conn_string(target) as saver:
        worker = Worker(build(saver, marker), checkpointer=saver, lease_ttl=1.0)
        worker.submit({"done": []}, thread_id="takeover-0")
        worker.run()


# -- cloning ------------------------------------------------------------------------------


class Sql:
    """Raw SQL on the store: ``run(sql, params)``, ``rows(sql, params)``; ``?`` placeholders."""

    def __init__(self, dialect: str, target: str) -> None:
        self.dialect = dialect
        if dialect == "sqlite":
            self.conn: Any = sqlite3.connect(target, isolation_level=None)
        else:
            self.conn = psycopg.connect(target, autocommit=True)

    def run(self, text: str, params: tuple[Any, ...] = ()) -> list[Any]:
        if self.dialect == "sqlite":
            cur = self.conn.execute(text, params)
        else:  # no parameters: psycopg leaves a % alone
            cur = self.conn.execute(text.replace("?", "%s"), params or None)
        return list(cur.fetchall()) if cur.description else []

    def thread_tables(self) -> dict[str, list[str]]:
        """Every table with a thread_id column (but the archive's): its columns."""
        if self.dialect == "sqlite":
            names = [r[0] for r in self.run("SELECT name FROM sqlite_master WHERE type='table'")]
            cols = {  # an INTEGER PRIMARY KEY is numbered afresh
                n: [r[1] for r in self.run(f"PRAGMA table_info({n})") if r[2:6:3] != ("INTEGER", 1)]
                for n in names
            }
        else:
            cols = {}
            for table, col in self.run(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND is_identity = 'NO' "
                "AND coalesce(column_default, '') NOT LIKE 'nextval%' "
                "ORDER BY table_name, ordinal_position"
            ):
                cols.setdefault(table, []).append(col)
        return {t: c for t, c in cols.items() if "thread_id" in c and t != "resilience_archive"}


def clone(db: Sql, copies: int, batch: int = 500) -> None:
    """Copy every row of the store's threads ``copies`` times (``thread_id`` and
    ``run_id`` columns suffixed ``~k``), ``batch`` copies per transaction."""
    tables = db.thread_tables()
    db.run("CREATE TEMP TABLE bench_copies (k INTEGER PRIMARY KEY)")
    for first in range(1, copies + 1, batch):
        db.run("DELETE FROM bench_copies")
        ks = range(first, min(first + batch, copies + 1))
        db.run(
            "INSERT INTO bench_copies (k) SELECT * FROM ("
            + " UNION ALL ".join(f"SELECT {k}" for k in ks)
            + ") AS ks"
        )
        db.run("BEGIN")
        for table, cols in tables.items():
            chosen = [
                f"{c} || '~' || k" if c in ("thread_id", "run_id") or c.endswith("_run_id") else c
                for c in cols
            ]
            db.run(
                f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(chosen)} "
                f"FROM {table} AS t CROSS JOIN bench_copies WHERE t.thread_id NOT LIKE '%~%'"
            )
        db.run("COMMIT")
    db.run("DROP TABLE bench_copies")


# -- the measurement ----------------------------------------------------------------------


@contextmanager
def store(dialect: str) -> Iterator[str]:
    if dialect == "sqlite":
        with tempfile.TemporaryDirectory(prefix="lgr-metrics-") as folder:
            yield os.path.join(folder, "store.db")
    else:
        with postgres_db(server_dsn()) as dsn:
            yield dsn


def median_time(call: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def fill(dialect: str, target: str, n: int, folder: str) -> tuple[int, float]:
    """Fill the empty store ``target`` up to about ``n`` runs: a sample of real
    runs, a takeover, then clones; returns (copies made, seconds the cloning took)."""
    healed.clear()
    with SAVERS[dialect].from_conn_string(target) as saver:
        saver.setup()
        sample(build(saver), saver, "s")
    takeover(dialect, target, folder)
    per_sample = sum(c * (2 if k == "turns" else 1) for k, c in MIX) + 1
    started = time.perf_counter()
    db = Sql(dialect, target)
    copies = max(0, round(n / per_sample) - 2)  # and the sample, and the last sample
    clone(db, copies)
    if dialect == "postgres":
        db.run("VACUUM ANALYZE")
    db.conn.close()
    return copies, time.perf_counter() - started


def measure(dialect: str, n: int, repeats: int) -> dict[str, Any]:
    with store(dialect) as target, tempfile.TemporaryDirectory() as folder:
        copies, built = fill(dialect, target, n, folder)
        with SAVERS[dialect].from_conn_string(target) as saver:
            since = datetime.now()
            sample(build(saver), saver, "new")
            thread = "fixed-s0~1" if copies else "fixed-s0"
            full, m = median_time(lambda: recovery_metrics(saver), repeats)
            recent, m_since = median_time(lambda: recovery_metrics(saver, since=since), repeats)
            report, r = median_time(lambda: run_report(saver, thread), repeats)
        if r.status != "success" or not r.effects:
            raise RuntimeError(f"unexpected report of {thread}: {r.status}, {r.effects}")
    return {
        "runs": m.runs,
        "partial": m.runs_partial,
        "recoveries": m.recoveries,
        "since_runs": m_since.runs,
        "built": built,
        "metrics": full,
        "since": recent,
        "report": report,
    }


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(*sys.argv[2:])
        return 0
    logging.getLogger("langgraph_resilience").setLevel(logging.CRITICAL)  # the sample's failures
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="1000,10000", help="store sizes, e.g. 1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dialects", default="sqlite,postgres")
    args = parser.parse_args()
    print(f"recovery_metrics and run_report by store size, medians of {args.repeats}")
    print(
        f"{'store':9s} {'runs':>7s} {'partial':>7s} {'recov':>6s} {'build s':>8s} "
        f"{'metrics s':>10s} {'since s':>8s} {'(runs)':>6s} {'report s':>9s}"
    )
    for dialect in args.dialects.split(","):
        for n in (int(x) for x in args.runs.split(",")):
            r = measure(dialect, n, args.repeats)
            print(
                f"{dialect:9s} {r['runs']:7d} {r['partial']:7d} {r['recoveries']:6d} "
                f"{r['built']:8.1f} {r['metrics']:10.3f} {r['since']:8.3f} "
                f"{r['since_runs']:6d} {r['report']:9.4f}",
                flush=True,
            )
    print(f"target: metrics < {TARGET} s at 100,000 runs; since independent of runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
