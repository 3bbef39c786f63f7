"""A `Worker` process for the recovery-metrics tests.

    python tests/metrics_worker.py BACKEND TARGET DIR submit THREAD...
    python tests/metrics_worker.py BACKEND TARGET DIR work [--slow THREAD] [--async]

The graph is a -> b -> c. On a thread whose name contains ``partial``, ``b``
fails for good (a permanent error: the run ends ``partial_complete``). With
``--slow THREAD``, the first execution of ``b`` on that thread (in any
process) logs ``slow <pid>`` to DIR/steps.log and sleeps a minute: the test
kills the process there, and another worker takes the run over. Every step logs
``<thread> <step> <pid>`` to DIR/steps.log when it starts.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from conftest import open_saver
from graphs import DoneState, chain
from helpers import append, script_parser
from langchain_core.runnables import RunnableConfig

from langgraph_resilience import NodePolicy, PermanentError, ResilientStateGraph, Worker

STEPS = ("a", "b", "c")


def build(service: Path, slow: str | None) -> Any:
    def make(step: str) -> Any:
        def node(state: DoneState, config: RunnableConfig) -> dict[str, Any]:
            thread = config["configurable"]["thread_id"]
            append(service / "steps.log", f"{thread} {step} {os.getpid()}")
            if step == "b" and "partial" in thread:
                raise PermanentError(f"{thread}: b cannot be done")
            if step == "b" and thread == slow:
                try:
                    (service / "slow-b").touch(exist_ok=False)
                except FileExistsError:
                    pass
                else:
                    append(service / "steps.log", f"slow {os.getpid()}")
                    time.sleep(60)
            return {"done": [step]}

        return node

    return chain(
        ResilientStateGraph(DoneState), STEPS, make, lambda _: {"policy": NodePolicy(retry=None)}
    )


async def main() -> int:
    parser = script_parser("backend", "target", "service", "mode")
    parser.add_argument("threads", nargs="*")
    parser.add_argument("--slow", default=None)
    args = parser.parse_args()
    service = Path(args.service)
    async with AsyncExitStack() as stack:
        saver = await open_saver(args.backend, args.is_async, args.target, stack)
        worker = Worker(
            build(service, args.slow), checkpointer=saver, lease_ttl=1.0, poll_interval=0.1
        )
        if args.mode == "submit":
            for thread in args.threads:
                await asyncio.to_thread(worker.submit, {"done": []}, thread_id=thread)
            return 0
        left = await worker.arun() if args.is_async else worker.run()
        print(json.dumps(left), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
