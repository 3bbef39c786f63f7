"""``saver.runs`` on Redis: the run queue's interface (`_interfaces.Runs`'
methods), each one operation of `_runs` run by the saver.

``RedisRuns`` runs them with the saver's sync driver (on an async saver: on its
event loop, from another thread); ``AsyncRedisRuns`` adds the a-prefixed twins,
awaited. Both build the same operation: only the driving differs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, TypeVar

import langgraph_resilience.checkpoint.redis.ledger._runs as _runs
from langgraph_resilience.checkpoint.ledger._lease_judge import Claimant
from langgraph_resilience.checkpoint.ledger._runs import Blob, Fence, RunRecord
from langgraph_resilience.checkpoint.redis.store._ops import Ops
from langgraph_resilience.checkpoint.saver._base import check_thread_id

__all__ = ["AsyncRedisRuns", "RedisRuns"]

T = TypeVar("T")


class RedisRuns:
    """The run queue under leases (`_runs`): the store side of `Worker`."""

    __slots__ = ("_saver",)

    def __init__(self, saver: Any) -> None:
        self._saver = saver

    def _sync(self, op: Ops[T]) -> T:
        return self._saver._run_sync(op)  # type: ignore[no-any-return]

    # -- the operations, built once ----------------------------------------------------

    def _submit(
        self, run_id: str, thread_id: str, input_: Blob | None, budget: Blob | None
    ) -> Ops[None]:
        check_thread_id(thread_id)
        return _runs.submit(self._saver.place, run_id, thread_id, input_, budget)

    def _claim(self, owner: str, limit: int, lease_ttl: float) -> Ops[list[RunRecord]]:
        token = uuid.uuid4().hex  # one token for every try of this claim
        return _runs.claim(self._saver.place, owner, limit, lease_ttl, token)

    def _renew(self, owner: str, fences: Sequence[Fence], lease_ttl: float) -> Ops[list[str]]:
        holder = Claimant.here().holder
        return _runs.renew(self._saver.place, owner, fences, lease_ttl, holder)

    # -- sync ---------------------------------------------------------------------------

    def submit(self, run_id: str, thread_id: str, input_: Blob | None, budget: Blob | None) -> None:
        """Queue a run of a thread (see `Worker.submit`).

        Raises:
            RunStateError: the thread already has an open run.
        """
        self._sync(self._submit(run_id, thread_id, input_, budget))

    def claim(self, owner: str, limit: int, lease_ttl: float) -> Sequence[RunRecord]:
        """Claim up to ``limit`` lease-expired or queued runs for ``owner``."""
        return self._sync(self._claim(owner, limit, lease_ttl))

    def renew(self, owner: str, fences: Sequence[Fence], lease_ttl: float) -> Sequence[str]:
        """Extend ``owner``'s leases; returns the run ids it still holds."""
        return self._sync(self._renew(owner, fences, lease_ttl))

    def finish(
        self,
        fence: Fence,
        status: str,
        outcome: Blob | None,
        wait: float | None = None,
        error: str | None = None,
    ) -> bool:
        """End, pause or release a held run; False if its lease was lost. ``error``:
        what a run that ends ``error`` ended on (its run ledger row keeps it)."""
        return self._sync(_runs.finish(self._saver.place, fence, status, outcome, wait, error))

    def requeue(self, run_id: str, budget: Blob | None, resume: Blob | None = None) -> bool:
        """Queue a paused run again, with a new budget if given."""
        return self._sync(_runs.requeue(self._saver.place, run_id, budget, resume))

    def settle(self, run_id: str, status: str, outcome: Blob) -> bool:
        """End a paused run whose thread was resumed by hand, as its thread ended."""
        return self._sync(_runs.settle(self._saver.place, run_id, status, outcome))

    def cancel(self, run_id: str, outcome: Blob) -> str | None:
        """End an open run as cancelled (fenced); the status it had, or None."""
        return self._sync(_runs.cancel(self._saver.place, run_id, outcome))


class AsyncRedisRuns(RedisRuns):
    """`RedisRuns` with the a-prefixed methods of an async saver."""

    __slots__ = ()

    async def _async(self, op: Ops[T]) -> T:
        return await self._saver._run(op)  # type: ignore[no-any-return]

    async def asubmit(
        self, run_id: str, thread_id: str, input_: Blob | None, budget: Blob | None
    ) -> None:
        """Async twin of `RedisRuns.submit`."""
        await self._async(self._submit(run_id, thread_id, input_, budget))

    async def aclaim(self, owner: str, limit: int, lease_ttl: float) -> Sequence[RunRecord]:
        """Async twin of `RedisRuns.claim`."""
        return await self._async(self._claim(owner, limit, lease_ttl))

    async def arenew(self, owner: str, fences: Sequence[Fence], lease_ttl: float) -> Sequence[str]:
        """Async twin of `RedisRuns.renew`."""
        return await self._async(self._renew(owner, fences, lease_ttl))

    async def afinish(
        self,
        fence: Fence,
        status: str,
        outcome: Blob | None,
        wait: float | None = None,
        error: str | None = None,
    ) -> bool:
        """Async twin of `RedisRuns.finish`."""
        place = self._saver.place
        return await self._async(_runs.finish(place, fence, status, outcome, wait, error))

    async def arequeue(self, run_id: str, budget: Blob | None, resume: Blob | None = None) -> bool:
        """Async twin of `RedisRuns.requeue`."""
        return await self._async(_runs.requeue(self._saver.place, run_id, budget, resume))

    async def asettle(self, run_id: str, status: str, outcome: Blob) -> bool:
        """Async twin of `RedisRuns.settle`."""
        return await self._async(_runs.settle(self._saver.place, run_id, status, outcome))

    async def acancel(self, run_id: str, outcome: Blob) -> str | None:
        """Async twin of `RedisRuns.cancel`."""
        return await self._async(_runs.cancel(self._saver.place, run_id, outcome))
