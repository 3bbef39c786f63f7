"""What one thread takes up in the store: bytes per channel, checkpoints, writes
and the resilience tables' rows (``saver.history.storage``).

Postgres keeps a channel's values apart (``checkpoint_blobs``, one row per
version) and primitives inline in the checkpoint; both are summed per channel
by SQL. SQLite keeps each checkpoint as one blob: a channel's bytes there are
its values serialized alone (``loads``/``dumps`` of the saver's serde), read
from every checkpoint of the thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from langgraph_resilience.checkpoint.store._schema import THREAD_TABLES
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt

__all__ = ["ThreadStorage", "read_storage"]

Loads = Callable[[tuple[str, bytes]], Any]
Dumps = Callable[[Any], tuple[str, bytes]]


@dataclass(frozen=True, kw_only=True)
class ThreadStorage:
    """One thread's share of the store.

    Attributes:
        thread_id: the thread.
        checkpoints / checkpoint_bytes: its checkpoints (every namespace) and
            their bytes as stored (values kept apart included).
        writes / write_bytes: its pending writes and their bytes.
        channels: per channel, ``checkpoint_bytes`` (its values in checkpoints),
            ``write_bytes`` and ``writes``.
        ledger: rows per resilience table (runs, attempts, effects, recoveries, ...).
    """

    thread_id: str
    checkpoints: int
    checkpoint_bytes: int
    writes: int
    write_bytes: int
    channels: dict[str, dict[str, int]] = field(default_factory=dict)
    ledger: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Nothing of the thread is stored."""
        return not self.checkpoints and not self.writes and not any(self.ledger.values())

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_bytes": self.checkpoint_bytes + self.write_bytes}


def _channel(channels: dict[str, dict[str, int]], name: str) -> dict[str, int]:
    return channels.setdefault(name, {"checkpoint_bytes": 0, "write_bytes": 0, "writes": 0})


def _checkpoints_pg(
    d: Dialect, thread_id: str, channels: dict[str, dict[str, int]]
) -> Statements[tuple[int, int]]:
    (count, inline), *_ = yield Stmt(
        d.sql(
            "SELECT count(*), coalesce(sum(octet_length(checkpoint::text)), 0) "
            "FROM checkpoints WHERE thread_id = ?"
        ),
        (thread_id,),
        fetch=True,
    )
    for name, size in (
        yield Stmt(
            d.sql(
                "SELECT e.key, sum(octet_length(e.value::text)) FROM checkpoints c, "
                "jsonb_each(c.checkpoint -> 'channel_values') e WHERE c.thread_id = ? "
                "GROUP BY e.key"
            ),
            (thread_id,),
            fetch=True,
        )
    ):
        _channel(channels, name)["checkpoint_bytes"] += int(size or 0)
    apart = 0
    for name, size in (
        yield Stmt(
            d.sql(
                "SELECT channel, coalesce(sum(octet_length(blob)), 0) FROM checkpoint_blobs "
                "WHERE thread_id = ? GROUP BY channel"
            ),
            (thread_id,),
            fetch=True,
        )
    ):
        _channel(channels, name)["checkpoint_bytes"] += int(size)
        apart += int(size)
    return int(count), int(inline) + apart


def _checkpoints_sqlite(
    d: Dialect, thread_id: str, channels: dict[str, dict[str, int]], loads: Loads, dumps: Dumps
) -> Statements[tuple[int, int]]:
    rows = yield Stmt(
        d.sql("SELECT type, checkpoint FROM checkpoints WHERE thread_id = ?"),
        (thread_id,),
        fetch=True,
    )
    total = 0
    for type_, blob in rows:
        total += len(blob or b"")
        values = (loads((type_, blob)) or {}).get("channel_values") or {}
        for name, value in values.items():
            _channel(channels, name)["checkpoint_bytes"] += len(dumps(value)[1])
    return len(rows), total


def read_storage(
    d: Dialect, thread_id: str, loads: Loads, dumps: Dumps
) -> Statements[ThreadStorage]:
    """What ``thread_id`` takes up (`ThreadStorage`)."""
    channels: dict[str, dict[str, int]] = {}
    if d.blobs is not None:
        checkpoints, checkpoint_bytes = yield from _checkpoints_pg(d, thread_id, channels)
    else:
        checkpoints, checkpoint_bytes = yield from _checkpoints_sqlite(
            d, thread_id, channels, loads, dumps
        )
    value = d.writes.names[-1]  # "value" (SQLite) or "blob" (Postgres)
    size = "octet_length" if d.blobs is not None else "length"
    writes = write_bytes = 0
    for name, count, nbytes in (
        yield Stmt(
            d.sql(
                f"SELECT channel, count(*), coalesce(sum({size}({value})), 0) "
                f"FROM {d.writes.name} WHERE thread_id = ? GROUP BY channel"
            ),
            (thread_id,),
            fetch=True,
        )
    ):
        entry = _channel(channels, name)
        entry["writes"] += int(count)
        entry["write_bytes"] += int(nbytes)
        writes += int(count)
        write_bytes += int(nbytes)
    ledger: dict[str, int] = {}
    for table in THREAD_TABLES:
        (rows,), *_ = yield Stmt(
            d.sql(f"SELECT count(*) FROM {table.name} WHERE thread_id = ?"),
            (thread_id,),
            fetch=True,
        )
        ledger[table.name] = int(rows)
    return ThreadStorage(
        thread_id=thread_id,
        checkpoints=checkpoints,
        checkpoint_bytes=checkpoint_bytes,
        writes=writes,
        write_bytes=write_bytes,
        channels=dict(sorted(channels.items())),
        ledger=ledger,
    )
