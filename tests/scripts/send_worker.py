"""A worker for the crash tests of an effect's outcome window.

    python tests/send_worker.py BACKEND TARGET SERVICE_DIR THREAD [--async] [--defer] [--work S]

Runs (or resumes) a one-node pipeline whose node ``notify`` sends an email
through a plain ``@side_effect`` (no ``reconcile``, ``defer_outcome=True`` with
``--defer``) and then works on for S seconds (a model call summarising the
thread, say) before it returns. The mail service ignores idempotency keys: it
sends every call, one line ``<key> <pid>`` in ``SERVICE_DIR/sends.log``
(fsynced). Once the effect returned, the node creates ``SERVICE_DIR/working``:
the test kills the process while it works on. ``--async`` uses the async saver,
an async node and effect, and ``ainvoke``.
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
from helpers import append

from langgraph_resilience import ResilientStateGraph, side_effect


def build(service: Path, is_async: bool, defer: bool, work: float) -> Any:
    def send(key: str) -> str:
        append(service / "sends.log", f"{key} {os.getpid()}")
        return f"sent:{key}"

    def working() -> None:
        append(service / "working", str(os.getpid()))

    options = {"defer_outcome": True} if defer else {}  # the default: stored at once

    if is_async:

        @side_effect(name="send_email", **options)
        async def send_email(*, idempotency_key: str) -> str:
            return send(idempotency_key)

        async def anode(state: ReceiptsState) -> dict[str, Any]:
            receipt = await send_email()
            working()
            await asyncio.sleep(work)
            return {"receipts": [receipt]}

        make: Any = lambda _: anode  # noqa: E731
    else:

        @side_effect(name="send_email", **options)
        def send_email_sync(*, idempotency_key: str) -> str:
            return send(idempotency_key)

        def node(state: ReceiptsState) -> dict[str, Any]:
            receipt = send_email_sync()
            working()
            time.sleep(work)
            return {"receipts": [receipt]}

        make = lambda _: node  # noqa: E731
    return chain(ResilientStateGraph(ReceiptsState), ["notify"], make)


async def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("backend", "target", "service", "thread"):
        parser.add_argument(name)
    parser.add_argument("--async", dest="is_async", action="store_true")
    parser.add_argument("--defer", action="store_true")
    parser.add_argument("--work", type=float, default=0.0)
    args = parser.parse_args()
    service = Path(args.service)
    config = {"configurable": {"thread_id": args.thread}}
    async with AsyncExitStack() as stack:
        saver = await open_saver(args.backend, args.is_async, args.target, stack)
        graph = build(service, args.is_async, args.defer, args.work).compile(checkpointer=saver)
        if args.is_async:
            state = await graph.aget_state(config)
            start = None if state.created_at else {"receipts": []}
            await graph.ainvoke(start, config)
        else:
            state = await asyncio.to_thread(graph.get_state, config)
            start = None if state.created_at else {"receipts": []}
            await asyncio.to_thread(graph.invoke, start, config)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
