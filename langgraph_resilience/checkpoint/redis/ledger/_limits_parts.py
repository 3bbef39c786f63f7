"""``saver.limits`` of the Redis savers: the SQL savers' limits interface
(`ledger._limits.Limits`, which `langgraph_resilience.limits` drives), its
operations written once (`_limits`) and only driven here.

A sync saver runs an operation with ``saver._run``; an async saver's a-methods
``await`` it, and its sync methods (the heartbeat renewing a hold, a sync node
under ``ainvoke``) send it to the saver's loop (``saver._bridge``). The twins
differ in `_go`, the ``await`` of each a-method and where a flush runs.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import langgraph_resilience.checkpoint.redis.ledger._limits as _limits
from langgraph_resilience.checkpoint.ledger._limits import (
    Admission,
    AsyncLimits,
    LimitAsk,
    LimitRow,
    Limits,
)
from langgraph_resilience.checkpoint.redis.store._ops import Ops, T

__all__ = ["AsyncRedisLimits", "RedisLimits"]

Make = Callable[[], Ops[T]]


class RedisLimits(Limits):
    """`Limits` on Redis (``defer``, which hands a release to the next write, is
    the SQL savers')."""

    __slots__ = ()
    _saver: Any

    def __init__(self, saver: Any) -> None:
        self._saver = saver
        self._io = saver

    def _go(self, make: Make[T]) -> T:
        return self._saver._run(make())  # type: ignore[no-any-return]

    def _ride(self, make: Make[T]) -> Make[T]:
        """A write carrying what waits for the saver's next one (slots, outcomes)."""
        return lambda: self._saver._riding(make())

    def _acquire(
        self,
        asks: Sequence[LimitAsk],
        hold: str,
        holder: str,
        lease: float,
        dead: Sequence[str],
        blamed: str,
        waited: float,
    ) -> Make[Admission]:
        place = self._saver.place
        return self._ride(
            lambda: _limits.acquire(place, asks, hold, holder, lease, dead, blamed, waited)
        )

    def _pause(self, paused: Sequence[str], pause: float, reason: str) -> Make[None]:
        place = self._saver.place
        return self._ride(lambda: _limits.pause(place, paused, pause, reason))

    def _flush(self) -> Make[None]:
        return self._ride(_limits.nothing)

    def _read(self) -> Make[list[LimitRow]]:
        place, ended = self._saver.place, self._saver._state.releases.waiting
        return lambda: _limits.read(place, ended)

    def acquire(
        self,
        asks: Sequence[LimitAsk],
        hold: str,
        holder: str,
        lease: float,
        dead: Sequence[str] = (),
        blamed: str = "",
        waited: float = 0.0,
    ) -> Admission:
        return self._go(self._acquire(asks, hold, holder, lease, dead, blamed, waited))

    def pause(self, paused: Sequence[str], pause: float, reason: str = "") -> None:
        self._go(self._pause(paused, pause, reason))

    def flush(self) -> None:
        self._go(self._flush())

    def renew(self, hold: str, lease: float, names: Sequence[str] = ()) -> bool:
        place = self._saver.place
        return self._go(self._ride(lambda: _limits.renew(place, hold, names, lease)))

    def read(self) -> list[LimitRow]:
        return self._go(self._read())


class AsyncRedisLimits(RedisLimits, AsyncLimits):
    """`AsyncLimits` on Redis: `RedisLimits` with the a-prefixed methods."""

    __slots__ = ()
    _saver: Any

    def _go(self, make: Make[T]) -> T:
        return self._saver._bridge(self._saver._run(make()))  # type: ignore[no-any-return]

    def _flushing(self) -> Coroutine[Any, Any, None]:
        return self._saver._run(self._flush()())  # type: ignore[no-any-return]

    def flush(self) -> None:
        AsyncLimits.flush(self)  # on the saver's loop, not waited for

    async def aacquire(
        self,
        asks: Sequence[LimitAsk],
        hold: str,
        holder: str,
        lease: float,
        dead: Sequence[str] = (),
        blamed: str = "",
        waited: float = 0.0,
    ) -> Admission:
        make = self._acquire(asks, hold, holder, lease, dead, blamed, waited)
        return await self._saver._run(make())  # type: ignore[no-any-return]

    async def apause(self, paused: Sequence[str], pause: float, reason: str = "") -> None:
        await self._saver._run(self._pause(paused, pause, reason)())

    async def aread(self) -> list[LimitRow]:
        return await self._saver._run(self._read()())  # type: ignore[no-any-return]
