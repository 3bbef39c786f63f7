"""What the rest of the package needs of a saver: `ResilientSaver` and its async twin.

The four savers of this package satisfy both (an async saver bridges its sync
methods to its event loop, as LangGraph's async savers do). Code that needs a
resilient saver checks ``isinstance(saver, ResilientSaver)`` instead of probing
for single methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_resilience.checkpoint._ledger import (
    AttemptKey,
    AttemptRecord,
    EffectRecord,
    IntentClaim,
    OutcomeFields,
)
from langgraph_resilience.checkpoint._runs import Fence, RunRecord

__all__ = ["AsyncResilientSaver", "ResilientSaver"]

Blob = tuple[str, bytes]


@runtime_checkable
class ResilientSaver(Protocol):
    """A checkpointer that also keeps the resilience ledger: node attempts, side
    effects and runs under leases (the sync methods)."""

    serde: SerializerProtocol

    def record_attempt(
        self,
        key: AttemptKey,
        record: AttemptRecord,
        started_at: float,
        fence: Fence | None = None,
    ) -> None: ...

    def node_attempts(self, key: AttemptKey) -> Sequence[AttemptRecord]: ...

    def read_effect(self, thread_id: str, key: str) -> EffectRecord | None: ...

    def claim_intent(
        self,
        thread_id: str,
        record: EffectRecord,
        args_digest: str | None,
        lease: float,
        fence: Fence | None = None,
        first: bool = False,
    ) -> IntentClaim: ...

    def renew_intent(self, thread_id: str, key: str, owner: str, lease: float) -> bool: ...

    def record_outcome(
        self, thread_id: str, key: str, fields: OutcomeFields, fence: Fence | None = None
    ) -> None: ...

    def defer_outcome(self, thread_id: str, key: str, fields: OutcomeFields) -> None: ...

    def list_effects(self, thread_id: str) -> Sequence[EffectRecord]: ...

    def step_history(
        self, thread_id: str, *, run: int | None = None
    ) -> Sequence[dict[str, Any]]: ...

    def read_counters(self, since: float | None = None) -> dict[str, int]: ...

    def read_history(self, what: str, thread_id: str | None = None) -> Sequence[Any]: ...

    def note_recovery(
        self, thread_id: str, key: str, kind: str, owner: str | None = None
    ) -> None: ...

    def submit_run(
        self, run_id: str, thread_id: str, input_: Blob | None, budget: Blob | None
    ) -> None: ...

    def claim_runs(self, owner: str, limit: int, lease_ttl: float) -> Sequence[RunRecord]: ...

    def renew_leases(
        self, owner: str, fences: Sequence[Fence], lease_ttl: float
    ) -> Sequence[str]: ...

    def finish_run(
        self, fence: Fence, status: str, outcome: Blob | None, wait: float | None = None
    ) -> bool: ...

    def requeue_run(self, run_id: str, budget: Blob | None, resume: Blob | None = None) -> bool: ...

    def cancel_run(self, run_id: str, outcome: Blob) -> str | None: ...

    def settle_paused(self, run_id: str, status: str, outcome: Blob) -> bool: ...

    def read_run(self, run_id: str) -> RunRecord | None: ...

    def list_runs(self, statuses: Sequence[str] = ()) -> Sequence[RunRecord]: ...

    def active_runs(self) -> int: ...

    def lease_saver(self) -> AbstractContextManager[ResilientSaver]: ...


@runtime_checkable
class AsyncResilientSaver(Protocol):
    """The async twin of `ResilientSaver` (the a-prefixed methods)."""

    serde: SerializerProtocol

    async def arecord_attempt(
        self,
        key: AttemptKey,
        record: AttemptRecord,
        started_at: float,
        fence: Fence | None = None,
    ) -> None: ...

    async def anode_attempts(self, key: AttemptKey) -> Sequence[AttemptRecord]: ...

    async def aread_effect(self, thread_id: str, key: str) -> EffectRecord | None: ...

    async def aclaim_intent(
        self,
        thread_id: str,
        record: EffectRecord,
        args_digest: str | None,
        lease: float,
        fence: Fence | None = None,
        first: bool = False,
    ) -> IntentClaim: ...

    async def arenew_intent(self, thread_id: str, key: str, owner: str, lease: float) -> bool: ...

    def renew_intent(self, thread_id: str, key: str, owner: str, lease: float) -> bool: ...

    async def arecord_outcome(
        self, thread_id: str, key: str, fields: OutcomeFields, fence: Fence | None = None
    ) -> None: ...

    def defer_outcome(self, thread_id: str, key: str, fields: OutcomeFields) -> None: ...

    async def alist_effects(self, thread_id: str) -> Sequence[EffectRecord]: ...

    async def astep_history(
        self, thread_id: str, *, run: int | None = None
    ) -> Sequence[dict[str, Any]]: ...

    async def aread_counters(self, since: float | None = None) -> dict[str, int]: ...

    async def aread_history(self, what: str, thread_id: str | None = None) -> Sequence[Any]: ...

    async def anote_recovery(
        self, thread_id: str, key: str, kind: str, owner: str | None = None
    ) -> None: ...

    async def asubmit_run(
        self, run_id: str, thread_id: str, input_: Blob | None, budget: Blob | None
    ) -> None: ...

    async def aclaim_runs(
        self, owner: str, limit: int, lease_ttl: float
    ) -> Sequence[RunRecord]: ...

    async def arenew_leases(
        self, owner: str, fences: Sequence[Fence], lease_ttl: float
    ) -> Sequence[str]: ...

    async def afinish_run(
        self, fence: Fence, status: str, outcome: Blob | None, wait: float | None = None
    ) -> bool: ...

    async def arequeue_run(
        self, run_id: str, budget: Blob | None, resume: Blob | None = None
    ) -> bool: ...

    async def acancel_run(self, run_id: str, outcome: Blob) -> str | None: ...

    async def asettle_paused(self, run_id: str, status: str, outcome: Blob) -> bool: ...

    async def aread_run(self, run_id: str) -> RunRecord | None: ...

    async def alist_runs(self, statuses: Sequence[str] = ()) -> Sequence[RunRecord]: ...

    async def aactive_runs(self) -> int: ...

    def alease_saver(self) -> AbstractAsyncContextManager[AsyncResilientSaver]: ...
