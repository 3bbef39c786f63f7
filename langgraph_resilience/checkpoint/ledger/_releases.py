"""Concurrency slots freed by the saver's next write (`PendingReleases`).

A try that held a shared limit's slot has ended when its release is handed
here, so it may be stored any time after: it rides in the transaction of the
saver's next write (`_base.Riders`), as waiting effect outcomes do. In a node
that write is the try's own (``put_writes`` as the node ends, or a failed try's
attempt record), which costs it no round trip of its own. A write that fails
gives its releases back. Whatever is still waiting ``BOUND`` seconds after it
was handed here (a node without writes, ``durability="exit"``, a write that
failed) is stored on its own, by one thread (`flush` of the saver); after a
failed write, the wait doubles each time in a row.

A release is forgotten once its hold's lease has run out (the store has let
the hold go by then). A process that dies with releases waiting leaves its
holds as a killed holder does: freed at once by an acquirer on this machine,
elsewhere when their lease runs out.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from langgraph_resilience.checkpoint.store._schema import LIMIT_HOLDS
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt

__all__ = ["BOUND", "PendingReleases", "Waiting", "free_holds", "log_failure"]

logger = logging.getLogger("langgraph_resilience")

#: Seconds a release waits for a write to ride before it is stored on its own.
BOUND = 0.05


class Waiting(NamedTuple):
    """A hold to free: its limits' names, and when (monotonic) its lease is over."""

    names: tuple[str, ...]
    forget_at: float


def free_holds(d: Dialect, holds: Mapping[str, Waiting]) -> Statements[None]:
    """Free the holds, in the transaction they ride (its durability is the carrier's)."""
    rows = [(name, hold) for hold, w in sorted(holds.items()) for name in w.names]
    if rows:
        yield Stmt(
            d.sql(f"DELETE FROM {LIMIT_HOLDS.name} WHERE name = ? AND hold = ?"), rows, many=True
        )


class PendingReleases:
    """The holds of a saver whose tries ended, waiting for its next write."""

    __slots__ = ("failures", "flush", "lock", "scheduled", "since", "waiting")

    def __init__(self) -> None:
        self.waiting: dict[str, Waiting] = {}  # replaced under the lock, never changed in place
        self.since: float | None = None  # when the oldest of them was handed here
        self.scheduled = False  # the thread will look at them
        #: Stores them on their own (a write of the saver with nothing but riders).
        self.flush: Callable[[], object] | None = None
        #: Writes that carried them and failed, in a row (each doubles the wait).
        self.failures = 0
        self.lock = threading.Lock()

    def add(self, hold: str, w: Waiting, flush: Callable[[], object]) -> None:
        with self.lock:
            self.waiting = {**self.waiting, hold: w}
            self.flush = flush
            self._due_locked()

    def take_all(self) -> dict[str, Waiting]:
        if not self.waiting:  # an unlocked peek: mostly nothing waits
            return {}
        with self.lock:
            taken, self.waiting, self.since = self.waiting, {}, None
        return taken

    def give_back(self, taken: Mapping[str, Waiting]) -> None:
        """Undo a take after the transaction failed: stored on their own within
        `BOUND` unless another write carries them first."""
        now = time.monotonic()
        kept = {h: w for h, w in taken.items() if w.forget_at > now}
        if kept:
            with self.lock:
                self.failures += 1
                self.waiting = {**kept, **self.waiting}
                self._due_locked()

    def _bound(self) -> float:
        """`BOUND`, doubled for each failed write in a row (at most 64 times)."""
        return float(BOUND * 2 ** min(self.failures, 6))

    def _due_locked(self) -> None:
        if self.since is None:
            self.since = time.monotonic()
        if not self.scheduled:
            self.scheduled = True
            _schedule(self.since + self._bound(), self)

    def _rearm(self, now: float) -> None:
        """After the thread's own write: what is still waiting (it failed, or has
        not run yet on an async saver's loop) is looked at again in `BOUND`;
        releases past their hold's lease are forgotten."""
        with self.lock:
            self.waiting = {h: w for h, w in self.waiting.items() if w.forget_at > now}
            if not self.waiting:
                self.since = None
            elif not self.scheduled:
                self.failures += 1
                self.scheduled = True
                self.since = now
                _schedule(now + self._bound(), self)

    def _look(self, now: float) -> float | None:
        """The thread's look: when to look again (None: do not), or 0.0: store them now."""
        with self.lock:
            if self.since is None:  # a write took them
                self.scheduled = False
                self.failures = 0
                return None
            if self.since + self._bound() > now:
                return self.since + self._bound()
            self.scheduled = False
            return 0.0


def log_failure(pending: PendingReleases, exc: BaseException) -> None:
    """A write of releases on their own failed: a warning the first time in a row."""
    log = logger.warning if pending.failures <= 1 else logger.debug
    log("could not free a shared limit's slot (tried again later): %s", exc)


# -- the thread that stores what no write carried -----------------------------------------

_cond = threading.Condition()
_heap: list[tuple[float, int, PendingReleases]] = []
_order = itertools.count()
_thread: list[threading.Thread] = []


def _schedule(at: float, pending: PendingReleases) -> None:
    with _cond:
        heapq.heappush(_heap, (at, next(_order), pending))
        if not _thread:
            _thread.append(threading.Thread(target=_run, name="lgr-releases", daemon=True))
            _thread[0].start()
        if _heap[0][2] is pending:
            _cond.notify()


def _run() -> None:
    while True:
        with _cond:
            while not _heap or _heap[0][0] > time.monotonic():
                _cond.wait(None if not _heap else _heap[0][0] - time.monotonic())
            _, _, pending = heapq.heappop(_heap)
        again = pending._look(time.monotonic())
        if again is None:
            continue
        if again > 0:
            with _cond:
                heapq.heappush(_heap, (again, next(_order), pending))
            continue
        flush = pending.flush
        try:
            if flush is not None:
                flush()
        except Exception as exc:
            log_failure(pending, exc)
        pending._rearm(time.monotonic())


def _after_fork() -> None:  # the thread does not survive a fork; the child starts its own
    global _cond
    _cond = threading.Condition()
    _heap.clear()
    _thread.clear()


os.register_at_fork(after_in_child=_after_fork)
