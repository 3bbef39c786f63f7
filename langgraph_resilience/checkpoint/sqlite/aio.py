"""`AsyncResilientSqliteSaver`: LangGraph's `AsyncSqliteSaver` with the resilience store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from langgraph_resilience.checkpoint.saver import _base, _threads
from langgraph_resilience.checkpoint.saver._asavers import AsyncResilience
from langgraph_resilience.checkpoint.sqlite import (
    SqliteSaverBase,
    sqlite_final,
    sqlite_path_error,
    sqlite_unavailable,
)
from langgraph_resilience.checkpoint.store import _schema
from langgraph_resilience.checkpoint.store._store import SQLITE, Statements, aexecute
from langgraph_resilience.checkpoint.store._store_retry import Translate, acall_with_retry
from langgraph_resilience.checkpoint.store._sums import (
    _config_of,
    sqlite_keys,
    sqlite_read,
    sqlite_tuple,
)
from langgraph_resilience.policy import Backoff

__all__ = ["AsyncResilientSqliteSaver"]

T = TypeVar("T")


async def _no_reset(exc: BaseException) -> None:
    return None


class VerifiedAsyncSqliteReads(AsyncSqliteSaver):
    """Async twin of `VerifiedSqliteReads`."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        await self.setup()
        async with self.lock, self.conn.cursor() as cur:
            read = await aexecute(cur, sqlite_read(config))
        return None if read is None else sqlite_tuple(self.serde, read)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        await self.setup()
        async with self.lock, self.conn.cursor() as cur:
            keys = await aexecute(cur, sqlite_keys(config, filter, before, limit))
        for key in keys:
            found = await self.aget_tuple(_config_of(*key))
            if found is not None:  # deleted since it was listed
                yield found


class AsyncResilientSqliteSaver(
    SqliteSaverBase[aiosqlite.Connection], AsyncResilience, VerifiedAsyncSqliteReads
):
    """A drop-in `AsyncSqliteSaver` with the resilience store.

    The async twin of `ResilientSqliteSaver`: same tables, retries, fork refusal
    and extended contract (`acopy_thread`, `adelete_for_runs`, `aprune`).

    Example:
        >>> import asyncio
        >>> from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
        >>> async def main() -> None:
        ...     async with AsyncResilientSqliteSaver.from_conn_string(":memory:") as saver:
        ...         await saver.setup()
        >>> asyncio.run(main())
    """

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, *, store_retry: Backoff | None = None, **lifecycle: Any
    ) -> AsyncIterator[AsyncResilientSqliteSaver]:
        """Open (or create) a SQLite database file, or ``":memory:"``.

        Raises:
            ConfigError: the file's directory does not exist.
            StoreUnavailable: SQLite cannot open the file.
        """
        if (error := sqlite_path_error(conn_string)) is not None:
            raise error
        try:
            conn = await aiosqlite.connect(conn_string)
        except aiosqlite.Error as exc:
            raise sqlite_unavailable(conn_string, exc) from exc
        saver = cls(conn, store_retry=store_retry, **lifecycle)
        saver._state.conninfo = conn_string  # named in errors
        try:
            yield saver
        finally:
            await _base.aflush_quietly(saver._state, saver.aflush_counters)
            await conn.close()

    async def setup(self) -> None:
        """Create LangGraph's tables and bring the resilience tables up to date.

        Raises:
            ConfigError: the database was migrated by a newer langgraph-resilience.
        """
        if self.is_setup and self._state.schema_checked:
            return
        await super().setup()
        async with self.lock:
            if self._state.schema_checked:
                return
            try:
                async with self.conn.execute("PRAGMA synchronous") as cur:
                    row = await cur.fetchone()
                self._synchronous = int(row[0]) if row else 2
                await self._in_transaction(
                    lambda: _schema.migrate(SQLITE, where="this SQLite database")
                )
            except BaseException:
                self.is_setup = False
                raise
            self._state.schema_checked = True

    async def _in_transaction(
        self,
        statements: Callable[[], Statements[T]],
        riders: _base.Riders | None = None,
        *,
        immediate: bool = True,
        relaxed: bool = False,
    ) -> T:
        """Run the statements, and store ``riders``, in one transaction (caller holds
        the lock); see the sync twin."""
        if self.conn.in_transaction:
            await self.conn.commit()
        cur = await self.conn.cursor()
        if relaxed:  # committed without fsync; see _ledger.record_outcome
            await cur.execute("PRAGMA synchronous = NORMAL")
        try:
            await cur.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            if riders is not None and riders.riding:
                await aexecute(cur, riders.statements(SQLITE))
            result = await aexecute(cur, statements())
            await self.conn.commit()
            return result
        except BaseException:
            await self.conn.rollback()
            raise
        finally:
            if relaxed:
                await cur.execute(f"PRAGMA synchronous = {self._synchronous}")
            await cur.close()

    async def _transact(
        self,
        statements: Callable[[], Statements[T]],
        *,
        translate: Translate | None = None,
        ok: str | None = None,
        failed: str | None = None,
        pipeline: bool = False,
        flush: bool = False,
        relaxed: bool = False,
        alone: bool = False,  # Postgres only: every SQLite transaction is local
    ) -> T:
        async def attempt() -> T:
            await self.setup()
            async with self.lock:
                with _base.Riders(self._state, ok, flush=flush, relaxed=relaxed) as riders:
                    return await self._in_transaction(
                        statements, riders, immediate=not pipeline, relaxed=relaxed
                    )

        async def on_failure(exc: BaseException) -> None:
            _base.count_failure(self._state, failed)

        return await acall_with_retry(
            attempt,
            backoff=self._state.backoff,
            on_failure=on_failure,
            translate=translate,
            give_up=sqlite_final(self._state),
        )

    async def _query(self, statements: Callable[[], Statements[T]]) -> T:
        async def attempt() -> T:
            await self.setup()
            async with self.lock:
                cur = await self.conn.cursor()
                try:
                    return await aexecute(cur, statements())
                finally:
                    await cur.close()

        return await self._call(attempt)

    async def _call(self, op: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return await acall_with_retry(
            op, backoff=self._state.backoff, on_failure=_no_reset, give_up=sqlite_final(self._state)
        )

    # -- the dialect's rows ------------------------------------------------------

    async def _keep_latest(self, thread_ids: list[str]) -> None:
        await self._transact(lambda: _threads.sqlite_keep_latest(thread_ids))
