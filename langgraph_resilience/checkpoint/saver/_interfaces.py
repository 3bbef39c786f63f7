"""The ledgers a resilient saver keeps besides its checkpoints, each a small typed
interface reached from the saver: ``saver.effects`` (side-effect intents and
outcomes), ``saver.attempts`` (the failed tries of a task), ``saver.runs`` (the
run queue under leases) and ``saver.history`` (what `recovery_metrics` and
`run_report` read, and the recoveries noted). They are the store side of
`side_effect`, the node wrapper and `Worker`; the saver itself stays a
checkpointer with the methods the README documents.

An interface is built on each access (one slotted object, two on an async saver)
and acts on the saver it was reached from: a copy of a saver (``compile()`` may
``copy.copy`` one) never writes through the original. Its statements are the
dialect's (`_ledger`, `_runs`, `_events`); an interface only says how each runs,
as a (fenced) write or a read, through the saver's ``_write`` and ``_query``.

Sync and async twins: ``AsyncEffects`` is ``Effects`` plus the a-prefixed
methods. On an async saver the sync methods are the sync interface's own, with
only their I/O sent to the saver's event loop (`Bridge`), for the callers in
other threads: the heartbeat that renews a claim, a sync node under
``ainvoke``, a sync `Worker`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

import langgraph_resilience.checkpoint.ledger._ledger as _ledger
import langgraph_resilience.checkpoint.ledger._runs as _runs
import langgraph_resilience.checkpoint.runlog._events as _events
import langgraph_resilience.checkpoint.runlog._run_log as _run_log
from langgraph_resilience._store_errors import is_store_error
from langgraph_resilience.checkpoint.ledger._ledger import (
    AttemptKey,
    AttemptRecord,
    EffectRecord,
    IntentVerdict,
    OutcomeFields,
)
from langgraph_resilience.checkpoint.ledger._runs import Blob, Fence, RunRecord
from langgraph_resilience.checkpoint.saver._base import check_thread_id, seal, unseal
from langgraph_resilience.checkpoint.saver._parts import AsyncPart as _AsyncPart
from langgraph_resilience.checkpoint.saver._parts import AsyncStore, SyncStore
from langgraph_resilience.checkpoint.saver._parts import Part as _Part
from langgraph_resilience.checkpoint.store._store import Dialect, Statements

__all__ = [
    "AsyncAttempts",
    "AsyncEffects",
    "AsyncRuns",
    "AsyncStore",
    "Attempts",
    "Effects",
    "Runs",
    "SyncStore",
]

T = TypeVar("T")


# -- side effects --------------------------------------------------------------------------


class Effects(_Part):
    """The side-effect ledger (`side_effect`, `settle_effect`): an effect's intent,
    stored durably before its call and held under a lease, then its outcome."""

    __slots__ = ()

    def read(self, thread_id: str, key: str) -> EffectRecord | None:
        """One effect's record (with its outcome if one waits to be stored), or None."""
        d = self._saver._dialect
        return self._overlaid(
            thread_id, self._io._query(lambda: _ledger.read_effect(d, thread_id, key))
        )

    def claim(
        self,
        thread_id: str,
        record: EffectRecord,
        args_digest: str | None,
        lease: float,
        fence: Fence | None = None,
        first: bool = False,
    ) -> IntentVerdict:
        """Store an effect's intent, held by ``record.owner`` for ``lease`` seconds,
        or say who holds it (`IntentVerdict`); ``first``: see `_ledger.claim_intent`."""
        d = self._saver._dialect
        claim = _ledger.claim_intent
        return self._io._write(
            lambda: claim(d, thread_id, record, args_digest, lease, first),
            fence=fence,
            pipeline=True,
        )

    def renew(self, thread_id: str, key: str, owner: str, lease: float) -> bool:
        """Extend the lease of an intent whose call runs; False once it is not held."""
        d = self._saver._dialect
        return self._io._write(lambda: _ledger.renew_intent(d, thread_id, key, owner, lease))

    def record(
        self, thread_id: str, key: str, fields: OutcomeFields, fence: Fence | None = None
    ) -> None:
        """Store an effect's outcome (or error) after the call, at once.

        An outcome the store refuses (a full disk, an outage) is of a call that
        happened: it is held, as `defer` holds it, before the error is raised, so
        the saver's next write stores it and a later try replays it."""
        d = self._saver._dialect
        outcome = _ledger.record_outcome
        try:
            self._io._write(lambda: outcome(d, thread_id, key, fields), fence=fence, pipeline=True)
        except Exception as exc:
            self._held_back(thread_id, key, fields, exc)
            raise

    def defer(self, thread_id: str, key: str, fields: OutcomeFields) -> None:
        """Store an effect's outcome with the saver's next write (no I/O now).

        See `_ledger.PendingOutcomes` for when that is and what a crash before it
        means; reads of the saver see the outcome at once.
        """
        self._saver._state.outcomes.add(thread_id, key, fields)

    def _held_back(self, thread_id: str, key: str, fields: OutcomeFields, exc: Exception) -> None:
        if is_store_error(exc):
            self.defer(thread_id, key, fields)

    def _overlaid(self, thread_id: str, found: EffectRecord | None) -> EffectRecord | None:
        return found and self._saver._state.outcomes.overlay(thread_id, [found])[0]


