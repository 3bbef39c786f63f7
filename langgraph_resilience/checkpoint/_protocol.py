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

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_resilience.checkpoint.ledger._ledger import EffectRecord
from langgraph_resilience.checkpoint.ledger._runs import RunRecord
from langgraph_resilience.checkpoint.runlog._history import AsyncHistory, History
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
    "AsyncRunQueueSaver",
    "AsyncStepLog",
    "EffectLedger",
    "ResilientSaver",
    "RunQueueSaver",
    "StepLog",
]


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
    saver, and the Redis savers, which keep no run rows (docs/redis.md)."""

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


@runtime_checkable
class ResilientSaver(EffectLedger, Protocol):
    """A checkpointer that also keeps the resilience ledgers: side effects, node
    attempts, runs under leases and their history (the sync methods)."""

    @property
    def runs(self) -> Runs: ...

    @property
    def history(self) -> History: ...

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None: ...

    def step_history(
        self, thread_id: str, *, run: int | None = None
    ) -> Sequence[dict[str, Any]]: ...

    def read_counters(self, since: float | None = None) -> dict[str, int]: ...

    def read_run(self, run_id: str) -> RunRecord | None: ...

    def list_runs(self, statuses: Sequence[str] = ()) -> Sequence[RunRecord]: ...

    def active_runs(self) -> int: ...

    def lease_saver(self) -> AbstractContextManager[ResilientSaver]: ...


@runtime_checkable
class AsyncResilientSaver(AsyncEffectLedger, Protocol):
    """The async twin of `ResilientSaver` (the a-prefixed methods; its interfaces
    have both)."""

    @property
    def runs(self) -> AsyncRuns: ...

    @property
    def history(self) -> AsyncHistory: ...

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None: ...

    async def astep_history(
        self, thread_id: str, *, run: int | None = None
    ) -> Sequence[dict[str, Any]]: ...

    async def aread_counters(self, since: float | None = None) -> dict[str, int]: ...

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
