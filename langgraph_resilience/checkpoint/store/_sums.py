"""Checksums on what the savers store, computed when written, verified on every read.

Each row of LangGraph's tables a resilient saver writes carries a
``resilience_sum`` column (added by our migration 15; LangGraph names its columns
in every statement, so its own code and suite never see it): a checkpoint row,
each write, and on Postgres each blob. A read recomputes it over the bytes it
got and raises `CheckpointCorrupt` naming the thread, namespace, checkpoint and
the part that changed, before anything is decoded; a changed state never reaches
the graph. A row with no sum (written before the migration, or by a stock
LangGraph saver) is read as before, unverified; ``langgraph-resilience check``
counts those.

An effect's recorded outcome (``resilience_effects``, our own table) carries
``outcome_sum`` (migration 17), written by the statement that stores the outcome
(`outcome_sum`) and cleared when a new call takes the intent over; every read of
the ledger checks it (`_ledger`), so a replay never hands a node a value
the call did not return, and a changed ``status`` never makes a done call look
undone (which would call it again).

The sum is CRC-32 (``zlib.crc32``) over the row's bytes and the keys that give
them their meaning (a checkpoint's id, a write's task, index and
channel, a blob's channel and version), never over the thread id, so
``copy_thread`` copies sums as they are. CRC-32 finds every single-bit flip and
every burst up to 32 bits for certain, at memory speed. Postgres stores a
checkpoint's own fields as JSONB, which it normalises on the way in: their sum
is the server's hash of the JSONB's text (``PG_CHECKPOINT_SUM``), computed in the
write's own statement and again in the read's.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointMetadata, CheckpointTuple, get_checkpoint_id
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite.utils import load_pending_writes, search_where

from langgraph_resilience.checkpoint.store._schema import SUM
from langgraph_resilience.checkpoint.store._store import Dialect, Row, Statements, Stmt
from langgraph_resilience.errors import CheckpointCorrupt

__all__ = [
    "PG_CHECKPOINT_SUM",
    "SUM",
    "CHECK_PAGE",
    "Failure",
    "StoreCheck",
    "blob_sum",
    "check_store",
    "effect_mismatch",
    "checkpoint_sum",
    "mismatch",
    "outcome_sum",
    "sqlite_keys",
    "sqlite_read",
    "sqlite_tuple",
    "write_sum",
]


def _crc(parts: Iterable[Any]) -> int:
    """CRC-32 of the parts, each followed by a NUL (None as ``\\xff``, not the
    empty string; text as UTF-8), in one pass over their joined bytes: the same
    value as summing them one by one, as the sums stored so far were."""
    chunks: list[bytes] = []
    add = chunks.append
    for part in parts:
        kind = type(part)  # the usual parts by their exact type, one test each
        if kind is str:
            add(part.encode("utf-8", "surrogatepass"))
        elif kind is bytes:
            add(part)
        elif part is None:
            add(b"\xff")
        elif isinstance(part, str):  # a str subclass: as its text, like a str
            add(part.encode("utf-8", "surrogatepass"))
        elif isinstance(part, (bytes, bytearray, memoryview)):
            add(bytes(part))
        else:
            add(str(part).encode("utf-8", "surrogatepass"))
    add(b"")
    return zlib.crc32(b"\x00".join(chunks))


def checkpoint_sum(checkpoint_id: str, type_: str | None, checkpoint: Any, metadata: Any) -> int:
    """A SQLite checkpoint row's sum: its id, type, bytes and metadata (not its
    parent: a prune that deletes the parent unsets it, as LangGraph's does)."""
    return _crc((checkpoint_id, type_, checkpoint, metadata))


def write_sum(
    checkpoint_id: str, task_id: str, task_path: str, idx: int, channel: str, type_: Any, value: Any
) -> int:
    """A write's sum (both dialects): its key, channel, type and bytes, not its
    ``task_path`` (which only orders the writes): LangGraph's Postgres upsert of
    a write to a special channel (`INTERRUPT_CHANNEL` again, by the same task)
    replaces the value and keeps the first row's path."""
    del task_path
    return _crc((checkpoint_id, task_id, int(idx), channel, type_, value))


