"""Store-fault tolerance: which store errors are transient, and the retry loops.

The decision (is this error worth another try, how long to wait) is pure; the
two loops below are the sync and async drivers and differ only in how they
call, sleep and reset the connection.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from langgraph_resilience.policy import Backoff

__all__ = [
    "DEFAULT_STORE_RETRY",
    "acall_with_retry",
    "call_with_retry",
    "is_store_error",
    "is_transient_store_error",
]

T = TypeVar("T")

#: Long enough to ride out a Postgres restart (about ten seconds of caps in all).
DEFAULT_STORE_RETRY = Backoff(
    max_attempts=8, initial_interval=0.05, backoff_factor=2.0, max_interval=5.0
)

_SQLITE_TRANSIENT = ("database is locked", "database table is locked", "busy")
# SQLSTATE classes and codes after which a new try on a fresh connection can work:
# connection exceptions, serialization failures and deadlocks, too many
# connections, and the server shutting down or starting up.
_PG_TRANSIENT_CLASSES = ("08", "40")
_PG_TRANSIENT_CODES = ("53300", "57P01", "57P02", "57P03", "55P03")


def _is_psycopg_error(exc: BaseException) -> bool:
    return any(c.__module__.startswith(("psycopg", "psycopg_pool")) for c in type(exc).__mro__[:-1])


def is_store_error(exc: BaseException) -> bool:
    """Whether ``exc`` came from the database driver (as opposed to our checks)."""
    return isinstance(exc, sqlite3.Error) or _is_psycopg_error(exc)


def is_transient_store_error(exc: BaseException) -> bool:
    """Whether a store operation that raised ``exc`` may succeed if tried again.

    Transient: SQLite "database is locked"/busy; Postgres connection failures
    (dropped connection, server restart, terminated backend, pool timeout),
    serialization failures and deadlocks. Everything else (constraint
    violations, syntax errors, a missing table) is not.
    """
    if isinstance(exc, sqlite3.OperationalError):
        message = str(exc).lower()
        return any(marker in message for marker in _SQLITE_TRANSIENT)
    if not _is_psycopg_error(exc):
        return False
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate:
        return sqlstate.startswith(_PG_TRANSIENT_CLASSES) or sqlstate in _PG_TRANSIENT_CODES
    # No SQLSTATE: the client lost or never had a connection (psycopg.OperationalError,
    # psycopg_pool.PoolTimeout), or used one that is closed (InterfaceError).
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"OperationalError", "InterfaceError", "PoolTimeout"})


def call_with_retry(
    op: Callable[[], T],
    *,
    backoff: Backoff,
    on_failure: Callable[[BaseException], None],
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """Run ``op``; after a transient store error, reset and try again with backoff.

    ``on_failure`` sees every failed try of a store error (to count it and to
    drop a broken connection) before the decision to retry or raise.
    """
    attempt = 1
    while True:
        try:
            return op()
        except Exception as exc:
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
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """Async twin of `call_with_retry`."""
    attempt = 1
    while True:
        try:
            return await op()
        except Exception as exc:
            if not is_store_error(exc):
                raise
            await on_failure(exc)
            if attempt >= backoff.max_attempts or not is_transient_store_error(exc):
                raise
            await sleep(backoff.delay(attempt, rand()))
            attempt += 1
