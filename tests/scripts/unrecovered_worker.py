"""A `Worker` process that dies just after a step failed unrecovered: for the
false-success tests (issue 24).

    python tests/unrecovered_worker.py BACKEND TARGET

The graph is a -> b -> c. b raises, and its error handler (a user's) re-raises
what it was handed: LangGraph then goes on from b's checkpoint without b's
writes, to a checkpoint with nothing left to run, before ``invoke`` raises. This
process SIGKILLs itself right after that checkpoint is stored, before its
Worker stores the run's end: the run is left ``running``, for a peer to take
over and find nothing to run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/: conftest, helpers

from conftest import open_saver
from graphs import DoneState, appending, chain, failing
from langgraph.errors import NodeError

from langgraph_resilience import NodePolicy, ResilientStateGraph, Worker

STEPS = ["a", "b", "c"]


def reraise(state: Any, error: NodeError) -> Any:
    """A user's error handler that re-raises what it was handed."""
    raise error.error


def failing_graph() -> Any:
    """a -> b -> c; b always raises, its handler re-raises."""

    make = appending(failing("b", lambda: ValueError("b broke")))

    def options(step: str) -> dict[str, Any]:
        if step == "b":
            return {"policy": None, "error_handler": reraise}
        return {"policy": NodePolicy(retry=None, critical=True)}

    return chain(ResilientStateGraph(DoneState), STEPS, make, options)


def die_after_the_step_after(saver: Any, step: int) -> None:
    """SIGKILL this process once the checkpoint of loop step ``step`` is stored."""
    put = saver.put

    def put_then_die(config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
        stored = put(config, checkpoint, metadata, versions)
        if metadata.get("source") == "loop" and metadata.get("step") == step:
            os.kill(os.getpid(), signal.SIGKILL)
        return stored

    saver.put = put_then_die


async def main() -> int:
    backend, target = sys.argv[1:3]
    async with AsyncExitStack() as stack:
        saver = await open_saver(backend, False, target, stack)
        die_after_the_step_after(saver, 2)  # a=0 -> 1, b=1 -> 2 (nothing left)
        worker = Worker(failing_graph(), checkpointer=saver, lease_ttl=30, poll_interval=0.05)
        worker.run()
    return 0  # not reached: the run's checkpoint after b kills this process


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
