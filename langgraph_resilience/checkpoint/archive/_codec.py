"""What one archived checkpoint is, as an object: its key and its bytes.

One object per checkpoint, under ``{thread}/{ns}/{step:010d}-{checkpoint_id}``:
a thread's objects are one prefix (all of a session), a namespace's sort by
step then id (the last is the latest), a given step is one name. Each part is
percent-encoded (a thread id may hold ``/``); the root namespace is ``ns=``,
any other ``ns=`` + its name, so no part is ever empty.

The body carries the checkpoint and its metadata as the saver's serde typed
them (an encrypting serde keeps the archive encrypted), the checkpoint's writes
(with the step records among them) and its failed node attempts, as msgpack,
compressed with gzip. gzip rather than zstd: it is in the standard library (no
binary dependency for the cold tier), any tool reads an object back, and a
fixed mtime makes the bytes the same for the same checkpoint, so a retried put
finds its own object equal. Checkpoints are small (the size budget keeps them
under ~100 KB): compression speed does not matter next to a network round trip.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import ormsgpack

__all__ = ["ArchivedCheckpoint", "decode", "encode", "object_key", "thread_prefix"]

FORMAT = 1
Typed = tuple[str, bytes]


def thread_prefix(thread_id: str) -> str:
    return quote(str(thread_id), safe="")


def ns_part(ns: str) -> str:
    return "ns=" + quote(ns, safe="")


def object_key(thread_id: str, ns: str, step: int, checkpoint_id: str) -> str:
    """Where a checkpoint's object lives (a negative step sorts first)."""
    return f"{thread_prefix(thread_id)}/{ns_part(ns)}/{step:010d}-{quote(checkpoint_id, safe='')}"


@dataclass(frozen=True, kw_only=True)
class ArchivedCheckpoint:
    """One checkpoint as archived.

    Attributes:
        writes: ``(task_id, task_path, idx, channel, type, value)`` rows.
        attempts: the node-attempt rows of this checkpoint, by column name (a
            later schema may add columns).
    """

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    step: int
    checkpoint: Typed
    metadata: Typed
    writes: tuple[tuple[Any, ...], ...] = ()
    attempts: tuple[dict[str, Any], ...] = ()

    @property
    def key(self) -> str:
        return object_key(self.thread_id, self.ns, self.step, self.checkpoint_id)


def encode(item: ArchivedCheckpoint) -> bytes:
    """The object's bytes: the same for the same checkpoint."""
    packed = ormsgpack.packb(
        [
            FORMAT,
            item.thread_id,
            item.ns,
            item.checkpoint_id,
            item.parent_id,
            item.step,
            list(item.checkpoint),
            list(item.metadata),
            [list(w) for w in item.writes],
            [dict(a) for a in item.attempts],
        ]
    )
    return gzip.compress(packed, compresslevel=6, mtime=0)


def decode(body: bytes) -> ArchivedCheckpoint:
    """An object's checkpoint back.

    Raises:
        ValueError: the bytes are not an archived checkpoint of a known format.
    """
    try:
        fields = ormsgpack.unpackb(gzip.decompress(body))
    except Exception as exc:
        raise ValueError(f"not an archived checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(fields, list) or len(fields) != 10 or fields[0] != FORMAT:
        raise ValueError("not an archived checkpoint of a format this release reads")
    _, thread_id, ns, checkpoint_id, parent_id, step, cp, meta, writes, attempts = fields
    return ArchivedCheckpoint(
        thread_id=str(thread_id),
        ns=str(ns),
        checkpoint_id=str(checkpoint_id),
        parent_id=parent_id,
        step=int(step),
        checkpoint=(str(cp[0]), bytes(cp[1])),
        metadata=(str(meta[0]), bytes(meta[1])),
        writes=tuple(tuple(w) for w in writes),
        attempts=tuple(dict(a) for a in attempts),
    )
