"""A worker for the backoff crash test: a node that always fails transiently.

    python tests/backoff_worker.py BACKEND TARGET THREAD LEDGER [--resume] [--async]

The node appends ``<attempt number> <pid>`` to LEDGER, then raises
ConnectionError. Its policy allows 3 attempts; the wait after attempt 1 is
0.05 s and after attempt 2 is 10 s, so the test can kill the process during
that second wait. Prints one JSON line with the run's outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from conftest import open_saver
from helpers import run_graph, script_parser
from langgraph.graph import END, START

from langgraph_resilience import (
    Backoff,
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    current_attempt,
)

POLICY = NodePolicy(
    retry=Backoff(max_attempts=3, initial_interval=0.05, backoff_factor=200, jitter="none")
)


class State(ResilientState, total=False):
    done: list[str]


def build(ledger: str, is_async: bool) -> ResilientStateGraph:
    def body() -> None:
        with open(ledger, "a") as f:
            f.write(f"{current_attempt().number} {os.getpid()}\n")
            f.flush()
            os.fsync(f.fileno())
        raise ConnectionError("upstream unavailable")

    async def call_async(state: State) -> dict[str, Any]:
        body()
        return {}

    def call_sync(state: State) -> dict[str, Any]:
        body()
        return {}

    g = ResilientStateGraph(State)
    g.add_node("call", call_async if is_async else call_sync, policy=POLICY)
    g.add_edge(START, "call")
    g.add_edge("call", END)
    return g


async def main() -> int:
    parser = script_parser(resume=True)
    args = parser.parse_args()
    config = {"configurable": {"thread_id": args.thread}}
    value = None if args.resume else {"done": []}
    async with AsyncExitStack() as stack:
        saver = await open_saver(args.backend, args.is_async, args.target, stack)
        graph = build(args.ledger, args.is_async).compile(checkpointer=saver)
        out = await run_graph(graph, value, config, args.is_async)
    print(
        json.dumps(
            {"status": out["resilience"]["status"], "failed_step": out["resilience"]["failed_step"]}
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
