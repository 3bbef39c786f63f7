"""The saver methods both dialects share: one mixin for the sync savers, its twin
for the async ones.

A saver class puts its mixin before LangGraph's saver in its bases
(``class ResilientSqliteSaver(SyncResilience, SqliteSaver)``) and supplies the
dialect's I/O: ``_run`` (a statement list in one transaction, retried), ``_read``
(a statement list, retried), ``_call`` (a LangGraph method, retried), the rows of
a checkpoint and of writes, and ``_keep_latest``.
"""

from __future__ import annotations

import asyncio
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Coroutine,
    Generator,
    Iterator,
    Sequence,
)
from typing import Any, ClassVar, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from langgraph_resilience.checkpoint import _base, _store
from langgraph_resilience.checkpoint._retry import is_store_error
from langgraph_resilience.checkpoint._store import Dialect, PutCheckpoint, Statements

T = TypeVar("T")
WriteRows = tuple[str, list[tuple[Any, ...]]]


def next_config(config: RunnableConfig, put: PutCheckpoint) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": config["configurable"]["thread_id"],
            "checkpoint_ns": put.ns,
            "checkpoint_id": put.checkpoint_id,
        }
    }


def fork_translator(put: PutCheckpoint) -> _base.Translate:
    """Maps the Postgres fork guard's error to `CheckpointConflict` (SQLite raises it)."""
    return lambda exc: _store.fork_conflict(
        exc, put.thread_id, put.ns, put.parent_id or "", put.checkpoint_id
    )


