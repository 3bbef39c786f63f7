"""What a paused run asks: the values of the interrupts pending on its thread's
latest checkpoint (an ``interrupt()`` in a node, or in a tool of an agent),
for `run_report` and `list_runs` (``questions``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langgraph_resilience._langgraph import INTERRUPT_CHANNEL

__all__ = ["questions_of"]


def questions_of(pending_writes: Iterable[tuple[str, str, Any]] | None) -> tuple[Any, ...]:
    """The values of the pending interrupt writes, in the order they were written."""
    found: list[Any] = []
    for _, channel, value in pending_writes or ():
        if channel != INTERRUPT_CHANNEL:
            continue
        items = value if isinstance(value, list | tuple) else [value]
        found += [getattr(item, "value", item) for item in items]
    return tuple(found)
