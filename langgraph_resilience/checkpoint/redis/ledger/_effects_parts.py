"""``saver.effects`` and ``saver.attempts`` of the Redis savers: the typed
interfaces of the SQL savers (`saver._interfaces`), their operations written
once (`_effects`, `_attempts`) and only driven here.

A sync saver drives an operation with ``saver._drive``; an async saver's
a-methods ``await`` it, and its sync methods (the heartbeat renewing a claim, a
sync node under ``ainvoke``) send it to the saver's loop (``saver._bridge``).
The two differ in `_go` and the ``await`` of each a-method, nothing else.
Writes carry the outcomes written behind and the slots of ended tries
(``saver._riding``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import langgraph_resilience.checkpoint.redis.ledger._attempts as _attempts
import langgraph_resilience.checkpoint.redis.ledger._effects as _effects
from langgraph_resilience.checkpoint.ledger._ledger import (
    AttemptKey,
    AttemptRecord,
    EffectRecord,
    IntentVerdict,
    OutcomeFields,
)
from langgraph_resilience.checkpoint.ledger._runs import Fence
from langgraph_resilience.checkpoint.redis.store._ops import Ops, T
from langgraph_resilience.checkpoint.saver._base import seal
from langgraph_resilience.checkpoint.saver._interfaces import (
    AsyncAttempts,
    AsyncEffects,
    Attempts,
    Effects,
    _unsealed,
)

__all__ = ["AsyncRedisAttempts", "AsyncRedisEffects", "RedisAttempts", "RedisEffects"]

Make = Callable[[], Ops[T]]


class _Redis:
    """What the Redis parts share: the saver, and the operations they drive."""

    __slots__ = ()
    _saver: Any

    def _go(self, make: Make[T]) -> T:
        return self._saver._drive(make)  # type: ignore[no-any-return]

    def _ride(self, op: Ops[T]) -> Ops[T]:
        return self._saver._riding(op)  # type: ignore[no-any-return]


class _AsyncRedis(_Redis):
    __slots__ = ()

    def _go(self, make: Make[T]) -> T:
        return self._saver._bridge(self._saver._drive(make))  # type: ignore[no-any-return]


# -- side effects ----------------------------------------------------------------------


class RedisEffects(_Redis, Effects):
    """`Effects` on Redis."""

    __slots__ = ()

    def __init__(self, saver: Any) -> None:
        self._saver = saver
        self._io = saver

    def _read(self, thread_id: str, key: str) -> Make[EffectRecord | None]:
        return lambda: _effects.read_effect(self._saver.place, thread_id, key)

    def _list(self, thread_id: str) -> Make[list[EffectRecord]]:
        return lambda: _effects.list_effects(self._saver.place, thread_id)

    def _claim(
        self,
        thread_id: str,
        record: EffectRecord,
        args_digest: str | None,
        lease: float,
        fence: Fence | None,
    ) -> Make[IntentVerdict]:
        place = self._saver.place
        return lambda: self._ride(
            _effects.claim(place, thread_id, record, args_digest, lease, fence)
        )

    def _renew(self, thread_id: str, key: str, owner: str, lease: float) -> Make[bool]:
        return lambda: _effects.renew(self._saver.place, thread_id, key, owner, lease)

    def _record(
        self, thread_id: str, key: str, fields: OutcomeFields, fence: Fence | None
    ) -> Make[None]:
        place = self._saver.place
        return lambda: self._ride(_effects.record_outcome(place, thread_id, key, fields, fence))

    def read(self, thread_id: str, key: str) -> EffectRecord | None:
        return self._overlaid(thread_id, self._go(self._read(thread_id, key)))

    def listed(self, thread_id: str) -> list[EffectRecord]:
        """A thread's effects (``saver.list_effects``), waiting outcomes applied."""
        return self._saver._state.outcomes.overlay(  # type: ignore[no-any-return]
            thread_id, self._go(self._list(thread_id))
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
        return self._go(self._claim(thread_id, record, args_digest, lease, fence))

    def renew(self, thread_id: str, key: str, owner: str, lease: float) -> bool:
        return self._go(self._renew(thread_id, key, owner, lease))

    def record(
        self, thread_id: str, key: str, fields: OutcomeFields, fence: Fence | None = None
    ) -> None:
        try:
            self._go(self._record(thread_id, key, fields, fence))
        except Exception as exc:
            self._held_back(thread_id, key, fields, exc)
            raise

    def flush(self) -> None:
        """Store the outcomes written behind now, and free the slots of ended
        tries (the saver closes)."""
        self._go(self._flushing)

    def _flushing(self) -> Ops[None]:
        return self._ride(_effects.flush(self._saver._state.outcomes, self._saver.place))


class AsyncRedisEffects(_AsyncRedis, RedisEffects, AsyncEffects):
    """`AsyncEffects` on Redis: `RedisEffects` with the a-prefixed methods."""

    __slots__ = ()

    async def aread(self, thread_id: str, key: str) -> EffectRecord | None:
        return self._overlaid(thread_id, await self._saver._drive(self._read(thread_id, key)))

    async def alisted(self, thread_id: str) -> list[EffectRecord]:
        found = await self._saver._drive(self._list(thread_id))
        return self._saver._state.outcomes.overlay(thread_id, found)  # type: ignore[no-any-return]

    async def aclaim(
        self,
        thread_id: str,
        record: EffectRecord,
        args_digest: str | None,
        lease: float,
        fence: Fence | None = None,
        first: bool = False,
    ) -> IntentVerdict:
        return await self._saver._drive(  # type: ignore[no-any-return]
            self._claim(thread_id, record, args_digest, lease, fence)
        )

    async def arenew(self, thread_id: str, key: str, owner: str, lease: float) -> bool:
        return await self._saver._drive(  # type: ignore[no-any-return]
            self._renew(thread_id, key, owner, lease)
        )

    async def arecord(
        self, thread_id: str, key: str, fields: OutcomeFields, fence: Fence | None = None
    ) -> None:
        try:
            await self._saver._drive(self._record(thread_id, key, fields, fence))
        except Exception as exc:
            self._held_back(thread_id, key, fields, exc)
            raise

    async def aflush(self) -> None:
        await self._saver._drive(self._flushing)


# -- node attempts ---------------------------------------------------------------------


class RedisAttempts(_Redis, Attempts):
    """`Attempts` on Redis."""

    __slots__ = ()

    def __init__(self, saver: Any) -> None:
        self._saver = saver
        self._io = saver

    def _record(
        self, key: AttemptKey, record: AttemptRecord, started_at: float, fence: Fence | None
    ) -> Make[None]:
        place, sealed = self._saver.place, _sealed(self._saver.serde, record)
        return lambda: self._ride(_attempts.record_attempt(place, key, sealed, started_at, fence))

    def _read(self, key: AttemptKey) -> Make[list[AttemptRecord]]:
        return lambda: _attempts.read_attempts(self._saver.place, key)

    def record(
        self, key: AttemptKey, record: AttemptRecord, started_at: float, fence: Fence | None = None
    ) -> None:
        self._go(self._record(key, record, started_at, fence))

    def read(self, key: AttemptKey) -> Sequence[AttemptRecord]:
        return _unsealed(self._saver.serde, self._go(self._read(key)))


class AsyncRedisAttempts(_AsyncRedis, RedisAttempts, AsyncAttempts):
    """`AsyncAttempts` on Redis: `RedisAttempts` with the a-prefixed methods."""

    __slots__ = ()

    async def arecord(
        self, key: AttemptKey, record: AttemptRecord, started_at: float, fence: Fence | None = None
    ) -> None:
        await self._saver._drive(self._record(key, record, started_at, fence))

    async def aread(self, key: AttemptKey) -> Sequence[AttemptRecord]:
        return _unsealed(self._saver.serde, await self._saver._drive(self._read(key)))


def _sealed(serde: Any, record: AttemptRecord) -> AttemptRecord:
    return replace(record, reason=seal(serde, record.reason))
