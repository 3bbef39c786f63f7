"""A worker process for the fan-out crash test and `benchmarks/branch_loss.py`:
runs (or resumes) a `Send` fan-out whose branches take different times.

    python tests/fanout_worker.py BACKEND TARGET THREAD LEDGER [options]

Branch ``i`` of ``--branches`` (default 20) appends ``start i <time>`` to LEDGER
(fsynced), sleeps ``i * --step`` seconds (default 0.03), then appends
``end i <time>``: a kill leaves in LEDGER which branches had finished, and when.

--resume   resume with invoke(None) instead of starting
--async    the async saver and ainvoke
--stock    a plain StateGraph on LangGraph's own saver, with LangGraph's
           defaults (durability "async"), instead of a ResilientStateGraph on
           the resilient saver

Prints one JSON line: {"done": [the branches in the final state]}.

`crash_and_resume` is a trial: a run SIGKILLed mid-fan-out, then resumed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from conftest import open_saver
from graphs import BranchState, PlainBranchState
from helpers import append, read_ledger, run_graph, script_parser
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from langgraph_resilience import ResilientStateGraph


def build(args: argparse.Namespace) -> StateGraph:
    def mark(what: str, i: int) -> None:
        append(args.ledger, f"{what} {i} {time.time():.4f}")

    def branch(state: dict[str, Any]) -> dict[str, Any]:
        mark("start", state["i"])
        time.sleep(state["i"] * args.step)
        mark("end", state["i"])
        return {"done": [state["i"]]}

    async def abranch(state: dict[str, Any]) -> dict[str, Any]:
        mark("start", state["i"])
        await asyncio.sleep(state["i"] * args.step)
        mark("end", state["i"])
        return {"done": [state["i"]]}

    g: StateGraph = StateGraph(PlainBranchState) if args.stock else ResilientStateGraph(BranchState)
    g.add_node("fan", lambda state: {"done": []})
    g.add_node("branch", abranch if args.is_async else branch)
    g.add_edge(START, "fan")
    g.add_conditional_edges(
        "fan", lambda state: [Send("branch", {"i": i}) for i in range(args.branches)], ["branch"]
    )
    g.add_edge("branch", END)
    return g


async def stock_saver(backend: str, is_async: bool, target: str, stack: AsyncExitStack) -> Any:
    """LangGraph's own saver of ``backend``."""
    if backend == "sqlite":
        if is_async:
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            return await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(target))
        from langgraph.checkpoint.sqlite import SqliteSaver

        return stack.enter_context(SqliteSaver.from_conn_string(target))
    if is_async:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        saver = await stack.enter_async_context(AsyncPostgresSaver.from_conn_string(target))
        await saver.setup()
        return saver
    from langgraph.checkpoint.postgres import PostgresSaver

    saver = stack.enter_context(PostgresSaver.from_conn_string(target))
    saver.setup()
    return saver


@dataclass(frozen=True)
class Trial:
    """A fan-out killed, then resumed: which branches had finished (and when),
    which ran again."""

    finished: dict[int, float]  # branch -> when it finished, before the kill
    killed_at: float
    ran_again: set[int]  # branches that started again on resume
    done: list[int]  # the resumed run's final state

    def finished_before(self, margin: float) -> set[int]:
        """The branches that finished ``margin`` seconds or more before the kill."""
        return {i for i, at in self.finished.items() if at <= self.killed_at - margin}


def crash_and_resume(
    start: Callable[[list[str]], Any], ledger: str, kill_after: float, timeout: float = 60
) -> Trial:
    """Start a run (``start(extra_args)``: a process with ``kill``, ``wait`` and
    ``communicate``), SIGKILL it ``kill_after`` seconds after its first branch
    started, resume it to the end."""
    proc = start([])
    deadline = time.monotonic() + timeout
    while not (starts := [w for w in read_ledger(ledger) if w[0] == "start"]):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no branch started (exit {proc.poll()}): {proc.communicate()}")
        time.sleep(0.002)
    time.sleep(max(0.0, float(starts[0][2]) + kill_after - time.time()))
    proc.kill()
    killed_at = time.time()
    proc.wait()
    before = read_ledger(ledger)
    out, err = start(["--resume"]).communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"the resumed run printed nothing:\n{err}"
    return Trial(
        finished={int(w[1]): float(w[2]) for w in before if w[0] == "end"},
        killed_at=killed_at,
        ran_again={int(w[1]) for w in read_ledger(ledger)[len(before) :] if w[0] == "start"},
        done=json.loads(lines[-1])["done"],
    )


async def main() -> int:
    parser = script_parser(resume=True)
    parser.add_argument("--stock", action="store_true")
    parser.add_argument("--branches", type=int, default=20)
    parser.add_argument("--step", type=float, default=0.03)
    args = parser.parse_args()
    config = {"configurable": {"thread_id": args.thread}}
    value = None if args.resume else {"done": []}
    async with AsyncExitStack() as stack:
        opener = stock_saver if args.stock else open_saver
        saver = await opener(args.backend, args.is_async, args.target, stack)
        graph = build(args).compile(checkpointer=saver)
        out = await run_graph(graph, value, config, args.is_async)
    print(json.dumps({"done": sorted(out["done"])}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
