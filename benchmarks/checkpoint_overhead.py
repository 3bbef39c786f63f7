"""Happy-path checkpoint overhead: our resilient savers against LangGraph's stock savers.

What it measures: the wall-clock time of one ``graph.invoke(..., durability="sync")`` of a
ten-node linear ``StateGraph`` (START -> n0 -> ... -> n9 -> END, trivial nodes, a counter and
an ``operator.add`` list channel so Postgres writes blobs), each invocation on a new thread.
With ``durability="sync"`` every step waits for its checkpoint, so the time is dominated by
the savers' ``put`` / ``put_writes``.

Pairs compared:

- SQLite: ``SqliteSaver`` vs ``ResilientSqliteSaver``, each on its own file in a temp dir.
- Postgres: ``PostgresSaver`` vs ``ResilientPostgresSaver``, each in its own fresh
  ``lgr_bench_<random>`` database (dropped at the end). The server comes from
  ``LGR_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``); when it
  is unreachable the Postgres pair is skipped and the reason printed.

It is a side-by-side comparison in one process: both savers of a pair are warmed up, then
each repeat interleaves N invocations of each, one by one, alternating which goes first,
so that drift of the machine (disk, other load) hits both alike. Reported per pair: the median
seconds per invocation of each, ``ratio`` = median(ours) / median(stock), and the median of
the per-repeat ratios. The target is ``ratio <= 1.10``. It is a measurement, not a test: the
exit code is 0 unless an exception occurs.

Run it from the repository root::

    .venv/bin/python benchmarks/checkpoint_overhead.py
    .venv/bin/python benchmarks/checkpoint_overhead.py --repeats 9 --runs 60 --json
"""

from __future__ import annotations

import argparse
import gc
import json
import operator
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
TARGET_RATIO = 1.10
NODE_COUNT = 10

Graph = CompiledStateGraph[Any, Any, Any, Any]


# ---------------------------------------------------------------------------
# The graph
# ---------------------------------------------------------------------------


class State(TypedDict):
    count: int
    trail: Annotated[list[str], operator.add]


@dataclass(frozen=True)
class Node:
    """A trivial node: bump the counter, append its name to the trail."""

    name: str

    def __call__(self, state: State) -> dict[str, Any]:
        return {"count": state["count"] + 1, "trail": [self.name]}


def build_graph(saver: BaseCheckpointSaver[Any]) -> Graph:
    """START -> n0 -> ... -> n9 -> END, checkpointed by ``saver``."""
    builder = StateGraph(State)
    names = [f"n{i}" for i in range(NODE_COUNT)]
    for name in names:
        builder.add_node(name, Node(name))
    for src, dst in zip([START, *names], [*names, END], strict=True):
        builder.add_edge(src, dst)
    return builder.compile(checkpointer=saver)


def invoke_once(graph: Graph) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": str(uuid.uuid4())}}
    start: State = {"count": 0, "trail": []}
    result = graph.invoke(start, config, durability="sync")
    if result["count"] != NODE_COUNT:
        raise RuntimeError(f"unexpected graph result: {result!r}")


# ---------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    repeats: int
    runs: int
    warmup: int


@dataclass
class PairResult:
    """Seconds per invocation of each repeat, for the stock saver and ours."""

    name: str
    stock: list[float] = field(default_factory=list)
    ours: list[float] = field(default_factory=list)

    @property
    def stock_median(self) -> float:
        return statistics.median(self.stock)

    @property
    def ours_median(self) -> float:
        return statistics.median(self.ours)

    @property
    def ratio(self) -> float:
        return self.ours_median / self.stock_median

    @property
    def median_repeat_ratio(self) -> float:
        return statistics.median(o / s for o, s in zip(self.ours, self.stock, strict=True))

    def as_dict(self) -> dict[str, Any]:
        return {
            "pair": self.name,
            "stock_median_s": self.stock_median,
            "ours_median_s": self.ours_median,
            "ratio": self.ratio,
            "median_repeat_ratio": self.median_repeat_ratio,
            "within_target": self.ratio <= TARGET_RATIO,
            "stock_per_repeat_s": self.stock,
            "ours_per_repeat_s": self.ours,
        }


def time_once(graph: Graph) -> float:
    start = time.perf_counter()
    invoke_once(graph)
    return time.perf_counter() - start


def measure_pair(name: str, stock: Graph, ours: Graph, settings: Settings) -> PairResult:
    """Warm both up; then, per repeat, interleave single invocations of the two
    (alternating which goes first) so that drift of the machine (disk, other
    load) hits both alike. A repeat's figure is its mean seconds per invocation.
    """
    for graph in (stock, ours):
        for _ in range(settings.warmup):
            invoke_once(graph)
    result = PairResult(name)
    for repeat in range(settings.repeats):
        gc.collect()
        totals = {"stock": 0.0, "ours": 0.0}
        for run in range(settings.runs):
            order = ("stock", "ours") if (repeat + run) % 2 == 0 else ("ours", "stock")
            for which in order:
                totals[which] += time_once(stock if which == "stock" else ours)
        result.stock.append(totals["stock"] / settings.runs)
        result.ours.append(totals["ours"] / settings.runs)
    return result


