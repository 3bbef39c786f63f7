"""The run leases this process holds, as its Workers last proved them: what a
side effect asks before it calls.

A Worker's claim or renewal is sent at a known local instant; the store sets the
lease to its own clock plus ``lease_ttl`` no earlier than that, so ``sent +
lease_ttl`` on this machine's clocks is a deadline the store's lease cannot end
before (clocks ticking at the same rate). The deadline is kept on the machine's
boot clock (`_process.clock_now`: monotonic, and it counts a suspend), the clock
SQLite leases are judged by: a process stalled by SIGSTOP, a long pause, a
frozen or suspended VM finds its deadline passed when it wakes. The wall clock
is kept beside it but proves nothing: a step of it moves no store's lease
(Postgres judges by the server's clock, SQLite by the boot clock), so it must
not end a proof either.

A side effect under a Worker's fence calls only while its lease is proven for
more than a margin (a third of the lease: one renewal period) — it waits for a
renewal while less is left, and raises `LeaseLost` once the deadline passed or
its Worker lost the run. The decision is pure (`check_lease`); the registry
(`LEASES`) maps each held run's `Fence` to its `Proof`, which the Worker's loop
updates in place as renewals succeed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

from langgraph_resilience._util._process import clock_now
from langgraph_resilience.checkpoint import Fence

__all__ = ["LEASES", "Instant", "LeaseCheck", "Leases", "Proof", "check_lease"]

#: The longest a side effect waits between two looks at a lease that is proven
#: for less than its margin (a renewal may be on its way).
LOOK_AGAIN = 0.05


class Instant(NamedTuple):
    """One moment on the boot clock (``monotonic``) and the wall clock (seconds)."""

    monotonic: float
    wall: float

    @classmethod
    def now(cls) -> Instant:
        return cls(clock_now().ticks, time.time())

    def after(self, seconds: float) -> Instant:
        return Instant(self.monotonic + seconds, self.wall + seconds)


@dataclass
class Proof:
    """What this process can prove of one run lease.

    Attributes:
        deadline: when the lease surely still holds until (the instant its last
            successful claim or renewal was sent, plus the TTL; judged on the
            boot clock).
        margin: how much of it must be left for a side effect to call.
        lost: why this worker no longer holds the run (None while it does).
    """

    deadline: Instant
    margin: float
    lost: str | None = None

    def left(self, now: Instant) -> float:
        """Seconds the lease is proven for from ``now``, by the boot clock."""
        return self.deadline.monotonic - now.monotonic


class LeaseCheck(NamedTuple):
    """What a side effect under a fence does: ``"call"``, ``"wait"`` ``seconds``
    and look again, or ``"lost"`` (do not call; ``reason`` says why)."""

    verdict: str
    seconds: float = 0.0
    reason: str = ""


def check_lease(proof: Proof | None, now: Instant) -> LeaseCheck:
    """Whether a call may go ahead under a lease (pure)."""
    if proof is None:
        return LeaseCheck("lost", reason="no Worker of this process holds the run any more")
    if proof.lost is not None:
        return LeaseCheck("lost", reason=proof.lost)
    left = proof.left(now)
    if left > proof.margin:
        return LeaseCheck("call")
    if left > 0:
        return LeaseCheck("wait", min(LOOK_AGAIN, left))
    return LeaseCheck(
        "lost",
        reason=(
            f"its lease ran out {-left:.2f} s ago by this worker's clocks and was not "
            "renewed since (the store was unreachable, or this process was stalled)"
        ),
    )


class Leases:
    """The proofs of the leases this process's Workers hold, by fence."""

    def __init__(self) -> None:
        self._proofs: dict[Fence, Proof] = {}
        self._lock = threading.Lock()

    @contextmanager
    def holding(self, fence: Fence, proof: Proof) -> Iterator[None]:
        """``proof`` answers for ``fence`` while the run is worked on here."""
        with self._lock:
            self._proofs[fence] = proof
        try:
            yield
        finally:
            with self._lock:
                if self._proofs.get(fence) is proof:
                    del self._proofs[fence]

    def get(self, fence: Fence) -> Proof | None:
        return self._proofs.get(fence)

    def check(self, fence: Fence) -> LeaseCheck:
        return check_lease(self.get(fence), Instant.now())

    def _forget(self) -> None:  # in a forked child: the parent's Workers are not its own
        self._proofs = {}
        self._lock = threading.Lock()


LEASES = Leases()
os.register_at_fork(after_in_child=LEASES._forget)
