"""One daemon thread that calls `beat` functions periodically (lease renewals).

A side effect in flight renews its intent's lease every third of the lease
(`side_effect`), so a call that takes longer than the lease is not mistaken for
an abandoned one. Registering costs a heap push; no thread is started per call.
The async savers renew through their sync methods, which run on the saver's
event loop, so this thread serves them too.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

__all__ = ["Beat", "every"]

logger = logging.getLogger("langgraph_resilience")


class Beat:
    """A registered periodic call; `stop` ends it (a call in progress finishes)."""

    __slots__ = ("fn", "period", "stopped")

    def __init__(self, fn: Callable[[], bool], period: float) -> None:
        self.fn = fn
        self.period = period
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


_lock = threading.Condition()
_heap: list[tuple[float, int, Beat]] = []
_order = itertools.count()
_thread: threading.Thread | None = None


def every(period: float, fn: Callable[[], bool]) -> Beat:
    """Call ``fn`` every ``period`` seconds, first after one period, until it
    returns False or raises, or the returned `Beat` is stopped."""
    global _thread
    beat = Beat(fn, period)
    entry = (time.monotonic() + period, next(_order), beat)
    with _lock:
        heapq.heappush(_heap, entry)
        if _thread is None:
            _thread = threading.Thread(target=_run, name="lgr-heartbeat", daemon=True)
            _thread.start()
        if _heap[0] is entry:  # due before all others: wake the thread to wait less
            _lock.notify()
    return beat


def _run() -> None:
    while True:
        with _lock:
            while not _heap or _heap[0][0] > time.monotonic():
                _lock.wait(None if not _heap else _heap[0][0] - time.monotonic())
            _, _, beat = heapq.heappop(_heap)
        if beat.stopped:
            continue
        try:
            again = beat.fn()
        except Exception as exc:
            logger.warning("a heartbeat failed and stops: %s", exc)
            again = False
        if again and not beat.stopped:
            with _lock:
                heapq.heappush(_heap, (time.monotonic() + beat.period, next(_order), beat))


def _after_fork() -> None:  # the thread does not survive a fork; the child starts its own
    global _thread, _lock
    _thread = None
    _lock = threading.Condition()
    _heap.clear()


os.register_at_fork(after_in_child=_after_fork)
