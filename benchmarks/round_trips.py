"""Store round trips per step on Postgres, counted (not timed): a ten-step
`ResilientStateGraph` on `ResilientPostgresSaver` against a plain `StateGraph`
on LangGraph's stock `PostgresSaver`.

A round trip is a point where the client waits for the server: each
``ReadyForQuery`` the server sends (one per simple query, one per pipeline
``Sync``), read from libpq's protocol trace of the saver's connection
(``PGconn.trace``). Counted over one ``invoke`` of a fresh thread, after the
saver's setup, ``durability="sync"``. Run it from the repository root (any
revision: it uses only public names)::

    .venv/bin/python benchmarks/round_trips.py [--steps 10]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import uuid
from collections.abc import Callable
from typing import Any, TypedDict

from _pg import postgres_db, server_dsn
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph

from langgraph_resilience import ResilientState, ResilientStateGraph
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver


class State(ResilientState, total=False):
    count: int


class PlainState(TypedDict, total=False):
    count: int


def bump(state: Any) -> dict[str, Any]:
    return {"count": int(state.get("count") or 0) + 1}


def chain(graph: Any, steps: int) -> Any:
    names = [f"n{i}" for i in range(steps)]
    for name in names:
        graph.add_node(name, bump)
    graph.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph.add_edge(a, b)
    graph.add_edge(names[-1], END)
    return graph


def round_trips(conn: Any, run: Callable[[], Any]) -> int:
    """The server's ReadyForQuery messages on ``conn`` while ``run()`` runs."""
    fd, path = tempfile.mkstemp(prefix="lgr-trace-")
    try:
        conn.pgconn.trace(fd)
        try:
            run()
        finally:
            conn.pgconn.untrace()
        with open(path) as f:
            return sum(1 for line in f if "\tB\t" in line and "ReadyForQuery" in line)
    finally:
        os.close(fd)
        os.unlink(path)


def count(dsn: str, steps: int) -> dict[str, int]:
    found = {}
    config = {"configurable": {"thread_id": f"rt-{uuid.uuid4().hex[:8]}"}}
    with PostgresSaver.from_conn_string(dsn) as stock:
        stock.setup()
        graph = chain(StateGraph(PlainState), steps).compile(checkpointer=stock)
        found["stock"] = round_trips(
            stock.conn, lambda: graph.invoke({"count": 0}, config, durability="sync")
        )
    with ResilientPostgresSaver.from_conn_string(dsn) as ours:
        ours.setup()
        graph = chain(ResilientStateGraph(State), steps).compile(checkpointer=ours)
        graph.invoke({"count": 0}, {"configurable": {"thread_id": "warm"}})  # schema checked
        found["ours"] = round_trips(ours.conn, lambda: graph.invoke({"count": 0}, config))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    with postgres_db(server_dsn()) as dsn:
        found = count(dsn, args.steps)
    print(f"Postgres round trips, one {args.steps}-step run (durability=sync):")
    for name, n in found.items():
        print(f"  {name:6s} {n:4d}  ({n / args.steps:.1f} per step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
