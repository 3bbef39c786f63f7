"""Archival and restore, written once as generators of operations (`Op`), run by
a sync and an async driver (`_drivers`) against a saver and its `Archive`.

Archival of one thread: claim it in the hot tier; read its checkpoints (through
LangGraph's own reader, so an object restores into either dialect), writes and
node attempts; put one object per checkpoint with a conditional create (an
object already there with the same bytes is a retry's own; with other bytes, a
leftover of an earlier archival, replaced under the claim); drop objects no
checkpoint has any more; then, in one transaction, delete the hot rows and mark
the thread archived, unless it changed meanwhile. A crash anywhere leaves either
the hot rows (archival not done: run it again) or a complete archive.

Restore: read every object of the thread (an unreadable one raises `ArchiveError`
naming the thread and the object, and nothing changes), then in one
transaction win the status row and put the rows back; a reader that loses the
race finds the thread hot. The objects are dropped after the commit.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Generator, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

from langgraph.checkpoint.base import CheckpointTuple

from langgraph_resilience.checkpoint.archive import _archival, _codec
from langgraph_resilience.checkpoint.archive._codec import ArchivedCheckpoint
from langgraph_resilience.checkpoint.store._store import Dialect, Statements
from langgraph_resilience.errors import ArchiveError, ConfigError

__all__ = ["ArchiveReport", "Op", "archive_threads", "restore"]

logger = logging.getLogger("langgraph_resilience")


# -- operations -------------------------------------------------------------------------


class Sql(NamedTuple):
    """Run statements: in a write transaction, or as a read."""

    statements: Callable[[], Statements[Any]]
    write: bool = False


class Tuples(NamedTuple):
    """Every checkpoint of a thread, all namespaces, as LangGraph reads them."""

    thread_id: str


class Put(NamedTuple):
    """Create an object unless it exists: `_objects.PutOutcome`."""

    key: str
    body: bytes


class Overwrite(NamedTuple):
    key: str
    body: bytes


class Fetch(NamedTuple):
    key: str


class Keys(NamedTuple):
    prefix: str


class Drop(NamedTuple):
    keys: tuple[str, ...]


Op = Sql | Tuples | Put | Overwrite | Fetch | Keys | Drop
Moves = Generator[Op, Any, Any]


class ArchiveReport(NamedTuple):
    """What one `archive_idle` call did.

    Attributes:
        archived: threads moved to the archive.
        skipped: idle threads left hot (another archiver held them, or they
            changed while being archived).
        failed: threads whose archival failed, with the error (they stay hot).
    """

    archived: list[str]
    skipped: list[str]
    failed: dict[str, BaseException]


# -- pure parts ---------------------------------------------------------------------------

_UUID_EPOCH_OFFSET = 0x01B21DD213814000  # 100-ns intervals from 1582-10-15 to 1970


def id_before(epoch_seconds: float) -> str:
    """The smallest uuid6 checkpoint id of that moment: LangGraph's ids sort by
    time, so ``checkpoint_id < id_before(t)`` means written before ``t``."""
    ts = int(epoch_seconds * 10_000_000) + _UUID_EPOCH_OFFSET
    value = ((ts >> 12) & 0xFFFFFFFFFFFF) << 80 | (0x6000 | ts & 0x0FFF) << 64 | 0x8000 << 48
    return str(uuid.UUID(int=value))


def seconds_of(value: timedelta | float, name: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise ConfigError(f"{name} must be >= 0, got {value!r} (e.g. timedelta(hours=24))")
    return seconds


def to_objects(
    thread_id: str,
    tuples: Sequence[CheckpointTuple],
    rows: _archival.ThreadRows,
    dumps: Callable[[Any], tuple[str, bytes]],
) -> list[ArchivedCheckpoint]:
    writes: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for ns, checkpoint_id, *rest in rows.writes:
        writes.setdefault((ns, checkpoint_id), []).append(tuple(rest))
    attempts: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for a in rows.attempts:
        attempts.setdefault((a["checkpoint_ns"], a["checkpoint_id"]), []).append(a)
    found = []
    for t in tuples:
        conf = t.config["configurable"]
        key = (str(conf.get("checkpoint_ns") or ""), str(conf["checkpoint_id"]))
        parent = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        found.append(
            ArchivedCheckpoint(
                thread_id=thread_id,
                ns=key[0],
                checkpoint_id=key[1],
                parent_id=parent,
                step=int((t.metadata or {}).get("step", 0) or 0),
                checkpoint=dumps(t.checkpoint),
                metadata=dumps(dict(t.metadata or {})),
                writes=tuple(sorted(writes.get(key, []), key=lambda w: (w[0], w[2]))),
                attempts=tuple(attempts.get(key, [])),
            )
        )
    return found


# -- archival -------------------------------------------------------------------------------


def archive_threads(
    d: Dialect,
    dumps: Callable[[Any], tuple[str, bytes]],
    *,
    older_than: float,
    now: float,
    limit: int,
    claim_ttl: float,
    pause: Callable[[str, str], None] | None = None,
) -> Moves:
    """Archive up to ``limit`` threads idle for ``older_than`` seconds; returns an
    `ArchiveReport`. ``pause(thread_id, stage)`` is a test hook, called before
    the puts, after them, and before the hot delete."""
    before = id_before(now - older_than)
    threads = yield Sql(lambda: _archival.idle_threads(d, before, older_than, limit))
    report = ArchiveReport([], [], {})
    for thread_id in threads:
        try:
            done = yield from archive_thread(d, dumps, thread_id, claim_ttl, pause)
        except Exception as exc:
            logger.warning("could not archive thread %r: %s", thread_id, exc)
            report.failed[thread_id] = exc
            continue
        (report.archived if done else report.skipped).append(thread_id)
    return report


def archive_thread(
    d: Dialect,
    dumps: Callable[[Any], tuple[str, bytes]],
    thread_id: str,
    claim_ttl: float,
    pause: Callable[[str, str], None] | None = None,
) -> Moves:
    claim = uuid.uuid4().hex
    if not (yield Sql(lambda: _archival.claim_thread(d, thread_id, claim, claim_ttl), True)):
        return False
    try:
        tuples = yield Tuples(thread_id)
        rows = yield Sql(lambda: _archival.thread_rows(d, thread_id))
        objects = {o.key: _codec.encode(o) for o in to_objects(thread_id, tuples, rows, dumps)}
        if pause:
            pause(thread_id, "before_put")
        for key, body in objects.items():
            if (yield Put(key, body)) == "differs":
                yield Overwrite(key, body)
        strays = [k for k in (yield Keys(_codec.thread_prefix(thread_id))) if k not in objects]
        if strays:
            yield Drop(tuple(strays))
        if pause:
            pause(thread_id, "after_put")
        signature, count = rows.signature, len(objects)
        done = yield Sql(
            lambda: _archival.finish_archive(d, thread_id, claim, signature, count), True
        )
    except Exception:  # the thread stays hot; give the claim back for the next archival
        yield Sql(lambda: _archival.release_thread(d, thread_id, claim), True)
        raise
    return bool(done)


# -- restore ----------------------------------------------------------------------------------


def _restored_meanwhile(d: Dialect, thread_id: str) -> Generator[Any, Any, bool]:
    """Whether another reader restored the thread since this one found it archived
    (and dropped the objects this one was about to read)."""
    status = yield Sql(lambda: _archival.archive_status(d, thread_id))
    return bool(status != "archived")


def restore(
    d: Dialect,
    thread_id: str,
    where: Callable[[str], str],
    prepare: Callable[[ArchivedCheckpoint], Any],
    put_statements: Callable[[Any], Statements[None]],
) -> Moves:
    """Restore an archived thread into the hot tier. Returns ``restored`` (this
    call did), ``lost`` (another reader did first), or the status found otherwise
    (``hot``: restored earlier; ``archiving``; ``none``: never archived).

    Raises:
        ArchiveError: an object cannot be read or decoded (names the thread and
            the object; the thread stays archived).
    """
    status = yield Sql(lambda: _archival.archive_status(d, thread_id))
    if status != "archived":
        return status or "none"
    prefix = _codec.thread_prefix(thread_id)
    try:
        keys = yield Keys(prefix)
    except ArchiveError as exc:
        raise ArchiveError(
            f"cannot restore thread {thread_id!r}: {exc}", thread_id=thread_id, key=prefix
        ) from exc
    except ConfigError as exc:
        raise ConfigError(
            f"thread {thread_id!r} is archived, but this saver has no archive: open it "
            "with archive= (the Archive URL the thread was archived to) to restore it"
        ) from exc
    if not keys and (yield from _restored_meanwhile(d, thread_id)):
        return "lost"
    if not keys:
        raise ArchiveError(
            f"cannot restore thread {thread_id!r}: the archive holds no object under "
            f"{where(prefix)} (was it deleted or moved?); the thread stays archived",
            thread_id=thread_id,
            key=prefix,
        )
    items = []
    for key in keys:
        try:
            items.append(_codec.decode((yield Fetch(key))))
        except Exception as exc:
            if (yield from _restored_meanwhile(d, thread_id)):
                return "lost"  # its objects were dropped by the reader that restored it
            if not isinstance(exc, (ArchiveError, ValueError)):
                raise
            raise ArchiveError(
                f"cannot restore thread {thread_id!r}: object {where(key)} is unreadable "
                f"({exc}); the thread stays archived",
                thread_id=thread_id,
                key=key,
            ) from exc
    puts = [prepare(item) for item in items]
    writes = [(i.ns, i.checkpoint_id, *w) for i in items for w in i.writes]
    attempts = [a for i in items for a in i.attempts]
    won = yield Sql(
        lambda: _archival.restore_thread(d, thread_id, puts, put_statements, writes, attempts),
        True,
    )
    if won:
        try:
            yield Drop(tuple(keys))
        except ArchiveError as exc:  # leftovers are replaced or dropped by the next archival
            logger.warning("restored thread %r but could not drop its objects: %s", thread_id, exc)
    return "restored" if won else "lost"
