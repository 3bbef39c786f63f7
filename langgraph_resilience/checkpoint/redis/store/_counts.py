"""The save counters on Redis: checkpoint and write tries, succeeded and failed,
as the SQL savers count them (`store._counters`), kept per thread.

A successful try is counted by the very script that stores the checkpoint or
the writes (`_scripts.COUNT`: ``HINCRBY`` on the thread's ``P:{T}:cn``, under its
hash tag), so a count never exists without its write, nor the reverse. A failed
try (a store error: the batch's pipeline failed) is known only on the client: it
waits in the saver's `Counters`, as on SQL, and rides with the thread's next
successful write, in its script (given back when that write fails in turn).
A field is ``<name>@<hour>`` (the hour's start, epoch seconds), so
``recovery_metrics(since=...)`` reads the hours that end after ``since``, as on
SQL. The counts of a thread expire with its keys and go with ``delete_thread``
(the SQL savers keep them per process, apart from threads); demotion to the cold
tier leaves them hot.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langgraph_resilience.checkpoint.redis.store._keys import counts_key, runlog_key, threads_key
from langgraph_resilience.checkpoint.redis.store._ops import Ops, Place
from langgraph_resilience.checkpoint.store._counters import (
    BUCKET_SECONDS,
    COUNTER_NAMES,
    Counters,
)

__all__ = ["counted", "read_counts"]

#: Threads whose counts are read per round trip.
READ_BATCH = 256


def _encoded(deltas: dict[str, int], now: float) -> str:
    hour = int(now // BUCKET_SECONDS) * BUCKET_SECONDS
    return "\n".join(f"{name}@{hour}={n}" for name, n in sorted(deltas.items()) if n)


@contextmanager
def counted(counters: Counters, ok: str) -> Iterator[str]:
    """The counts a write's script adds (``ok`` for its own try, and the failed
    tries waiting), as its ARGV (`_scripts.COUNT`); given back if the write fails."""
    waiting = counters.take_all() if counters.snapshot() else {}
    try:
        yield _encoded({**waiting, ok: waiting.get(ok, 0) + 1}, time.time())
    except BaseException:
        counters.give_back(waiting)
        raise


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_counts(place: Place, counters: Counters, since: float | None) -> Ops[dict[str, int]]:
    """Every thread's counts (the threads the registry and the run index list),
    plus what this saver has not stored yet (`store._counters.read_counters`)."""
    listed = yield [
        ("ZRANGE", threads_key(place.prefix), 0, -1),
        ("ZRANGE", runlog_key(place.prefix), 0, -1),
    ]
    threads = sorted({_text(t) for found in listed for t in found})
    found = dict.fromkeys(COUNTER_NAMES, 0)
    for i in range(0, len(threads), READ_BATCH):
        batch = threads[i : i + READ_BATCH]
        for reply in (yield [("HGETALL", counts_key(place.prefix, t)) for t in batch]):
            for field, value in dict(reply).items():
                name, _, hour = _text(field).rpartition("@")
                if since is None or float(hour) + BUCKET_SECONDS > since:
                    found[name] = found.get(name, 0) + int(value)
    for name, n in counters.snapshot().items():
        found[name] = found.get(name, 0) + n
    return found