class AsyncEffects(Effects, _AsyncPart):
    """`Effects` with the a-prefixed methods of an async saver."""

    __slots__ = ()

    async def aread(self, thread_id: str, key: str) -> EffectRecord | None:
        """Async twin of `Effects.read`."""
        d = self._saver._dialect
        found = await self._saver._query(lambda: _ledger.read_effect(d, thread_id, key))
        return self._overlaid(thread_id, found)

    async def aclaim(
        self,
        thread_id: str,
        record: EffectRecord,
        args_digest: str | None,
        lease: float,
        fence: Fence | None = None,
        first: bool = False,
    ) -> IntentVerdict:
        """Async twin of `Effects.claim`."""
        d = self._saver._dialect
        claim = _ledger.claim_intent
        return await self._saver._write(
            lambda: claim(d, thread_id, record, args_digest, lease, first),
            fence=fence,
            pipeline=True,
        )

    async def arenew(self, thread_id: str, key: str, owner: str, lease: float) -> bool:
        """Async twin of `Effects.renew`."""
        d = self._saver._dialect
        return await self._saver._write(
            lambda: _ledger.renew_intent(d, thread_id, key, owner, lease)
        )

    async def arecord(
        self, thread_id: str, key: str, fields: OutcomeFields, fence: Fence | None = None
    ) -> None:
        """Async twin of `Effects.record`."""
        d = self._saver._dialect
        outcome = _ledger.record_outcome
        try:
            await self._saver._write(
                lambda: outcome(d, thread_id, key, fields), fence=fence, pipeline=True
            )
        except Exception as exc:
            self._held_back(thread_id, key, fields, exc)
            raise


# -- node attempts -------------------------------------------------------------------------


class Attempts(_Part):
    """The failed tries of a task (thread, namespace, checkpoint, task), which a
    resumed or retried task counts on from."""

    __slots__ = ()

    def record(
        self, key: AttemptKey, record: AttemptRecord, started_at: float, fence: Fence | None = None
    ) -> None:
        """Store a failed try of a task (its message encrypted when the serde encrypts)."""
        d = self._saver._dialect
        record = replace(record, reason=seal(self._saver.serde, record.reason))
        self._io._write(lambda: _ledger.record_attempt(d, key, record, started_at), fence=fence)

    def read(self, key: AttemptKey) -> Sequence[AttemptRecord]:
        """The failed tries stored for a task."""
        d = self._saver._dialect
        return _unsealed(self._saver.serde, self._io._query(lambda: _ledger.read_attempts(d, key)))


class AsyncAttempts(Attempts, _AsyncPart):
    """`Attempts` with the a-prefixed methods of an async saver."""

    __slots__ = ()

    async def arecord(
        self, key: AttemptKey, record: AttemptRecord, started_at: float, fence: Fence | None = None
    ) -> None:
        """Async twin of `Attempts.record`."""
        d = self._saver._dialect
        record = replace(record, reason=seal(self._saver.serde, record.reason))
        await self._saver._write(
            lambda: _ledger.record_attempt(d, key, record, started_at), fence=fence
        )

    async def aread(self, key: AttemptKey) -> Sequence[AttemptRecord]:
        """Async twin of `Attempts.read`."""
        d = self._saver._dialect
        found = await self._saver._query(lambda: _ledger.read_attempts(d, key))
        return _unsealed(self._saver.serde, found)


def _unsealed(serde: Any, records: Sequence[AttemptRecord]) -> list[AttemptRecord]:
    """Failed tries with their messages as written (`seal`ed under an encrypting serde)."""
    return [replace(r, reason=unseal(serde, r.reason)) for r in records]


# -- runs and leases -----------------------------------------------------------------------


