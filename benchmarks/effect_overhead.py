"""The cost of one recorded side effect, in units of one checkpoint write on the same store.

What it measures, per store (SQLite file, Postgres database):

- effect cost: a one-node graph whose node makes ``CALLS`` calls, run with the
  calls decorated by ``@side_effect`` and run with the same calls bare; the
  difference per call is what recording costs: the intent before the call and
  the outcome, stored in a write of its own as the call returns (the default);
- the same with ``defer_outcome=True``, whose outcome rides along with the next
  write (the next intent, the node's writes), inside the timed run, so its share
  is counted: the default before the outcome was stored at once (HEAD 581aad9);
- checkpoint write: ``saver.put`` of a small checkpoint continuing a thread, on
  the same resilient saver;
- ratio = effect cost / checkpoint write; and the saver's transactions per
  recorded call (each one round trip to the store): 2 stored, 1 deferred.

Both are measured in one process, interleaved, medians over repeats. Run it from
the repository root::

    .venv/bin/python benchmarks/effect_overhead.py [--repeats 9] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from _pg import postgres_db, server_dsn
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START

from langgraph_resilience import ResilientState, ResilientStateGraph, side_effect
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

CALLS = 5


class State(ResilientState, total=False):
    results: list[str]


def deliver(to: str) -> str:
    return f"sent to {to}"


recorded = side_effect(name="deliver")(deliver)  # the outcome stored as the call returns
# The outcome written behind, with the next write (the default before).
deferred = side_effect(name="deliver", defer_outcome=True)(deliver)


def build(saver: Any, call: Callable[[str], str]) -> Any:
    def node(state: State) -> dict[str, Any]:
        return {"results": [call(f"user{i}") for i in range(CALLS)]}

    g = ResilientStateGraph(State)
    g.add_node("notify", node, policy=None)
    g.add_edge(START, "notify")
    g.add_edge("notify", END)
    return g.compile(checkpointer=saver)


def time_invoke(graph: Any) -> float:
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}
    start = time.perf_counter()
    graph.invoke({"results": []}, config)
    return time.perf_counter() - start


def time_put(saver: Any, state: dict[str, Any]) -> float:
    if "config" not in state:
        config = {"configurable": {"thread_id": str(uuid.uuid4()), "checkpoint_ns": ""}}
        state["config"] = saver.put(config, _checkpoint(0), {"source": "input", "step": -1}, {})
    step = state["step"] = state.get("step", 0) + 1
    start = time.perf_counter()
    state["config"] = saver.put(
        state["config"], _checkpoint(step), {"source": "loop", "step": step}, {"results": "1"}
    )
    return time.perf_counter() - start


def _checkpoint(step: int) -> Any:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=step))
    cp["channel_values"] = {"results": [f"sent to user{i}" for i in range(CALLS)]}
    cp["channel_versions"] = {"results": str(step)}
    return cp


def count_transactions(saver: Any) -> list[int]:
    """A one-item counter of the saver's transactions (each one round trip)."""
    seen = [0]
    transact = saver._transact

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        return transact(*args, **kwargs)

    saver._transact = counted
    return seen


def measure(saver: Any, repeats: int, runs: int) -> dict[str, float]:
    graphs = {
        "bare": build(saver, deliver),
        "stored": build(saver, recorded),
        "deferred": build(saver, deferred),
    }
    transactions = count_transactions(saver)
    per_run = {}
    for name, graph in graphs.items():
        before = transactions[0]
        time_invoke(graph)
        per_run[name] = transactions[0] - before
    put_state: dict[str, Any] = {}
    for _ in range(5):
        for graph in graphs.values():
            time_invoke(graph)
        time_put(saver, put_state)
    per_call: dict[str, list[float]] = {"stored": [], "deferred": []}
    per_put = []
    for _ in range(repeats):
        totals = dict.fromkeys([*graphs, "put"], 0.0)
        for _ in range(runs):
            for name, graph in graphs.items():
                totals[name] += time_invoke(graph)
            totals["put"] += time_put(saver, put_state)
        for name in per_call:
            per_call[name].append((totals[name] - totals["bare"]) / runs / CALLS)
        per_put.append(totals["put"] / runs)
    put = statistics.median(per_put)
    result: dict[str, float] = {"checkpoint_write_s": put}
    for name in per_call:
        cost = statistics.median(per_call[name])
        result[f"{name}_effect_s"] = cost
        result[f"{name}_ratio"] = cost / put
        result[f"{name}_transactions"] = (per_run[name] - per_run["bare"]) / CALLS
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="lgr_bench_") as tmp,
        ResilientSqliteSaver.from_conn_string(os.path.join(tmp, "fx.sqlite")) as saver,
    ):
        results["sqlite"] = measure(saver, args.repeats, args.runs)
    dsn = server_dsn()
    try:
        with postgres_db(dsn) as target, ResilientPostgresSaver.from_conn_string(target) as saver:
            saver.setup()
            results["postgres"] = measure(saver, args.repeats, args.runs)
    except psycopg.OperationalError as exc:
        print(f"postgres skipped: {str(exc).splitlines()[0]}", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"effect overhead: {CALLS} recorded calls per node, {args.repeats} repeats x "
        f"{args.runs} runs, interleaved with bare calls and checkpoint writes"
    )
    print(
        f"{'store':9} {'ckpt write ms':>14}  {'stored ms':>9} {'ratio':>6} {'tx':>4}"
        f"  {'deferred ms':>11} {'ratio':>6} {'tx':>4}"
    )
    for store, r in results.items():
        print(
            f"{store:9} {r['checkpoint_write_s'] * 1e3:14.3f}  "
            f"{r['stored_effect_s'] * 1e3:9.3f} {r['stored_ratio']:6.3f} "
            f"{r['stored_transactions']:4.1f}  {r['deferred_effect_s'] * 1e3:11.3f} "
            f"{r['deferred_ratio']:6.3f} {r['deferred_transactions']:4.1f}"
        )
    print(
        "ratio = (one recorded effect - one bare call) / one checkpoint write; tx = the "
        "saver's transactions (round trips) per recorded call"
    )
    print(
        "stored: the default, the outcome in a write of its own as the call returns; "
        "deferred: defer_outcome=True, the outcome rides with the next write (the "
        "default before)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
