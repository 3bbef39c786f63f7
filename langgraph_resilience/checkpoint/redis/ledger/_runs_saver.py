"""What the Redis savers add for the `Worker`: ``runs`` (`_runs_parts`), the
reads of runs (``read_run``, ``list_runs``, ``active_runs``) and
``lease_saver``. A mixin each twin puts before `RedisCommon` in its bases; the
operations are `_runs`', the twins differ only in how they drive them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import langgraph_resilience.checkpoint.redis.ledger._runs as _runs
from langgraph_resilience.checkpoint.ledger._runs import RunRecord
from langgraph_resilience.checkpoint.redis.ledger._runs_parts import AsyncRedisRuns, RedisRuns
from langgraph_resilience.checkpoint.redis.store._ops import Ops, Place

__all__ = ["AsyncRunsSaver", "RunsSaver"]

T = TypeVar("T")


class _Reads:
    place: Place

    def _run_sync(self, op: Ops[T]) -> T:
        raise NotImplementedError

    def read_run(self, run_id: str) -> RunRecord | None:
        """A run: status, claims, owner, lease expiry, fencing token, outcome."""
        return self._run_sync(_runs.read_run(self.place, str(run_id)))

    def list_runs(self, statuses: Sequence[str] = ()) -> Sequence[RunRecord]:
        """Runs, oldest first; only those in ``statuses`` if given."""
        return self._run_sync(_runs.list_runs(self.place, statuses))

    def active_runs(self) -> int:
        """How many runs are queued (and due) or running: work some worker has to do."""
        return self._run_sync(_runs.active_runs(self.place))

    @contextmanager
    def lease_saver(self) -> Iterator[Any]:
        """This saver: its client is a pool, so the Worker's claims and renewals
        never wait behind one of its writes."""
        yield self


class RunsSaver(_Reads):
    """The sync saver's part (its driver is sync)."""

    def _run(self, op: Ops[T]) -> T:
        raise NotImplementedError

    def _run_sync(self, op: Ops[T]) -> T:
        return self._run(op)

    @property
    def runs(self) -> RedisRuns:
        """The run queue under leases (the store side of `Worker`)."""
        return RedisRuns(self)


class AsyncRunsSaver(_Reads):
    """The async saver's part: the a-prefixed reads, and the sync ones on its loop."""

    async def _run(self, op: Ops[T]) -> T:
        raise NotImplementedError

    def _bridge(self, coro: Any) -> Any:
        raise NotImplementedError

    def _run_sync(self, op: Ops[T]) -> T:
        return self._bridge(self._run(op))  # type: ignore[no-any-return]

    @property
    def runs(self) -> AsyncRedisRuns:
        """The run queue under leases (the store side of `Worker`)."""
        return AsyncRedisRuns(self)

    async def aread_run(self, run_id: str) -> RunRecord | None:
        """Async twin of ``read_run``."""
        return await self._run(_runs.read_run(self.place, str(run_id)))

    async def alist_runs(self, statuses: Sequence[str] = ()) -> Sequence[RunRecord]:
        """Async twin of ``list_runs``."""
        return await self._run(_runs.list_runs(self.place, statuses))

    async def aactive_runs(self) -> int:
        """Async twin of ``active_runs``."""
        return await self._run(_runs.active_runs(self.place))

    @asynccontextmanager
    async def alease_saver(self) -> AsyncIterator[Any]:
        """Async twin of ``lease_saver``."""
        yield self
