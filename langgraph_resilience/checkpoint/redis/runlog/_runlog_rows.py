"""The run ledger's rows on Redis, decided and read by the SQL savers' own code.

The run ledger's decisions (`runlog._run_log`: ``put_statements``,
``write_statements``, ``close_run``, ``fail_run``, ``reopen_run``;
`runlog._events.note_recovery`) and its readers (`runlog._run_summaries`,
`runlog._run_metrics`, `runlog._run_log_reads`, `runlog._events`) are statement
generators over the store's tables. On Redis they run unchanged on a
`LedgerSnapshot`: an in-memory SQLite database holding the store's schema,
loaded with the rows of the thread a write touches (or of the threads a reader
reads), so a run row on Redis is the row the SQL savers would hold for the same
writes, and the readers return what theirs return. Nothing here decides
anything of its own.

A row is kept on Redis as the JSON list of its columns in the table's order
(`encode_row`; a binary column as ``{"b": base64}``), one field a row of the
thread's hash of that table (`row_field`: the table's key columns but the
thread, joined by NUL).
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver

from langgraph_resilience._langgraph import INTERRUPT_CHANNEL
from langgraph_resilience.checkpoint.store._schema import (
    ATTEMPTS,
    EFFECTS,
    RECOVERIES,
    RECOVERY_PATHS,
    RUN_LOG,
    RUNS,
    STEPS,
    SUM,
    migrate,
)
from langgraph_resilience.checkpoint.store._store import SQLITE, Statements, Table, execute

__all__ = [
    "LEDGER_TABLES",
    "LedgerSnapshot",
    "changes",
    "latest_paused",
    "decode_row",
    "encode_row",
    "row_field",
]

#: The run ledger's tables a thread's rows are kept in, in the order of its
#: ledger keys (`_keys.LedgerKeys`: ``rl``, ``rc``, ``rp``).
LEDGER_TABLES: tuple[Table, ...] = (RUN_LOG, RECOVERIES, RECOVERY_PATHS)

#: Each table's key columns after ``thread_id`` (its field in the thread's hash).
_KEYS: Mapping[str, tuple[str, ...]] = {
    RUN_LOG.name: ("run",),
    RECOVERIES.name: ("key",),
    RECOVERY_PATHS.name: ("key", "path"),
    STEPS.name: ("checkpoint_ns", "checkpoint_id", "task_id"),
}

_SEP = "\0"

# A `Worker`'s takeover, stored by its claim on Redis (`_runs_scripts.CLAIM`), as
# the SQL claim stores it (`_events.claim_noting`): of the run row of its run.
_TAKEOVER = (
    f"INSERT INTO {RECOVERIES.name} (thread_id, key, kind, run_id, owner, checkpoint_id, at, run) "
    "SELECT ?, ?, 'takeover', ?, ?, ?, ?, coalesce("
    f"(SELECT max(run) FROM {RUN_LOG.name} WHERE run_id = ?), "
    f"(SELECT max(run) FROM {RUN_LOG.name} WHERE thread_id = ?)) "
    "ON CONFLICT (thread_id, key) DO NOTHING"
)


def _encoded(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"b": base64.b64encode(bytes(value)).decode("ascii")}
    return value


def _decoded(value: Any) -> Any:
    if isinstance(value, dict):
        return base64.b64decode(value["b"])
    return value


def encode_row(row: Sequence[Any]) -> str:
    """A row as kept on Redis: the JSON list of its columns, in the table's order."""
    return json.dumps([_encoded(v) for v in row], separators=(",", ":"))


def decode_row(raw: str | bytes) -> tuple[Any, ...]:
    """The row `encode_row` kept."""
    return tuple(_decoded(v) for v in json.loads(raw))


_RUN_AT = RUN_LOG.names.index("run")
_STATUS_AT = RUN_LOG.names.index("status")


def latest_paused(run_rows: Iterable[str | bytes]) -> bool:
    """Whether a thread's latest run (the highest numbered of its run rows, as
    Redis keeps them) is paused: an interrupt, a budget, its driver's word."""
    latest: tuple[Any, ...] | None = None
    for raw in run_rows:
        row = decode_row(raw)
        if latest is None or int(row[_RUN_AT]) > int(latest[_RUN_AT]):
            latest = row
    return latest is not None and latest[_STATUS_AT] == "paused"


def row_field(table: Table, row: Sequence[Any]) -> str:
    """The row's field in its thread's hash of ``table`` (its key but the thread)."""
    named = dict(zip(table.names, row, strict=True))
    return _SEP.join(str(named[c]) for c in _KEYS[table.name])


