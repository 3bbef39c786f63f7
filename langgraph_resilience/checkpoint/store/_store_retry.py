"""Store-fault tolerance: the retry loops every saver operation runs in.

The decision (is this error worth another try, how long to wait) is pure
(`langgraph_resilience._store_errors`, `Backoff.delay`); the two loops below are
the sync and async drivers and differ only in how they call and sleep. A loop
makes no connection of its own: a saver's try reconnects first when its
connection is gone (see the Postgres savers' ``_connection``).

The retry window of a policy is the sum of its waits (`retry_window`): with
``jitter="none"`` every outage shorter than that is ridden out; with full
jitter each wait is drawn below its cap, so the window is only an upper bound
(about half of it on average).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from langgraph_resilience._store_errors import is_store_error, is_transient_store_error
from langgraph_resilience.policy import Backoff

__all__ = [
    "DEFAULT_PG_STORE_RETRY",
    "DEFAULT_STORE_RETRY",
    "GiveUp",
    "Translate",
    "acall_with_retry",
    "call_with_retry",
    "retry_window",
]

T = TypeVar("T")
#: Maps a store error to the library's own error (None: not one it knows).
Translate = Callable[[BaseException], BaseException | None]
#: Maps the store error a call finally fails with, after ``attempts`` tries, to
#: the error to raise instead (None: raise it as it is).
GiveUp = Callable[[BaseException, int], BaseException | None]

#: SQLite: "database is locked" while another process writes. Eight tries; the
#: waits between them are capped at 0.05, 0.1, ... 3.2 s, 6.35 s in all; full
#: jitter (about half that on average) spreads the processes that contend.
DEFAULT_STORE_RETRY = Backoff(
    max_attempts=8, initial_interval=0.05, backoff_factor=2.0, max_interval=5.0
)

#: Postgres: an outage (a restart, a failover, a dropped link). Ten tries, with
#: fixed waits of 0.1, 0.2, 0.4, 0.8, 1.6, then 2 s: 11.1 s in all, so an outage
#: shorter than that is always ridden out, and a try follows the server's return
#: within 2 s. No jitter: the window is a promise, not an average; processes that
#: lose the server together still reconnect apart, each when its own try fails.
DEFAULT_PG_STORE_RETRY = Backoff(
    max_attempts=10, initial_interval=0.1, backoff_factor=2.0, max_interval=2.0, jitter="none"
)


def retry_window(backoff: Backoff) -> float:
    """The longest a retry loop waits in all between its first and last try (the
    sum of the caps); with ``jitter="none"`` also the shortest.

    Example:
        >>> round(retry_window(DEFAULT_PG_STORE_RETRY), 2)
        11.1
    """
    return sum(backoff.cap(retry) for retry in range(1, backoff.max_attempts))


def _mapped(exc: Exception, translate: Translate | None) -> BaseException | None:
    """What a failed try raises instead of ``exc`` (a store error the caller knows
    more about: a refused fork, a lost lease, a second open run), if anything."""
    return translate(exc) if translate is not None else None


def _given_up(exc: Exception, attempts: int, give_up: GiveUp | None) -> BaseException | None:
    return give_up(exc, attempts) if give_up is not None else None


def call_with_retry(
    op: Callable[[], T],
    *,
    backoff: Backoff,
    on_failure: Callable[[BaseException], None],
    translate: Translate | None = None,
    give_up: GiveUp | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """Run ``op``; after a transient store error, try again with backoff.

    ``translate`` maps an error first (the mapped error is raised, not retried);
    ``on_failure`` sees every other failed try of a store error (to count it)
    before the decision to retry or raise; ``give_up`` maps the store error the
    call finally fails with (the last try's, or one not worth another).
    """
    attempt = 1
    while True:
        try:
            return op()
        except Exception as exc:
            if (mapped := _mapped(exc, translate)) is not None:
                raise mapped from exc
            if not is_store_error(exc):
                raise
            on_failure(exc)
            if attempt >= backoff.max_attempts or not is_transient_store_error(exc):
                if (final := _given_up(exc, attempt, give_up)) is not None:
                    raise final from exc
                raise
            sleep(backoff.delay(attempt, rand()))
            attempt += 1


async def acall_with_retry(
    op: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff,
    on_failure: Callable[[BaseException], Awaitable[None]],
    translate: Translate | None = None,
    give_up: GiveUp | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """Async twin of `call_with_retry`."""
    attempt = 1
    while True:
        try:
            return await op()
        except Exception as exc:
            if (mapped := _mapped(exc, translate)) is not None:
                raise mapped from exc
            if not is_store_error(exc):
                raise
            await on_failure(exc)
            if attempt >= backoff.max_attempts or not is_transient_store_error(exc):
                if (final := _given_up(exc, attempt, give_up)) is not None:
                    raise final from exc
                raise
            await sleep(backoff.delay(attempt, rand()))
            attempt += 1
