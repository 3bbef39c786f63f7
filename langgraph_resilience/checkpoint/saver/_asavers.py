"""The mixin of the async savers: the async twin of `_savers.SyncResilience`, with
sync bridges for the methods LangGraph's async savers do not bridge themselves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ClassVar, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from typing_extensions import Unpack

from langgraph_resilience._store_errors import is_store_error
from langgraph_resilience._util._plans import Plan
from langgraph_resilience.checkpoint.archive._methods import AsyncArchival
from langgraph_resilience.checkpoint.ledger import _ledger, _runs
from langgraph_resilience.checkpoint.ledger._ledger import EffectRecord
from langgraph_resilience.checkpoint.ledger._runs import Fence, RunRecord
from langgraph_resilience.checkpoint.runlog import _run_end, _run_log, _run_log_reads, _scope
from langgraph_resilience.checkpoint.runlog._history import AsyncHistory
from langgraph_resilience.checkpoint.saver import _base, _threads
from langgraph_resilience.checkpoint.saver._interfaces import AsyncAttempts, AsyncEffects, AsyncRuns
from langgraph_resilience.checkpoint.saver._parts import Interface
from langgraph_resilience.checkpoint.saver._savers import PUT, WRITES, Hooks, Transaction
from langgraph_resilience.checkpoint.store import _counters
from langgraph_resilience.checkpoint.store._store import Statements, no_statements
from langgraph_resilience.checkpoint.store._store_retry import Translate

T = TypeVar("T")


class AsyncResilience(Hooks, AsyncArchival):
    """The async twin of `SyncResilience`, with sync bridges for the README's methods
    (the interfaces bridge their own)."""

    loop: asyncio.AbstractEventLoop

    async def _transact(
        self, statements: Callable[[], Statements[T]], **options: Unpack[Transaction]
    ) -> T:
        raise NotImplementedError

    async def _query(self, statements: Callable[[], Statements[T]]) -> T:
        raise NotImplementedError

    async def _call(self, op: Callable[[], Coroutine[Any, Any, T]]) -> T:
        raise NotImplementedError

    async def _keep_latest(self, thread_ids: list[str]) -> None:
        raise NotImplementedError

    async def _write(
        self,
        statements: Callable[[], Statements[T]],
        *,
        fence: Fence | None = None,
        translate: Translate | None = None,
        **options: Any,
    ) -> T:
        """Run a write in one transaction, fenced if ``fence`` is given."""
        if fence is not None:
            statements, translate = _runs.fence_write(self._dialect, fence, statements, translate)
        return await self._transact(statements, translate=translate, **options)

    # -- checkpoints and writes -------------------------------------------------------

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
            LeaseLost: the run's worker no longer holds its lease.
        """
        put, ledger = self._checked_put(config, checkpoint, metadata, new_versions)
        # A checked put's own transaction refuses an archived thread: its end check
        # reads the hot tier, restoring nothing (a restore would let the put split it).
        listing = self._ahot_list if put.check_fork else self.alist
        ledger = await _run_end.aend_checked(ledger, config, checkpoint, metadata, listing)
        await self._write(
            lambda: self._put_and_runs(put, ledger),
            fence=_runs.fence_of(config),
            translate=put.fork_conflict,
            **PUT,
        )
        _run_log.stored_put(config, ledger)  # the invoke's scope: its run, its end
        return _threads.wrote(config, put)

    async def areplace_checkpoint(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async twin of `SyncResilience.replace_checkpoint`: `aput`."""
        return await self.aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes, retrying transient store errors (none of a step
        stopped by a lost lease: `stops_on_lost_lease`)."""
        handed = _scope.take(config, task_id)  # a step's record its node handed over
        try:
            rows = self._checked_writes(config, writes, task_id, task_path, handed)
            if rows is not None:
                await self._write(
                    lambda: self._writes_and_steps(*rows), fence=_runs.fence_of(config), **WRITES
                )
        finally:
            _scope.landed(config, task_id)  # its step, if any, is the store's to list

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """As LangGraph's `aget_tuple`; an undecodable row raises `CheckpointCorrupt`."""
        config = _base.check_config_thread(config)  # a bad id: ConfigError, not a driver's
        try:
            found = await self._call(lambda: super(AsyncResilience, self).aget_tuple(config))
            if found is None and await self._arestored(config):  # was archived: read again
                found = await self._call(lambda: super(AsyncResilience, self).aget_tuple(config))
            return _threads.saw_latest(config, found)
        except Exception as exc:
            thread_id, ns, checkpoint_id = _base.thread_key(config)
            if checkpoint_id is None and not is_store_error(exc):
                d = self._dialect
                checkpoint_id = await self._query(
                    lambda: _threads.locate_checkpoint(d, thread_id, ns)
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
        """As LangGraph's `alist` (``filter``, ``before``, ``limit``); an undecodable row
        raises `CheckpointCorrupt`."""
        async for item in self._alisting(config, filter, before, limit, restore=True):
            yield item

    def _ahot_list(
        self, config: RunnableConfig | None, *, before: RunnableConfig | None = None
    ) -> AsyncIterator[CheckpointTuple]:
        """Async twin of `SyncResilience._hot_list`."""
        return self._alisting(config, None, before, None, restore=False)

    async def _alisting(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
        *,
        restore: bool,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async twin of `SyncResilience._listing`."""
        if config is not None:
            config = _base.check_config_thread(config)
        listed = cast(
            AsyncGenerator[CheckpointTuple, None],
            super().alist(config, filter=filter, before=before, limit=limit),
        )
        found = False
        while True:
            try:
                item = await listed.__anext__()
            except StopAsyncIteration:
                if found or not restore or not await self._arestored(config):
                    return
                found = True  # was archived: list it again, once
                listed = cast(Any, super().alist(config, filter=filter, before=before, limit=limit))
                continue
            except Exception as exc:
                await listed.aclose()
                raise _base.corrupt(config, None, exc) from exc
            found = True
            yield item

    # -- counters --------------------------------------------------------------------------

    async def aflush_counters(self) -> None:
        """Store the save counts and effect outcomes this saver holds in memory (run on
        close)."""
        await self._transact(no_statements, flush=True)

    async def aread_counters(self, since: float | None = None) -> dict[str, int]:
        """Checkpoint and write tries stored so far, summed over every process
        (``since``: epoch seconds; counts are kept per hour)."""
        counters = self._state.counters
        return await self._query(lambda: _counters.read_counters(self._dialect, counters, since))

    # -- the ledgers (`_interfaces`), their sync methods bridged --------------------------

    #: The class of `effects` (a `FaultPlan` taps a subclass of it on one saver).
    _effects_type: ClassVar[type[AsyncEffects]] = AsyncEffects
    effects = Interface[AsyncEffects](
        "_effects_type", "The side-effect ledger (the store side of `side_effect`)."
    )
    attempts = Interface(
        AsyncAttempts, "The failed tries of tasks (the store side of the node wrapper)."
    )
    runs = Interface(AsyncRuns, "The run queue under leases (the store side of `Worker`).")
    history = Interface(AsyncHistory, "What `arecovery_metrics` and `arun_report` read.")

    # -- what the README documents ----------------------------------------------------

    async def alist_effects(self, thread_id: str) -> Sequence[EffectRecord]:
        """A thread's side effects: key, name, intent and outcome times, status."""
        found = await self._query(lambda: _ledger.list_effects(self._dialect, str(thread_id)))
        return self._state.outcomes.overlay(str(thread_id), found)

    async def astep_history(
        self, thread_id: str, *, run: int | None = None
    ) -> Sequence[dict[str, Any]]:
        """Async twin of `SyncResilience.step_history`."""
        d = self._dialect
        found = await self._query(lambda: _run_log_reads.read_steps(d, str(thread_id), run))
        if not found and await self._arestored({"configurable": {"thread_id": thread_id}}):
            found = await self._query(lambda: _run_log_reads.read_steps(d, str(thread_id), run))
        return found

    async def aread_run(self, run_id: str) -> RunRecord | None:
        """A run: status, claims, owner, lease expiry, fencing token, outcome."""
        return await self._query(lambda: _runs.read_run(self._dialect, str(run_id)))

    async def alist_runs(self, statuses: Sequence[str] = ()) -> Sequence[RunRecord]:
        """Runs, oldest first; only those in ``statuses`` if given."""
        return await self._query(lambda: _runs.list_runs(self._dialect, statuses))

    async def aactive_runs(self) -> int:
        """How many runs are queued or running (work some worker has to do)."""
        return await self._query(lambda: _runs.active_runs(self._dialect))

    @asynccontextmanager
    async def alease_saver(self) -> AsyncIterator[AsyncResilience]:
        """Async twin of `SyncResilience.lease_saver`: this store through a
        connection and a lock of its own, for a `Worker`'s claims, renewals and run
        ends.

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        plan = Plan(self._lease_steps(_base.AsyncConnectionPool))
        for sql in plan:
            async with cast(Any, self).lock, cast(Any, self).conn.execute(sql) as cur:
                plan.reply = await cur.fetchall()
        if not isinstance(plan.value, str):
            yield plan.value
            return
        async with cast(Any, type(self)).from_conn_string(plan.value, **self._own_options()) as own:
            yield own

    # -- thread maintenance ----------------------------------------------------------------

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints, writes (and blobs) and resilience rows."""
        await self._write(lambda: _threads.delete_threads(self._dialect, [str(thread_id)]))
        await self._adrop_archived(str(thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints, writes (and blobs) and resilience rows.

        Raises:
            ConfigError: the target thread already has checkpoints.
        """
        d = self._dialect
        await self._arestored({"configurable": {"thread_id": source_thread_id}})
        await self._write(lambda: _threads.copy_thread(d, source_thread_id, target_thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (with writes, freed blobs, resilience rows) of runs."""
        await self._write(lambda: _threads.delete_for_runs(self._dialect, run_ids))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only the latest checkpoint per namespace, or delete the threads
        (``"delete"``, or ``"delete_all"`` as Agent Server's gRPC servicer says).

        Raises:
            ConfigError: unknown strategy, or a single str for ``thread_ids``.
            NotImplementedError: ``keep_latest`` on a thread using a DeltaChannel.
        """
        ids = _threads.check_prune_args(thread_ids, strategy)
        if not ids:
            return
        if strategy in _threads.DELETE_STRATEGIES:
            await self._write(lambda: _threads.delete_threads(self._dialect, ids))
        else:
            await self._keep_latest(ids)

    # -- sync bridges, as LangGraph's async savers have for their other methods ----------

    def _bridge(self, coro: Coroutine[Any, Any, T]) -> T:
        return _base.bridge(coro, self.loop, type(self).__name__)

    def replace_checkpoint(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._bridge(self.areplace_checkpoint(config, checkpoint, metadata, new_versions))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._bridge(self.acopy_thread(source_thread_id, target_thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._bridge(self.adelete_for_runs(run_ids))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._bridge(self.aprune(thread_ids, strategy=strategy))

    def flush_counters(self) -> None:
        self._bridge(self.aflush_counters())

    def read_counters(self, since: float | None = None) -> dict[str, int]:
        return self._bridge(self.aread_counters(since))

    def list_effects(self, thread_id: str) -> Sequence[EffectRecord]:
        return self._bridge(self.alist_effects(thread_id))

    def step_history(self, thread_id: str, *, run: int | None = None) -> Sequence[dict[str, Any]]:
        return self._bridge(self.astep_history(thread_id, run=run))

    def read_run(self, run_id: str) -> RunRecord | None:
        return self._bridge(self.aread_run(run_id))

    def list_runs(self, statuses: Sequence[str] = ()) -> Sequence[RunRecord]:
        return self._bridge(self.alist_runs(statuses))

    def active_runs(self) -> int:
        return self._bridge(self.aactive_runs())

    @contextmanager
    def lease_saver(self) -> Iterator[AsyncResilience]:
        # A sync Worker on an async saver: a saver of its own would have to be
        # opened and run on this one's event loop; its calls share this saver's
        # lock instead (use `arun` to keep renewals apart from hung writes).
        yield self
