"""A `Worker` process for the durable-wait and human-approval tests.

    python tests/wait_worker.py BACKEND TARGET SERVICE_DIR submit KIND [--thread T]
    python tests/wait_worker.py BACKEND TARGET SERVICE_DIR work [--async] [--until-idle]
    python tests/wait_worker.py BACKEND TARGET SERVICE_DIR resume RUN_ID JSON_VALUE

``submit`` queues one run of the three-step pipeline (``fetch``, ``approve``,
``finish``) and prints its id. KIND says what the run meets: ``wait`` (the first
``fetch`` of its thread is refused with ``Retry-After: 3600``), ``human``
(``approve`` asks ``interrupt("approve?")``) or ``plain``. ``work`` runs a
Worker (until no run is due with ``--until-idle``, else until killed) and prints
what it left each run in (JSON). Every node logs ``<thread> <node> <pid>
<detail>`` to ``SERVICE_DIR/nodes.log`` (``approve``'s detail is the JSON of the
answer it got). ``resume`` answers a paused run through ``Worker.resume``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from conftest import open_saver
from helpers import append, read_ledger
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START
from langgraph.types import interrupt

from langgraph_resilience import (
    Backoff,
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    TransientError,
    Worker,
)


class State(ResilientState, total=False):
    kind: str
    answer: Any
    done: list[str]


def pipeline(service: Path) -> ResilientStateGraph:
    log = service / "nodes.log"

    def thread_of(config: RunnableConfig) -> str:
        return str(config["configurable"]["thread_id"])

    def fetch(state: State, config: RunnableConfig) -> dict[str, Any]:
        thread = thread_of(config)
        tried = [r for r in read_ledger(log) if r[0] == thread and r[1] == "fetch"]
        append(log, f"{thread} fetch {os.getpid()} try{len(tried) + 1}")
        if state.get("kind") == "wait" and not tried:
            raise TransientError("daily quota used up", retry_after=3600)
        return {"done": ["fetch"]}

    def approve(state: State, config: RunnableConfig) -> dict[str, Any]:
        answer = interrupt("approve?") if state.get("kind") == "human" else None
        compact = json.dumps(answer, separators=(",", ":"))  # one word of the log
        append(log, f"{thread_of(config)} approve {os.getpid()} {compact}")
        return {"answer": answer, "done": [*state.get("done", []), "approve"]}

    def finish(state: State, config: RunnableConfig) -> dict[str, Any]:
        append(log, f"{thread_of(config)} finish {os.getpid()} -")
        return {"done": [*state.get("done", []), "finish"]}

    policy = NodePolicy(retry=Backoff(max_attempts=3, initial_interval=0.01, max_wait=1))
    g = ResilientStateGraph(State)
    for name, fn in (("fetch", fetch), ("approve", approve), ("finish", finish)):
        g.add_node(name, fn, policy=policy)
    g.add_edge(START, "fetch")
    g.add_edge("fetch", "approve")
    g.add_edge("approve", "finish")
    g.add_edge("finish", END)
    return g


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("backend")
    parser.add_argument("target")
    parser.add_argument("service", type=Path)
    parser.add_argument("command", choices=["submit", "work", "resume"])
    parser.add_argument("args", nargs="*")
    parser.add_argument("--thread")
    parser.add_argument("--async", dest="is_async", action="store_true")
    parser.add_argument("--until-idle", action="store_true")
    opts = parser.parse_args()
    async with AsyncExitStack() as stack:
        is_async = opts.is_async and opts.command == "work"
        saver = await open_saver(opts.backend, is_async, opts.target, stack)
        worker = Worker(pipeline(opts.service), checkpointer=saver, lease_ttl=2, poll_interval=0.1)
        if opts.command == "submit":
            value = {"kind": opts.args[0]}
            run_id = await asyncio.to_thread(worker.submit, value, thread_id=opts.thread)
            print(json.dumps(run_id))
        elif opts.command == "resume":
            await asyncio.to_thread(worker.resume, opts.args[0], json.loads(opts.args[1]))
        elif is_async:
            print(json.dumps(await worker.arun(until_idle=opts.until_idle)), flush=True)
        else:
            left = await asyncio.to_thread(worker.run, until_idle=opts.until_idle)
            print(json.dumps(left), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
