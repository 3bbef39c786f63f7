"""A `ResilientStateGraph`'s node cache: keyed and stored without the run log.

A wrapped node's input and writes carry the run log (``resilience``: times,
counts, usage that differ in every run). `keyed_without_run_log` keys a node's
cache policy on its input without it; `RunLogFreeCache` stores and hands back a
wrapped node's writes without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from langgraph.cache.base import BaseCache, FullKey, Namespace
from langgraph.types import CachePolicy

__all__ = ["RunLogFreeCache", "keyed_without_run_log"]

_RUN_LOG = "resilience"


def keyed_without_run_log(policy: CachePolicy[Any]) -> CachePolicy[Any]:
    """``policy``, its cache key taken on the node's input without the run log
    (``resilience``: times and counts that differ in every run)."""
    key: Callable[..., str | bytes] = policy.key_func
    if getattr(key, "_lgr_without_run_log", False):
        return policy

    def key_func(*args: Any, **kwargs: Any) -> str | bytes:
        if args and isinstance(args[0], Mapping) and _RUN_LOG in args[0]:
            args = ({k: v for k, v in args[0].items() if k != _RUN_LOG}, *args[1:])
        return key(*args, **kwargs)

    key_func._lgr_without_run_log = True  # type: ignore[attr-defined]
    return replace(policy, key_func=key_func)


class RunLogFreeCache(BaseCache[Any]):
    """A run's node cache, holding no run log.

    A node's writes carry its run-log update (``resilience``: its step record,
    times, usage, budget). Cached with them, a hit would write another run's
    log into this one; cached without, a hit writes the node's output only, as
    on a plain `StateGraph` (and the run log does not record the hit). A
    degraded step (a failure skipped) is not cached: the next run tries again;
    nor is a step that was not run (`_drivers.NOT_RUN`: it wrote nothing).
    """

    def __init__(self, cache: BaseCache[Any], nodes: frozenset[str]) -> None:
        super().__init__(serde=cache.serde)
        self.cache = cache
        self.nodes = nodes  # the wrapped nodes, whose writes carry a run log

    def _ours(self, key: FullKey) -> bool:
        ns = key[0]  # (the writes namespace, the node's identifier, its name)
        return len(ns) == 3 and ns[2] in self.nodes

    def _stored(
        self, pairs: Mapping[FullKey, tuple[Any, int | None]]
    ) -> dict[FullKey, tuple[Any, int | None]]:
        kept: dict[FullKey, tuple[Any, int | None]] = {}
        for key, (writes, ttl) in pairs.items():
            if not self._ours(key):
                kept[key] = (writes, ttl)
            elif all(c.startswith("__") for c, _ in writes):
                continue  # no write of its own: a step not run (the run had stopped short)
            elif not any(
                c == _RUN_LOG and isinstance(v, Mapping) and v.get("degraded_steps")
                for c, v in writes
            ):
                kept[key] = ([(c, v) for c, v in writes if c != _RUN_LOG], ttl)
        return kept

    def _found(self, found: dict[FullKey, Any]) -> dict[FullKey, Any]:
        return {
            k: [(c, v) for c, v in w if c != _RUN_LOG] if self._ours(k) else w
            for k, w in found.items()
        }

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return self._found(self.cache.get(keys))

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return self._found(await self.cache.aget(keys))

    def set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        if kept := self._stored(pairs):
            self.cache.set(kept)

    async def aset(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        if kept := self._stored(pairs):
            await self.cache.aset(kept)

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        self.cache.clear(namespaces)

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        await self.cache.aclear(namespaces)