def blob_sum(channel: Any, version: Any, type_: Any, blob: Any) -> int:
    """A Postgres blob's sum."""
    return _crc((channel, version, type_, blob))


def outcome_sum(
    key: str, status: str, outcome_type: str | None, outcome: bytes | None, error: str | None
) -> int:
    """An effect outcome's sum: its key, status, bytes and error (not its thread:
    ``copy_thread`` copies it as it is; not its times, which replay nothing)."""
    return _crc((key, status, outcome_type, outcome, error))


def effect_mismatch(
    thread_id: str, ns: str, checkpoint_id: str | None, name: str, key: str
) -> CheckpointCorrupt:
    """The error for an effect outcome whose bytes no longer match their sum."""
    return CheckpointCorrupt(
        thread_id=str(thread_id),
        checkpoint_ns=ns or "",
        checkpoint_id=checkpoint_id or None,
        mismatch=_effect_what(name, key),
        idempotency_key=key,
    )


def _effect_what(name: str, key: str) -> str:
    return f"the recorded outcome of side effect {name!r} (idempotency key {key!r})"


def pg_checkpoint_sum(c: str, m: str, i: str) -> str:
    """The SQL of a Postgres checkpoint row's sum over the named columns."""
    return f"hashtextextended({c}::text || ' ' || {m}::text || ' ' || {i}, 0)"


#: The sum of a row of ``checkpoints`` on Postgres, in a read of the row.
PG_CHECKPOINT_SUM = pg_checkpoint_sum("checkpoint", "metadata", "checkpoint_id")

# -- the Postgres savers' statements (LangGraph's, with the sums) -------------------------

_PG_CHECKPOINT_VALUES = (
    f"SELECT v.t, v.n, v.i, v.p, v.c, v.m, {pg_checkpoint_sum('v.c', 'v.m', 'v.i')} "
    "FROM (VALUES (%s, %s, %s, %s, %s::jsonb, %s::jsonb)) AS v(t, n, i, p, c, m)"
)
_PG_CHECKPOINT_UPSERT = f"""
INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
    checkpoint, metadata, {SUM})
{{values}}
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id)
DO UPDATE SET checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata,
    {SUM} = EXCLUDED.{SUM}
"""
#: `PostgresSaver`'s checkpoint upsert, its sum computed by the server.
PG_PUT = _PG_CHECKPOINT_UPSERT.format(values=_PG_CHECKPOINT_VALUES)
#: The same, refused by the fork check (which raises first).
PG_PUT_UNLESS_NEWER = _PG_CHECKPOINT_UPSERT.format(
    values=_PG_CHECKPOINT_VALUES + ", resilience_refuse_fork(%s, %s, %s, %s)"
)
PG_BLOBS = f"""
INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob, {SUM})
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
"""
_PG_WRITES = f"""
INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
    idx, channel, type, blob, {SUM})
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO {{then}}
"""
PG_WRITES_REPLACE = _PG_WRITES.format(
    then=f"UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob, "
    f"{SUM} = EXCLUDED.{SUM}"
)
PG_WRITES_IGNORE = _PG_WRITES.format(then="NOTHING")

