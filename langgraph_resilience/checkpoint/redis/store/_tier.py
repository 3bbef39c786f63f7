"""The cold tier on Redis: a thread demoted to an `Archive` object, and restored
when it is read or written again (the operations are in `_ops`).

A thread's object holds the ``DUMP`` of its data keys (Redis's own
serialization, restored with ``RESTORE``: the same server major version, or a
newer one, reads it back; an object of the six keys before the ledgers' is
restored as it is), under ``redis/<prefix>/<thread>/<demotion>`` in the
archive: each demotion writes an object of its own, so two sweepers never
overwrite each other's, and the marker names the one that holds the thread
(dropped once the thread is restored or deleted).
While a thread is in the cold tier its marker key names that object, and every
script refuses to touch the thread (`_scripts.ARCHIVED`): the saver restores it
first, so nothing written is ever lost to the move.

With an archive, a thread's keys carry no Redis TTL: ``ttl`` is how long a
thread stays hot after its last write, and ``archive_idle()`` demotes the
threads idle past it. A paused thread is never lost to a TTL.
"""

from __future__ import annotations

import base64
import json
import uuid
from urllib.parse import quote

__all__ = ["Archived", "object_key", "pack_dumps", "unpack_dumps"]


class Archived(Exception):
    """A script found the thread in the cold tier (internal: the saver restores
    the thread and runs the operation again)."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(thread_id)
        self.thread_id = thread_id


def object_key(prefix: str, thread_id: str) -> str:
    """A new object's key for one demotion of ``thread_id``."""
    return f"redis/{quote(prefix, safe='')}/{quote(thread_id, safe='')}/{uuid.uuid4().hex}"


def pack_dumps(dumps: list[bytes | None]) -> bytes:
    return json.dumps([None if d is None else base64.b64encode(d).decode() for d in dumps]).encode()


def unpack_dumps(body: bytes) -> list[bytes | None]:
    return [None if d is None else base64.b64decode(d) for d in json.loads(body)]
