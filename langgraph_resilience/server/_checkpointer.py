"""`checkpointer`: our async savers as LangGraph Agent Server's checkpointer.

``langgraph.json``'s ``"checkpointer": {"path": "langgraph_resilience.server.checkpointer"}``
names this factory. The server enters it once per thread that runs graphs (and
keeps each saver until it shuts down), so every entry builds its own saver, on its
own connection or pool: one saver shared by the server's threads would have one
thread's event loop close another's connection. ``LGR_DB`` names the store, as
it does for the command line: a SQLite file path, or a Postgres DSN (a
connection pool of ``LGR_POOL_SIZE`` connections, 10 by default, each with the
timeouts `PgTimeouts` adds). ``LGR_ARCHIVE`` names the cold tier, if any.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langgraph_resilience.checkpoint import AsyncResilientSaver
from langgraph_resilience.checkpoint.saver import _base
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.checkpoint.store._store import is_postgres
from langgraph_resilience.errors import ConfigError, needs_extra

try:
    from psycopg_pool import AsyncConnectionPool, PoolTimeout

    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
    from langgraph_resilience.checkpoint.postgres._network import (
        CONNECT_KWARGS,
        AsyncBoundedConnection,
        PgTimeouts,
        target_of,
        unavailable,
    )
    from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver

    _POSTGRES_MISSING: str | None = None
except ImportError as missing:  # the base install, without the `postgres` extra
    _POSTGRES_MISSING = str(missing)

__all__ = ["ARCHIVE_ENV", "DB_ENV", "POOL_ENV", "checkpointer", "sync_saver"]

DB_ENV = "LGR_DB"
ARCHIVE_ENV = "LGR_ARCHIVE"
POOL_ENV = "LGR_POOL_SIZE"
_POOL_SIZE = 10
_CONNECT_WAIT = 30.0  # seconds for the pool's first connection at start-up


def _db() -> str:
    db = os.environ.get(DB_ENV, "").strip()
    if not db:
        raise ConfigError(
            f"langgraph_resilience.server.checkpointer reads the store from {DB_ENV}: set it "
            "to a SQLite file path (runs.db) or a Postgres DSN "
            "(postgresql://user@host:5432/dbname), e.g. in the .env langgraph.json names"
        )
    return db


def _pool_size() -> int:
    raw = os.environ.get(POOL_ENV, "").strip()
    if not raw:
        return _POOL_SIZE
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{POOL_ENV} must be a whole number of connections >= 1, got {raw!r}")
    return int(raw)


def _options() -> dict[str, Any]:
    archive = os.environ.get(ARCHIVE_ENV, "").strip()
    return {"archive": archive} if archive else {}


@asynccontextmanager
async def _postgres(dsn: str, options: dict[str, Any]) -> AsyncIterator[AsyncResilientSaver]:
    if _POSTGRES_MISSING is not None:
        raise ConfigError(
            needs_extra(
                f"{DB_ENV} names a Postgres DSN, which needs",
                "postgres",
                _POSTGRES_MISSING,
                install="postgres,server",
            )
        )
    timeouts = PgTimeouts()
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        timeouts.conninfo(dsn),
        min_size=1,
        max_size=_pool_size(),
        connection_class=AsyncBoundedConnection,
        kwargs=CONNECT_KWARGS,
        open=False,
    )
    try:
        await pool.open(wait=True, timeout=_CONNECT_WAIT)
    except PoolTimeout as exc:
        await pool.close()
        raise unavailable(target_of(dsn), exc, 1, _CONNECT_WAIT, connecting=True) from exc
    try:
        saver = AsyncResilientPostgresSaver(pool, timeouts=timeouts, **options)
        await saver.setup()
        try:
            yield saver
        finally:
            await _base.aflush_quietly(saver._state, saver.aflush_counters)
    finally:
        await pool.close()


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncResilientSaver]:
    """A new async resilient saver on the store ``LGR_DB`` names, set up.

    For ``langgraph.json``'s ``checkpointer.path``; compile the graphs the server
    serves without a checkpointer (``langgraph dev`` refuses one that has its own).

    Raises:
        ConfigError: ``LGR_DB`` is unset, or names Postgres without the postgres extra.
        StoreUnavailable: the store cannot be reached.

    Example:
        >>> # langgraph.json: {"checkpointer": {"path": "langgraph_resilience.server.checkpointer"}}
        >>> async def main() -> None:  # doctest: +SKIP
        ...     async with checkpointer() as saver:
        ...         graph = builder.compile(checkpointer=saver)
    """
    db, options = _db(), _options()
    if is_postgres(db):
        async with _postgres(db, options) as saver:
            yield saver
        return
    async with AsyncResilientSqliteSaver.from_conn_string(db, **options) as lite:
        await lite.setup()
        yield lite


@contextmanager
def sync_saver() -> Iterator[Any]:
    """A sync resilient saver on ``LGR_DB``, for the console's pages (`console_app`),
    which read in the server's thread pool; the store is set up by `checkpointer`."""
    db, options = _db(), _options()
    if is_postgres(db):
        if _POSTGRES_MISSING is not None:
            raise ConfigError(f"{DB_ENV} names a Postgres DSN: {_POSTGRES_MISSING}")
        with ResilientPostgresSaver.from_conn_string(db, **options) as pg:
            yield pg
        return
    with ResilientSqliteSaver.from_conn_string(db, **options) as lite:
        lite.setup()
        yield lite