# ---------------------------------------------------------------------------
# SQLite
# ---------------------------------------------------------------------------


def run_sqlite(settings: Settings) -> PairResult:
    with tempfile.TemporaryDirectory(prefix="lgr_bench_") as tmp:
        stock_path = os.path.join(tmp, "stock.sqlite")
        ours_path = os.path.join(tmp, "ours.sqlite")
        with (
            SqliteSaver.from_conn_string(stock_path) as stock,
            ResilientSqliteSaver.from_conn_string(ours_path) as ours,
        ):
            return measure_pair("sqlite", build_graph(stock), build_graph(ours), settings)


# ---------------------------------------------------------------------------
# Postgres
# ---------------------------------------------------------------------------


def masked(dsn: str) -> str:
    """The DSN without its password, safe to print."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparseable DSN>"
    params.pop("password", None)
    return make_conninfo("", **params)


def admin_connection(dsn: str) -> psycopg.Connection[Any] | str:
    """An autocommit connection to the server, or why there is none."""
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        lines = str(exc).strip().splitlines()
        return lines[0] if lines else type(exc).__name__


@contextmanager
def scratch_databases(admin: psycopg.Connection[Any], dsn: str, count: int) -> Iterator[list[str]]:
    """Create ``count`` fresh ``lgr_bench_<random>`` databases; yield their DSNs; drop them."""
    names: list[str] = []
    try:
        for _ in range(count):
            name = f"lgr_bench_{uuid.uuid4().hex[:12]}"
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            names.append(name)
        yield [make_conninfo(dsn, dbname=name) for name in names]
    finally:
        for name in names:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def run_postgres(admin: psycopg.Connection[Any], dsn: str, settings: Settings) -> PairResult:
    with (
        scratch_databases(admin, dsn, 2) as (stock_dsn, ours_dsn),
        PostgresSaver.from_conn_string(stock_dsn) as stock,
        ResilientPostgresSaver.from_conn_string(ours_dsn) as ours,
    ):
        stock.setup()
        ours.setup()
        return measure_pair("postgres", build_graph(stock), build_graph(ours), settings)


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def render_table(results: list[PairResult], skipped: dict[str, str], settings: Settings) -> str:
    lines = [
        f"checkpoint overhead: {NODE_COUNT}-node linear graph, durability='sync', "
        f"{settings.repeats} repeats x {settings.runs} runs (warmup {settings.warmup})",
        f"{'pair':<9} {'stock ms/run':>12} {'ours ms/run':>12} {'ratio':>7} "
        f"{'median ratio':>12}  target",
    ]
    for r in results:
        verdict = "ok" if r.ratio <= TARGET_RATIO else "ABOVE"
        lines.append(
            f"{r.name:<9} {r.stock_median * 1e3:>12.3f} {r.ours_median * 1e3:>12.3f} "
            f"{r.ratio:>7.3f} {r.median_repeat_ratio:>12.3f}  {verdict}"
        )
    lines.extend(f"{name} pair skipped: {why}" for name, why in skipped.items())
    lines.append("ratio = median(ours) / median(stock); median ratio = median of per-repeat ratios")
    lines.append(f"target: ratio <= {TARGET_RATIO:.2f}")
    return "\n".join(lines)


def render_json(results: list[PairResult], skipped: dict[str, str], settings: Settings) -> str:
    return json.dumps(
        {
            "graph": {"nodes": NODE_COUNT, "durability": "sync"},
            "repeats": settings.repeats,
            "runs": settings.runs,
            "warmup": settings.warmup,
            "target_ratio": TARGET_RATIO,
            "pairs": [r.as_dict() for r in results],
            "skipped": skipped,
        },
        indent=2,
    )


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=positive_int, default=15, help="batches per saver")
    parser.add_argument("--runs", type=positive_int, default=40, help="invocations per batch")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs per saver first")
    parser.add_argument(
        "--pair",
        choices=("all", "sqlite", "postgres"),
        default="all",
        help="which pair to measure",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    return parser.parse_args(argv)


def run_pairs(pair: str, settings: Settings) -> tuple[list[PairResult], dict[str, str]]:
    results: list[PairResult] = []
    skipped: dict[str, str] = {}
    if pair in ("all", "sqlite"):
        results.append(run_sqlite(settings))
    if pair in ("all", "postgres"):
        dsn = os.environ.get("LGR_POSTGRES_URL", DEFAULT_DSN)
        admin = admin_connection(dsn)
        if isinstance(admin, str):
            skipped["postgres"] = f"cannot connect to {masked(dsn)!r}: {admin}"
        else:
            with admin:
                results.append(run_postgres(admin, dsn, settings))
    return results, skipped


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings(repeats=args.repeats, runs=args.runs, warmup=max(args.warmup, 0))
    results, skipped = run_pairs(args.pair, settings)
    if args.json:
        for name, why in skipped.items():
            print(f"{name} pair skipped: {why}", file=sys.stderr)
        print(render_json(results, skipped, settings))
    else:
        print(render_table(results, skipped, settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
