"""Save counters: checkpoint and write tries, succeeded and failed, per process.

A try's outcome is known only after its transaction, so counts wait in memory
(`Counters`) and ride along with a later successful write; `bump` stores them,
`read_counters` adds up every process's.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field

from langgraph_resilience.checkpoint.store._schema import COUNTERS
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt
from langgraph_resilience.telemetry._emit import checkpoint_write

__all__ = ["COUNTER_NAMES", "Counters", "bucket_of", "bucketed", "bump", "read_counters"]

CHECKPOINT_OK = "checkpoint_put_ok"
CHECKPOINT_FAILED = "checkpoint_put_failed"
WRITES_OK = "writes_put_ok"
WRITES_FAILED = "writes_put_failed"
COUNTER_NAMES = (CHECKPOINT_OK, CHECKPOINT_FAILED, WRITES_OK, WRITES_FAILED)

#: Successful tries are stored at most this often (seconds); failed ones with
#: the next successful write. Storing a count with every write would cost the
#: happy path a row update per checkpoint.
COUNTER_FLUSH_INTERVAL = 1.0


def process_scope() -> str:
    # os.urandom, not uuid.uuid4: a program that seeds or patches uuid4 for
    # deterministic ids must not see its sequence shift because a saver ran.
    return f"{socket.gethostname()}/{os.getpid()}/{os.urandom(4).hex()}"


@dataclass
class Counters:
    """Counts kept by one saver (and every copy of it, e.g. under strict msgpack).

    Counts wait here and ride along with a later successful write: at once when
    a failure is waiting, otherwise at most every `COUNTER_FLUSH_INTERVAL`
    seconds. What waits here when the process dies is lost; `flush_counters()`
    on a saver (run when its ``from_conn_string`` block exits) stores it.
    """

    unflushed: dict[str, int] = field(default_factory=dict)
    last_flush: float = 0.0
    interval: float = COUNTER_FLUSH_INTERVAL
    lock: threading.Lock = field(default_factory=threading.Lock)
    _scope: str = ""
    #: Failed tries among the waiting counts (known when added, so that the
    #: check each write makes is one comparison, not a scan of the names).
    _failures: int = 0

    @property
    def scope(self) -> str:
        """This process's row key, drawn when counts are first stored: building a
        saver draws no random id (a program seeding its own ids would notice)."""
        with self.lock:
            if not self._scope:
                self._scope = process_scope()
            return self._scope

    def add(self, name: str) -> None:
        checkpoint_write(name)  # the OTel counter, when the `otel` extra is set up
        with self.lock:
            self.unflushed[name] = self.unflushed.get(name, 0) + 1
            if name.endswith("_failed"):
                self._failures += 1

    def due(self, now: float) -> bool:
        """Whether counts are due to ride with the write about to run (unlocked, a
        peek; `take_due` asks again under the lock)."""
        return bool(self.unflushed) and (
            self._failures > 0 or now - self.last_flush >= self.interval
        )

    def take_due(self, now: float) -> dict[str, int]:
        """The counts to store with the write about to run (maybe none)."""
        with self.lock:
            if not self.due(now):
                return {}
            deltas, self.unflushed, self.last_flush = self.unflushed, {}, now
            self._failures = 0
        return deltas

    def take_all(self) -> dict[str, int]:
        with self.lock:
            deltas, self.unflushed, self._failures = self.unflushed, {}, 0
        return deltas

    def give_back(self, deltas: dict[str, int]) -> None:
        """Undo a take after the transaction failed after all."""
        with self.lock:
            for name, n in deltas.items():
                self.unflushed[name] = self.unflushed.get(name, 0) + n
                if name.endswith("_failed"):
                    self._failures += n

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self.unflushed)


_BUMP = (
    f"INSERT INTO {COUNTERS.name} (scope, name, value) VALUES (?, ?, ?) "
    f"ON CONFLICT (scope, name) DO UPDATE SET value = {COUNTERS.name}.value + excluded.value"
)

#: Counts are kept per process and per hour (the scope ends with ``@`` and the
#: hour's start, epoch seconds), so that ``recovery_metrics(since=...)`` can read
#: the tries of a time window; each process still writes its own rows.
BUCKET_SECONDS = 3600


def bucketed(scope: str, now: float) -> str:
    """The row key of a process's counts in the hour of ``now``."""
    return f"{scope}@{int(now // BUCKET_SECONDS) * BUCKET_SECONDS}"


def bucket_of(scope: str) -> float | None:
    """The start of the hour a row counts (None: a row of an older release)."""
    _, sep, hour = scope.rpartition("@")
    return float(hour) if sep and hour.isdigit() else None


def bump(d: Dialect, scope: str, deltas: dict[str, int]) -> Statements[None]:
    rows = [(bucketed(scope, time.time()), name, n) for name, n in sorted(deltas.items()) if n]
    if rows:
        yield Stmt(d.sql(_BUMP), rows, many=True)


def read_counters(
    d: Dialect, counters: Counters, since: float | None = None
) -> Statements[dict[str, int]]:
    """Stored counts of every process, plus what this saver has not stored yet.

    ``since`` (epoch seconds): only the hours that end after it (counts are kept
    per hour: the hour ``since`` falls in is counted whole).
    """
    rows = yield Stmt(
        f"SELECT scope, name, sum(value) FROM {COUNTERS.name} GROUP BY scope, name", fetch=True
    )
    found = dict.fromkeys(COUNTER_NAMES, 0)
    kept = [
        (name, value)
        for scope, name, value in rows
        if since is None or (bucket_of(str(scope)) or 0.0) + BUCKET_SECONDS > since
    ]
    for name, value in [*kept, *counters.snapshot().items()]:
        found[str(name)] = found.get(str(name), 0) + int(value)
    return found
