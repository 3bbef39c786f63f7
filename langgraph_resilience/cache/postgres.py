"""`PostgresCache`: LangGraph's node cache (``CachePolicy``) on Postgres.

A ``BaseCache`` as LangGraph's ``SqliteCache`` and ``RedisCache`` are, kept in
one table (``resilience_node_cache``) of the database the savers use::

    cache = PostgresCache.from_conn_string(DSN)  # or PostgresCache(pool)
    cache.setup()
    graph = builder.compile(checkpointer=saver, cache=cache)

Entries expire by the server's clock (``CachePolicy(ttl=...)``, in seconds); an
expired entry is a miss and is deleted when it is next asked for, or by
`PostgresCache.purge_expired`. ``clear(namespaces)`` deletes the entries of
exactly those namespaces (LangGraph's ``graph.clear_cache(nodes)``), ``clear()``
every entry.

A cache only saves work, so it never fails a run: when the server cannot be
reached, a read is a miss and a write is skipped (logged as a warning), and the
node runs. A stored value that no longer decodes (for instance written under
another encryption key) is a miss too, overwritten by the node's next result.
Bad keys or TTLs, a missing table, and ``clear`` on an unreachable server raise.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from langgraph_resilience.errors import needs_extra

try:
    import psycopg
except ImportError as missing:  # the base install, without the `postgres` extra
    raise ImportError(needs_extra("PostgresCache needs", "postgres", missing)) from missing

from langgraph.cache.base import BaseCache, FullKey, Namespace, ValueT
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncConnection, AsyncCursor, Connection, Cursor
from psycopg.rows import TupleRow, tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_resilience._store_errors import is_missing_table, is_unavailable_error
from langgraph_resilience.cache import _entries
from langgraph_resilience.errors import ConfigError

__all__ = ["PostgresCache"]

logger = logging.getLogger("langgraph_resilience")

T = TypeVar("T")

SyncConn = Connection[Any] | ConnectionPool[Any]
AsyncConn = AsyncConnection[Any] | AsyncConnectionPool[Any]
_CONNECTIONS = (Connection, ConnectionPool, AsyncConnection, AsyncConnectionPool)


class PostgresCache(BaseCache[ValueT]):
    """A LangGraph node cache in a Postgres table, with TTLs (sync and async).

    Args:
        conn: a psycopg ``Connection`` or ``ConnectionPool`` (the sync methods run
            on it; the async ones in a worker thread, as ``SqliteCache`` does), or
            an ``AsyncConnection`` or ``AsyncConnectionPool`` (the async methods
            run on it; the sync ones, from another thread, on the event loop it
            was made on, as LangGraph's ``AsyncPostgresSaver`` does). The same
            connection or pool as the saver's works: each call is one statement.
        serde: how values are stored (default: LangGraph's ``JsonPlusSerializer``,
            without pickle); an ``EncryptedSerializer`` keeps them encrypted.

    Attributes:
        conn: the connection or pool.
        loop: for an async connection, the event loop it belongs to (None otherwise).
    """

    def __init__(self, conn: SyncConn | AsyncConn, *, serde: SerializerProtocol | None = None):
        super().__init__(serde=serde)
        if not isinstance(
            conn, Connection | ConnectionPool | AsyncConnection | AsyncConnectionPool
        ):
            raise ConfigError(
                "PostgresCache takes a psycopg Connection, ConnectionPool, AsyncConnection "
                f"or AsyncConnectionPool, got {type(conn).__name__}; "
                "PostgresCache.from_conn_string(dsn) opens one"
            )
        self.conn = conn
        self.loop: asyncio.AbstractEventLoop | None = None
        if isinstance(conn, AsyncConnection | AsyncConnectionPool):
            try:
                self.loop = asyncio.get_running_loop()
            except RuntimeError:
                self.loop = None

    # -- opening ----------------------------------------------------------------------

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Iterator[PostgresCache[Any]]:
        """A cache on its own connection (autocommit), closed at the block's end."""
        with Connection.connect(conn_string, autocommit=True, prepare_threshold=0) as conn:
            yield cls(conn, **kwargs)

    @classmethod
    @asynccontextmanager
    async def afrom_conn_string(
        cls, conn_string: str, **kwargs: Any
    ) -> AsyncIterator[PostgresCache[Any]]:
        """The async twin of `from_conn_string` (an ``AsyncConnection``)."""
        async with await AsyncConnection.connect(
            conn_string, autocommit=True, prepare_threshold=0
        ) as conn:
            yield cls(conn, **kwargs)

    # -- the table --------------------------------------------------------------------

    def setup(self) -> None:
        """Create the cache's table if it is missing (idempotent; safe when several
        processes set up at once)."""
        if self._is_async:
            self._from_async(self.asetup)
            return
        with self._connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(_entries.SETUP_LOCK)
            for statement in _entries.SETUP:
                cur.execute(statement)

    async def asetup(self) -> None:
        """The async twin of `setup`."""
        if not self._is_async:
            await asyncio.to_thread(self.setup)
            return
        async with self._aconnection() as conn, conn.transaction(), conn.cursor() as cur:
            await cur.execute(_entries.SETUP_LOCK)
            for statement in _entries.SETUP:
                await cur.execute(statement)

    # -- BaseCache --------------------------------------------------------------------

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """The live entries among ``keys`` (an expired or undecodable one is left out)."""
        if self._is_async:
            return self._from_async(lambda: self.aget(keys))
        if not keys:
            return {}
        asked, params = _entries.wanted(keys)
        rows = self._sync_call("read", lambda cur: _fetch(cur, _entries.GET, params), [])
        return self._decoded(asked, rows)

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """The async twin of `get`."""
        if not self._is_async:
            return await asyncio.to_thread(self.get, keys)
        if not keys:
            return {}
        asked, params = _entries.wanted(keys)
        rows = await self._async_call("read", lambda cur: _afetch(cur, _entries.GET, params), [])
        return self._decoded(asked, rows)

    def set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """Store each value under its key for its TTL in seconds (None: no expiry),
        replacing what the key held; one statement for all of them."""
        if self._is_async:
            self._from_async(lambda: self.aset(pairs))
            return
        if not pairs:
            return
        params = _entries.set_params(pairs, self.serde.dumps_typed)
        self._sync_call("write", lambda cur: cur.execute(_entries.SET, params), None)

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """The async twin of `set`."""
        if not self._is_async:
            await asyncio.to_thread(self.set, pairs)
            return
        if not pairs:
            return
        params = _entries.set_params(pairs, self.serde.dumps_typed)
        await self._async_call("write", lambda cur: cur.execute(_entries.SET, params), None)

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Delete the entries of exactly these namespaces; every entry when None
        (an empty list deletes nothing)."""
        if self._is_async:
            self._from_async(lambda: self.aclear(namespaces))
            return
        statement = _clear_statement(namespaces)
        if statement is None:
            return
        with self._connected() as cur:
            cur.execute(*statement)

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """The async twin of `clear`."""
        if not self._is_async:
            await asyncio.to_thread(self.clear, namespaces)
            return
        statement = _clear_statement(namespaces)
        if statement is None:
            return
        async with self._acursor() as cur:
            await cur.execute(*statement)

    def purge_expired(self) -> int:
        """Delete every expired entry (also those never asked for again); how many."""
        if self._is_async:
            return self._from_async(self.apurge_expired)
        with self._connected() as cur:
            cur.execute(_entries.PURGE_EXPIRED)
            return max(cur.rowcount, 0)

    async def apurge_expired(self) -> int:
        """The async twin of `purge_expired`."""
        if not self._is_async:
            return await asyncio.to_thread(self.purge_expired)
        async with self._acursor() as cur:
            await cur.execute(_entries.PURGE_EXPIRED)
            return max(cur.rowcount, 0)

    # -- decoding ---------------------------------------------------------------------

    def _decoded(
        self, asked: dict[tuple[str, str], FullKey], rows: list[TupleRow]
    ) -> dict[FullKey, ValueT]:
        found: dict[FullKey, ValueT] = {}
        for ns, key, encoding, raw in rows:
            full = asked[(ns, key)]
            try:
                found[full] = self.serde.loads_typed((encoding, bytes(raw)))
            except Exception as exc:  # a miss: the node runs and its result replaces it
                logger.warning(
                    "node cache entry %r of namespace %s does not decode (%s: %s); taken as a miss",
                    key,
                    ns,
                    type(exc).__name__,
                    exc,
                )
        return found

    # -- I/O: sync --------------------------------------------------------------------

    @property
    def _is_async(self) -> bool:
        return isinstance(self.conn, AsyncConnection | AsyncConnectionPool)

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        conn = self.conn
        if isinstance(conn, ConnectionPool):
            with conn.connection() as pooled:
                yield pooled
        else:
            assert isinstance(conn, Connection)
            yield conn

    @contextmanager
    def _connected(self) -> Iterator[Cursor[TupleRow]]:
        """A cursor of tuples; on a connection outside autocommit, in a transaction
        committed at the block's end (a failed statement leaves none open)."""
        with self._connection() as conn:
            if conn.autocommit:
                with conn.cursor(row_factory=tuple_row) as cur:
                    yield cur
            else:
                with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                    yield cur

    def _sync_call(self, what: str, run: Callable[[Cursor[TupleRow]], Any], missed: T) -> Any:
        try:
            with self._connected() as cur:
                return run(cur)
        except psycopg.Error as exc:
            return _when_failed(exc, what, missed)

    # -- I/O: async -------------------------------------------------------------------

    @asynccontextmanager
    async def _aconnection(self) -> AsyncIterator[AsyncConnection[Any]]:
        conn = self.conn
        if isinstance(conn, AsyncConnectionPool):
            async with conn.connection() as pooled:
                yield pooled
        else:
            assert isinstance(conn, AsyncConnection)
            yield conn

    @asynccontextmanager
    async def _acursor(self) -> AsyncIterator[AsyncCursor[TupleRow]]:
        async with self._aconnection() as conn:
            if conn.autocommit:
                async with conn.cursor(row_factory=tuple_row) as cur:
                    yield cur
            else:
                async with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                    yield cur

    async def _async_call(
        self, what: str, run: Callable[[AsyncCursor[TupleRow]], Awaitable[Any]], missed: T
    ) -> Any:
        try:
            async with self._acursor() as cur:
                return await run(cur)
        except psycopg.Error as exc:
            return _when_failed(exc, what, missed)

    def _from_async(self, make: Callable[[], Awaitable[T]]) -> T:
        """A sync call on an async connection: run on its loop, from another thread."""
        if self.loop is None:
            raise ConfigError(
                "this PostgresCache holds an async connection made outside an event loop; "
                "make it inside the loop that runs the graph, or give it a sync "
                "Connection or ConnectionPool"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise asyncio.InvalidStateError(
                "a sync call of a PostgresCache on an async connection, from its event "
                "loop's thread, would block the loop: use the async methods "
                "(await graph.ainvoke(...), await cache.aclear(...))"
            )
        return asyncio.run_coroutine_threadsafe(_awaited(make), self.loop).result()


async def _awaited(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


def _fetch(cur: Cursor[TupleRow], statement: str, params: list[Any]) -> list[TupleRow]:
    cur.execute(statement, params)
    return cur.fetchall()


async def _afetch(cur: AsyncCursor[TupleRow], statement: str, params: list[Any]) -> list[TupleRow]:
    await cur.execute(statement, params)
    return await cur.fetchall()


def _clear_statement(namespaces: Sequence[Namespace] | None) -> tuple[Any, ...] | None:
    if namespaces is None:
        return (_entries.CLEAR_ALL,)
    texts = _entries.namespace_texts(namespaces)
    return (_entries.CLEAR_NAMESPACES, [texts]) if texts else None


def _when_failed(exc: psycopg.Error, what: str, missed: T) -> T:
    """A read or write the server could not serve is a miss or a skip; a missing
    table says to call ``setup()``; anything else is raised."""
    if is_missing_table(exc):
        raise ConfigError(
            f"the node cache's table {_entries.TABLE} does not exist: "
            "call PostgresCache.setup() (or asetup()) once"
        ) from exc
    if is_unavailable_error(exc):
        logger.warning(
            "node cache %s skipped, the store is unavailable (%s: %s); the node runs",
            what,
            type(exc).__name__,
            str(exc).strip().splitlines()[0] if str(exc).strip() else "",
        )
        return missed
    raise exc
