"""The I/O of shared limits, sync and async: `admission`'s operations run on the
graph's resilient saver, the hold's lease renewed while its try runs, the wait
logged and counted (`telemetry`).

The try loop's drivers (`graph._drivers`) call `admit_sync` / `admit_async` for
an `Admit` and `release_sync` / `release_async` for a `Release` (and, when a try
ends by a `BaseException` such as a cancellation, for what it held). A release
costs no round trip of its own: the slots ride the saver's next write, which in
a node is the try's own (`checkpoint.ledger._releases`); a pause is stored at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from langgraph_resilience._util._heartbeat import every
from langgraph_resilience._util._plans import Plan
from langgraph_resilience._util._process import process_id
from langgraph_resilience.checkpoint.ledger._limits import AsyncLimits, Limits
from langgraph_resilience.errors import ConfigError, LimitBusy
from langgraph_resilience.limits._admit import Admit, Held, Nap, Release, admission, asks_of
from langgraph_resilience.telemetry._emit import emit

logger = logging.getLogger("langgraph_resilience")

__all__ = ["LEASE", "admit_async", "admit_sync", "limits_io", "release_async", "release_sync"]

#: Seconds a hold lasts without renewal (renewed every third of it while its try
#: runs): what a holder on another machine that died keeps its slot for.
LEASE = 30.0


def limits_io(saver: Any, where: str) -> Limits:
    """The limits interface of the graph's resilient saver (its async one on an
    async saver, whose sync methods run on the saver's loop)."""
    if saver is None:
        raise ConfigError(
            f"{where} has limits=, which are kept in the store: compile the graph (or "
            "agent) with a resilient saver (ResilientSqliteSaver, ResilientPostgresSaver, "
            "ResilientRedisSaver or their async twins), shared by every process that "
            "shares the limits"
        )
    own: Limits | None = getattr(saver, "limits", None)  # a store of its own (Redis)
    if own is not None:
        return own
    return AsyncLimits(saver) if hasattr(saver, "_bridge") else Limits(saver)


def _held(op: Admit, io: Limits, hold: str) -> Held:
    return Held(
        hold=hold,
        holding=tuple(x.name for x in op.limits if x.concurrency),
        pausing=tuple(x.name for x in op.limits if x.pause_on_retry_after),
        io=io,
    )


#: The holds of this process whose tries run, renewed together every third of
#: `LEASE` by one heartbeat (a try adds and removes itself: no thread woken).
_live: dict[str, Held] = {}
_live_lock = threading.Lock()
_beat: list[Any] = []


def _after_fork() -> None:  # a child holds none of its parent's slots
    global _live_lock
    _live_lock = threading.Lock()
    _live.clear()
    _beat.clear()


os.register_at_fork(after_in_child=_after_fork)


def _renew_live() -> bool:
    with _live_lock:
        live = list(_live.items())
    for hold, held in live:
        try:
            held.io.renew(hold, LEASE, held.holding)
        except Exception as exc:  # the next beat tries again; the lease has time left
            logger.warning("could not renew a shared limit's hold: %s", exc)
    return True


def _renewing(held: Held) -> None:
    if held.holding:
        with _live_lock:
            _live[held.hold] = held
            if not _beat or _beat[0] != os.getpid():
                _beat[:] = [os.getpid(), every(LEASE / 3, _renew_live)]


#: A paused limit's pause, once logged (limit -> until when, this process's
#: clock): the branches that meet the same pause log it at DEBUG, not each one.
_pauses_told: dict[str, float] = {}
_pauses_lock = threading.Lock()


def busy_level(busy: LimitBusy, now: float) -> int:
    """The log level of a try turned away by a busy limit: WARNING, except for a
    pause already logged (one line per pause, not per branch)."""
    if busy.why != "paused":
        return logging.WARNING
    with _pauses_lock:
        if _pauses_told.get(busy.limit, 0.0) > now:
            return logging.DEBUG
        _pauses_told[busy.limit] = now + float(busy.retry_after or 0.0)
    return logging.WARNING