#: `PostgresSaver.SELECT_SQL` with each part's stored sum (and the server's sum of
#: the row's JSONB): blobs carry theirs as a 4th item and their version as a 5th,
#: writes theirs as a 7th. `pg_checked` checks and strips them.
PG_SELECT = f"""
select
    thread_id,
    checkpoint,
    checkpoint_ns,
    checkpoint_id,
    parent_checkpoint_id,
    metadata,
    {SUM},
    {PG_CHECKPOINT_SUM} as resilience_actual,
    (
        select array_agg(array[bl.channel::bytea, bl.type::bytea, bl.blob,
            convert_to(coalesce(bl.{SUM}::text, ''), 'UTF8'), convert_to(bl.version, 'UTF8')])
        from jsonb_each_text(checkpoint -> 'channel_versions')
        inner join checkpoint_blobs bl
            on bl.thread_id = checkpoints.thread_id
            and bl.checkpoint_ns = checkpoints.checkpoint_ns
            and bl.channel = jsonb_each_text.key
            and bl.version = jsonb_each_text.value
    ) as channel_values,
    (
        select
        array_agg(array[cw.task_id::text::bytea, cw.channel::bytea, cw.type::bytea, cw.blob,
            convert_to(cw.task_path, 'UTF8'), cw.idx::text::bytea,
            convert_to(coalesce(cw.{SUM}::text, ''), 'UTF8')])
        from checkpoint_writes cw
        where cw.thread_id = checkpoints.thread_id
            and cw.checkpoint_ns = checkpoints.checkpoint_ns
            and cw.checkpoint_id = checkpoints.checkpoint_id
    ) as pending_writes
from checkpoints """


def _stored(raw: bytes | None) -> int | None:
    return int(raw) if raw else None


def pg_checked(value: dict[str, Any]) -> dict[str, Any]:
    """A `PG_SELECT` row checked against its sums, in the shape LangGraph decodes.

    Raises:
        CheckpointCorrupt: a sum does not match (nothing is decoded).
    """
    checkpoint_id = value["checkpoint_id"]
    where = (value["thread_id"], value["checkpoint_ns"], checkpoint_id)
    verify(value.pop(SUM, None), value.pop("resilience_actual", 0), where, "the checkpoint row")
    blobs = []
    for blob in value.get("channel_values") or ():
        if len(blob) == 5:  # LangGraph's own pending-sends migration appends 3
            channel, type_, data, stored, version = blob
            actual = blob_sum(channel.decode(), version.decode(), type_.decode(), data)
            verify(_stored(stored), actual, where, f"the value of channel {channel.decode()!r}")
        blobs.append(tuple(blob[:3]))
    if value.get("channel_values") is not None:
        value["channel_values"] = blobs
    writes = []
    for w in value.get("pending_writes") or ():
        task_id, channel, type_, data, path, idx, stored = (x and bytes(x) for x in w)
        actual = write_sum(
            checkpoint_id,
            task_id.decode(),
            path.decode(),
            int(idx),
            channel.decode(),
            type_.decode(),
            data,
        )
        what = f"the write of task {task_id.decode()} to {channel.decode()!r} #{int(idx)}"
        verify(_stored(stored), actual, where, what)
        writes.append(w[:6])
    if value.get("pending_writes") is not None:
        value["pending_writes"] = writes
    return value


def mismatch(thread_id: str, ns: str, checkpoint_id: str | None, what: str) -> CheckpointCorrupt:
    """The error for a row whose bytes no longer match their sum."""
    return CheckpointCorrupt(
        thread_id=str(thread_id), checkpoint_ns=ns or "", checkpoint_id=checkpoint_id, mismatch=what
    )


def verify(stored: Any, actual: int, where: Sequence[str], what: str) -> None:
    """Raise `CheckpointCorrupt` when a stored sum differs from ``actual``
    (``where``: thread, namespace, checkpoint id); a row with no sum passes."""
    if stored is not None and int(stored) != actual:
        raise mismatch(where[0], where[1], where[2], what)


# -- the SQLite savers' reads (LangGraph's, with the sums) --------------------------------

