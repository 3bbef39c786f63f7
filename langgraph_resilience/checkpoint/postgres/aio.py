"""`AsyncResilientPostgresSaver`: LangGraph's `AsyncPostgresSaver` with the resilience store."""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext, suppress
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool
from typing_extensions import Unpack

from langgraph_resilience._langgraph import check_pg_rows, route_cursor
from langgraph_resilience.checkpoint.postgres import (
    RETRIED_LIST_DOC,
    PgSaverBase,
    PgTransaction,
    _network,
    connecting,
    pg_put,
    pg_put_statements,
    pg_write_rows,
    riders_of,
    saver_timeouts,
    suspecting,
    translation,
)
from langgraph_resilience.checkpoint.postgres._network import (
    AsyncBoundedConnection,
    AsyncConn,
    PgTimeouts,
)
from langgraph_resilience.checkpoint.saver import _base, _threads
from langgraph_resilience.checkpoint.saver._asavers import AsyncResilience
from langgraph_resilience.checkpoint.store import _schema, _sums
from langgraph_resilience.checkpoint.store._store import POSTGRES, Statements, aexecute
from langgraph_resilience.checkpoint.store._store_retry import (
    acall_with_retry,
)
from langgraph_resilience.policy import Backoff

__all__ = ["AsyncBoundedConnection", "AsyncResilientPostgresSaver"]

T = TypeVar("T")


AL = TypeVar("AL", bound=Callable[..., AsyncIterator[CheckpointTuple]])


def aretried_list(listing: AL) -> AL:
    """Async twin of `retried_list`."""

    @functools.wraps(listing)
    async def alist(
        saver: Any, config: RunnableConfig | None, **options: Any
    ) -> AsyncIterator[CheckpointTuple]:
        listed: AsyncGenerator[CheckpointTuple, None] | None = None

        async def first() -> CheckpointTuple | None:
            nonlocal listed
            listed = cast(AsyncGenerator[CheckpointTuple, None], listing(saver, config, **options))
            return await anext(listed, None)

        item = await saver._call(first)
        if item is None or listed is None:
            return
        try:
            yield item
            async for item in listed:
                yield item
        finally:
            await listed.aclose()  # a reader that stops early frees the saver's lock now

    alist.__doc__ = RETRIED_LIST_DOC.replace("`list`", "`alist`")
    return cast(AL, alist)


