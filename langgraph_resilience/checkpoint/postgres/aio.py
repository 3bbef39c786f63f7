"""`AsyncResilientPostgresSaver`: LangGraph's `AsyncPostgresSaver` with the resilience store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext
from typing import TypeVar

import psycopg
from langgraph.checkpoint.postgres import _ainternal
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from langgraph_resilience._store_errors import is_transient_store_error
from langgraph_resilience.checkpoint import _base, _schema, _threads
from langgraph_resilience.checkpoint._asavers import AsyncResilience
from langgraph_resilience.checkpoint._retry import Translate, acall_with_retry
from langgraph_resilience.checkpoint._store import POSTGRES, Statements, aexecute
from langgraph_resilience.checkpoint.postgres import (
    CONNECT_KWARGS,
    live_conninfo,
    pg_put,
    pg_put_statements,
    pg_unavailable,
    pg_write_rows,
    translation,
)
from langgraph_resilience.policy import Backoff

__all__ = ["AsyncResilientPostgresSaver"]

T = TypeVar("T")


class AsyncResilientPostgresSaver(AsyncResilience, AsyncPostgresSaver):
    """A drop-in `AsyncPostgresSaver` with the resilience store.

    The async twin of `ResilientPostgresSaver`: same tables, one transaction per
    write, retries on a fresh connection, fork refusal, and the extended contract
    (`acopy_thread`, `adelete_for_runs`, `aprune`).

    Example:
        >>> from langgraph_resilience.checkpoint.postgres.aio import (
        ...     AsyncResilientPostgresSaver,
        ... )
        >>> async def main(dsn: str) -> None:  # doctest: +SKIP
        ...     async with AsyncResilientPostgresSaver.from_conn_string(dsn) as saver:
        ...         await saver.setup()
    """

    _dialect = POSTGRES

    def __init__(
        self,
        conn: _ainternal.Conn,
        pipe: AsyncPipeline | None = None,
        serde: SerializerProtocol | None = None,
        *,
        store_retry: Backoff | None = None,
    ) -> None:
        self._state = _base.make_state(store_retry)
        super().__init__(conn, pipe, serde)
        if isinstance(conn, AsyncConnection):
            self._state.conninfo = live_conninfo(conn)

    @property
    def conn(self) -> _ainternal.Conn:
        return self._state.conn  # type: ignore[no-any-return]

    @conn.setter
    def conn(self, value: _ainternal.Conn) -> None:
        self._state.conn = value

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        serde: SerializerProtocol | None = None,
        store_retry: Backoff | None = None,
    ) -> AsyncIterator[AsyncResilientPostgresSaver]:
        """Connect to Postgres with a DSN.

        Raises:
            StoreUnavailable: the server cannot be reached (the message names the
                DSN without its password).
        """
        try:
            conn: AsyncConnection[DictRow] = await AsyncConnection.connect(
                conn_string, **CONNECT_KWARGS
            )
        except psycopg.Error as exc:
            raise pg_unavailable(conn_string, exc) from exc
        saver = None
        try:
            async with conn.pipeline() if pipeline else nullcontext() as pipe:
                saver = cls(conn, pipe, serde, store_retry=store_retry)
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
        """
        await acall_with_retry(
            lambda: super(AsyncResilientPostgresSaver, self).setup(),
            backoff=self._state.backoff,
            on_failure=self._on_failure(None),
        )
        await self._transact(
            lambda: _schema.migrate(POSTGRES, where="this Postgres database"), check=False
        )
        self._state.schema_checked = True

    # -- the transaction driver ----------------------------------------------

    @asynccontextmanager
    async def _transaction(self, pipeline: bool) -> AsyncIterator[AsyncCursor[DictRow]]:
        async with self.lock:
            try:
                async with _ainternal.get_connection(self.conn) as conn:
                    if (
                        pipeline
                        and self.pipe is None
                        and self.supports_pipeline
                        and conn.autocommit
                    ):
                        # One round trip: an autocommit pipeline runs everything up
                        # to its Sync as one implicit transaction, all or nothing.
                        async with conn.pipeline(), conn.cursor(binary=True) as cur:
                            yield cur
                    else:
                        async with conn.transaction(), conn.cursor(binary=True) as cur:
                            yield cur
                        if self.pipe is not None:
                            await self.pipe.sync()
            except Exception as exc:
                # Replace a broken connection before the lock goes to the next
                # caller, so one outage fails one operation, not every queued one.
                if is_transient_store_error(exc):
                    await self._reset_connection()
                raise

    async def _transact(
        self,
        statements: Callable[[], Statements[T]],
        *,
        translate: Translate | None = None,
        ok: str | None = None,
        failed: str | None = None,
        flush: bool = False,
        check: bool = True,
        pipeline: bool = False,
        relaxed: bool = False,  # Postgres relaxes in SQL: see _ledger.record_outcome
        ride: bool = True,  # False for a read: nothing rides along
    ) -> T:
        async def attempt() -> T:
            # Pipeline mode sends the whole transaction in one round trip, but it
            # can hand a fetch the rows of an earlier statement (after a NOTICE),
            # so only statement lists that fetch nothing use it.
            checked = self._state.schema_checked or not check
            with _base.Riders(self._state, ok, flush=flush, ride=ride) as riders:
                async with self._transaction(pipeline and checked) as cur:
                    if not checked:
                        await aexecute(cur, _schema.check_schema(POSTGRES))
                    if riders:
                        await aexecute(cur, riders.statements(POSTGRES))
                    result = await aexecute(cur, statements())
            self._state.schema_checked = self._state.schema_checked or check
            return result

        return await acall_with_retry(
            attempt,
            backoff=self._state.backoff,
            on_failure=self._on_failure(failed),
            translate=translation(translate),
        )

    def _on_failure(self, failed: str | None) -> Callable[[BaseException], Awaitable[None]]:
        async def on_failure(exc: BaseException) -> None:
            _base.count_failure(self._state, failed)
            await self._reset_connection()

        return on_failure

    async def _reset_connection(self) -> None:
        """Replace a broken connection (or drop a pool's broken ones) before a retry."""
        conn = self.conn
        if isinstance(conn, AsyncConnectionPool):
            await conn.check()
            return
        if not (conn.closed or conn.broken) or self.pipe is not None or not self._state.conninfo:
            return
        try:
            self.conn = await AsyncConnection.connect(self._state.conninfo, **CONNECT_KWARGS)
        except psycopg.Error:
            return  # the next try fails on the closed connection and comes back here
        await conn.close()

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T:
        return await acall_with_retry(
            op, backoff=self._state.backoff, on_failure=self._on_failure(None)
        )

    async def _query(self, statements: Callable[[], Statements[T]]) -> T:
        return await self._transact(statements, ride=False)

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
