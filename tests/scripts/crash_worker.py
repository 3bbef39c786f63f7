"""A worker process for the crash tests: runs (or resumes) a linear pipeline.

    python tests/crash_worker.py BACKEND TARGET THREAD LEDGER [options]

Every node appends ``<node> <pid>`` to LEDGER (fsynced) when it starts, then
sleeps ``--node-seconds``. Options:

--resume               resume with invoke(None) instead of starting
--async                use the async saver and ainvoke
--kill-in-put N        SIGKILL this process inside the N-th checkpoint write,
                       after the row is written and before the commit
--barrier NODE:K       NODE waits until K processes have started it (in LEDGER)
--fail-once NODE       NODE raises the first time it runs in this thread

Prints one JSON line: {"status": "completed" | "conflict", "done": [...]}.
Exit codes: 0 completed, 3 CheckpointConflict, 4 the node failed as asked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from conftest import open_saver
from graphs import linear_graph
from helpers import append, read_ledger, run_graph, script_parser

from langgraph_resilience.checkpoint.saver import _threads
from langgraph_resilience.errors import CheckpointConflict

STEPS = ["a", "b", "c", "d", "e"]


def kill_inside_put(n: int) -> None:
    """Die (SIGKILL) inside the n-th checkpoint transaction, before its commit."""
    original = _threads.put_checkpoint
    seen = 0

    def dying(*args: Any, **kwargs: Any) -> Any:
        nonlocal seen
        yield from original(*args, **kwargs)
        seen += 1
        if seen == n:
            os.kill(os.getpid(), signal.SIGKILL)

    _threads.put_checkpoint = dying  # type: ignore[assignment]


def behaviour_for(args: argparse.Namespace) -> Any:
    def behaviour(name: str) -> None:
        append(args.ledger, f"{name} {os.getpid()}")
        if args.barrier and args.barrier[0] == name:
            node, k = args.barrier
            deadline = time.monotonic() + 20
            while sum(words[0] == node for words in read_ledger(args.ledger)) < int(k):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"barrier {node}:{k} not reached")
                time.sleep(0.01)
        runs = sum(words[0] == name for words in read_ledger(args.ledger))
        if args.fail_once == name and runs == 1:
            raise RuntimeError(f"{name} fails the first time")
        time.sleep(args.node_seconds)

    return behaviour


async def main() -> int:
    parser = script_parser(resume=True)
    parser.add_argument("--kill-in-put", type=int, default=0)
    parser.add_argument("--barrier", type=lambda s: s.split(":"), default=None)
    parser.add_argument("--fail-once", default=None)
    parser.add_argument("--node-seconds", type=float, default=0.0)
    args = parser.parse_args()
    if args.kill_in_put:
        kill_inside_put(args.kill_in_put)
    config = {"configurable": {"thread_id": args.thread}}
    value = None if args.resume else {"done": []}
    async with AsyncExitStack() as stack:
        saver = await open_saver(args.backend, args.is_async, args.target, stack)
        graph = linear_graph(STEPS, behaviour_for(args)).compile(checkpointer=saver)
        try:
            out = await run_graph(graph, value, config, args.is_async, durability="sync")
        except CheckpointConflict as exc:
            print(json.dumps({"status": "conflict", "error": str(exc)}), flush=True)
            return 3
        except RuntimeError as exc:
            print(json.dumps({"status": "failed", "error": str(exc)}), flush=True)
            return 4
    print(json.dumps({"status": "completed", "done": out["done"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
