"""`AsyncResilientPostgresSaver`: LangGraph's `AsyncPostgresSaver` with the resilience store."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.postgres import _ainternal
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from langgraph_resilience.checkpoint import _base, _store
from langgraph_resilience.checkpoint._retry import (
    acall_with_retry,
    is_store_error,
    is_transient_store_error,
)
from langgraph_resilience.checkpoint._store import POSTGRES, Statements
from langgraph_resilience.checkpoint.postgres import (
    CONNECT_KWARGS,
    fork_translator,
    pg_put,
    pg_put_statements,
    pg_write_rows,
)
from langgraph_resilience.policy import Backoff

__all__ = ["AsyncResilientPostgresSaver"]

T = TypeVar("T")


class AsyncResilientPostgresSaver(AsyncPostgresSaver):
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
            self._state.conninfo = _base.live_conninfo(conn)

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
            raise _base.pg_unavailable(conn_string, exc) from exc
        saver = None
        try:
            if pipeline:
                async with conn.pipeline() as pipe:
                    saver = cls(conn, pipe, serde, store_retry=store_retry)
                    yield saver
            else:
                saver = cls(conn, serde=serde, store_retry=store_retry)
                yield saver
        finally:
            if saver is not None:
                await _base.aflush_quietly(saver._state, saver.aflush_counters)
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
        await self._run(
            lambda: _store.migrate(POSTGRES, where="this Postgres database"), check=False
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

    async def _run(
        self,
        statements: Callable[[], Statements[T]],
        *,
        ok: str | None = None,
        failed: str | None = None,
        flush: bool = False,
        translate: _base.Translate | None = None,
        check: bool = True,
        pipeline: bool = False,
    ) -> T:
        async def attempt() -> T:
            # Pipeline mode sends the whole transaction in one round trip, but it
            # can hand a fetch the rows of an earlier statement (after a NOTICE),
            # so only statement lists that fetch nothing use it.
            checked = self._state.schema_checked or not check
            with _base.counted(self._state, ok, flush=flush) as deltas:
                try:
                    async with self._transaction(pipeline and checked) as cur:
                        if not checked:
                            await _store.aexecute(cur, _store.check_schema(POSTGRES))
                        result = await _store.aexecute(cur, statements())
                        await _store.aexecute(
                            cur, _store.bump(POSTGRES, self._state.counters.scope, deltas)
                        )
                except Exception as exc:
                    mapped = (translate and translate(exc)) or _base.missing_schema(exc)
                    if mapped is not None:
                        raise mapped from exc
                    raise
            self._state.schema_checked = self._state.schema_checked or check
            return result

        return await acall_with_retry(
            attempt, backoff=self._state.backoff, on_failure=self._on_failure(failed)
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

    # -- checkpoints and writes ----------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint in one transaction; refuse one that would fork the thread.

        Raises:
            CheckpointConflict: another process moved the thread past this
                checkpoint's parent.
        """
        put = pg_put(self, config, checkpoint, metadata, new_versions)
        await self._run(
            lambda: pg_put_statements(self, put),
            ok=_store.CHECKPOINT_OK,
            failed=_store.CHECKPOINT_FAILED,
            translate=fork_translator(put),
            pipeline=True,
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
        sql, rows = pg_write_rows(self, config, writes, task_id, task_path)
        await self._run(
            lambda: _store.put_writes(sql, rows),
            ok=_store.WRITES_OK,
            failed=_store.WRITES_FAILED,
            pipeline=True,
        )

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """As `AsyncPostgresSaver.aget_tuple`; an undecodable row raises `CheckpointCorrupt`."""
        try:
            return await self._call(
                lambda: super(AsyncResilientPostgresSaver, self).aget_tuple(config)
            )
        except Exception as exc:
            thread_id, ns, checkpoint_id = _base.thread_key(config)
            if checkpoint_id is None and not is_store_error(exc):
                checkpoint_id = await self._run(
                    lambda: _store.locate_checkpoint(POSTGRES, thread_id, ns)
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
        """As `AsyncPostgresSaver.alist`; an undecodable row raises `CheckpointCorrupt`."""
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
        return await self._run(lambda: _store.read_counters(POSTGRES, self._state.counters))

    # -- thread maintenance ----------------------------------------------------

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints, blobs, writes and resilience rows."""
        await self._run(lambda: _store.delete_threads(POSTGRES, [str(thread_id)]))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints, blobs, writes and resilience rows.

        Raises:
            ConfigError: the target thread already has checkpoints.
        """
        await self._run(lambda: _store.copy_thread(POSTGRES, source_thread_id, target_thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (with writes, freed blobs, resilience rows) of runs."""
        await self._run(lambda: _store.delete_for_runs(POSTGRES, run_ids))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """LangGraph's prune, extended to the resilience rows.

        Raises:
            ConfigError: unknown strategy, or a single str for ``thread_ids``.
            NotImplementedError: ``keep_latest`` on a thread using a DeltaChannel.
        """
        ids = _store.check_prune_args(thread_ids, strategy)
        if not ids:
            return
        if strategy == "delete":
            await self._run(lambda: _store.delete_threads(POSTGRES, ids))
            return
        await self._call(
            lambda: super(AsyncResilientPostgresSaver, self).aprune(ids, strategy=strategy)
        )
        await self._run(lambda: _store.delete_orphans(POSTGRES, ids))

    # Sync bridges for the methods AsyncPostgresSaver lacks.
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
