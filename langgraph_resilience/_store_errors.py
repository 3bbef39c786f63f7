"""Which exceptions come from the database driver, and which of those may pass.

A leaf module (it imports no other module of the package): the classifier
(`classify`) and the savers' retry loops (`checkpoint.store._store_retry`) both ask it.

Four questions, asked of an exception a store call raised:

- `is_store_error`: did it come from the driver (or is it the
  ``StoreUnavailable`` a saver raised from a driver error)?
- `is_transient_store_error`: may the same call succeed if tried again?
- `is_refused_login`: did the server refuse the login (no retry passes it)?
- `is_unavailable_error`: does it say the store could not be reached or could
  not serve the call (what a saver reports as ``StoreUnavailable`` once it stops
  trying), as opposed to a bad statement or bad data?
"""

from __future__ import annotations

import re
import sqlite3

__all__ = [
    "is_refused_login",
    "is_store_error",
    "is_transient_store_error",
    "is_unavailable_error",
]

_SQLITE_TRANSIENT = ("database is locked", "database table is locked", "busy", "disk is full")
# SQLite's SQLITE_FULL ("database or disk is full"): the file system has no room.
# Transient (space may come back: a log rotated, a temp file removed), and once
# the retries are spent the store could not serve the call: StoreUnavailable.
_SQLITE_UNAVAILABLE = ("disk is full",)
# SQLSTATE classes and codes after which a new try on a fresh connection can work:
# connection exceptions, serialization failures and deadlocks, too many
# connections, the server shutting down or starting up, a lock not granted in
# lock_timeout, and a session the server ended for idling in a transaction.
_PG_TRANSIENT_CLASSES = ("08", "40")
_PG_TRANSIENT_CODES = ("53300", "57P01", "57P02", "57P03", "55P03", "25P03")
# A login the server refuses (bad role, password or database): no retry passes it.
_PG_REFUSED_CLASSES = ("28",)
_PG_REFUSED_CODES = ("3D000",)
# The same refusals as libpq reports them at connect time, without a SQLSTATE.
# (The server's messages are in English unless lc_messages says otherwise; a
# translated one is taken as transient, and fails after the retry window.)
_PG_REFUSED_LOGIN = re.compile(
    r'(role|database) "[^"]*" does not exist'
    r"|authentication failed"
    r"|no pg_hba\.conf entry"
    r"|pg_hba\.conf rejects connection"
    r"|no password supplied"
    r"|is not permitted to log in"
    r"|permission denied for database"
    r"|SSL was required"
)
# Client-side misuse that psycopg reports as an OperationalError without SQLSTATE,
# like a lost connection; a retry repeats it.
_PG_MISUSE = ("not in pipeline mode", "already in pipeline mode")
# psycopg's error classes of "the server is not there or did not answer".
_PG_UNAVAILABLE = {"OperationalError", "InterfaceError", "PoolTimeout"}


def _is_psycopg_error(exc: BaseException) -> bool:
    return any(c.__module__.startswith(("psycopg", "psycopg_pool")) for c in type(exc).__mro__[:-1])


def _is_driver_error(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.Error) or _is_psycopg_error(exc)


def is_store_error(exc: BaseException) -> bool:
    """Whether ``exc`` came from the database driver (as opposed to our checks).

    A ``ConnectionError`` raised from a driver error (the saver's
    ``StoreUnavailable``) counts: it is the same failure, reported once the saver
    stopped trying.
    """
    if _is_driver_error(exc):
        return True
    cause = exc.__cause__
    return isinstance(exc, ConnectionError) and cause is not None and _is_driver_error(cause)


def is_refused_login(exc: BaseException) -> bool:
    """Whether the server refused a login: unknown role or database, failed
    authentication, no ``pg_hba.conf`` entry (no retry passes it)."""
    if not _is_psycopg_error(exc):
        return False
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if sqlstate.startswith(_PG_REFUSED_CLASSES) or sqlstate in _PG_REFUSED_CODES:
        return True
    return bool(_PG_REFUSED_LOGIN.search(str(exc)))


def is_transient_store_error(exc: BaseException) -> bool:
    """Whether a store operation that raised ``exc`` may succeed if tried again.

    Transient: SQLite "database is locked"/busy and "database or disk is full";
    Postgres connection failures (dropped connection, server restart, terminated
    backend, pool timeout, no reply in time), serialization failures and
    deadlocks, lock timeouts.
    Everything else (constraint violations, syntax errors, a missing table, a
    closed pool) is not, and neither is a login the server refuses (unknown role
    or database, failed authentication): the next try would be refused too.
    """
    if isinstance(exc, sqlite3.OperationalError):
        message = str(exc).lower()
        return any(marker in message for marker in _SQLITE_TRANSIENT)
    if not _is_psycopg_error(exc) or is_refused_login(exc):
        return False
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate:
        return sqlstate.startswith(_PG_TRANSIENT_CLASSES) or sqlstate in _PG_TRANSIENT_CODES
    if any(marker in str(exc) for marker in _PG_MISUSE):
        return False
    # No SQLSTATE: the client lost or never had a connection (psycopg.OperationalError,
    # psycopg_pool.PoolTimeout), or used one that is closed (InterfaceError). A pool
    # closed by its owner (PoolClosed) stays closed.
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & _PG_UNAVAILABLE) and "PoolClosed" not in names


def is_unavailable_error(exc: BaseException) -> bool:
    """Whether a Postgres error says the store could not be reached or could not
    serve the call: psycopg's ``OperationalError`` family (refused, lost or timed
    out connections, a refused login, shutdowns, statement and lock timeouts,
    serialization failures) and pool timeouts; SQLite's full disk. Not: bad SQL,
    bad data, a missing table, a misused connection."""
    if isinstance(exc, sqlite3.OperationalError):
        return any(marker in str(exc).lower() for marker in _SQLITE_UNAVAILABLE)
    if not _is_psycopg_error(exc) or any(marker in str(exc) for marker in _PG_MISUSE):
        return False
    return bool({c.__name__ for c in type(exc).__mro__} & _PG_UNAVAILABLE)


def is_missing_table(exc: BaseException) -> bool:
    """A table the savers need does not exist: ``setup()`` was never called."""
    if getattr(exc, "sqlstate", None) == "42P01":  # Postgres undefined_table
        return True
    return is_store_error(exc) and "no such table" in str(exc)
