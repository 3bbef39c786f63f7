"""`AsyncResilientSqliteSaver`: LangGraph's `AsyncSqliteSaver` with the resilience store."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from langgraph_resilience.checkpoint import _base, _store
from langgraph_resilience.checkpoint._retry import acall_with_retry, is_store_error
from langgraph_resilience.checkpoint._store import SQLITE, Statements
from langgraph_resilience.checkpoint.sqlite import sqlite_put, sqlite_write_rows
from langgraph_resilience.policy import Backoff

__all__ = ["AsyncResilientSqliteSaver"]

T = TypeVar("T")


async def _no_reset(exc: BaseException) -> None:
    return None


class AsyncResilientSqliteSaver(AsyncSqliteSaver):
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

    def __init__(
        self,
        conn: aiosqlite.Connection,
        *,
        serde: SerializerProtocol | None = None,
        store_retry: Backoff | None = None,
    ) -> None:
        super().__init__(conn, serde=serde)
        self._state = _base.make_state(store_retry)

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, *, store_retry: Backoff | None = None
    ) -> AsyncIterator[AsyncResilientSqliteSaver]:
        """Open (or create) a SQLite database file, or ``":memory:"``.

        Raises:
            ConfigError: the file's directory does not exist.
            StoreUnavailable: SQLite cannot open the file.
        """
        if (error := _base.sqlite_path_error(conn_string)) is not None:
            raise error
        try:
            conn = await aiosqlite.connect(conn_string)
        except aiosqlite.Error as exc:
            raise _base.sqlite_unavailable(conn_string, exc) from exc
        saver = cls(conn, store_retry=store_retry)
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
                await self._in_transaction(
                    lambda cur: _store.aexecute(
                        cur, _store.migrate(SQLITE, where="this SQLite database")
                    )
                )
            except BaseException:
                self.is_setup = False
                raise
            self._state.schema_checked = True

    async def _in_transaction(self, body: Callable[[aiosqlite.Cursor], Awaitable[T]]) -> T:
        """Run ``body`` in one BEGIN IMMEDIATE transaction (caller holds the lock)."""
        if self.conn.in_transaction:
            await self.conn.commit()
        cur = await self.conn.cursor()
        try:
            await cur.execute("BEGIN IMMEDIATE")
            result = await body(cur)
            await self.conn.commit()
            return result
        except BaseException:
            await self.conn.rollback()
            raise
        finally:
            await cur.close()

    async def _run(
        self,
        statements: Callable[[], Statements[T]],
        *,
        ok: str | None = None,
        failed: str | None = None,
        flush: bool = False,
    ) -> T:
        async def attempt() -> T:
            await self.setup()
            async with self.lock:
                with _base.counted(self._state, ok, flush=flush) as deltas:

                    async def body(cur: aiosqlite.Cursor) -> T:
                        result = await _store.aexecute(cur, statements())
                        scope = self._state.counters.scope
                        await _store.aexecute(cur, _store.bump(SQLITE, scope, deltas))
                        return result

                    return await self._in_transaction(body)

        async def on_failure(exc: BaseException) -> None:
            _base.count_failure(self._state, failed)

        return await acall_with_retry(attempt, backoff=self._state.backoff, on_failure=on_failure)

    async def _read(self, statements: Callable[[], Statements[T]]) -> T:
        async def attempt() -> T:
            await self.setup()
            async with self.lock:
                cur = await self.conn.cursor()
                try:
                    return await _store.aexecute(cur, statements())
                finally:
                    await cur.close()

        return await acall_with_retry(attempt, backoff=self._state.backoff, on_failure=_no_reset)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; refuse one that would fork the thread.

        Raises:
            CheckpointConflict: another process moved the thread past this
                checkpoint's parent.
        """
        put = sqlite_put(self.serde, config, checkpoint, metadata)
        await self._run(
            lambda: _store.put_checkpoint(SQLITE, put),
            ok=_store.CHECKPOINT_OK,
            failed=_store.CHECKPOINT_FAILED,
        )
        return {
            "configurable": {
                "thread_id": config["configurable"]["thread_id"],
                "checkpoint_ns": put.ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes, retrying transient store errors."""
        sql, rows = sqlite_write_rows(self.serde, config, writes, task_id, task_path)
        await self._run(
            lambda: _store.put_writes(sql, rows),
            ok=_store.WRITES_OK,
            failed=_store.WRITES_FAILED,
        )

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """As `AsyncSqliteSaver.aget_tuple`; an undecodable row raises `CheckpointCorrupt`."""
        try:
            return await acall_with_retry(
                lambda: super(AsyncResilientSqliteSaver, self).aget_tuple(config),
                backoff=self._state.backoff,
                on_failure=_no_reset,
            )
        except Exception as exc:
            thread_id, ns, checkpoint_id = _base.thread_key(config)
            if checkpoint_id is None and not is_store_error(exc):
                checkpoint_id = await self._read(
                    lambda: _store.locate_checkpoint(SQLITE, thread_id, ns)
                )
            raise _base.corrupt(config, checkpoint_id, exc) from exc

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """As `AsyncSqliteSaver.alist`; an undecodable row raises `CheckpointCorrupt`."""
        listed = cast(
            AsyncGenerator[CheckpointTuple, None],
            super().alist(config, filter=filter, before=before, limit=limit),
        )
        while True:
            try:
                item = await listed.__anext__()
            except StopAsyncIteration:
                return
            except Exception as exc:
                await listed.aclose()
                raise _base.corrupt(config, None, exc) from exc
            yield item

    async def aflush_counters(self) -> None:
        """Store the save counts this saver holds in memory (run on close)."""
        await self._run(_store.no_statements, flush=True)

    async def aread_counters(self) -> dict[str, int]:
        """Checkpoint and write tries stored so far, summed over every process."""
        return await self._read(lambda: _store.read_counters(SQLITE, self._state.counters))

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints, writes and resilience rows."""
        await self._run(lambda: _store.delete_threads(SQLITE, [str(thread_id)]))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints, writes and resilience rows to a new thread.

        Raises:
            ConfigError: the target thread already has checkpoints.
        """
        await self._run(lambda: _store.copy_thread(SQLITE, source_thread_id, target_thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and writes, resilience rows) of the given runs."""
        await self._run(lambda: _store.delete_for_runs(SQLITE, run_ids))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only the latest checkpoint per namespace, or delete the threads.

        Raises:
            ConfigError: unknown strategy, or a single str for ``thread_ids``.
            NotImplementedError: ``keep_latest`` on a thread using a DeltaChannel.
        """
        ids = _store.check_prune_args(thread_ids, strategy)
        if not ids:
            return
        if strategy == "delete":
            await self._run(lambda: _store.delete_threads(SQLITE, ids))
        else:
            await self._run(lambda: _store.sqlite_keep_latest(ids))

    # The sync bridges of AsyncSqliteSaver, for the methods it lacks.
    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._bridge(self.acopy_thread(source_thread_id, target_thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._bridge(self.adelete_for_runs(run_ids))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._bridge(self.aprune(thread_ids, strategy=strategy))

    def read_counters(self) -> dict[str, int]:
        return self._bridge(self.aread_counters())

    def _bridge(self, coro: Coroutine[Any, Any, T]) -> T:
        return _base.bridge(coro, self.loop, type(self).__name__)
