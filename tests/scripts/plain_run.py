"""A user's plain run for the stale-run tests: ``graph.invoke`` of a resilient
pipeline, in a process of its own that the test kills (SIGKILL) mid-run.

    python tests/scripts/plain_run.py BACKEND TARGET THREAD LEDGER [--async] [--ask]

Every node appends ``<node> <pid>`` to LEDGER (fsynced) when it starts; ``slow``
then sleeps a minute (the test kills the process there), or with ``--ask``
pauses at an interrupt (the process then exits); ``fast`` returns. Prints one
JSON line {"done": [...]} when the invoke returns.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from conftest import open_saver
from graphs import DoneState, appending, chain
from helpers import append, run_graph, script_parser
from langgraph.types import interrupt

from langgraph_resilience import ResilientStateGraph

STEPS = ["fast", "slow"]


def graph_of(behaviour: Callable[[str], None]) -> ResilientStateGraph:
    return chain(ResilientStateGraph(DoneState), STEPS, appending(behaviour))


def logging_to(ledger: str, ask: bool = False) -> Callable[[str], None]:
    def behaviour(name: str) -> None:
        append(ledger, f"{name} {os.getpid()}")
        if name == "slow" and ask:
            interrupt("go on?")
        elif name == "slow":
            time.sleep(60)

    return behaviour


async def main() -> int:
    parser = script_parser()
    parser.add_argument("--ask", action="store_true")
    args = parser.parse_args()
    config = {"configurable": {"thread_id": args.thread}}
    async with AsyncExitStack() as stack:
        saver = await open_saver(args.backend, args.is_async, args.target, stack)
        graph = graph_of(logging_to(args.ledger, args.ask)).compile(checkpointer=saver)
        out = await run_graph(graph, {"done": []}, config, args.is_async)
    print(json.dumps({"done": out.get("done", [])}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