class _Hooks(BaseCheckpointSaver[str]):
    """What a dialect supplies (pure parts; the I/O hooks are on each mixin)."""

    _dialect: ClassVar[Dialect]
    _state: _base.SaverState

    def _prepare_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> PutCheckpoint:
        raise NotImplementedError

    def _put_statements(self, put: PutCheckpoint) -> Statements[None]:
        return _store.put_checkpoint(self._dialect, put)

    def defer_outcome(self, thread_id: str, key: str, fields: _store.OutcomeFields) -> None:
        """Store an effect's outcome with this saver's next write (no I/O now).

        See `_store.PendingOutcomes` for when that is and what a crash before it
        means; reads of this saver see the outcome at once.
        """
        self._state.outcomes.add(thread_id, key, fields)

    def _write_rows(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> WriteRows:
        raise NotImplementedError


class SyncResilience(_Hooks):
    """put, put_writes, reads and thread maintenance of the sync savers."""

    def _run(
        self,
        statements: Callable[[], Statements[T]],
        *,
        ok: str | None = None,
        failed: str | None = None,
        translate: _base.Translate | None = None,
        pipeline: bool = False,
        flush: bool = False,
        relaxed: bool = False,
    ) -> T:
        raise NotImplementedError

    def _read(self, statements: Callable[[], Statements[T]]) -> T:
        raise NotImplementedError

    def _call(self, op: Callable[[], T]) -> T:
        raise NotImplementedError

    def _keep_latest(self, thread_ids: list[str]) -> None:
        raise NotImplementedError

    def put(
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
        put = self._prepare_put(config, checkpoint, metadata, new_versions)
        fence = _base.fence_of(config)
        self._run(
            lambda: _store.fenced(self._dialect, fence, self._put_statements(put)),
            ok=_store.CHECKPOINT_OK,
            failed=_store.CHECKPOINT_FAILED,
            translate=_base.fenced_translate(fence, fork_translator(put)),
            pipeline=True,
        )
        return next_config(config, put)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes, retrying transient store errors."""
        sql, rows = self._write_rows(config, writes, task_id, task_path)
        fence = _base.fence_of(config)
        self._run(
            lambda: _store.fenced(self._dialect, fence, _store.put_writes(sql, rows)),
            ok=_store.WRITES_OK,
            failed=_store.WRITES_FAILED,
            translate=_base.fenced_translate(fence),
            pipeline=True,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """As LangGraph's `get_tuple`; an undecodable row raises `CheckpointCorrupt`."""
        try:
            return self._call(lambda: super(SyncResilience, self).get_tuple(config))
        except Exception as exc:
            thread_id, ns, checkpoint_id = _base.thread_key(config)
            if checkpoint_id is None and not is_store_error(exc):
                d = self._dialect
                checkpoint_id = self._read(lambda: _store.locate_checkpoint(d, thread_id, ns))
            raise _base.corrupt(config, checkpoint_id, exc) from exc

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """As LangGraph's `list`; an undecodable row raises `CheckpointCorrupt`."""
        listed = cast(
            Generator[CheckpointTuple, None, None],
            super().list(config, filter=filter, before=before, limit=limit),
        )
        while True:
            try:
                item = next(listed)
            except StopIteration:
                return
            except Exception as exc:
                listed.close()
                raise _base.corrupt(config, None, exc) from exc
            yield item

    def flush_counters(self) -> None:
        """Store the save counts and effect outcomes this saver holds in memory (run on
        close)."""
        self._run(_store.no_statements, flush=True)

    def read_counters(self) -> dict[str, int]:
        """Checkpoint and write tries stored so far, summed over every process."""
        return self._read(lambda: _store.read_counters(self._dialect, self._state.counters))

    def record_attempt(
        self,
        key: tuple[str, str, str, str],
        record: _store.AttemptRecord,
        started_at: float,
        fence: _store.Fence | None = None,
    ) -> None:
        """Store a failed try of a task (thread, ns, checkpoint, task)."""
        self._run(
            lambda: _store.fenced(
                self._dialect, fence, _store.record_attempt(self._dialect, key, record, started_at)
            ),
            translate=_base.fenced_translate(fence),
        )

    def node_attempts(self, key: tuple[str, str, str, str]) -> Sequence[_store.AttemptRecord]:
        """The failed tries stored for a task (thread, ns, checkpoint, task)."""
        return self._read(lambda: _store.read_attempts(self._dialect, key))

    def read_effect(self, thread_id: str, key: str) -> _store.EffectRecord | None:
        """The record of one side effect (with its outcome if one waits), or None."""
        found = self._read(lambda: _store.read_effect(self._dialect, thread_id, key))
        return found and self._state.outcomes.overlay(thread_id, [found])[0]

    def record_intent(
        self,
        thread_id: str,
        record: _store.EffectRecord,
        args_digest: str | None,
        fence: _store.Fence | None = None,
    ) -> None:
        """Store an effect's intent durably, before the call."""
        intent = _store.record_intent
        self._run(
            lambda: _store.fenced(
                self._dialect, fence, intent(self._dialect, thread_id, record, args_digest)
            ),
            translate=_base.fenced_translate(fence),
            pipeline=True,
        )

    def record_outcome(
        self,
        thread_id: str,
        key: str,
        fields: _store.OutcomeFields,
        fence: _store.Fence | None = None,
    ) -> None:
        """Store an effect's outcome (or error) after the call, at once."""
        outcome = _store.record_outcome
        self._run(
            lambda: _store.fenced(
                self._dialect, fence, outcome(self._dialect, thread_id, key, fields)
            ),
            translate=_base.fenced_translate(fence),
            pipeline=True,
            relaxed=True,
        )

    def list_effects(self, thread_id: str) -> Sequence[_store.EffectRecord]:
        """A thread's side effects: key, name, intent and outcome times, status."""
        found = self._read(lambda: _store.list_effects(self._dialect, str(thread_id)))
        return self._state.outcomes.overlay(str(thread_id), found)

    # -- runs and leases (the store side of `Worker`) ---------------------------

    def submit_run(
        self,
        run_id: str,
        thread_id: str,
        input_: tuple[str, bytes] | None,
        budget: tuple[str, bytes] | None,
    ) -> None:
        """Queue a run of a thread (see `Worker.submit`)."""
        return self._run(
            lambda: _store.submit_run(self._dialect, run_id, thread_id, input_, budget),
            translate=lambda exc: _store.open_run_conflict(exc, thread_id),
        )

    def claim_runs(self, owner: str, limit: int, lease_ttl: float) -> Sequence[_store.RunRecord]:
        """Claim up to ``limit`` queued or lease-expired runs for ``owner``."""
        return self._run(lambda: _store.claim_runs(self._dialect, owner, limit, lease_ttl))

    def renew_leases(
        self, owner: str, fences: Sequence[_store.Fence], lease_ttl: float
    ) -> Sequence[str]:
        """Extend ``owner``'s leases; returns the run ids it still holds."""
        return self._run(lambda: _store.renew_leases(self._dialect, owner, fences, lease_ttl))

    def finish_run(
        self, fence: _store.Fence, status: str, outcome: tuple[str, bytes] | None
    ) -> bool:
        """End, pause or release a held run; False if its lease was lost."""
        return self._run(lambda: _store.finish_run(self._dialect, fence, status, outcome))

    def requeue_run(self, run_id: str, budget: tuple[str, bytes] | None) -> bool:
        """Queue a paused run again, with a new budget if given."""
        return self._run(lambda: _store.requeue_run(self._dialect, run_id, budget))

    def read_run(self, run_id: str) -> _store.RunRecord | None:
        """A run: status, claims, owner, lease expiry, fencing token, outcome."""
        return self._read(lambda: _store.read_run(self._dialect, str(run_id)))

    def list_runs(self, statuses: Sequence[str] = ()) -> Sequence[_store.RunRecord]:
        """Runs, oldest first; only those in ``statuses`` if given."""
        return self._read(lambda: _store.list_runs(self._dialect, statuses))

    def open_runs(self) -> int:
        """How many runs are queued or running."""
        return self._read(lambda: _store.open_runs(self._dialect))

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints, writes (and blobs) and resilience rows."""
        self._run(lambda: _store.delete_threads(self._dialect, [str(thread_id)]))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints, writes (and blobs) and resilience rows.

        Raises:
            ConfigError: the target thread already has checkpoints.
        """
        self._run(lambda: _store.copy_thread(self._dialect, source_thread_id, target_thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (with writes, freed blobs, resilience rows) of runs."""
        self._run(lambda: _store.delete_for_runs(self._dialect, run_ids))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only the latest checkpoint per namespace, or delete the threads.

        The resilience rows of deleted checkpoints go with them.

        Raises:
            ConfigError: unknown strategy, or a single str for ``thread_ids``.
            NotImplementedError: ``keep_latest`` on a thread using a DeltaChannel.
        """
        ids = _store.check_prune_args(thread_ids, strategy)
        if not ids:
            return
        if strategy == "delete":
            self._run(lambda: _store.delete_threads(self._dialect, ids))
        else:
            self._keep_latest(ids)


class AsyncResilience(_Hooks):
    """The async twin of `SyncResilience`, with sync bridges for the new methods."""

    loop: asyncio.AbstractEventLoop

    async def _run(
        self,
        statements: Callable[[], Statements[T]],
        *,
        ok: str | None = None,
        failed: str | None = None,
        translate: _base.Translate | None = None,
        pipeline: bool = False,
        flush: bool = False,
        relaxed: bool = False,
    ) -> T:
        raise NotImplementedError

    async def _read(self, statements: Callable[[], Statements[T]]) -> T:
        raise NotImplementedError

    async def _call(self, op: Callable[[], Coroutine[Any, Any, T]]) -> T:
        raise NotImplementedError

    async def _keep_latest(self, thread_ids: list[str]) -> None:
        raise NotImplementedError

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
        put = self._prepare_put(config, checkpoint, metadata, new_versions)
        fence = _base.fence_of(config)
        await self._run(
            lambda: _store.fenced(self._dialect, fence, self._put_statements(put)),
            ok=_store.CHECKPOINT_OK,
            failed=_store.CHECKPOINT_FAILED,
            translate=_base.fenced_translate(fence, fork_translator(put)),
            pipeline=True,
        )
        return next_config(config, put)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes, retrying transient store errors."""
        sql, rows = self._write_rows(config, writes, task_id, task_path)
        fence = _base.fence_of(config)
        await self._run(
            lambda: _store.fenced(self._dialect, fence, _store.put_writes(sql, rows)),
            ok=_store.WRITES_OK,
            failed=_store.WRITES_FAILED,
            translate=_base.fenced_translate(fence),
            pipeline=True,
        )

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """As LangGraph's `aget_tuple`; an undecodable row raises `CheckpointCorrupt`."""
        try:
            return await self._call(lambda: super(AsyncResilience, self).aget_tuple(config))
        except Exception as exc:
            thread_id, ns, checkpoint_id = _base.thread_key(config)
            if checkpoint_id is None and not is_store_error(exc):
                d = self._dialect
                checkpoint_id = await self._read(lambda: _store.locate_checkpoint(d, thread_id, ns))
            raise _base.corrupt(config, checkpoint_id, exc) from exc

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """As LangGraph's `alist`; an undecodable row raises `CheckpointCorrupt`."""
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
        """Store the save counts and effect outcomes this saver holds in memory (run on
        close)."""
        await self._run(_store.no_statements, flush=True)

    async def aread_counters(self) -> dict[str, int]:
        """Checkpoint and write tries stored so far, summed over every process."""
        return await self._read(lambda: _store.read_counters(self._dialect, self._state.counters))

    async def arecord_attempt(
        self,
        key: tuple[str, str, str, str],
        record: _store.AttemptRecord,
        started_at: float,
        fence: _store.Fence | None = None,
    ) -> None:
        """Store a failed try of a task (thread, ns, checkpoint, task)."""
        await self._run(
            lambda: _store.fenced(
                self._dialect, fence, _store.record_attempt(self._dialect, key, record, started_at)
            ),
            translate=_base.fenced_translate(fence),
        )

    async def anode_attempts(
        self, key: tuple[str, str, str, str]
    ) -> Sequence[_store.AttemptRecord]:
        """The failed tries stored for a task (thread, ns, checkpoint, task)."""
        return await self._read(lambda: _store.read_attempts(self._dialect, key))

    async def aread_effect(self, thread_id: str, key: str) -> _store.EffectRecord | None:
        """The record of one side effect (with its outcome if one waits), or None."""
        found = await self._read(lambda: _store.read_effect(self._dialect, thread_id, key))
        return found and self._state.outcomes.overlay(thread_id, [found])[0]

    async def arecord_intent(
        self,
        thread_id: str,
        record: _store.EffectRecord,
        args_digest: str | None,
        fence: _store.Fence | None = None,
    ) -> None:
        """Store an effect's intent durably, before the call."""
        intent = _store.record_intent
        await self._run(
            lambda: _store.fenced(
                self._dialect, fence, intent(self._dialect, thread_id, record, args_digest)
            ),
            translate=_base.fenced_translate(fence),
            pipeline=True,
        )

    async def arecord_outcome(
        self,
        thread_id: str,
        key: str,
        fields: _store.OutcomeFields,
        fence: _store.Fence | None = None,
    ) -> None:
        """Store an effect's outcome (or error) after the call, at once."""
        outcome = _store.record_outcome
        await self._run(
            lambda: _store.fenced(
                self._dialect, fence, outcome(self._dialect, thread_id, key, fields)
            ),
            translate=_base.fenced_translate(fence),
            pipeline=True,
            relaxed=True,
        )

    async def alist_effects(self, thread_id: str) -> Sequence[_store.EffectRecord]:
        """A thread's side effects: key, name, intent and outcome times, status."""
        found = await self._read(lambda: _store.list_effects(self._dialect, str(thread_id)))
        return self._state.outcomes.overlay(str(thread_id), found)

    # -- runs and leases (the store side of `Worker`) ---------------------------

    async def asubmit_run(
        self,
        run_id: str,
        thread_id: str,
        input_: tuple[str, bytes] | None,
        budget: tuple[str, bytes] | None,
    ) -> None:
        """Queue a run of a thread (see `Worker.submit`)."""
        return await self._run(
            lambda: _store.submit_run(self._dialect, run_id, thread_id, input_, budget),
            translate=lambda exc: _store.open_run_conflict(exc, thread_id),
        )

    async def aclaim_runs(
        self, owner: str, limit: int, lease_ttl: float
    ) -> Sequence[_store.RunRecord]:
        """Claim up to ``limit`` queued or lease-expired runs for ``owner``."""
        return await self._run(lambda: _store.claim_runs(self._dialect, owner, limit, lease_ttl))

    async def arenew_leases(
        self, owner: str, fences: Sequence[_store.Fence], lease_ttl: float
    ) -> Sequence[str]:
        """Extend ``owner``'s leases; returns the run ids it still holds."""
        return await self._run(lambda: _store.renew_leases(self._dialect, owner, fences, lease_ttl))

    async def afinish_run(
        self, fence: _store.Fence, status: str, outcome: tuple[str, bytes] | None
    ) -> bool:
        """End, pause or release a held run; False if its lease was lost."""
        return await self._run(lambda: _store.finish_run(self._dialect, fence, status, outcome))

    async def arequeue_run(self, run_id: str, budget: tuple[str, bytes] | None) -> bool:
        """Queue a paused run again, with a new budget if given."""
        return await self._run(lambda: _store.requeue_run(self._dialect, run_id, budget))

    async def aread_run(self, run_id: str) -> _store.RunRecord | None:
        """A run: status, claims, owner, lease expiry, fencing token, outcome."""
        return await self._read(lambda: _store.read_run(self._dialect, str(run_id)))

    async def alist_runs(self, statuses: Sequence[str] = ()) -> Sequence[_store.RunRecord]:
        """Runs, oldest first; only those in ``statuses`` if given."""
        return await self._read(lambda: _store.list_runs(self._dialect, statuses))

    async def aopen_runs(self) -> int:
        """How many runs are queued or running."""
        return await self._read(lambda: _store.open_runs(self._dialect))

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints, writes (and blobs) and resilience rows."""
        await self._run(lambda: _store.delete_threads(self._dialect, [str(thread_id)]))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints, writes (and blobs) and resilience rows.

        Raises:
            ConfigError: the target thread already has checkpoints.
        """
        await self._run(
            lambda: _store.copy_thread(self._dialect, source_thread_id, target_thread_id)
        )

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (with writes, freed blobs, resilience rows) of runs."""
        await self._run(lambda: _store.delete_for_runs(self._dialect, run_ids))

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
            await self._run(lambda: _store.delete_threads(self._dialect, ids))
        else:
            await self._keep_latest(ids)

    # Sync bridges, as LangGraph's async savers have for their other methods.
    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._bridge(self.acopy_thread(source_thread_id, target_thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._bridge(self.adelete_for_runs(run_ids))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._bridge(self.aprune(thread_ids, strategy=strategy))

    def read_counters(self) -> dict[str, int]:
        return self._bridge(self.aread_counters())

    def record_attempt(
        self,
        key: tuple[str, str, str, str],
        record: _store.AttemptRecord,
        started_at: float,
        fence: _store.Fence | None = None,
    ) -> None:
        self._bridge(self.arecord_attempt(key, record, started_at, fence))

    def node_attempts(self, key: tuple[str, str, str, str]) -> Sequence[_store.AttemptRecord]:
        return self._bridge(self.anode_attempts(key))

    def read_effect(self, thread_id: str, key: str) -> _store.EffectRecord | None:
        return self._bridge(self.aread_effect(thread_id, key))

    def record_intent(
        self,
        thread_id: str,
        record: _store.EffectRecord,
        args_digest: str | None,
        fence: _store.Fence | None = None,
    ) -> None:
        self._bridge(self.arecord_intent(thread_id, record, args_digest, fence))

    def record_outcome(
        self,
        thread_id: str,
        key: str,
        fields: _store.OutcomeFields,
        fence: _store.Fence | None = None,
    ) -> None:
        self._bridge(self.arecord_outcome(thread_id, key, fields, fence))

    def list_effects(self, thread_id: str) -> Sequence[_store.EffectRecord]:
        return self._bridge(self.alist_effects(thread_id))

    def flush_counters(self) -> None:
        self._bridge(self.aflush_counters())

    def submit_run(
        self,
        run_id: str,
        thread_id: str,
        input_: tuple[str, bytes] | None,
        budget: tuple[str, bytes] | None,
    ) -> None:
        return self._bridge(self.asubmit_run(run_id, thread_id, input_, budget))

    def claim_runs(self, owner: str, limit: int, lease_ttl: float) -> Sequence[_store.RunRecord]:
        return self._bridge(self.aclaim_runs(owner, limit, lease_ttl))

    def renew_leases(
        self, owner: str, fences: Sequence[_store.Fence], lease_ttl: float
    ) -> Sequence[str]:
        return self._bridge(self.arenew_leases(owner, fences, lease_ttl))

    def finish_run(
        self, fence: _store.Fence, status: str, outcome: tuple[str, bytes] | None
    ) -> bool:
        return self._bridge(self.afinish_run(fence, status, outcome))

    def requeue_run(self, run_id: str, budget: tuple[str, bytes] | None) -> bool:
        return self._bridge(self.arequeue_run(run_id, budget))

    def read_run(self, run_id: str) -> _store.RunRecord | None:
        return self._bridge(self.aread_run(run_id))

    def list_runs(self, statuses: Sequence[str] = ()) -> Sequence[_store.RunRecord]:
        return self._bridge(self.alist_runs(statuses))

    def open_runs(self) -> int:
        return self._bridge(self.aopen_runs())

    def _bridge(self, coro: Coroutine[Any, Any, T]) -> T:
        return _base.bridge(coro, self.loop, type(self).__name__)