_SQLITE_ROW = (
    "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, "
    f"metadata, {SUM} FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
)
_SQLITE_WRITES_OF = (
    f"SELECT task_id, channel, type, value, task_path, idx, {SUM} FROM writes "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
SqliteRead = tuple[RunnableConfig, Row, list[Row]]


def sqlite_read(config: RunnableConfig) -> Statements[SqliteRead | None]:
    """The row `SqliteSaver.get_tuple` reads (the config's checkpoint, or the
    namespace's latest) and its writes, sums included."""
    configurable = config["configurable"]
    thread_id, ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")
    params: tuple[Any, ...] = (thread_id, ns)
    if checkpoint_id := get_checkpoint_id(config):
        sql, params = _SQLITE_ROW + "AND checkpoint_id = ?", (*params, checkpoint_id)
    else:
        sql = _SQLITE_ROW + "ORDER BY checkpoint_id DESC LIMIT 1"
    rows = yield Stmt(sql, params, fetch=True)
    if not rows:
        return None
    row = rows[0]
    if not checkpoint_id:
        config = _config_of(row[0], ns, row[2])
    writes = yield Stmt(_SQLITE_WRITES_OF, (row[0], ns, row[2]), fetch=True)
    return config, row, writes


def sqlite_keys(
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> Statements[list[Row]]:
    """(thread_id, checkpoint_ns, checkpoint_id) of what `SqliteSaver.list` lists, in
    its order; each is then read as by `sqlite_read`."""
    where, params = search_where(config, filter, before)
    sql = f"SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints {where} "
    sql += "ORDER BY checkpoint_id DESC"
    if limit is not None:
        sql, params = sql + " LIMIT ?", (*params, limit)
    return (yield Stmt(sql, tuple(params), fetch=True))


def _config_of(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def sqlite_tuple(serde: SerializerProtocol, read: SqliteRead) -> CheckpointTuple:
    """Verify a row and its writes against their sums, then decode them as
    `SqliteSaver` does.

    Raises:
        CheckpointCorrupt: a sum does not match (nothing is decoded).
    """
    config, row, writes = read
    thread_id, ns, checkpoint_id, parent_id, type_, blob, metadata, stored = row
    where = (thread_id, ns, checkpoint_id)
    actual = checkpoint_sum(checkpoint_id, type_, blob, metadata)
    verify(stored, actual, where, "the checkpoint row (its state or metadata)")
    for task_id, channel, t, value, path, idx, stored_write in writes:
        actual = write_sum(checkpoint_id, task_id, path, idx, channel, t, value)
        verify(stored_write, actual, where, f"the write of task {task_id} to {channel!r} #{idx}")
    return CheckpointTuple(
        config,
        serde.loads_typed((type_, blob)),
        cast(CheckpointMetadata, json.loads(metadata) if metadata is not None else {}),
        _config_of(thread_id, ns, parent_id) if parent_id else None,
        load_pending_writes([w[:6] for w in writes], serde),
    )


# -- checking a whole store (``langgraph-resilience check``) -----------------------------


@dataclass(frozen=True, kw_only=True)
class Failure:
    """A row whose bytes do not match their sum."""

    kind: str  # checkpoint, write, blob, effect (a side effect's recorded outcome)
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None  # None for a blob (shared by checkpoints)
    what: str
    idempotency_key: str | None = None  # an effect's


@dataclass(frozen=True, kw_only=True)
class StoreCheck:
    """What `check_store` found: rows checked and rows with no sum (written before
    the checksums), per kind; the failures; SQLite's ``PRAGMA quick_check``."""

    checked: dict[str, int]
    unverified: dict[str, int]
    failures: tuple[Failure, ...]
    quick_check: tuple[str, ...] = ()  # SQLite only: ("ok",) when the file is sound

    @property
    def ok(self) -> bool:
        return not self.failures and self.quick_check in ((), ("ok",))


class _Scan(NamedTuple):
    kind: str
    table: str
    key: tuple[str, ...]
    columns: str  # after the key; the stored sum, then (Postgres rows) the server's


class _Judged(NamedTuple):
    stored: Any
    actual: int
    what: str
    ns: str
    checkpoint_id: str | None
    key: str | None = None  # an effect's idempotency key


def _judged(kind: str, key: Row, rest: Row, dialect: str) -> _Judged | None:
    """A scanned row's stored and actual sum; None for a row with nothing to check
    (an effect's intent: no outcome yet)."""
    ns, checkpoint_id = str(key[1]), None if kind in ("blob", "effect") else str(key[2])
    if kind == "checkpoint":
        if dialect == "postgres":
            return _Judged(rest[0], int(rest[1]), "the checkpoint row", ns, checkpoint_id)
        type_, blob, metadata, stored = rest
        actual = checkpoint_sum(key[2], type_, blob, metadata)
        return _Judged(stored, actual, "the checkpoint row", ns, checkpoint_id)
    if kind == "write":
        path, channel, type_, value, stored = rest
        actual = write_sum(key[2], key[3], path, key[4], channel, type_, value)
        what = f"the write of task {key[3]} to {channel!r} #{key[4]}"
        return _Judged(stored, actual, what, ns, checkpoint_id)
    if kind == "effect":
        ns, checkpoint_id, name, status, outcome_type, outcome, error, stored = rest
        if stored is None and status == "intent":
            return None
        actual = outcome_sum(str(key[1]), status, outcome_type, outcome, error)
        what = _effect_what(name, str(key[1]))
        return _Judged(stored, actual, what, str(ns), checkpoint_id or None, str(key[1]))
    type_, blob, stored = rest
    what = f"the value of channel {key[2]!r}"
    return _Judged(stored, blob_sum(key[2], key[3], type_, blob), what, ns, None)


_WRITE_KEY = ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx")
_EFFECT = _Scan(
    "effect",
    "resilience_effects",
    ("thread_id", "idempotency_key"),
    "checkpoint_ns, checkpoint_id, name, status, outcome_type, outcome, error, outcome_sum",
)
_SCANS = {
    "sqlite": (
        _Scan("checkpoint", "checkpoints", _WRITE_KEY[:3], f"type, checkpoint, metadata, {SUM}"),
        _Scan("write", "writes", _WRITE_KEY, f"task_path, channel, type, value, {SUM}"),
        _EFFECT,
    ),
    "postgres": (
        _Scan("checkpoint", "checkpoints", _WRITE_KEY[:3], f"{SUM}, {PG_CHECKPOINT_SUM}"),
        _Scan(
            "blob",
            "checkpoint_blobs",
            ("thread_id", "checkpoint_ns", "channel", "version"),
            f"type, blob, {SUM}",
        ),
        _Scan("write", "checkpoint_writes", _WRITE_KEY, f"task_path, channel, type, blob, {SUM}"),
        _EFFECT,
    ),
}
#: Rows read per statement while checking a store.
CHECK_PAGE = 500


def check_store(d: Dialect) -> Statements[StoreCheck]:
    """Check every row's sum (and on SQLite the file itself, ``PRAGMA quick_check``),
    a page of rows at a time."""
    quick: tuple[str, ...] = ()
    if d.name == "sqlite":
        quick = tuple(str(r[0]) for r in (yield Stmt("PRAGMA quick_check", fetch=True)))
    checked: dict[str, int] = {}
    unverified: dict[str, int] = {}
    failures: list[Failure] = []
    for scan in _SCANS[d.name]:
        keys = ", ".join(scan.key)
        checked[scan.kind] = unverified[scan.kind] = 0
        after: Row | None = None
        while True:
            where = f"WHERE ({keys}) > ({', '.join('?' for _ in scan.key)}) " if after else ""
            rows = yield Stmt(
                d.sql(
                    f"SELECT {keys}, {scan.columns} FROM {scan.table} {where}"
                    f"ORDER BY {keys} LIMIT {CHECK_PAGE}"
                ),
                after or (),
                fetch=True,
            )
            for row in rows:
                key, rest = row[: len(scan.key)], row[len(scan.key) :]
                judged = _judged(scan.kind, key, rest, d.name)
                if judged is None:
                    continue
                if judged.stored is None:
                    unverified[scan.kind] += 1
                    continue
                checked[scan.kind] += 1
                if int(judged.stored) != judged.actual:
                    failures.append(
                        Failure(
                            kind=scan.kind,
                            thread_id=str(key[0]),
                            checkpoint_ns=judged.ns,
                            checkpoint_id=judged.checkpoint_id,
                            what=judged.what,
                            idempotency_key=judged.key,
                        )
                    )
            if len(rows) < CHECK_PAGE:
                break
            after = rows[-1][: len(scan.key)]
    return StoreCheck(
        checked=checked, unverified=unverified, failures=tuple(failures), quick_check=quick
    )
