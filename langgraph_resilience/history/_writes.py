"""The stored writes a thread's runs were read back from before the run ledger
(`_scan`, run once per thread by `_backfill`): decoded, in checkpoint order."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Write", "checkpoint_time", "decode_writes"]

_UUID_EPOCH = 0x01B21DD213814000  # 1582-10-15 in 100 ns ticks before 1970-01-01


@dataclass(frozen=True, kw_only=True, slots=True)
class Write:
    """One stored write of a task (its value decoded, or None)."""

    thread_id: str
    ns: str
    checkpoint_id: str
    task_id: str
    idx: int
    channel: str
    value: Any


def decode_writes(
    rows: Iterable[Sequence[Any]], loads: Callable[[tuple[str, bytes]], Any]
) -> list[Write]:
    """Writes from `_events.read_run_log` rows, in checkpoint order."""
    found = []
    for thread, ns, checkpoint_id, task_id, idx, channel, type_, value in rows:
        decoded = None
        if value is not None and type_:
            try:
                decoded = loads((str(type_), bytes(value)))
            except Exception:  # a value this process cannot decode tells nothing here
                decoded = None
        found.append(
            Write(
                thread_id=str(thread),
                ns=str(ns or ""),
                checkpoint_id=str(checkpoint_id),
                task_id=str(task_id),
                idx=int(idx),
                channel=str(channel),
                value=decoded,
            )
        )
    found.sort(key=lambda w: (w.thread_id, w.ns, w.checkpoint_id, w.task_id, w.idx))
    return found


def checkpoint_time(checkpoint_id: str | None) -> float | None:
    """When a checkpoint was made (epoch seconds), from its uuid6 id."""
    try:
        n = uuid.UUID(str(checkpoint_id)).int
    except ValueError:
        return None
    ticks = ((n >> 80) << 12) | ((n >> 64) & 0x0FFF)
    return (ticks - _UUID_EPOCH) / 1e7
