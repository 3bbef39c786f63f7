"""A finished task's writes are stored when it finishes: the node limit of a run.

LangGraph runs a step's parallel tasks (a `Send` fan-out, parallel edges) and the
saves of their writes on one executor: a sync run's thread pool of
``max_concurrency`` workers (by default ``min(32, cpus + 4)``), an async run's
semaphore of ``max_concurrency`` when one is given. A task that finishes hands
its writes to that executor, behind every task of the step not yet started: in
a fan-out wider than the pool, no finished branch is stored until the last
branch has started, and a crash before then runs every finished branch again.

A `ResilientStateGraph` run takes the limit over (`take_over`): it bounds the
graph's own nodes (`Slots`, held by the node wrapper for the node's whole
turn, tries and waits included), and hands LangGraph an executor with room
past it (`SPARE_THREADS`) for the saves, so a finished task's writes are stored
at once. What the node's own code sees is the limit the run was given
(`user_config`): a ``Runnable.batch`` or a plain subgraph called inside a node
runs as it would under LangGraph.

A run level has its own slots, as it has its own LangGraph executor: a
subgraph's nodes never wait for slots their parent's node holds.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config

from langgraph_resilience._keys import SLOTS_KEY

__all__ = ["SPARE_THREADS", "Slots", "node_turn", "take_over", "user_config"]

#: Threads a sync run's LangGraph pool has past the node limit: the saves of
#: finished tasks never wait while a step has fewer parallel tasks than this.
SPARE_THREADS = 1024
#: An async run's LangGraph semaphore when the graph bounds its own nodes.
_UNBOUNDED = 2**31


def default_limit() -> int:
    """The node limit of a sync run given none: the size of LangGraph's pool then
    (``ThreadPoolExecutor``'s default)."""
    return min(32, (os.cpu_count() or 1) + 4)


class Slots:
    """At most ``limit`` nodes of a run level at a time, first come first served;
    held from threads (sync nodes) and from asyncio tasks (async nodes) alike."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {limit}")
        self.limit = limit
        self._free = limit
        self._lock = threading.Lock()
        self._waiters: deque[Callable[[], None]] = deque()

    def _take(self, wake: Callable[[], None]) -> bool:
        """Take a slot now (True), or queue ``wake``, called when one is handed over."""
        with self._lock:
            if self._free and not self._waiters:
                self._free -= 1
                return True
            self._waiters.append(wake)
            return False

    def release(self) -> None:
        """Free a slot: handed to the first waiter, if any."""
        with self._lock:
            if not self._waiters:
                self._free += 1
                return
            wake = self._waiters.popleft()
        wake()

    def acquire(self) -> None:
        """Take a slot, waiting for one if none is free (first come first served)."""
        with self._lock:  # the usual case, a slot free: no event to wait on
            if self._free and not self._waiters:
                self._free -= 1
                return
        granted = threading.Event()
        if not self._take(granted.set):
            granted.wait()

    async def aacquire(self) -> None:
        """Async twin of `acquire` (a waiter cancelled meanwhile takes no slot)."""
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[None] = loop.create_future()

        def hand_over() -> None:  # on the loop: a waiter cancelled meanwhile passes it on
            if granted.cancelled():
                self.release()
            else:
                granted.set_result(None)

        def wake() -> None:
            loop.call_soon_threadsafe(hand_over)

        if not self._take(wake):
            try:
                await granted
            except asyncio.CancelledError:
                with self._lock:
                    waiting = wake in self._waiters
                    if waiting:
                        self._waiters.remove(wake)
                if not waiting and granted.done() and not granted.cancelled():
                    self.release()  # handed over as the wait was cancelled
                raise


@dataclass(frozen=True, slots=True)
class Level:
    """A run level's node limit: its slots (None: no limit), and the
    ``max_concurrency`` it was given, for the nodes' own code."""

    slots: Slots | None
    given: int | None


def _given(*configs: RunnableConfig | None) -> int | None:
    """The ``max_concurrency`` LangGraph would read from these (the last set wins)."""
    found = None
    for config in configs:
        if config is not None and config.get("max_concurrency") is not None:
            found = config["max_concurrency"]
    return found


def take_over(
    config: RunnableConfig | None, graph_config: RunnableConfig | None, *, is_async: bool
) -> RunnableConfig:
    """The config a run of a resilient graph hands LangGraph: its node limit held
    by the graph's nodes, LangGraph's executor with room for the saves.

    ``graph_config``: the compiled graph's own (``with_config``). An async run
    given no limit has none (LangGraph's has none then either).
    """
    out: dict[str, Any] = dict(config or {})
    given = _given(var_child_runnable_config.get(), graph_config, config)
    slots = None
    if given is not None or not is_async:
        slots = Slots(given or default_limit())
        out["max_concurrency"] = _UNBOUNDED if is_async else slots.limit + SPARE_THREADS
    configurable = dict(out.get("configurable") or {})
    configurable[SLOTS_KEY] = Level(slots, given)  # a subgraph's level replaces its parent's
    out["configurable"] = configurable
    return cast(RunnableConfig, out)


def _level(config: RunnableConfig | None) -> Level | None:
    found = ((config or {}).get("configurable") or {}).get(SLOTS_KEY)
    return found if isinstance(found, Level) else None


def user_config(config: RunnableConfig) -> RunnableConfig:
    """``config`` as a node's own code is to see it: the run's ``max_concurrency``
    as given, not the room LangGraph's executor was handed."""
    level = _level(config)
    if level is None or level.slots is None:
        return config
    return cast(RunnableConfig, {**config, "max_concurrency": level.given})


class _Turn:
    """A node's turn (`node_turn`, `anode_turn`): a slot of its run level held,
    the user's config ambient. A class, not a generator: every node of a run
    takes one; the sync and async turns differ only in how the slot is taken."""

    __slots__ = ("_level", "_token")

    def __init__(self, level: Level) -> None:
        self._level = level
        self._token: Any = None

    def __enter__(self) -> None:
        level = self._level
        assert level.slots is not None
        level.slots.acquire()
        self._ambient()

    def _ambient(self) -> None:
        """The node's code runs with ``user_config`` as its ambient config (what
        ``get_config()`` and a nested invoke read): the limit as given."""
        ambient = var_child_runnable_config.get()
        if ambient is not None:
            seen: Any = {**ambient, "max_concurrency": self._level.given}  # no cast() call
            self._token = var_child_runnable_config.set(seen)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            var_child_runnable_config.reset(self._token)
            self._token = None
        assert self._level.slots is not None
        self._level.slots.release()

    async def __aenter__(self) -> None:
        level = self._level
        assert level.slots is not None
        await level.slots.aacquire()
        self._ambient()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__()


_NO_TURN: nullcontext[None] = nullcontext()  # a sync and an async context manager both


def node_turn(config: RunnableConfig) -> AbstractContextManager[None]:
    """A sync node's turn: a slot of its run level held, the user's config ambient
    (`user_config`)."""
    level = _level(config)
    if level is None or level.slots is None:
        return _NO_TURN
    return _Turn(level)


def anode_turn(config: RunnableConfig) -> AbstractAsyncContextManager[None]:
    """An async node's turn: as `node_turn`."""
    level = _level(config)
    if level is None or level.slots is None:
        return _NO_TURN
    return _Turn(level)
