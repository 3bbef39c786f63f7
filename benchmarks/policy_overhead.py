"""Happy-path cost of the failure model: ResilientStateGraph + resilient saver
against plain StateGraph + LangGraph's SqliteSaver.

What it measures: one ``graph.invoke(..., durability="sync")`` of a ten-node
linear graph with no failures, on a new thread each time. Ours has a
`NodePolicy` on every node (the node wrapper, the run log in every checkpoint,
the error-handler routes and the partial_result node); the baseline is the same
graph built with ``StateGraph`` on LangGraph's stock ``SqliteSaver``. Both run
side by side in one process, invocations interleaved, as in ``checkpoint_overhead.py``
(whose measurement code this reuses). Target: ratio <= 1.15.

Run it from the repository root::

    .venv/bin/python benchmarks/policy_overhead.py
    .venv/bin/python benchmarks/policy_overhead.py --repeats 9 --runs 60 --json
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import sys
import tempfile
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checkpoint_overhead import (
    NODE_COUNT,
    Graph,
    Node,
    Settings,
    measure_pair,
)

from langgraph_resilience import Backoff, NodePolicy, ResilientState, ResilientStateGraph
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

TARGET_RATIO = 1.15


class PlainState(TypedDict):
    count: int
    trail: Annotated[list[str], operator.add]


class ResilientBenchState(ResilientState):
    count: int
    trail: Annotated[list[str], operator.add]


def _wire(builder: Any, names: list[str]) -> None:
    for src, dst in zip([START, *names], [*names, END], strict=True):
        builder.add_edge(src, dst)


def build_plain(saver: BaseCheckpointSaver[Any]) -> Graph:
    builder = StateGraph(PlainState)
    names = [f"n{i}" for i in range(NODE_COUNT)]
    for name in names:
        builder.add_node(name, Node(name))
    _wire(builder, names)
    return builder.compile(checkpointer=saver)


def build_resilient(saver: BaseCheckpointSaver[Any]) -> Graph:
    builder = ResilientStateGraph(ResilientBenchState)
    builder.set_node_defaults(policy=NodePolicy(retry=Backoff(max_attempts=3)))
    names = [f"n{i}" for i in range(NODE_COUNT)]
    for name in names:
        builder.add_node(name, Node(name).__call__)
    _wire(builder, names)
    return builder.compile(checkpointer=saver)  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    settings = Settings(repeats=args.repeats, runs=args.runs, warmup=args.warmup)
    with (
        tempfile.TemporaryDirectory(prefix="lgr_bench_") as tmp,
        SqliteSaver.from_conn_string(os.path.join(tmp, "stock.sqlite")) as stock,
        ResilientSqliteSaver.from_conn_string(os.path.join(tmp, "ours.sqlite")) as ours,
    ):
        result = measure_pair("sqlite", build_plain(stock), build_resilient(ours), settings)
    if args.json:
        print(json.dumps({**result.as_dict(), "target": TARGET_RATIO}, indent=2))
        return 0
    print(
        f"policy overhead: {NODE_COUNT}-node linear graph, no failures, durability='sync', "
        f"{settings.repeats} repeats x {settings.runs} runs (warmup {settings.warmup})"
    )
    print(
        f"{'pair':8}  {'plain ms/run':>12}  {'ours ms/run':>12}  {'ratio':>6}  "
        f"{'median ratio':>12}  target"
    )
    verdict = "ok" if result.ratio <= TARGET_RATIO else "ABOVE"
    print(
        f"{result.name:8}  {result.stock_median * 1e3:12.3f}  {result.ours_median * 1e3:12.3f}  "
        f"{result.ratio:6.3f}  {result.median_repeat_ratio:12.3f}  {verdict}"
    )
    print("plain = StateGraph + SqliteSaver; ours = ResilientStateGraph + ResilientSqliteSaver")
    print(f"target: ratio <= {TARGET_RATIO:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
