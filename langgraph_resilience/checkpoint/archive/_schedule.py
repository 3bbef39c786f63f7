"""A `Worker` archiving idle threads every so often (``Worker(archive_idle=...)``).

The archival runs beside the worker's loop, on a saver of its own (the worker's
``lease_saver``: its own connection), so a long archival never delays the
worker's claims and lease renewals. A failure is logged and tried again at the
next turn; it never stops the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from langgraph_resilience.errors import ConfigError
from langgraph_resilience.policy import seconds_of

__all__ = ["Schedule", "aarchiving", "archiving", "schedule_of"]

logger = logging.getLogger("langgraph_resilience")


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """Archive threads idle for ``older_than`` seconds, every ``every`` seconds."""

    older_than: float
    every: float

    def __post_init__(self) -> None:
        if self.older_than < 0 or self.every <= 0:
            raise ConfigError(
                f"archive_idle must be >= 0 and archive_every > 0 (seconds or timedelta), "
                f"got {self.older_than!r} and {self.every!r}; e.g. "
                "Worker(graph, archive_idle=timedelta(hours=24), archive_every=3600)"
            )


def schedule_of(
    archive_idle: timedelta | float | None, archive_every: timedelta | float
) -> Schedule | None:
    """A worker's archival schedule (None: the worker does not archive)."""
    if archive_idle is None:
        return None
    idle, every = (
        seconds_of("archive_idle", archive_idle),
        seconds_of("archive_every", archive_every),
    )
    return Schedule(older_than=idle, every=every)


def _archive_once(saver: Any, schedule: Schedule) -> None:
    try:
        report = saver.archive_idle(schedule.older_than)
        if report.archived:
            logger.info("archived %d idle thread(s)", len(report.archived))
    except Exception as exc:
        logger.warning("archiving idle threads failed (tried again later): %s", exc)


@contextmanager
def archiving(saver: Any, schedule: Schedule | None) -> Iterator[None]:
    """While inside: archive idle threads at once, then every ``schedule.every``
    (on the way out, the pass in progress finishes: at most ``limit`` threads)."""
    if schedule is None:
        yield
        return
    stop = threading.Event()

    def loop() -> None:
        with saver.lease_saver() as own:
            while True:
                _archive_once(own, schedule)
                if stop.wait(schedule.every):
                    return

    thread = threading.Thread(target=loop, name="lgr-archive", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


async def _aarchive_once(saver: Any, schedule: Schedule) -> None:
    try:
        report = await saver.aarchive_idle(schedule.older_than)
        if report.archived:
            logger.info("archived %d idle thread(s)", len(report.archived))
    except Exception as exc:
        logger.warning("archiving idle threads failed (tried again later): %s", exc)


@asynccontextmanager
async def aarchiving(saver: Any, schedule: Schedule | None) -> AsyncIterator[None]:
    """Async twin of `archiving`: a task on this event loop."""
    if schedule is None:
        yield
        return
    stop = asyncio.Event()

    async def loop() -> None:
        async with saver.alease_saver() as own:
            while True:
                await _aarchive_once(own, schedule)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), schedule.every)
                    return

    task = asyncio.create_task(loop(), name="lgr-archive")
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
