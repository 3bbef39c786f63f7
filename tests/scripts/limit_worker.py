"""A process for the shared-limit tests and `benchmarks/limits.py`: fans out to
``--tries`` tries of one node under a `Limit`, on its own thread of one store.

    python tests/limit_worker.py BACKEND TARGET PROC LEDGER [options]

Each try appends ``start PROC I <time>`` to LEDGER before its work (``--hold``
seconds of sleep) and ``end PROC I <time>`` after it (fsynced). With
``--retry-after S``, process 0's try 0 fails once with a 429 asking for S
seconds, after appending ``fail 0 0 <time>``; the other processes then start
their run only once that line is in LEDGER (and the pause stored: 0.2 s later),
so that whatever the machine's load did to the processes' start-up, they have
tries to run while the limit is paused.

TARGET: a SQLite path, a Postgres DSN, or on Redis ``[URL]#PREFIX`` (the key
prefix the processes share; the tests' Redis without a URL).

--limit NAME --concurrency N --rate N --per S   the limit (shared by name)
--async    the async saver and ainvoke

Prints one JSON line: {"done": [the tries in the final state], "status": ...}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from conftest import open_saver
from graphs import BranchState
from helpers import append, run_graph
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from langgraph_resilience import (
    Backoff,
    Limit,
    NodePolicy,
    ResilientStateGraph,
    current_attempt,
)


class RateLimited(Exception):
    """A provider's 429, as an HTTP client raises it."""

    status_code = 429

    def __init__(self, retry_after: float) -> None:
        super().__init__("429 Too Many Requests")
        self.response = type(
            "R", (), {"status_code": 429, "headers": {"Retry-After": str(retry_after)}}
        )


def build(args: argparse.Namespace) -> StateGraph:
    limit = Limit(args.limit, concurrency=args.concurrency, rate=args.rate, per=args.per)

    def work(state: dict[str, Any]) -> dict[str, Any]:
        i = state["i"]
        append(args.ledger, f"start {args.proc} {i} {time.time():.4f}")
        if args.retry_after and args.proc == 0 and i == 0 and current_attempt().number == 1:
            append(args.ledger, f"fail {args.proc} {i} {time.time():.4f}")
            raise RateLimited(args.retry_after)
        time.sleep(args.hold)
        append(args.ledger, f"end {args.proc} {i} {time.time():.4f}")
        return {"done": [i]}

    async def awork(state: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(work, state)

    g: StateGraph = ResilientStateGraph(BranchState)
    g.add_node("fan", lambda state: {"done": []})
    policy = NodePolicy(retry=Backoff(max_attempts=3, initial_interval=0.01), limits=[limit])
    g.add_node("work", awork if args.is_async else work, policy=policy)
    g.add_edge(START, "fan")
    g.add_conditional_edges(
        "fan", lambda state: [Send("work", {"i": i}) for i in range(args.tries)], ["work"]
    )
    g.add_edge("work", END)
    return g


async def after_the_429(ledger: Path) -> None:
    """Wait until process 0's try logged its 429, then for its pause to be stored."""
    deadline = time.monotonic() + 60
    while not (ledger.exists() and "fail " in ledger.read_text()):
        if time.monotonic() > deadline:
            raise SystemExit("process 0 never logged its 429")
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("backend")
    p.add_argument("target")
    p.add_argument("proc", type=int)
    p.add_argument("ledger")
    p.add_argument("--tries", type=int, default=6)
    p.add_argument("--limit", default="api")
    p.add_argument("--concurrency", type=int, default=None)
    p.add_argument("--rate", type=int, default=None)
    p.add_argument("--per", type=float, default=1.0)
    p.add_argument("--hold", type=float, default=0.05)
    p.add_argument("--retry-after", type=float, default=0.0)
    p.add_argument("--async", dest="is_async", action="store_true")
    args = p.parse_args()
    async with AsyncExitStack() as stack:
        saver = await open_saver(args.backend, args.is_async, args.target, stack)
        if args.retry_after and args.proc != 0:
            await after_the_429(Path(args.ledger))
        graph = build(args).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": f"limits-{args.proc}-{time.time()}"}}
        out = await run_graph(graph, {"done": []}, config, args.is_async)
    print(json.dumps({"done": sorted(out["done"]), "status": out["resilience"]["status"]}))


if __name__ == "__main__":
    asyncio.run(main())
