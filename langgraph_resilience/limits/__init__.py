"""Limits shared by every process on one store: concurrency, rate, and a pause.

A `Limit` names a bound kept in the store (``resilience_limits``): at most
``concurrency`` tries hold it at once and at most ``rate`` start per ``per``
seconds, across every process on the store; a try that fails with a
``Retry-After`` while holding it pauses it for all of them until then.
``NodePolicy(limits=[...])`` holds limits around each try of a node,
``CallPolicy(limits=[...])`` around each model or tool call of an agent.

`_admit` decides how a try waits (bounded by its ``Backoff.max_wait``),
`_drive` does the I/O (sync and async); the SQL is the checkpoint package's
(`checkpoint.ledger._limits`). `limit_states` reads what the store holds now, as
``langgraph-resilience limits`` prints it.
"""

from __future__ import annotations

from typing import Any

from langgraph_resilience.checkpoint.ledger._limits import LimitRow
from langgraph_resilience.limits._drive import limits_io
from langgraph_resilience.policy import Limit

__all__ = ["Limit", "LimitState", "alimit_states", "limit_states"]

#: A limit as the store holds it now: its numbers, holders, starts in the
#: current window, pause and the seconds tries waited for it.
LimitState = LimitRow


def limit_states(checkpointer: Any) -> list[LimitState]:
    """Every limit kept in a resilient saver's store, by name.

    Example:
        >>> for state in limit_states(saver):  # doctest: +SKIP
        ...     print(state.name, len(state.holders), state.starts, state.paused_for)
    """
    return limits_io(checkpointer, "limit_states").read()


async def alimit_states(checkpointer: Any) -> list[LimitState]:
    """Async twin of `limit_states` (an async resilient saver)."""
    io = limits_io(checkpointer, "alimit_states")
    aread = getattr(io, "aread", None)
    if aread is None:
        raise TypeError("alimit_states needs an async resilient saver; use limit_states")
    found: list[LimitState] = await aread()
    return found