class LedgerSnapshot:
    """An in-memory SQLite store (the store's schema) the ledger's statements run
    on: ``load`` the rows a write or a read needs, ``run`` the statements, and
    ``rows`` what a table holds after them. One snapshot a saver, used by one
    caller at a time (`lock`, never held across a round trip); ``clear``
    empties it between uses."""

    def __init__(self) -> None:
        self._conn = sqlite3.connect(":memory:", check_same_thread=False)
        SqliteSaver(self._conn).setup()  # LangGraph's tables, which the schema indexes
        execute(self._conn.cursor(), migrate(SQLITE, where="the Redis run ledger's snapshot"))
        self._conn.commit()
        self._tables = (*LEDGER_TABLES, STEPS, RUNS, ATTEMPTS, EFFECTS)
        self.lock = threading.Lock()

    def clear(self) -> None:
        cur = self._conn.cursor()
        for name in (*(t.name for t in self._tables), "writes", "checkpoints"):
            cur.execute(f"DELETE FROM {name}")

    def load(self, table: Table, rows: Iterable[Sequence[Any]]) -> None:
        """Add ``rows`` (full rows, in the table's column order)."""
        places = ", ".join("?" for _ in table.names)
        sql = f"INSERT OR REPLACE INTO {table.name} ({', '.join(table.names)}) VALUES ({places})"
        self._conn.executemany(sql, [tuple(r) for r in rows])

    def load_encoded(self, table: Table, rows: Iterable[str | bytes], thread_id: str) -> None:
        """Add one thread's rows as Redis keeps them (`encode_row`): a row of the
        thread's hash is the thread's."""
        assert table.names[0] == "thread_id"
        self.load(table, ((thread_id, *decode_row(raw)[1:]) for raw in rows))

    def load_checkpoints(self, thread_id: str, checkpoint_ids: Iterable[str]) -> None:
        """Top-level checkpoints the ledger's statements look for (their ids only:
        the latest, and those run rows started at)."""
        self._conn.executemany(
            "INSERT OR IGNORE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id) "
            "VALUES (?, '', ?)",
            [(thread_id, c) for c in checkpoint_ids],
        )

    def load_head(
        self,
        thread_id: str,
        checkpoint_id: str,
        row: tuple[str | None, str, bytes, bytes, int],
        writes: Iterable[tuple[str, int, str]],
    ) -> None:
        """A thread's head (its latest top-level checkpoint: parent, type, blob,
        metadata, sum, as the SQLite table keeps them) and its writes' tasks and
        channels (no values): what `runlog._heads.read_heads` reads."""
        self._conn.execute(
            "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
            f"parent_checkpoint_id, type, checkpoint, metadata, {SUM}) "
            "VALUES (?, '', ?, ?, ?, ?, ?, ?)",
            (thread_id, checkpoint_id, *row),
        )
        self._conn.executemany(
            "INSERT OR IGNORE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
            "idx, channel, type, value) VALUES (?, '', ?, ?, ?, ?, NULL, NULL)",
            [(thread_id, checkpoint_id, t, i, c) for t, i, c in writes],
        )

    def load_interrupts(self, thread_id: str, tasks: Iterable[tuple[str, str]]) -> None:
        """The top-level tasks that wrote an interrupt, ``(checkpoint_id, task_id)``
        (what the readers read of LangGraph's writes)."""
        self._conn.executemany(
            "INSERT OR IGNORE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
            "idx, channel, type, value) VALUES (?, '', ?, ?, 0, ?, NULL, NULL)",
            [(thread_id, c, t, INTERRUPT_CHANNEL) for c, t in tasks],
        )

    def load_takeover(
        self,
        thread_id: str,
        key: str,
        run_id: str | None,
        owner: str | None,
        checkpoint_id: str | None,
        at: float,
    ) -> None:
        """A `Worker`'s takeover its claim stored on Redis, as a recovery row
        (after the thread's run rows: it names the run of its Worker run)."""
        self._conn.execute(
            _TAKEOVER, (thread_id, key, run_id, owner, checkpoint_id, at, run_id, thread_id)
        )

    def run(self, statements: Statements[Any]) -> Any:
        """Run a ledger statement generator (a write's or a reader's) here."""
        return execute(self._conn.cursor(), statements)

    def rows(self, table: Table, thread_id: str | None = None) -> list[tuple[Any, ...]]:
        """What ``table`` holds (of one thread), in its column order."""
        sql = f"SELECT {', '.join(table.names)} FROM {table.name}"
        if thread_id is None:
            return [tuple(r) for r in self._conn.execute(sql)]
        return [tuple(r) for r in self._conn.execute(f"{sql} WHERE thread_id = ?", (thread_id,))]

    def encoded(self, thread_id: str) -> dict[str, dict[str, str]]:
        """The thread's ledger rows and step rows as Redis keeps them (table name
        -> its field -> the encoded row): taken after loading and again after the
        statements, their difference is what a write stores back."""
        found: dict[str, dict[str, str]] = {}
        for table in (*LEDGER_TABLES, STEPS):
            found[table.name] = {
                row_field(table, row): (
                    json.dumps(dict(zip(STEPS.names, row, strict=True)))
                    if table is STEPS
                    else encode_row(row)
                )
                for row in self.rows(table, thread_id)
            }
        return found


def changes(
    before: Mapping[str, Mapping[str, str]], after: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """The rows of ``after`` that are new or differ from ``before`` (the ledger's
    writes never delete a row: they insert or update)."""
    changed: dict[str, dict[str, str]] = {}
    for name, rows in after.items():
        held = before.get(name, {})
        for field, raw in rows.items():
            if held.get(field) != raw:
                changed.setdefault(name, {})[field] = raw
    return changed