def _told(name: str, op: Admit, held: Held | LimitBusy, waited: float) -> None:
    """Log and count a wait for limits (nothing when the try waited for none)."""
    limits = ",".join(x.name for x in op.limits)
    if isinstance(held, LimitBusy):
        emit(
            "limit_busy",
            busy_level(held, time.monotonic()),
            "%s: %s",
            name,
            held,
            node=name,
            limit=held.limit,
            why=held.why,
            waited=round(waited, 4),
            wait=held.retry_after,
        )
    if waited > 0:
        emit(
            "limit_wait",
            logging.INFO,
            "%s waited %.3f s for limit %s",
            name,
            waited,
            limits,
            node=name,
            limit=limits,
            waited=round(waited, 4),
        )


def _admitted(
    name: str, op: Admit, io: Any, hold: str, busy: LimitBusy | None, waited: float
) -> Held | LimitBusy:
    """What the admission of ``op`` came to (``busy``: the `LimitBusy` it failed
    with, else None), told and, when admitted, its lease kept renewed."""
    found: Held | LimitBusy = busy if busy is not None else _held(op, io, hold)
    if isinstance(found, Held):
        found.waited = waited
        _renewing(found)
    _told(name, op, found, waited)
    return found


def _admitting(
    name: str, op: Admit, io: Any
) -> Generator[Nap | tuple[Any, ...], Any, Held | LimitBusy]:
    """`admission` of ``op`` on ``io``, the I/O left to its driver: yields a `Nap`
    to sleep, or the arguments of the acquire to run (sent its reply); returns
    the `Held` of an admitted try, or the `LimitBusy` it fails with."""
    asks, hold, holder = asks_of(op.limits), os.urandom(8).hex(), process_id()
    steps = admission(op.limits, op.max_wait, random.random)
    reply: Any = None
    waited = 0.0
    try:
        while True:
            step = steps.send(reply)
            if isinstance(step, Nap):
                yield step
                waited += step.seconds
                reply = None
            else:
                reply = yield (asks, hold, holder, LEASE, step.dead, step.blamed, step.waited)
    except StopIteration as stop:
        return _admitted(name, op, io, hold, stop.value, waited)


def admit_sync(
    saver: Any, name: str, op: Admit, sleep: Callable[[float], None] = time.sleep
) -> Held | LimitBusy:
    """Wait for ``op``'s limits (blocking): the `Held` of an admitted try, or the
    `LimitBusy` it fails with."""
    io = limits_io(saver, f"the policy of {name!r}")
    plan = Plan(_admitting(name, op, io))
    for step in plan:
        if isinstance(step, Nap):
            sleep(step.seconds)
        else:
            plan.reply = io.acquire(*step)
    return plan.value


async def admit_async(
    saver: Any,
    name: str,
    op: Admit,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Held | LimitBusy:
    """Async twin of `admit_sync`."""
    io = limits_io(saver, f"the policy of {name!r}")
    if not isinstance(io, AsyncLimits):  # a sync saver under ainvoke: its I/O in a thread
        return await asyncio.to_thread(admit_sync, saver, name, op)
    plan = Plan(_admitting(name, op, io))
    for step in plan:
        if isinstance(step, Nap):
            await sleep(step.seconds)
        else:
            plan.reply = await io.aacquire(*step)
    return plan.value


def _letting_go(op: Release) -> float | None:
    """Hand ``op``'s slots to the saver's next write (they ride it: `_releases`);
    the seconds to pause its limits for, if it pauses them (else None)."""
    held = op.held
    if held.done:
        return None
    held.done = True
    if held.holding:
        with _live_lock:
            _live.pop(held.hold, None)
        held.io.defer(held.hold, held.holding, LEASE)
    pause = op.pause if op.pause and op.pause > 0 and held.pausing else None
    if pause is not None:
        emit(
            "limit_paused",
            logging.WARNING,
            "limit %s paused for %.2f s for every process: %s",
            ",".join(held.pausing),
            pause,
            op.reason,
            limit=",".join(held.pausing),
            wait=pause,
        )
    return pause


def release_sync(op: Release) -> None:
    """Free what ``op.held`` holds (with the saver's next write, which is, in a
    node, the try's own); pause its limits after a ``Retry-After`` at once."""
    pause = _letting_go(op)
    if pause is not None:
        op.held.io.pause(op.held.pausing, pause, op.reason)


async def release_async(op: Release) -> None:
    """Async twin of `release_sync`."""
    pause = _letting_go(op)
    if pause is None:
        return
    io = op.held.io
    if isinstance(io, AsyncLimits):
        await io.apause(op.held.pausing, pause, op.reason)
    else:
        await asyncio.to_thread(io.pause, op.held.pausing, pause, op.reason)
