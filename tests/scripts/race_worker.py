"""A racer for the chaos test of two processes resuming one head at once.

    python tests/race_worker.py BACKEND TARGET PREFIX N DIR [--prepare] [--async]

The pipeline is ``prepare -> pay -> after``, interrupted before ``pay``; ``pay``
calls a side effect (no ``reconcile``: an intent taken for unknown would be
called again) against a fake service in DIR (``calls.log``: ``<thread> <key> <pid>``).

``--prepare`` runs threads PREFIX-0 .. PREFIX-(N-1) up to the interrupt. Without
it, two racers resume each thread in turn: both wait at a barrier (``ready.log``)
and resume at the same instant with ``invoke(None)``. Each appends to
``outcomes.log`` one line ``<thread> <pid> <outcome> <ran>``: outcome is
``completed`` or the error's class name, ran is 1 if this process started
``pay`` (``ran.log``) for the thread.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from conftest import open_saver
from graphs import ReceiptsState, chain
from helpers import append, read_ledger

from langgraph_resilience import Backoff, NodePolicy, ResilientStateGraph, side_effect

STEPS = ("prepare", "pay", "after")


def build(service: Path, is_async: bool) -> ResilientStateGraph:
    @side_effect(name="pay")
    def charge(thread: str, *, idempotency_key: str) -> str:
        append(service / "calls.log", f"{thread} {idempotency_key} {os.getpid()}")
        time.sleep(0.05)  # both racers are inside the step meanwhile
        return f"receipt:{idempotency_key}"

    @side_effect(name="pay")
    async def acharge(thread: str, *, idempotency_key: str) -> str:
        append(service / "calls.log", f"{thread} {idempotency_key} {os.getpid()}")
        await asyncio.sleep(0.05)
        return f"receipt:{idempotency_key}"

    def make(step: str) -> Any:
        if step != "pay":
            return lambda state: {"receipts": [*state.get("receipts", []), step]}

        def ran(state: ReceiptsState) -> str:
            thread = state["receipts"][0]
            append(service / "ran.log", f"{thread} {os.getpid()}")
            return thread

        def pay(state: ReceiptsState) -> dict[str, Any]:
            return {"receipts": [*state["receipts"], charge(ran(state))]}

        async def apay(state: ReceiptsState) -> dict[str, Any]:
            return {"receipts": [*state["receipts"], await acharge(ran(state))]}

        return apay if is_async else pay

    policy = NodePolicy(retry=Backoff(initial_interval=0.01, max_attempts=4))
    return chain(ResilientStateGraph(ReceiptsState), STEPS, make, lambda _: {"policy": policy})


def barrier(path: Path, i: int) -> None:
    append(path, f"{i} {os.getpid()}")
    deadline = time.monotonic() + 30
    while sum(words[0] == str(i) for words in read_ledger(path)) < 2:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the other racer never reached repeat {i}")
        time.sleep(0.002)


async def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("backend", "target", "prefix", "n", "dir"):
        parser.add_argument(name)
    parser.add_argument("--prepare", action="store_true")
    parser.add_argument("--async", dest="is_async", action="store_true")
    args = parser.parse_args()
    where = Path(args.dir)
    async with AsyncExitStack() as stack:
        saver = await open_saver(args.backend, args.is_async, args.target, stack)
        graph = build(where, args.is_async).compile(checkpointer=saver, interrupt_before=["pay"])
        for i in range(int(args.n)):
            thread = f"{args.prefix}-{i}"
            config = {"configurable": {"thread_id": thread}}
            if args.prepare:
                await asyncio.to_thread(graph.invoke, {"receipts": [thread]}, config)
                continue
            barrier(where / "ready.log", i)
            try:
                if args.is_async:
                    await graph.ainvoke(None, config)
                else:
                    graph.invoke(None, config)
                outcome = "completed"
            except Exception as exc:
                outcome = type(exc).__name__
            ran = any(w == [thread, str(os.getpid())] for w in read_ledger(where / "ran.log"))
            append(where / "outcomes.log", f"{thread} {os.getpid()} {outcome} {int(ran)}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
