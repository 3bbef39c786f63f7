"""A worker for the side-effect crash and chaos tests.

    python tests/effect_worker.py BACKEND TARGET SERVICE_DIR THREADS [--kill POINT]

Runs (or resumes) the pipeline ``reserve -> charge -> notify`` on each thread
in THREADS (comma-separated) until all are done. Each node calls one
side effect against a fake outside service kept in SERVICE_DIR:

- ``calls.log``: one line ``<key> <pid> <time>`` per call (fsynced);
- the service deduplicates by key, as a real one given an idempotency key would;
- ``reconcile.log``: one line per reconcile question.

``--kill`` makes this process SIGKILL itself at one point of the first effect:
``before-call`` (intent stored, service not called), ``after-call`` (service
called, outcome not stored), ``after-return`` (the effect returned: its outcome
is stored, the node has not ended) or ``after-outcome`` (outcome
stored: the node fails after the effect, the failed try's record carries the
outcome, and the process dies as the retry starts).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from conftest import open_saver
from graphs import ReceiptsState, chain
from helpers import append, read_ledger

from langgraph_resilience import (
    Backoff,
    NodePolicy,
    ResilientStateGraph,
    TransientError,
    current_attempt,
    side_effect,
)

STEPS = ("reserve", "charge", "notify")


def calls(service: Path) -> list[tuple[str, int, float]]:
    return [(k, int(p), float(t)) for k, p, t in read_ledger(service / "calls.log")]


def build(service: Path, kill: str | None) -> ResilientStateGraph:
    armed = {"kill": kill}

    def die_at(point: str) -> None:
        if armed["kill"] == point:
            os.kill(os.getpid(), signal.SIGKILL)

    def lookup(key: str) -> Any:
        append(service / "reconcile.log", f"{key} {os.getpid()}")
        return f"receipt:{key}" if any(k == key for k, _, _ in calls(service)) else None

    def make(step: str) -> Any:
        @side_effect(name=step, reconcile=lookup)
        def effect(*, idempotency_key: str) -> str:
            die_at("before-call")
            append(service / "calls.log", f"{idempotency_key} {os.getpid()} {time.time()}")
            time.sleep(0.005)
            die_at("after-call")
            return f"receipt:{idempotency_key}"

        def node(state: ReceiptsState) -> dict[str, Any]:
            if current_attempt().number > 1:
                die_at("after-outcome")
            receipt = effect()
            die_at("after-return")
            if armed["kill"] == "after-outcome":
                raise TransientError("fail after the effect; the try's record stores it")
            time.sleep(0.005)
            return {"receipts": [*state.get("receipts", []), receipt]}

        return node

    policy = NodePolicy(retry=Backoff(initial_interval=0.01, max_attempts=3))
    return chain(ResilientStateGraph(ReceiptsState), STEPS, make, lambda _: {"policy": policy})


async def main() -> int:
    import asyncio
    from contextlib import AsyncExitStack

    parser = argparse.ArgumentParser()
    for name in ("backend", "target", "service", "threads"):
        parser.add_argument(name)
    parser.add_argument("--kill", default=None)
    args = parser.parse_args()
    service = Path(args.service)
    async with AsyncExitStack() as stack:
        saver = await open_saver(args.backend, False, args.target, stack)
        graph = build(service, args.kill).compile(checkpointer=saver)
        for thread in args.threads.split(","):
            config = {"configurable": {"thread_id": thread}}
            state = await asyncio.to_thread(graph.get_state, config)
            # A thread finished by a worker killed before it could say so is done too.
            if state.values.get("resilience", {}).get("status") != "success":
                start = None if state.created_at else {"receipts": []}
                await asyncio.to_thread(graph.invoke, start, config)
            append(service / "done.log", thread)
    return 0


if __name__ == "__main__":
    import asyncio

    sys.exit(asyncio.run(main()))
