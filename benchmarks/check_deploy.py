"""How long ``check_deploy`` takes over many threads in flight (issue 40: 10,000 in
under 2 s on SQLite and Postgres).

Builds ``--threads`` threads paused at an interrupt (version 1; the paused node
records a side effect first, as an approval step that notifies someone does),
then checks them against a version 2 that renames the paused node: every thread
reads as ``migrates``. Prints the median of ``--repeats`` checks, per dialect,
and the time of one ``langgraph-resilience check-deploy`` command (a process:
its imports included).

    python benchmarks/check_deploy.py --threads 10000
"""

from __future__ import annotations

import argparse
import operator
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

from _pg import postgres_db, server_dsn
from langgraph.graph import END, START
from langgraph.types import interrupt

from langgraph_resilience import ResilientState, ResilientStateGraph, check_deploy, side_effect
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver


class State(ResilientState, total=False):
    done: Annotated[list[str], operator.add]


@side_effect
def notify(text: str) -> str:
    return "sent"


def ask(state: State) -> dict[str, Any]:
    notify("approve?")
    return {"done": [str(interrupt("approve?"))]}


def build(name: str, **versions: Any) -> ResilientStateGraph[Any]:
    g = ResilientStateGraph(State, **versions)
    g.add_node(name, ask)
    g.add_edge(START, name)
    g.add_edge(name, END)
    return g


#: The new version, for the command line: ``--graph check_deploy:V2``.
V2 = build("approve", version=2, renames={"review": "approve"})


GRAPH = ("--graph", "check_deploy:V2")


def command(db: str | None) -> float:
    """Seconds one ``check-deploy`` command takes over ``db`` (a process of its own);
    without ``db``, a process that only imports the command and the graph's module
    (what any command pays before it reads a row)."""
    here = Path(__file__).parent
    path = os.pathsep.join([str(here), *sys.path])
    if db is None:
        line = "import langgraph_resilience.cli, check_deploy"
        argv = [sys.executable, "-c", line]
    else:
        argv = [sys.executable, "-m", "langgraph_resilience", "check-deploy", "--db", db, *GRAPH]
    began = time.perf_counter()
    done = subprocess.run(
        argv,
        cwd=here,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - began
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return seconds


def fill(saver: Any, threads: int, workers: int) -> None:
    graph = build("review", version=1).compile(checkpointer=saver)
    todo = [{"configurable": {"thread_id": f"t{i}"}} for i in range(threads)]
    if workers == 1:
        for config in todo:
            graph.invoke({"done": []}, config)
        return
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda c: graph.invoke({"done": []}, c), todo))


def timed(saver: Any, threads: int, repeats: int) -> float:
    new = build("approve", version=2, renames={"review": "approve"})
    seconds = []
    for _ in range(repeats):
        began = time.perf_counter()
        report = check_deploy(saver, new)
        seconds.append(time.perf_counter() - began)
        assert len(report.migrates) == threads, (len(report.threads), threads)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n, repeats = args.threads, args.repeats
    with (
        tempfile.TemporaryDirectory() as tmp,
        ResilientSqliteSaver.from_conn_string(str(Path(tmp) / "deploy.db")) as saver,
    ):
        fill(saver, n, 1)
        print(f"sqlite: {n} threads: {timed(saver, n, repeats):.2f} s")
        print(f"sqlite: the check-deploy command: {command(str(Path(tmp) / 'deploy.db')):.2f} s")
        print(f"its imports alone: {command(None):.2f} s")
    with (
        postgres_db(server_dsn()) as dsn,
        ResilientPostgresSaver.from_conn_string(dsn) as pg,
    ):
        pg.setup()
        fill(pg, n, 1)
        print(f"postgres: {n} threads: {timed(pg, n, repeats):.2f} s")
        print(f"postgres: the check-deploy command: {command(dsn):.2f} s")


if __name__ == "__main__":
    main()
