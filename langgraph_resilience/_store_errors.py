"""Which exceptions come from the database driver, and which of those may pass.

A leaf module (it imports no other module of the package): the classifier
(`classify`) and the savers' retry loops (`checkpoint._retry`) both ask it.
"""

from __future__ import annotations

import sqlite3

__all__ = ["is_store_error", "is_transient_store_error"]

_SQLITE_TRANSIENT = ("database is locked", "database table is locked", "busy")
# SQLSTATE classes and codes after which a new try on a fresh connection can work:
# connection exceptions, serialization failures and deadlocks, too many
# connections, and the server shutting down or starting up.
_PG_TRANSIENT_CLASSES = ("08", "40")
_PG_TRANSIENT_CODES = ("53300", "57P01", "57P02", "57P03", "55P03")
# Client-side misuse that psycopg reports as an OperationalError without SQLSTATE,
# like a lost connection; a retry repeats it.
_PG_MISUSE = ("not in pipeline mode", "already in pipeline mode")


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
    if any(marker in str(exc) for marker in _PG_MISUSE):
        return False
    # No SQLSTATE: the client lost or never had a connection (psycopg.OperationalError,
    # psycopg_pool.PoolTimeout), or used one that is closed (InterfaceError).
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"OperationalError", "InterfaceError", "PoolTimeout"})