class Runs(_Part):
    """The run queue, the store side of `Worker`: runs submitted, claimed under a
    lease with a fencing token, renewed, ended, requeued, cancelled. Reading runs
    is the saver's own (`read_run`, `list_runs`, `active_runs`)."""

    __slots__ = ()

    def submit(self, run_id: str, thread_id: str, input_: Blob | None, budget: Blob | None) -> None:
        """Queue a run of a thread (see `Worker.submit`).

        Raises:
            RunStateError: the thread already has an open run.
        """
        d = self._saver._dialect
        check_thread_id(thread_id)
        self._io._write(
            lambda: _runs.submit_run(d, run_id, thread_id, input_, budget),
            translate=lambda exc: _runs.open_run_conflict(exc, thread_id),
        )

    def claim(self, owner: str, limit: int, lease_ttl: float) -> Sequence[RunRecord]:
        """Claim up to ``limit`` lease-expired or queued runs for ``owner``."""
        d, token = self._saver._dialect, uuid.uuid4().hex  # one token for every try
        return self._io._write(lambda: _events.claim_noting(d, owner, limit, lease_ttl, token))

    def renew(self, owner: str, fences: Sequence[Fence], lease_ttl: float) -> Sequence[str]:
        """Extend ``owner``'s leases; returns the run ids it still holds."""
        d = self._saver._dialect
        return self._io._write(lambda: _runs.renew_leases(d, owner, fences, lease_ttl))

    def finish(
        self,
        fence: Fence,
        status: str,
        outcome: Blob | None,
        wait: float | None = None,
        error: str | None = None,
    ) -> bool:
        """End, pause or release a held run (``wait``: seconds before a released run
        may be claimed again; ``error``: what a run that ends ``error`` ended on,
        kept in its run row); False if its lease was lost."""
        d = self._saver._dialect
        return self._io._write(lambda: _finish(d, fence, status, outcome, wait, error))

    def requeue(self, run_id: str, budget: Blob | None, resume: Blob | None = None) -> bool:
        """Queue a paused run again, with a new budget if given."""
        d = self._saver._dialect
        return self._io._write(lambda: _runs.requeue_run(d, run_id, budget, resume))

    def settle(self, run_id: str, status: str, outcome: Blob) -> bool:
        """End a paused run whose thread was resumed by hand, as its thread ended."""
        d = self._saver._dialect
        return self._io._write(lambda: _runs.settle_paused(d, run_id, status, outcome))

    def cancel(self, run_id: str, outcome: Blob) -> str | None:
        """End an open run as cancelled (fenced); the status it had, or None."""
        d = self._saver._dialect
        return self._io._write(lambda: _cancel(d, run_id, outcome))


def _finish(
    d: Dialect,
    fence: Fence,
    status: str,
    outcome: Blob | None,
    wait: float | None,
    error: str | None = None,
) -> Statements[bool]:
    """`_runs.finish_run`, the run ledger's row of the run told first (same transaction)."""
    yield from _run_log.finish_worker_run(d, fence, status, error)
    return (yield from _runs.finish_run(d, fence, status, outcome, wait))


def _cancel(d: Dialect, run_id: str, outcome: Blob) -> Statements[str | None]:
    """`_runs.cancel_run`, and the run ledger's row of the run if it was open."""
    was = yield from _runs.cancel_run(d, run_id, outcome)
    if was is not None:
        yield from _run_log.cancel_worker_run(d, run_id)
    return was


class AsyncRuns(Runs, _AsyncPart):
    """`Runs` with the a-prefixed methods of an async saver."""

    __slots__ = ()

    async def asubmit(
        self, run_id: str, thread_id: str, input_: Blob | None, budget: Blob | None
    ) -> None:
        """Async twin of `Runs.submit`."""
        d = self._saver._dialect
        check_thread_id(thread_id)
        await self._saver._write(
            lambda: _runs.submit_run(d, run_id, thread_id, input_, budget),
            translate=lambda exc: _runs.open_run_conflict(exc, thread_id),
        )

    async def aclaim(self, owner: str, limit: int, lease_ttl: float) -> Sequence[RunRecord]:
        """Async twin of `Runs.claim`."""
        d, token = self._saver._dialect, uuid.uuid4().hex  # one token for every try
        return await self._saver._write(
            lambda: _events.claim_noting(d, owner, limit, lease_ttl, token)
        )

    async def arenew(self, owner: str, fences: Sequence[Fence], lease_ttl: float) -> Sequence[str]:
        """Async twin of `Runs.renew`."""
        d = self._saver._dialect
        return await self._saver._write(lambda: _runs.renew_leases(d, owner, fences, lease_ttl))

    async def afinish(
        self,
        fence: Fence,
        status: str,
        outcome: Blob | None,
        wait: float | None = None,
        error: str | None = None,
    ) -> bool:
        """Async twin of `Runs.finish`."""
        d = self._saver._dialect
        return await self._saver._write(lambda: _finish(d, fence, status, outcome, wait, error))

    async def arequeue(self, run_id: str, budget: Blob | None, resume: Blob | None = None) -> bool:
        """Async twin of `Runs.requeue`."""
        d = self._saver._dialect
        return await self._saver._write(lambda: _runs.requeue_run(d, run_id, budget, resume))

    async def asettle(self, run_id: str, status: str, outcome: Blob) -> bool:
        """Async twin of `Runs.settle`."""
        d = self._saver._dialect
        return await self._saver._write(lambda: _runs.settle_paused(d, run_id, status, outcome))

    async def acancel(self, run_id: str, outcome: Blob) -> str | None:
        """Async twin of `Runs.cancel`."""
        d = self._saver._dialect
        return await self._saver._write(lambda: _cancel(d, run_id, outcome))
