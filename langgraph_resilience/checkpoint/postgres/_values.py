"""Channel values LangGraph's Postgres savers would inline but Postgres cannot store.

`PostgresSaver.put` keeps a channel's value inside the checkpoint's JSONB row when
it is a primitive (None, str, int, float, bool) and serializes everything else
into a blob (bytea). Two primitives have no JSONB form: a float that is not
finite (NaN, ±Infinity: JSON has no token for them) and a str holding a NUL
(``\\x00``: Postgres text cannot hold it). Inside a blob (a list, a dict, a
model) both are stored fine.

Such a value fails the checkpoint's insert on every try. Worse, the task's
write that carried it was already stored (writes are blobs), so every resume
replays that write into the same channel and fails the same way: the thread is
stuck even after the node is fixed. So the write itself is refused, in
``put_writes``, before anything of it is stored: the step fails once with a
`ValueError` naming the channel and the value's kind, and the thread resumes
(the node runs again) once the node returns a storable value, as it does on
SQLite, whose checkpoints are all blobs.

A write is judged by its own value: a top-level NaN/±Infinity or a str with a
NUL, written to a state channel (LangGraph's own ``__…__`` channels are always
blobs). The checkpoint is checked too (`refuse_inline`), for a value a reducer
made from storable writes, with the same message. Every other value is stored
exactly as LangGraph stores it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

__all__ = ["refuse_inline", "refuse_writes", "unstorable_kind"]


def unstorable_kind(value: Any) -> str | None:
    """What makes ``value`` unstorable inline in JSONB, or None if it is storable."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"a float {value!r} (JSON has no NaN or Infinity)"
    if isinstance(value, str) and "\x00" in value:
        at = value.index("\x00")
        return f"a str holding a NUL character at index {at} (Postgres text cannot hold \\x00)"
    return None


def _refusal(channel: str, kind: str, where: str) -> ValueError:
    return ValueError(
        f"{where} wrote to {channel!r} {kind}, which the Postgres checkpointer cannot store "
        "as a channel value. Return a finite float or None instead of NaN/Infinity, strip "
        "NUL characters (value.replace('\\x00', '')), or keep such a value inside a list or "
        "dict. Nothing of this step was stored: once the node returns a storable value, "
        "resuming the thread runs the step again."
    )


def refuse_writes(writes: Iterable[tuple[str, Any]], task_path: str) -> None:
    """Raise the `ValueError` for the first write Postgres could not inline."""
    for channel, value in writes:
        if channel.startswith("__"):
            continue  # LangGraph's own channels (errors, interrupts, sends): blobs
        kind = unstorable_kind(value)
        if kind is not None:
            where = f"the task at {task_path!r}" if task_path else "a node"
            raise _refusal(channel, kind, where)


def refuse_inline(values: Iterable[tuple[str, Any]]) -> None:
    """Raise the `ValueError` for the first inline channel value Postgres cannot store."""
    for channel, value in values:
        kind = unstorable_kind(value)
        if kind is not None:
            raise _refusal(channel, kind, "a step")
