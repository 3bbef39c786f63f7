"""`AsyncResilientRedisSaver`: the async twin of `ResilientRedisSaver` (the same
operations, `_ops`, driven with ``await``; the sync methods bridge to its loop,
as LangGraph's async savers do)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, ClassVar

import redis
import redis.asyncio as aredis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

import langgraph_resilience.checkpoint.redis.ledger._runs as _runs
from langgraph_resilience.checkpoint.archive._moves import ArchiveReport
from langgraph_resilience.checkpoint.archive._objects import Archive
from langgraph_resilience.checkpoint.archive._sizes import DEFAULT_WARN_BYTES
from langgraph_resilience.checkpoint.ledger._ledger import EffectRecord
from langgraph_resilience.checkpoint.redis.ledger._effects_parts import (
    AsyncRedisAttempts,
    AsyncRedisEffects,
)
from langgraph_resilience.checkpoint.redis.ledger._limits_parts import AsyncRedisLimits
from langgraph_resilience.checkpoint.redis.ledger._runs_saver import AsyncRunsSaver
from langgraph_resilience.checkpoint.redis.runlog import _steps
from langgraph_resilience.checkpoint.redis.runlog._runlog_parts import AsyncRedisHistory
from langgraph_resilience.checkpoint.redis.store import _ops
from langgraph_resilience.checkpoint.redis.store._common import (
    DEFAULT_TTL,
    RedisCommon,
    check_version,
    config_reply,
    judge,
)
from langgraph_resilience.checkpoint.redis.store._counts import counted, read_counts
from langgraph_resilience.checkpoint.redis.store._driver import ALL_SCRIPTS, adrive, aretried
from langgraph_resilience.checkpoint.redis.store._durability import Durability
from langgraph_resilience.checkpoint.redis.store._ops import Ops, T
from langgraph_resilience.checkpoint.redis.store._tier import Archived, pack_dumps, unpack_dumps
from langgraph_resilience.checkpoint.runlog import _run_end, _run_log
from langgraph_resilience.checkpoint.saver import _threads
from langgraph_resilience.checkpoint.saver._base import aflush_quietly
from langgraph_resilience.checkpoint.store._counters import (
    CHECKPOINT_FAILED,
    CHECKPOINT_OK,
    WRITES_FAILED,
)
from langgraph_resilience.errors import ArchiveError
from langgraph_resilience.policy import Backoff

__all__ = ["AsyncResilientRedisSaver"]


class AsyncResilientRedisSaver(AsyncRunsSaver, RedisCommon):
    """The async twin of `ResilientRedisSaver` (same arguments; ``conn`` is a
    ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``).

    Example:
        >>> async with AsyncResilientRedisSaver.from_conn_string("redis://127.0.0.1") as s:
        ...     await s.setup()  # doctest: +SKIP
    """

    def __init__(
        self,
        conn: aredis.Redis | aredis.RedisCluster,
        *,
        prefix: str = "lgr",
        ttl: float | timedelta | None = DEFAULT_TTL,
        store_retry: Backoff | None = None,
        serde: SerializerProtocol | None = None,
        archive: Archive | str | None = None,
        warn_checkpoint_bytes: int | None = DEFAULT_WARN_BYTES,
        max_checkpoint_bytes: int | None = None,
    ) -> None:
        super().__init__(
            conn,
            prefix=prefix,
            ttl=ttl,
            store_retry=store_retry,
            serde=serde,
            archive=archive,
            warn_checkpoint_bytes=warn_checkpoint_bytes,
            max_checkpoint_bytes=max_checkpoint_bytes,
        )
        self.loop = asyncio.get_running_loop()

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, **kwargs: Any
    ) -> AsyncIterator[AsyncResilientRedisSaver]:
        """A saver on a new client for a ``redis://`` URL."""
        conn = aredis.Redis.from_url(conn_string, decode_responses=False)
        try:
            saver = cls(conn, **kwargs)
            yield saver
            await aflush_quietly(saver._state, saver.effects.aflush)  # outcomes written behind
        finally:
            await conn.aclose()

    _effects_type: ClassVar[type[AsyncRedisEffects]] = AsyncRedisEffects
    _attempts_type: ClassVar[type[AsyncRedisAttempts]] = AsyncRedisAttempts
    _limits_type: ClassVar[type[AsyncRedisLimits]] = AsyncRedisLimits

    @property
    def effects(self) -> AsyncRedisEffects:
        """The side-effect ledger, with the a-prefixed methods."""
        return self._effects_type(self)

    @property
    def attempts(self) -> AsyncRedisAttempts:
        """The failed tries of tasks, with the a-prefixed methods."""
        return self._attempts_type(self)

    @property
    def limits(self) -> AsyncRedisLimits:
        """Shared limits, with the a-prefixed methods."""
        return self._limits_type(self)

    async def alist_effects(self, thread_id: str) -> Sequence[EffectRecord]:
        """Async twin of `list_effects`."""
        return await self.effects.alisted(str(thread_id))

    async def _run(self, op: Ops[T], failed: str | None = None) -> T:
        return await adrive(self.conn, op, self.backoff, self.target, self._failed(failed))

    async def _drive(self, make: Callable[[], Ops[T]], failed: str | None = None) -> T:
        """As `ResilientRedisSaver._drive`."""
        while True:
            try:
                return await self._run(make(), failed)
            except Archived as found:
                await self._restore(found.thread_id)

    async def _restore(self, thread_id: str) -> None:
        key = await self._run(_ops.archived_object(self.place, thread_id))
        if key is not None:
            archive = self._archive_for(thread_id)
            try:
                body = await archive.aread(key)
            except ArchiveError:
                if await self._run(_ops.archived_object(self.place, thread_id)) != key:
                    return  # another client restored it (and dropped the object) first
                raise
            if await self._run(_ops.restore(self.place, thread_id, unpack_dumps(body))):
                await archive.adrop([key])

    async def aarchive_idle(
        self,
        older_than: float | timedelta | None = None,
        *,
        limit: int = 1000,
        thread_ids: Sequence[str] = (),
    ) -> ArchiveReport:
        """As `ResilientRedisSaver.archive_idle`."""
        idle = self._idle_ms(older_than)
        archive = self._archive_for("")
        threads = list(thread_ids) or await self._run(_ops.idle_threads(self.place, idle, limit))
        report = ArchiveReport(archived=[], skipped=[], failed={})
        for thread_id in threads:
            dumps = await self._run(_ops.dump_thread(self.place, thread_id))
            if dumps is None:
                continue
            key = self._object_key(thread_id)
            try:
                await archive.aput_new(key, pack_dumps(dumps))
            except ArchiveError as exc:
                report.failed[thread_id] = exc
                continue
            if await self._run(_ops.demote(self.place, thread_id, key, dumps)):
                report.archived.append(thread_id)
            else:  # written meanwhile: it stays hot
                report.skipped.append(thread_id)
                await archive.adrop([key])
        return report

    async def arestore_thread(self, thread_id: str) -> bool:
        """Bring a demoted thread back now (reads and writes do it themselves);
        False: it was not in the cold tier."""
        if await self._run(_ops.archived_object(self.place, thread_id)) is None:
            return False
        await self._restore(thread_id)
        return True

    async def setup(self) -> Durability:
        """As `ResilientRedisSaver.setup`."""
        config = await aretried(self._server_config, self.backoff, self.target)
        self.durability = judge(config, self.target)
        return self.durability

    async def _server_config(self) -> dict[str, str] | None:
        """As `ResilientRedisSaver._server_config`."""
        check_version(await self.conn.info("server"), self.target)
        for script in ALL_SCRIPTS:
            await self.conn.script_load(script.source)
        try:
            return config_reply(
                await self.conn.config_get("append*") | await self.conn.config_get("save")
            )
        except redis.ResponseError:
            return None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._drive(lambda: _ops.get_tuple(self.place, self.serde, config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        op = lambda: _ops.list_(  # noqa: E731
            self.place, self.serde, config, filter=filter, before=before, limit=limit
        )
        for found in await self._drive(op):
            yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; a second put of a stored one is a no-op (it keeps the first)."""
        return await self._aput(config, checkpoint, metadata, new_versions, replace=False)

    async def areplace_checkpoint(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint again under its own id, replacing it (`ReplacingSaver`):
        `aput`'s script but for the no-op (`_scripts.REPLACE`), under the same
        fencing, cold-tier restore and checksum; its writes stay."""
        return await self._aput(config, checkpoint, metadata, new_versions, replace=True)

    async def _aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        *,
        replace: bool,
    ) -> RunnableConfig:
        self._refuse_after_stop(config)  # the checkpoint after a lease-stopped step
        led = self._put_ledger(config, checkpoint, metadata, new_versions)
        led = await _run_end.aend_checked(led, config, checkpoint, metadata, self.alist)
        with counted(self._state.counters, CHECKPOINT_OK) as counts:
            op = lambda: self._riding(  # noqa: E731
                _ops.put(
                    self.place,
                    self.serde,
                    config,
                    checkpoint,
                    metadata,
                    new_versions,
                    led,
                    counts,
                    replace=replace,
                )
            )
            if not _ops.decides_rows(led):
                done = await self._drive(op, CHECKPOINT_FAILED)
            else:
                async with self.place.aledger_lock(str(config["configurable"]["thread_id"])):
                    done = await self._drive(op, CHECKPOINT_FAILED)
        _run_log.stored_put(config, led)  # the invoke's scope: its run, its end
        return done

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        led = _steps.step_of_writes(config, writes, task_id, self.serde)
        try:
            if self._lease_stop(config, writes):  # a step stopped, not failed
                return
            with self._counted_writes(writes) as counts:
                op = lambda: self._riding(  # noqa: E731
                    _ops.put_writes(
                        self.place, self.serde, config, writes, task_id, task_path, led, counts
                    )
                )
                if not _ops.decides_rows(led):
                    await self._drive(op, WRITES_FAILED)
                else:
                    async with self.place.aledger_lock(str(config["configurable"]["thread_id"])):
                        await self._drive(op, WRITES_FAILED)
        finally:
            _steps.landed(config, task_id)  # its step, if any, is the store's to list

    async def aread_counters(self, since: float | None = None) -> dict[str, int]:
        """Async twin of `ResilientRedisSaver.read_counters`."""
        return await self._run(read_counts(self.place, self._state.counters, since))

    def read_counters(self, since: float | None = None) -> dict[str, int]:
        return self._bridge(self.aread_counters(since))

    @property
    def history(self) -> AsyncRedisHistory:
        """The run ledger (`_runlog_parts`), with the a-prefixed methods."""
        return AsyncRedisHistory(self)

    async def astep_history(
        self, thread_id: str, *, run: int | None = None
    ) -> Sequence[dict[str, Any]]:
        """Async twin of `step_history`."""
        return await self._drive(lambda: _steps.step_history(self.place, str(thread_id), run))

    def step_history(self, thread_id: str, *, run: int | None = None) -> Sequence[dict[str, Any]]:
        return self._bridge(self.astep_history(thread_id, run=run))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._run(_runs.drop_threads(self.place, [str(thread_id)]))  # its runs first
        demoted = await self._drive(lambda: _ops.delete_thread(self.place, str(thread_id)))
        if demoted is not None and self.archive is not None:
            await self.archive.adrop([demoted])

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._drive(lambda: _ops.delete_for_runs(self.place, run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._drive(
            lambda: _ops.copy_thread(self.place, str(source_thread_id), str(target_thread_id))
        )

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy in _threads.DELETE_STRATEGIES:
            await self._run(
                _runs.drop_threads(self.place, _threads.check_prune_args(thread_ids, strategy))
            )
        await self._drive(lambda: _ops.prune(self.place, thread_ids, strategy))

    # -- the sync methods, on the saver's loop (from another thread) -------------------

    def _bridge(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            if asyncio.get_running_loop() is self.loop:
                coro.close()
                raise asyncio.InvalidStateError(
                    "synchronous calls to AsyncResilientRedisSaver are only allowed from "
                    "another thread than its event loop's; use the a-prefixed methods"
                )
        except RuntimeError:
            pass
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._bridge(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        op = lambda: _ops.list_(  # noqa: E731
            self.place, self.serde, config, filter=filter, before=before, limit=limit
        )
        yield from self._bridge(self._drive(op))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._bridge(self.aput(config, checkpoint, metadata, new_versions))

    def replace_checkpoint(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._bridge(self.areplace_checkpoint(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._bridge(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._bridge(self.adelete_thread(thread_id))
