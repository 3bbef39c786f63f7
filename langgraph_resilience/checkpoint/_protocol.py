"""What the rest of the package needs of a saver: `ResilientSaver` and its async twin.

The four savers of this package satisfy both (an async saver bridges its sync
methods to its event loop, as LangGraph's async savers do). Code that needs a
resilient saver checks ``isinstance(saver, ResilientSaver)`` instead of probing
for single methods.

A resilient saver is a checkpointer with the methods the README documents; its
ledgers are typed interfaces reached from it (`_interfaces`): ``effects``,
``attempts``, ``runs`` and ``history``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_resilience.checkpoint.ledger._ledger import EffectRecord
from langgraph_resilience.checkpoint.ledger._runs import RunRecord
from langgraph_resilience.checkpoint.runlog._events import StoredAttempt
from langgraph_resilience.checkpoint.runlog._heads import Head
from langgraph_resilience.checkpoint.runlog._history import AsyncHistory, History
from langgraph_resilience.checkpoint.runlog._run_log_reads import Cursor, RunLogRecord
from langgraph_resilience.checkpoint.runlog._run_metrics import RunCounts
from langgraph_resilience.checkpoint.runlog._run_summaries import ThreadLedger
from langgraph_resilience.checkpoint.saver._interfaces import (
    AsyncAttempts,
    AsyncEffects,
    AsyncRuns,
    Attempts,
    Effects,
    Runs,
)

__all__ = [
    "AsyncEffectLedger",
    "AsyncResilientSaver",
    "AsyncRunLedger",
    "AsyncReplacingSaver",
    "AsyncRunQueueSaver",
    "AsyncSaveCounters",
    "AsyncStepLog",
    "EffectLedger",
    "ReplacingSaver",
    "ResilientSaver",
    "RunLedger",
    "RunQueueSaver",
    "SaveCounters",
    "StepLog",
]


@runtime_checkable
class ReplacingSaver(Protocol):
    """A checkpointer that stores a checkpoint again under its own id, replacing
    the one stored (its pending writes stay its own): what a versioned graph's
    upgrade needs (`graph._upgrade`), where ``put`` of an id already stored may
    keep the first (the Redis savers' does). Every saver of this package; the SQL
    savers' ``put`` replaces a row of the same id, and this is that ``put``."""

    def replace_checkpoint(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig: ...


@runtime_checkable
class AsyncReplacingSaver(Protocol):
    """The async twin of `ReplacingSaver`."""

    async def areplace_checkpoint(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig: ...


@runtime_checkable
class EffectLedger(Protocol):
    """A checkpointer that keeps the step ledger: side effects and node attempts
    (what `side_effect` and the node wrapper need; the Redis savers keep these
    without the run ledger, docs/redis.md)."""

    serde: SerializerProtocol

    @property
    def effects(self) -> Effects: ...

    @property
    def attempts(self) -> Attempts: ...

    def list_effects(self, thread_id: str) -> Sequence[EffectRecord]: ...


@runtime_checkable
class AsyncEffectLedger(Protocol):
    """The async twin of `EffectLedger`."""

    serde: SerializerProtocol

    @property
    def effects(self) -> AsyncEffects: ...

    @property
    def attempts(self) -> AsyncAttempts: ...

    async def alist_effects(self, thread_id: str) -> Sequence[EffectRecord]: ...


class StepTally(Protocol):
    """A run's loop counts and usage, from its top-level step rows."""

    def tally(self, thread_id: str, run: int) -> tuple[dict[str, int], dict[str, float]]: ...


class AsyncStepTally(Protocol):
    """The async twin of `StepTally`."""

    async def atally(self, thread_id: str, run: int) -> tuple[dict[str, int], dict[str, float]]: ...


@runtime_checkable
class StepLog(Protocol):
    """A checkpointer that keeps the run log's step rows (a node hands it its step
    record, `_scope.hand`): ``step_history`` and the run's tally. Every resilient
    saver, the Redis savers too (docs/redis.md)."""

    @property
    def history(self) -> StepTally: ...

    def step_history(
        self, thread_id: str, *, run: int | None = None
    ) -> Sequence[dict[str, Any]]: ...


@runtime_checkable
class AsyncStepLog(Protocol):
    """The async twin of `StepLog`."""

    @property
    def history(self) -> AsyncStepTally: ...

    async def astep_history(
        self, thread_id: str, *, run: int | None = None
    ) -> Sequence[dict[str, Any]]: ...


class RunLedgerHistory(Protocol):
    """A saver's ``history`` as the run ledger's users need it: its rows' reads
    (`run_report`, `recovery_metrics`, `list_runs`, `check_deploy`'s heads) and
    what a run's driver,
    ``retry_failed`` and a resume tell it (`runlog._history.History`; on Redis,
    `redis.runlog._runlog_parts.RedisHistory`)."""

    def runs(self, thread_id: str | None = None) -> list[RunRecord]: ...

    def attempts(self, thread_id: str) -> list[StoredAttempt]: ...

    def note_recovery(
        self, thread_id: str, key: str, kind: str, owner: str | None = None
    ) -> None: ...

    def run_rows(
        self,
        thread_id: str | None = None,
        *,
        statuses: Sequence[str] = (),
        limit: int = 100,
        before: Cursor | None = None,
    ) -> list[RunLogRecord]: ...

    def metrics(self, since: float | None, nodes: Sequence[str] | None) -> RunCounts: ...

    def summaries(self, statuses: Sequence[str] | None, limit: int) -> list[tuple[Any, ...]]: ...

    def thread_ledger(self, thread_id: str) -> ThreadLedger: ...

    def run_row(self, thread_id: str, run: int) -> RunLogRecord | None: ...

    def heads(self) -> list[Head]: ...

    def tally(self, thread_id: str, run: int) -> tuple[dict[str, int], dict[str, float]]: ...

    def close_run(
        self,
        thread_id: str,
        run: int,
        status: str,
        usage: Mapping[str, float] | None = None,
        started_at: float | None = None,
    ) -> None: ...

    def reopen_run(
        self, thread_id: str, run: int, checkpoint_id: str, paths: Sequence[str]
    ) -> None: ...

    def fail_run(
        self,
        thread_id: str,
        run: int | None,
        ended: bool,
        continued: bool,
        error: str | None = None,
    ) -> None: ...


class AsyncRunLedgerHistory(RunLedgerHistory, Protocol):
    """The async twin of `RunLedgerHistory` (its a-prefixed methods)."""

    async def aruns(self, thread_id: str | None = None) -> list[RunRecord]: ...

    async def aattempts(self, thread_id: str) -> list[StoredAttempt]: ...

    async def anote_recovery(
        self, thread_id: str, key: str, kind: str, owner: str | None = None
    ) -> None: ...

    async def arun_rows(
        self,
        thread_id: str | None = None,
        *,
        statuses: Sequence[str] = (),
        limit: int = 100,
        before: Cursor | None = None,
    ) -> list[RunLogRecord]: ...

    async def ametrics(self, since: float | None, nodes: Sequence[str] | None) -> RunCounts: ...

    async def asummaries(
        self, statuses: Sequence[str] | None, limit: int
    ) -> list[tuple[Any, ...]]: ...

    async def athread_ledger(self, thread_id: str) -> ThreadLedger: ...

    async def arun_row(self, thread_id: str, run: int) -> RunLogRecord | None: ...

    async def aheads(self) -> list[Head]: ...

    async def atally(self, thread_id: str, run: int) -> tuple[dict[str, int], dict[str, float]]: ...

    async def aclose_run(
        self,
        thread_id: str,
        run: int,
        status: str,
        usage: Mapping[str, float] | None = None,
        started_at: float | None = None,
    ) -> None: ...

    async def areopen_run(
        self, thread_id: str, run: int, checkpoint_id: str, paths: Sequence[str]
    ) -> None: ...

    async def afail_run(
        self,
        thread_id: str,
        run: int | None,
        ended: bool,
        continued: bool,
        error: str | None = None,
    ) -> None: ...


@runtime_checkable
class RunLedger(EffectLedger, Protocol):
    """A checkpointer that keeps the run ledger (run rows, recoveries, steps):
    what `run_report`, `recovery_metrics`, `list_runs` and the drivers need.
    Every resilient saver, the Redis savers too (sync methods)."""

    @property
    def history(self) -> RunLedgerHistory: ...

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None: ...

    def step_history(
        self, thread_id: str, *, run: int | None = None
    ) -> Sequence[dict[str, Any]]: ...


@runtime_checkable
class AsyncRunLedger(AsyncEffectLedger, Protocol):
    """The async twin of `RunLedger`."""

    @property
    def history(self) -> AsyncRunLedgerHistory: ...

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None: ...

    async def astep_history(
        self, thread_id: str, *, run: int | None = None
    ) -> Sequence[dict[str, Any]]: ...


@runtime_checkable
class SaveCounters(Protocol):
    """A checkpointer that counts its checkpoint and write tries (every resilient
    saver, the Redis savers too: `recovery_metrics`' save success rate)."""

    def read_counters(self, since: float | None = None) -> dict[str, int]: ...


@runtime_checkable
class AsyncSaveCounters(Protocol):
    """The async twin of `SaveCounters`."""

    async def aread_counters(self, since: float | None = None) -> dict[str, int]: ...


@runtime_checkable
class ResilientSaver(RunLedger, Protocol):
    """A checkpointer that also keeps the resilience ledgers: side effects, node
    attempts, runs under leases and their history, and the save counters (the
    sync methods)."""

    @property
    def runs(self) -> Runs: ...

    @property
    def history(self) -> History: ...

    def read_counters(self, since: float | None = None) -> dict[str, int]: ...

    # The Redis savers count their tries too (`SaveCounters`) but have no counts
    # to flush (theirs are stored by the writes' scripts): this keeps them apart
    # from a full resilient saver, which `isinstance` tells by its members.
    def flush_counters(self) -> None: ...

    def read_run(self, run_id: str) -> RunRecord | None: ...

    def list_runs(self, statuses: Sequence[str] = ()) -> Sequence[RunRecord]: ...

    def active_runs(self) -> int: ...

    def lease_saver(self) -> AbstractContextManager[ResilientSaver]: ...


@runtime_checkable
class AsyncResilientSaver(AsyncRunLedger, Protocol):
    """The async twin of `ResilientSaver` (the a-prefixed methods; its interfaces
    have both)."""

    @property
    def runs(self) -> AsyncRuns: ...

    @property
    def history(self) -> AsyncHistory: ...

    async def aread_counters(self, since: float | None = None) -> dict[str, int]: ...

    async def aflush_counters(self) -> None: ...

    async def aread_run(self, run_id: str) -> RunRecord | None: ...

    async def alist_runs(self, statuses: Sequence[str] = ()) -> Sequence[RunRecord]: ...

    async def aactive_runs(self) -> int: ...

    def alease_saver(self) -> AbstractAsyncContextManager[AsyncResilientSaver]: ...


@runtime_checkable
class RunQueueSaver(Protocol):
    """What a `Worker` needs of its saver: the run queue under leases (``runs``)
    and its reads. The Redis savers keep it, not yet the other ledgers: a graph
    runs on them as on a plain checkpointer, its writes fenced by the saver."""

    serde: SerializerProtocol

    @property
    def runs(self) -> Any: ...

    def read_run(self, run_id: str) -> RunRecord | None: ...

    def list_runs(self, statuses: Sequence[str] = ()) -> Sequence[RunRecord]: ...

    def active_runs(self) -> int: ...

    def lease_saver(self) -> AbstractContextManager[Any]: ...


@runtime_checkable
class AsyncRunQueueSaver(Protocol):
    """The async twin of `RunQueueSaver`."""

    serde: SerializerProtocol

    @property
    def runs(self) -> Any: ...

    async def aread_run(self, run_id: str) -> RunRecord | None: ...

    async def alist_runs(self, statuses: Sequence[str] = ()) -> Sequence[RunRecord]: ...

    async def aactive_runs(self) -> int: ...

    def alease_saver(self) -> AbstractAsyncContextManager[Any]: ...
