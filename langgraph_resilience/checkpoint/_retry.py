"""Store-fault tolerance: the retry loops every saver operation runs in.

The decision (is this error worth another try, how long to wait) is pure
(`langgraph_resilience._store_errors`, `Backoff.delay`); the two loops below are
the sync and async drivers and differ only in how they call, sleep and reset
the connection.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from langgraph_resilience._store_errors import is_store_error, is_transient_store_error
from langgraph_resilience.policy import Backoff

__all__ = ["DEFAULT_STORE_RETRY", "Translate", "acall_with_retry", "call_with_retry"]

T = TypeVar("T")
#: Maps a store error to the library's own error (None: not one it knows).
Translate = Callable[[BaseException], BaseException | None]

#: Eight tries; the waits between them are capped at 0.05, 0.1, ... 3.2 s, 6.35 s
#: in all (full jitter: about half that on average).
DEFAULT_STORE_RETRY = Backoff(
    max_attempts=8, initial_interval=0.05, backoff_factor=2.0, max_interval=5.0
)


def _mapped(exc: Exception, translate: Translate | None) -> BaseException | None:
    """What a failed try raises instead of ``exc`` (a store error the caller knows
    more about: a refused fork, a lost lease, a second open run), if anything."""
    return translate(exc) if translate is not None else None


def call_with_retry(
    op: Callable[[], T],
    *,
    backoff: Backoff,
    on_failure: Callable[[BaseException], None],
    translate: Translate | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """Run ``op``; after a transient store error, reset and try again with backoff.

    ``translate`` maps an error first (the mapped error is raised, not retried);
    ``on_failure`` sees every other failed try of a store error (to count it and
    to drop a broken connection) before the decision to retry or raise.
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
                raise
            sleep(backoff.delay(attempt, rand()))
            attempt += 1


async def acall_with_retry(
    op: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff,
    on_failure: Callable[[BaseException], Awaitable[None]],
    translate: Translate | None = None,
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
                raise
            await sleep(backoff.delay(attempt, rand()))
            attempt += 1
