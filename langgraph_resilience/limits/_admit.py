"""How a try waits for its limits: the decision, apart from I/O.

`admission` is a generator of operations (`Take`: ask the store for every limit
at once; `Nap`: wait before asking again) that returns None once the try is
admitted, or the `LimitBusy` it fails with: a limit paused or rate-bound for
longer than the wait left of ``max_wait`` (its ``retry_after`` is that wait, so
under a `Worker` a wait longer than ``max_wait`` releases the run until then),
or full for all of ``max_wait``. A full limit whose holders include processes
of this machine that are gone (`_process.executor_alive`) is asked again at
once, dropping their holds.

`Admit` and `Release` are what the one try loop (`graph._tries`) yields around
a try; `Held` is what an admitted try holds until it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from langgraph_resilience._util._process import executor_alive
from langgraph_resilience.checkpoint.ledger._limits import Admission, LimitAsk
from langgraph_resilience.errors import ConfigError, LimitBusy
from langgraph_resilience.policy import Limit

__all__ = ["POLL", "Admit", "Held", "Nap", "Release", "Take", "admission", "asks_of"]

#: Seconds between two looks at a full limit (jittered: 0.5x to 1.5x).
POLL = 0.05
#: A clock difference between processes a rate window forgives (seconds).
_MARGIN = 0.002


class Admit(NamedTuple):
    """Take ``limits`` before a try (replies a `Held`, or the `LimitBusy` the try
    fails with instead of running)."""

    limits: Sequence[Limit]
    max_wait: float


@dataclass(kw_only=True, slots=True, eq=False)
class Held:
    """What an admitted try holds: ``hold`` (its id in the store) on the limits
    ``holding`` (concurrency slots); ``pausing``: the limits a ``Retry-After``
    pauses; ``waited``: seconds it waited for them."""

    hold: str
    holding: tuple[str, ...]
    pausing: tuple[str, ...]
    waited: float = 0.0
    io: Any = None  # the saver's limits interface, for the release
    done: bool = field(default=False)


class Release(NamedTuple):
    """Let go of ``held`` after its try; ``pause``: seconds the try's failure asked
    to wait (a ``Retry-After``), pausing the limits that pause on it."""

    held: Held
    pause: float | None = None
    reason: str = ""


class Take(NamedTuple):
    """Ask the store for every limit (replies an `Admission`); ``dead``: holders
    known gone; ``waited`` seconds since the last ask, spent on ``blamed``."""

    dead: tuple[str, ...]
    blamed: str
    waited: float


class Nap(NamedTuple):
    """Wait before asking again."""

    seconds: float


def asks_of(limits: Sequence[Limit]) -> list[LimitAsk]:
    """The limits as an acquire asks for them."""
    return [
        LimitAsk(x.name, x.concurrency or 0, x.rate or 0, float(x.per))  # type: ignore[arg-type]
        for x in limits
    ]


def admission(
    limits: Sequence[Limit],
    max_wait: float,
    rand: Callable[[], float],
    alive: Callable[[str], bool | None] = executor_alive,
) -> Generator[Take | Nap, Any, LimitBusy | None]:
    """Wait for ``limits`` at most ``max_wait`` seconds: returns None when
    admitted, else the `LimitBusy` the try fails with."""
    by_name = {x.name: x for x in limits}
    waited = last = 0.0
    dead: set[str] = set()
    blamed = ""
    while True:
        answer: Admission = yield Take(tuple(sorted(dead)), blamed, last)
        last = 0.0
        if answer.admitted:
            return None
        limit = by_name[answer.name]
        if answer.why == "mismatch":
            raise ConfigError(_mismatch(limit, answer))
        left = max_wait - waited
        if answer.why == "full":
            gone = {h for h in answer.holders if alive(h) is False} - dead
            if gone:  # killed holders of this machine: their slots are free now
                dead |= gone
                continue
            if left <= 0:
                return LimitBusy(
                    _busy(limit, answer, waited), limit=limit.name, why="full", wait=None
                )
            nap = min(left, POLL * (0.5 + rand()))
        else:
            wait = max(0.0, float(answer.wait or 0.0))
            if wait > left:
                return LimitBusy(
                    _busy(limit, answer, left, wait), limit=limit.name, why=answer.why, wait=wait
                )
            nap = wait + _MARGIN
        yield Nap(nap)
        waited += nap
        last, blamed = nap, limit.name


def _mismatch(limit: Limit, answer: Admission) -> str:
    conc, rate, per = answer.stored
    return (
        f"Limit {limit.name!r} is kept in the store with concurrency={conc}, rate={rate}, "
        f"per={per}, and this process names it with concurrency={limit.concurrency}, "
        f"rate={limit.rate}, per={limit.per}. Every process must give a shared limit the "
        "same numbers: name other numbers another limit, or change them in every process "
        "and drop the stored row once none runs (DELETE FROM resilience_limits WHERE name = "
        f"'{limit.name}'; on Redis: DEL <prefix>:lim:{{{limit.name}}}:def)."
    )


def _busy(limit: Limit, answer: Admission, waited: float, wait: float | None = None) -> str:
    """What a try that did not get ``limit`` failed of (``waited``: for a full
    limit, the seconds it waited; else the seconds it could still wait)."""
    if answer.why == "paused":
        why = (
            f"is paused for {wait:.2f} s more (a try holding it met a Retry-After), longer "
            f"than the {waited:.2f} s the try may still wait"
        )
    elif answer.why == "rate":
        why = (
            f"admits {limit.rate} tries per {limit.per:g} s; the next start is {wait:.2f} s "
            "away, beyond the try's max_wait"
        )
    else:
        holders = ", ".join(sorted(set(answer.holders))) or "?"
        why = (
            f"had all {limit.concurrency} slots held for the {waited:.2f} s the try may wait "
            f"(by {holders})"
        )
    return (
        f"limit {limit.name!r} {why}; the try did not run. Raise the policy's "
        "Backoff(max_wait=...) to wait longer in place; under a Worker a known wait "
        "longer than max_wait releases the run until then."
    )
