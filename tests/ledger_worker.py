"""A process for the run ledger's crash test: runs a four-step pipeline and
SIGKILLs itself inside the transaction of a step's writes, before its commit.

    python tests/ledger_worker.py BACKEND TARGET THREAD N WHERE

N: the step whose writes' transaction it dies in (1 = the first); WHERE:
``before`` (after the writes' statement, before the step row's) or ``after``
(after the step row's statement too). Exits 0 (never reached) only if it did not die.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from conftest import open_saver
from test_run_ledger import chain_graph

from langgraph_resilience.checkpoint.runlog import _run_log


class Sync:
    is_async = False


def die_in_step_writes(n: int, where: str) -> None:
    original = _run_log.write_statements
    seen = 0

    def dying(d: Any, led: Any) -> Any:
        nonlocal seen
        if led is not None and led.step is not None:
            seen += 1
            if seen == n and where == "before":
                os.kill(os.getpid(), signal.SIGKILL)
        yield from original(d, led)
        if seen == n and where == "after":
            os.kill(os.getpid(), signal.SIGKILL)

    _run_log.write_statements = dying  # type: ignore[assignment]


async def main() -> int:
    backend, target, thread, n, where = sys.argv[1:6]
    die_in_step_writes(int(n), where)
    async with AsyncExitStack() as stack:
        h = Sync()
        h.saver = await open_saver(backend, False, target, stack)  # type: ignore[attr-defined]
        graph = chain_graph(h, ["a", "b", "c", "d"])
        graph.invoke({"done": []}, {"configurable": {"thread_id": thread}})
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