@route_cursor
@check_pg_rows(_sums.pg_checked)
class AsyncResilientPostgresSaver(
    PgSaverBase[AsyncConn, AsyncPipeline], AsyncResilience, AsyncPostgresSaver
):
    """A drop-in `AsyncPostgresSaver` with the resilience store.

    The async twin of `ResilientPostgresSaver`: same tables, one transaction per
    write, retries that reconnect before every try whose connection is gone,
    bounded waits on the connections it opens (``timeouts``), `StoreUnavailable`
    once the retry window has passed, fork refusal, and the extended contract
    (`acopy_thread`, `adelete_for_runs`, `aprune`). For a pool, give it
    ``connection_class=AsyncBoundedConnection`` and a conninfo from
    ``PgTimeouts().conninfo(dsn)``.

    Example:
        >>> from langgraph_resilience.checkpoint.postgres.aio import (
        ...     AsyncResilientPostgresSaver,
        ... )
        >>> async def main(dsn: str) -> None:  # doctest: +SKIP
        ...     async with AsyncResilientPostgresSaver.from_conn_string(dsn) as saver:
        ...         await saver.setup()
    """

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        serde: SerializerProtocol | None = None,
        store_retry: Backoff | None = None,
        timeouts: PgTimeouts | None = None,
        **lifecycle: Any,
    ) -> AsyncIterator[AsyncResilientPostgresSaver]:
        """As `ResilientPostgresSaver.from_conn_string`: connect with a DSN, adding the
        ``timeouts`` it does not set (`StoreUnavailable` when the server cannot be
        reached)."""
        bounds = saver_timeouts(timeouts)
        with connecting(conn_string):
            conn = await _network.aconnect(bounds.conninfo(conn_string), bounds.read_timeout)
        saver = None
        try:
            async with conn.pipeline() if pipeline else nullcontext() as pipe:
                saver = cls(
                    conn, pipe, serde, store_retry=store_retry, timeouts=bounds, **lifecycle
                )
                try:
                    yield saver
                finally:
                    # Still inside the pipeline block: the flush's transaction syncs it.
                    await _base.aflush_quietly(saver._state, saver.aflush_counters)
        finally:
            await conn.close()
            if saver is not None and saver.conn is not conn:
                await saver.conn.close()

    async def setup(self) -> None:
        """Run LangGraph's migrations, then the resilience ones (in one transaction).

        Raises:
            ConfigError: the database was migrated by a newer langgraph-resilience.
            StoreUnavailable: the server could not be reached within the retry window.
        """
        async with self._setup_lock():  # one process at a time (LangGraph's migrations race)
            await self._call(lambda: super(AsyncResilientPostgresSaver, self).setup())
            await self._transact(
                lambda: _schema.migrate(POSTGRES, where="this Postgres database"), check=False
            )
        self._state.schema_checked = True

    @asynccontextmanager
    async def _setup_lock(self) -> AsyncIterator[None]:
        """Async twin of `ResilientPostgresSaver._setup_lock`."""
        pool, read = self.conn, self._timeouts.read_timeout
        own = not isinstance(pool, AsyncConnectionPool)
        conn: Any = pool
        if isinstance(pool, AsyncConnectionPool):
            conn = await self._call(lambda: _network.aconnect_beside(pool, read))

        async def lock(sql: str) -> None:
            await (await conn.execute(sql)).fetchone()

        try:
            await self._call(lambda: lock(_schema.SETUP_LOCK))
            try:
                yield
            finally:
                with suppress(Exception):  # a lost connection has let go of it
                    await lock(_schema.SETUP_UNLOCK)
        finally:
            if not own:
                await conn.close()

    alist = aretried_list(AsyncResilience.alist)

    # -- the connection of a try ---------------------------------------------------

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[DictRow]]:
        """The connection one try runs on, under the saver's lock (as the sync
        twin's `_connection`)."""
        async with self.lock:
            with suspecting(self._state):
                if isinstance(self.conn, AsyncConnectionPool):
                    async with _network.apooled(
                        self.conn, self._state.suspect, self._timeouts
                    ) as conn:
                        yield conn
                else:
                    yield await self._own_connection()

    async def _own_connection(self) -> AsyncConnection[DictRow]:
        conn = self.conn
        assert isinstance(conn, AsyncConnection)
        conninfo = self._replacement(conn)
        if conninfo is None:
            return conn
        fresh = await _network.aconnect(conninfo, self._timeouts.read_timeout)
        self.conn = fresh
        await conn.close()
        return fresh

    @asynccontextmanager
    async def _open_cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        """LangGraph's cursor (as `AsyncPostgresSaver`'s), on `_connection`: the
        cursor every query of LangGraph's own methods opens (`route_cursor`)."""
        async with self._connection() as conn:
            if self.pipe:
                try:
                    async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                        yield cur
                finally:
                    if pipeline:
                        await self.pipe.sync()
            elif pipeline and self.supports_pipeline:
                async with (
                    conn.pipeline(),
                    conn.cursor(binary=True, row_factory=dict_row) as cur,
                ):
                    yield cur
            elif pipeline:
                async with (
                    conn.transaction(),
                    conn.cursor(binary=True, row_factory=dict_row) as cur,
                ):
                    yield cur
            else:
                async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur

    # -- the transaction driver ----------------------------------------------

    @asynccontextmanager
    async def _transaction(
        self, pipeline: bool, alone: bool = False
    ) -> AsyncIterator[AsyncCursor[DictRow]]:
        async with self._connection() as conn:
            if alone and self.pipe is None and conn.autocommit:
                # One statement, its own implicit transaction: one round trip even
                # when it fetches (a pipeline's fetch waits once more, for its Sync).
                async with conn.cursor(binary=True) as cur:
                    yield cur
            elif pipeline and self.pipe is None and self.supports_pipeline and conn.autocommit:
                # One round trip: an autocommit pipeline runs everything up
                # to its Sync as one implicit transaction, all or nothing.
                async with conn.pipeline(), conn.cursor(binary=True) as cur:
                    yield cur
            else:
                async with conn.transaction(), conn.cursor(binary=True) as cur:
                    yield cur
                if self.pipe is not None:
                    await self.pipe.sync()

    async def _transact(
        self,
        statements: Callable[[], Statements[T]],
        **options: Unpack[PgTransaction],
    ) -> T:
        check = options.get("check", True)
        pipeline, alone = options.get("pipeline", False), options.get("alone", False)

        async def attempt() -> T:
            # As the sync twin's: a pipeline only for statements that fetch nothing.
            checked = self._state.schema_checked or not check
            with riders_of(self._state, options) as riders:
                async with self._transaction(
                    pipeline and checked, alone and checked and not riders.riding
                ) as cur:
                    if not checked:
                        await aexecute(cur, _schema.check_schema(POSTGRES))
                    if riders.riding:
                        await aexecute(cur, riders.statements(POSTGRES))
                    result = await aexecute(cur, statements())
            self._state.schema_checked = self._state.schema_checked or check
            return result

        return await acall_with_retry(
            attempt,
            backoff=self._state.backoff,
            on_failure=self._on_failure(options.get("failed")),
            translate=translation(options.get("translate")),
            give_up=self._give_up,
        )

    def _on_failure(self, failed: str | None) -> Callable[[BaseException], Awaitable[None]]:
        async def on_failure(exc: BaseException) -> None:
            _base.count_failure(self._state, failed)

        return on_failure

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T:
        return await acall_with_retry(
            op,
            backoff=self._state.backoff,
            on_failure=self._on_failure(None),
            give_up=self._give_up,
        )

    async def _query(self, statements: Callable[[], Statements[T]]) -> T:
        # As the sync saver's: each statement its own implicit transaction.
        return await self._transact(statements, ride=False, alone=True)

    # -- the dialect's rows ------------------------------------------------------

    _prepare_put = pg_put
    _put_statements = pg_put_statements
    _write_rows = pg_write_rows

    async def _keep_latest(self, thread_ids: list[str]) -> None:
        # LangGraph's own keep_latest (one transaction per thread), then our rows.
        await self._call(
            lambda: AsyncPostgresSaver.aprune(self, thread_ids, strategy="keep_latest")
        )
        await self._transact(lambda: _threads.delete_orphans(POSTGRES, thread_ids))
