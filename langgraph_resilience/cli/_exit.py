"""How the ``worker`` command's process ends after a drain, whatever the store does.

The command owns its process, so it need not wait for what its `Worker` left
behind (`Worker.left_behind`: a step a drain abandoned, a store call unanswered
at the drain's end), which Python would otherwise wait for as it exits (it joins
LangGraph's executor threads), nor flush the saver through a store that does not
answer:

- `exit_now`: flush the logs and the output, then ``os._exit`` with
  `LEFT_BEHIND` (75, ``EX_TEMPFAIL``);
- `watchdog`: once a drain is asked for, a process still running
  `Worker.exit_bound` plus `GRACE` later exits so too (a library caller embedding
  a Worker gets `run`'s bounded return instead, and decides itself).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from langgraph_resilience.worker._worker import Worker

__all__ = ["GRACE", "LEFT_BEHIND", "exit_now", "watchdog"]

logger = logging.getLogger("langgraph_resilience")
#: The exit code of a worker process that exited without waiting for a hung
#: step or store call (``EX_TEMPFAIL``: its runs are given back or left to their leases).
LEFT_BEHIND = 75
#: Seconds past `Worker.exit_bound` the watchdog allows (the process's own teardown).
GRACE = 1.0


def exit_now(code: int = LEFT_BEHIND) -> NoReturn:
    """End the process at once with ``code``, after flushing logs and output."""
    for handler in logging.getLogger("langgraph_resilience").handlers + logging.root.handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


@contextmanager
def watchdog(worker: Worker) -> Iterator[None]:
    """While in the block: once ``worker`` is asked to drain, the process exits
    (`exit_now`) if it still runs ``worker.exit_bound + GRACE`` seconds later."""
    over = threading.Event()
    bound = worker.exit_bound + GRACE

    def watch() -> None:
        while not worker.wait_for_drain(0.5):
            if over.is_set():
                return
        if over.wait(bound):
            return
        logger.error(
            "worker %s: still running %.1f s after its drain was asked for (its bound): "
            "exiting without what it waits for (exit code %d)",
            worker.worker_id,
            bound,
            LEFT_BEHIND,
        )
        exit_now(LEFT_BEHIND)

    if math.isfinite(bound):
        threading.Thread(target=watch, name="lgr-exit-watchdog", daemon=True).start()
    try:
        yield
    finally:
        over.set()
