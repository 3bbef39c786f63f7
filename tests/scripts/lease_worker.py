"""A `Worker` process for the lease tests (takeover, zombie, drain) and the
scaling benchmark.

    python tests/lease_worker.py BACKEND TARGET SERVICE_DIR submit N [--prefix P]
    python tests/lease_worker.py BACKEND TARGET SERVICE_DIR work [options]

``submit`` queues N runs of the five-step pipeline and prints their ids (JSON).
``work`` runs a Worker until no run is queued or running (or it is drained)
and prints what it left each run in (JSON). Every step calls one side effect
against a fake outside service in SERVICE_DIR (``calls.log``: one line per
call, ``<key> <pid> <time>``; it reconciles by looking there) and logs
``<thread> <step> <start|end> <pid> <time>`` to ``steps.log``.

Options of ``work``: ``--lease-ttl``, ``--concurrency``, ``--poll``,
``--step-sleep`` (seconds each step waits, as a model call would),
``--slow STEP:SECONDS`` (the first execution of STEP anywhere waits that long
after its side effect), ``--die-at STEP`` (every execution of STEP SIGKILLs its
own process: a poison run), ``--max-recoveries``, ``--go FILE`` (wait for FILE before claiming: the
benchmark starts every worker at once), ``--async`` (``Worker.arun`` on an
async saver), ``--stop-after-intent STEP`` (the first execution of STEP
anywhere SIGSTOPs its own process right after its effect's intent is stored,
before the call; it writes its pid to ``stopped.log`` first).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from conftest import open_saver
from graphs import ReceiptsState, chain
from helpers import append, read_ledger
from langchain_core.runnables import RunnableConfig

from langgraph_resilience import (
    NodePolicy,
    ResilientStateGraph,
    Worker,
    side_effect,
)

STEPS = ("s1", "s2", "s3", "s4", "s5")


#: Set by the node of --stop-after-intent's step: the next intent stored stops the process.
STOP_NEXT_INTENT = threading.Event()


def stop_after_intents(saver: Any, service: Path) -> None:
    """Make ``saver`` SIGSTOP this process right after it stores an intent of its
    own while `STOP_NEXT_INTENT` is set (the effects of the nodes are sync: they
    use the sync ``saver.effects.claim``, for an async saver too)."""

    class StopAfterClaim(type(saver)._effects_type):  # type: ignore[misc]
        __slots__ = ()

        def claim(self, *args: Any, **kwargs: Any) -> Any:
            found = super().claim(*args, **kwargs)
            if STOP_NEXT_INTENT.is_set() and found.verdict in ("new", "took_over"):
                STOP_NEXT_INTENT.clear()
                append(service / "stopped.log", f"{os.getpid()} {time.time()}")
                # Sent to this thread, it stops here (sent to the process, another
                # thread may take it and this one run on a little first).
                signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
                time.sleep(0.05)
            return found

    saver._effects_type = StopAfterClaim


def build(
    service: Path,
    step_sleep: float,
    slow: tuple[str, float] | None,
    die_at: str | None = None,
    stop_at: str | None = None,
    ledger: bool = True,
) -> Any:
    def lookup(key: str) -> Any:
        known = any(parts[0] == key for parts in read_ledger(service / "calls.log"))
        return f"receipt:{key}" if known else None

    def call(*, idempotency_key: str) -> str:
        append(service / "calls.log", f"{idempotency_key} {os.getpid()} {time.time()}")
        return f"receipt:{idempotency_key}"

    # On a saver without the effect ledger (a plain checkpointer) the call is a plain
    # one, keyed by its step, so the tests can still count it.
    deliver = side_effect(name="deliver", reconcile=lookup)(call) if ledger else None

    def called(thread: str, step: str) -> str:
        if deliver is not None:
            return str(deliver())
        return call(idempotency_key=f"{thread}:{step}")

    def make(step: str) -> Any:
        def node(state: ReceiptsState, config: RunnableConfig) -> dict[str, Any]:
            thread = config["configurable"]["thread_id"]
            append(service / "steps.log", f"{thread} {step} start {os.getpid()} {time.time()}")
            if step == die_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if step == stop_at:
                try:
                    (service / f"stop-{step}").touch(exist_ok=False)
                except FileExistsError:
                    pass
                else:
                    STOP_NEXT_INTENT.set()
            receipt = called(thread, step)
            if slow is not None and slow[0] == step:
                marker = service / f"slow-{step}"
                try:
                    marker.touch(exist_ok=False)
                except FileExistsError:
                    pass
                else:
                    time.sleep(slow[1])
            time.sleep(step_sleep)
            append(service / "steps.log", f"{thread} {step} end {os.getpid()} {time.time()}")
            return {"receipts": [*state.get("receipts", []), receipt]}

        return node

    return chain(
        ResilientStateGraph(ReceiptsState), STEPS, make, lambda _: {"policy": NodePolicy()}
    )


async def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("backend", "target", "service", "mode"):
        parser.add_argument(name)
    parser.add_argument("count", nargs="?", type=int, default=0)
    parser.add_argument("--prefix", default="run")
    parser.add_argument("--lease-ttl", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--poll", type=float, default=None)
    parser.add_argument("--step-sleep", type=float, default=0.02)
    parser.add_argument("--slow", default=None)
    parser.add_argument("--go", default=None)
    parser.add_argument("--die-at", default=None)
    parser.add_argument("--max-recoveries", type=int, default=3)
    parser.add_argument("--async", dest="is_async", action="store_true")
    parser.add_argument("--stop-after-intent", default=None)
    args = parser.parse_args()
    service = Path(args.service)
    slow = None
    if args.slow:
        step, seconds = args.slow.split(":")
        slow = (step, float(seconds))
    async with AsyncExitStack() as stack:
        saver = await open_saver(args.backend, args.is_async, args.target, stack)
        if args.stop_after_intent:
            stop_after_intents(saver, service)
        worker = Worker(
            build(
                service,
                args.step_sleep,
                slow,
                args.die_at,
                args.stop_after_intent,
                ledger=hasattr(type(saver), "effects"),  # SQL and Redis savers keep it
            ),
            checkpointer=saver,
            lease_ttl=args.lease_ttl,
            concurrency=args.concurrency,
            poll_interval=args.poll,
            max_recoveries=args.max_recoveries,
        )
        if args.mode == "submit":
            ids = [
                await asyncio.to_thread(
                    worker.submit, {"receipts": []}, thread_id=f"{args.prefix}-{i}"
                )
                for i in range(args.count)
            ]
            print(json.dumps(ids))
            return 0
        if args.go:
            append(service / "ready.log", str(os.getpid()))
            while not os.path.exists(args.go):
                await asyncio.sleep(0.005)
        # On the main thread, so that SIGTERM drains the worker.
        left = await worker.arun() if args.is_async else worker.run()
        print(json.dumps(left), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
