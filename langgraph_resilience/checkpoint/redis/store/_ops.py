"""Every saver operation on Redis, written once for both twins.

An operation is a generator: it yields a batch of commands (sent in one
pipeline, one round trip) and receives their replies; the sync and async savers
only drive it (`_driver`). Decisions (the fork check's verdict, what a list
returns, which errors are worth another try) are made here, apart from I/O.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import zlib
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_resilience.checkpoint.archive._sizes import SizeBudget, channel_sizes
from langgraph_resilience.checkpoint.ledger._runs import fence_of
from langgraph_resilience.checkpoint.redis.ledger._effects_lua import ORPHANS
from langgraph_resilience.checkpoint.redis.ledger._runs_fence import fence_command
from langgraph_resilience.checkpoint.redis.ledger._runs_scripts import REINDEX
from langgraph_resilience.checkpoint.redis.runlog._runlog import (
    NO_ROWS,
    Decided,
    decide,
    index,
    read_ledger,
    script_keys,
)
from langgraph_resilience.checkpoint.redis.runlog._runlog_rows import LedgerSnapshot
from langgraph_resilience.checkpoint.redis.store._keys import (
    SEP,
    ThreadKeys,
    check_prefix,
    counts_key,
    keyable,
    ledger_keys,
    member,
    run_key,
    runlog_key,
    split_member,
    thread_keys,
    threads_key,
)
from langgraph_resilience.checkpoint.redis.store._records import (
    pack_checkpoint,
    pack_write,
    read_tuple,
)
from langgraph_resilience.checkpoint.redis.store._scripts import (
    ARCHIVED,
    DELETE_RUN,
    DEMOTE,
    GET,
    PRUNE,
    PUT,
    PUT_WRITES,
    REPLACE,
    RESTORE,
    Script,
)
from langgraph_resilience.checkpoint.redis.store._tier import Archived
from langgraph_resilience.checkpoint.runlog._run_log import (
    PutLedger,
    WriteLedger,
    put_statements,
    write_statements,
)
from langgraph_resilience.checkpoint.saver import _base, _threads
from langgraph_resilience.checkpoint.store._counters import Counters
from langgraph_resilience.checkpoint.store._schema import STEPS
from langgraph_resilience.checkpoint.store._store import SQLITE, Statements

__all__ = ["Command", "Ops", "Place"]

T = TypeVar("T")
Command = tuple[Any, ...]
Ops = Generator[list[Command], list[Any], T]

#: The locks the writes deciding run-ledger rows take, by thread (`Place.ledger_lock`).
LOCK_STRIPES = 64

#: Checkpoints fetched per round trip by ``list``.
LIST_BATCH = 64


class Place:
    """Where a saver keeps its keys and for how long (``ttl_ms`` 0: no TTL)."""

    def __init__(
        self,
        prefix: str,
        ttl_ms: int,
        sizes: SizeBudget | None = None,
        counters: Counters | None = None,
    ) -> None:
        self.prefix = check_prefix(prefix)
        self.ttl_ms = ttl_ms
        self.sizes = sizes or SizeBudget()
        #: The save counts waiting to ride with a write (`_counts`), the saver's.
        self.counters = counters or Counters()
        self._ledger: LedgerSnapshot | None = None
        self._locks = tuple(threading.Lock() for _ in range(LOCK_STRIPES))
        self._alocks: tuple[asyncio.Lock, ...] | None = None

    @property
    def ledger(self) -> LedgerSnapshot:
        """The snapshot the run ledger's statements run on (`_runlog`), made once."""
        if self._ledger is None:
            self._ledger = LedgerSnapshot()
        return self._ledger

    def ledger_lock(self, thread_id: str) -> threading.Lock:
        """Held by a sync write that decides run-ledger rows, from its read to its
        script's reply: this process's writes of a thread decide in the order they
        came, as a SQL saver's connection serializes them (two processes still
        meet at the compare-and-set)."""
        return self._locks[zlib.crc32(thread_id.encode()) % LOCK_STRIPES]

    def aledger_lock(self, thread_id: str) -> asyncio.Lock:
        """The async twin of `ledger_lock` (FIFO), made on the saver's loop."""
        if self._alocks is None:
            self._alocks = tuple(asyncio.Lock() for _ in range(LOCK_STRIPES))
        return self._alocks[zlib.crc32(thread_id.encode()) % LOCK_STRIPES]

    def keys(self, thread_id: str) -> ThreadKeys:
        return thread_keys(self.prefix, thread_id)

    def script_keys(self, thread_id: str) -> tuple[str, ...]:
        """A writing script's KEYS: the thread's, then its ledger keys (the TTL's,
        `_scripts._RENEW`)."""
        return script_keys(self.prefix, thread_id)

    def registered(self, thread_id: str) -> Command:
        """The thread was written now (the registry's score: its last write, ms)."""
        return ("ZADD", threads_key(self.prefix), int(time.time() * 1000), thread_id)


def _hot(reply: Any, thread_id: str) -> Any:
    """A script's reply, or `Archived` when the thread is in the cold tier."""
    if isinstance(reply, int) and reply == ARCHIVED:
        raise Archived(thread_id)
    return reply


def run(script: Script, keys: Sequence[str], *args: Any) -> Command:
    return ("EVALSHA", script.sha, len(keys), *keys, *args)


def _write_keys(place: Place, thread_id: str) -> tuple[str, ...]:
    """A ``put`` or ``put_writes`` script's KEYS: the thread's, its ledger keys,
    its save counters."""
    return (*place.script_keys(thread_id), counts_key(place.prefix, thread_id))


def put(
    place: Place,
    serde: SerializerProtocol,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    led: PutLedger | None = None,
    counts: str = "",
    *,
    replace: bool = False,
) -> Ops[RunnableConfig]:
    """A checkpoint, and the run it starts or ends (``led``: `_run_log.ledger_of_put`,
    its rows stored in the checkpoint's script, `_runlog`), and the save counts
    (``counts``: `_counts.counted`) added by the same script. A checkpoint already
    stored is kept (a no-op), or with ``replace`` replaced (`_scripts.REPLACE`)."""
    del new_versions  # the whole checkpoint is one record, as SqliteSaver keeps it
    thread_id, ns, parent_id = _base.thread_key(config)
    try:
        type_, blob = serde.dumps_typed(checkpoint)
    except TypeError as exc:  # named by its channel, as on SQL
        values = list(checkpoint.get("channel_values", {}).items())
        raise _base.unstorable(serde, values, "", exc) from exc
    meta_dict = get_checkpoint_metadata(config, metadata)
    meta = json.dumps(meta_dict, ensure_ascii=False).encode("utf-8", "ignore")
    cid = checkpoint["id"]
    check = _threads.continues_head(thread_id, ns, parent_id)
    record = pack_checkpoint(cid, parent_id, type_, blob, meta)
    place.sizes.check(
        len(record),
        lambda: f"checkpoint {cid} of thread {thread_id!r}",
        lambda: channel_sizes(checkpoint.get("channel_values", {}), serde.dumps_typed),
        place.counters.add,
    )
    run_id = str(meta_dict.get("run_id") or "")
    keys = _write_keys(place, thread_id)
    while True:
        ledger = yield from _decided(
            place, thread_id, "", None if led is None else lambda: put_statements(SQLITE, led)
        )
        command = run(
            REPLACE if replace else PUT,
            keys,
            member(ns, cid),
            record,
            ns,
            int(check),
            parent_id or "",
            cid,
            run_id,
            place.ttl_ms,
            *ledger.args,
            counts,
        )
        batch = [index(place.prefix, thread_id)] if ledger.stores else []
        at = len(batch)
        batch += [
            fence_command(place.prefix, thread_id, command, fence_of(config)),
            place.registered(thread_id),
        ]
        if run_id:
            batch.append(("SADD", run_key(place.prefix, run_id), thread_id))
        reply = _hot((yield batch)[at], thread_id)
        if int(reply[0]) != 3:
            break
    if int(reply[0]) == 2:
        head = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
        raise _threads.PutCheckpoint(thread_id, ns, cid, parent_id, True, ()).conflict(head)
    _threads.wrote_head(_threads.PutCheckpoint(thread_id, ns, cid, parent_id, check, ()))
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}


def _decided(
    place: Place,
    thread_id: str,
    step_field: str,
    statements: Callable[[], Statements[None]] | None,
) -> Ops[Decided]:
    """The ledger rows a write carries (none without statements: no read)."""
    if statements is None:
        return Decided(NO_ROWS, None, None)
    held = yield from read_ledger(place.prefix, thread_id, step_field)
    return decide(place.ledger, thread_id, held, statements)


def decides_rows(led: PutLedger | WriteLedger | None) -> bool:
    """Whether a put or a task's writes read the thread's run rows to decide (see
    `Place.ledger_lock`)."""
    if isinstance(led, WriteLedger):
        return not _only_step(led)
    return led is not None


def _only_step(led: WriteLedger) -> bool:
    """Whether a task's writes tell the ledger only their step's row (most do):
    stored once with the writes, no run row read (`_steps.step_of_writes`)."""
    found = _statements(write_statements(SQLITE, led))
    return len(found) == 1 and found[0].params is led.step


def _statements(statements: Statements[None]) -> list[Any]:
    found = []
    try:
        stmt = next(statements)
        while True:
            found.append(stmt)
            stmt = statements.send(None)  # type: ignore[arg-type]  # no reply is read
    except StopIteration:
        return found


def put_writes(
    place: Place,
    serde: SerializerProtocol,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
    led: WriteLedger | None = None,
    counts: str = "",
) -> Ops[None]:
    """A task's writes, and what they tell the run ledger (``led``:
    `_run_log.ledger_of_writes`): its step's row, its run's, and the save counts
    (``counts``), in one script."""
    thread_id, ns, cid = _base.thread_key(config)
    if cid is None or not writes:
        return
    replace = all(w[0] in WRITES_IDX_MAP for w in writes)
    args: list[Any] = []
    for i, (channel, value) in enumerate(writes):
        idx = WRITES_IDX_MAP.get(channel, i)
        try:
            type_, blob = serde.dumps_typed(value)
        except TypeError as exc:  # named by its channel, as on SQL
            raise _base.unstorable(serde, writes, task_path, exc) from exc
        args += [
            f"{task_id}\0{idx}",
            pack_write(cid, task_id, task_path, idx, channel, type_, blob),
        ]
    keys = _write_keys(place, thread_id)
    fast = led is None or _only_step(led)
    step = step_row(led) if led is not None and led.step is not None else None
    while True:
        statements = None if fast else (lambda: write_statements(SQLITE, led))
        ledger = yield from _decided(place, thread_id, step[0] if step else "", statements)
        field, row = (step if fast else ledger.step) or ("", "")
        command = run(
            PUT_WRITES, keys, member(ns, cid), int(replace), place.ttl_ms, field, row,
            *ledger.args, counts, *args,
        )  # fmt: skip
        batch = [index(place.prefix, thread_id)] if ledger.stores else []
        batch += [
            fence_command(place.prefix, thread_id, command, fence_of(config)),
            place.registered(thread_id),
        ]
        if _hot((yield batch)[-2], thread_id) != MOVED:
            return


#: What ``put_writes`` answers when the ledger moved since its rows were decided.
MOVED = -3


def step_row(led: WriteLedger) -> tuple[str, str]:
    """A step row's field in ``st`` and its JSON (the SQL row's columns)."""
    assert led.step is not None
    row = dict(zip(STEPS.names, led.step, strict=True))
    field = SEP.join((str(row["checkpoint_ns"]), str(row["checkpoint_id"]), str(row["task_id"])))
    return field, json.dumps(row)


def _fetch(
    place: Place, serde: SerializerProtocol, thread_id: str, ns: str, checkpoint_id: str
) -> Command:
    return run(GET, place.keys(thread_id), ns, checkpoint_id)


def _tuple(serde: SerializerProtocol, thread_id: str, reply: Any) -> CheckpointTuple | None:
    if not _hot(reply, thread_id):
        return None
    ns, cid = split_member(reply[0])
    return read_tuple(serde, thread_id, ns, cid, reply)


def get_tuple(
    place: Place, serde: SerializerProtocol, config: RunnableConfig
) -> Ops[CheckpointTuple | None]:
    configurable = config["configurable"]
    thread_id = str(configurable["thread_id"])
    ns = str(configurable.get("checkpoint_ns") or "")
    cid = get_checkpoint_id(config) or ""
    reply = (yield [_fetch(place, serde, thread_id, ns, cid)])[0]
    return _threads.saw_latest(config, _tuple(serde, thread_id, reply))


def _matches(found: CheckpointTuple, filter: dict[str, Any] | None) -> bool:
    return all(found.metadata.get(k) == v for k, v in (filter or {}).items())


def list_(
    place: Place,
    serde: SerializerProtocol,
    config: RunnableConfig | None,
    *,
    filter: dict[str, Any] | None = None,
    before: RunnableConfig | None = None,
    limit: int | None = None,
) -> Ops[list[CheckpointTuple]]:
    configurable = (config or {}).get("configurable") or {}
    if configurable.get("thread_id") is not None:
        threads = [str(configurable["thread_id"])]
    else:
        scored = registry((yield [("ZRANGE", threads_key(place.prefix), 0, -1, "WITHSCORES")])[0])
        threads = sorted(scored)
    wanted_ns = configurable.get("checkpoint_ns")
    wanted_id = configurable.get("checkpoint_id")
    before_id = get_checkpoint_id(before) if before else None
    replies = yield [
        c
        for t in threads
        for c in (("EXISTS", place.keys(t).archived), ("ZRANGE", place.keys(t).ix, 0, -1))
    ]
    for thread_id, archived in zip(threads, replies[0::2], strict=True):
        if archived:
            raise Archived(thread_id)
    if configurable.get("thread_id") is None and place.ttl_ms:
        gone = expired(scored, dict(zip(threads, replies[1::2], strict=True)), place.ttl_ms)
        if gone:  # expired threads leave the registry when it is listed
            yield [run(REINDEX, [threads_key(place.prefix)], t, score, "") for t, score in gone]
    candidates: list[tuple[str, str, str]] = []
    for thread_id, listed in zip(threads, replies[1::2], strict=True):
        for m in listed:
            ns, cid = split_member(m)
            if wanted_ns is not None and ns != wanted_ns:
                continue
            if (wanted_id and cid != wanted_id) or (before_id and cid >= before_id):
                continue
            candidates.append((thread_id, ns, cid))
    candidates.sort(key=lambda c: (c[0], c[2]), reverse=True)
    out: list[CheckpointTuple] = []
    for batch in _batches(candidates, LIST_BATCH):
        replies = yield [_fetch(place, serde, *c) for c in batch]
        for (thread_id, _, _), reply in zip(batch, replies, strict=True):
            found = _tuple(serde, thread_id, reply)
            if found is not None and _matches(found, filter):
                out.append(found)
                if limit is not None and len(out) >= limit:
                    return out
    return out


def registry(reply: Sequence[Any]) -> dict[str, int]:
    """The thread registry's ``ZRANGE ... WITHSCORES`` (flat, or in pairs as the
    client may parse it): thread -> its last write (ms)."""
    pairs = (
        list(reply)
        if reply and isinstance(reply[0], (list, tuple))
        else list(zip(reply[0::2], reply[1::2], strict=True))
    )
    return {(t.decode() if isinstance(t, bytes) else str(t)): int(float(s)) for t, s in pairs}


def expired(
    scored: dict[str, int], checkpoints: dict[str, Any], ttl_ms: int
) -> list[tuple[str, int]]:
    """The registry's entries to drop: threads last written longer than the TTL
    ago whose keys are gone (no checkpoint left). A thread kept past its TTL (a
    paused run's, `_scripts._RENEW`) stays listed; an entry is dropped only if
    its score is still the one read (`REINDEX`), so a write in between keeps it."""
    before = int(time.time() * 1000) - ttl_ms
    return [(t, s) for t, s in scored.items() if s < before and not checkpoints.get(t)]


def _batches(items: list[T], size: int) -> Iterator[list[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def delete_thread(place: Place, thread_id: str) -> Ops[str | None]:
    """Drop the thread; returns its cold-tier object, if it was demoted."""
    if not keyable([thread_id]):
        return None  # stored nowhere
    keys = place.keys(thread_id)
    replies = yield [
        ("GET", keys.archived),
        ("DEL", *keys, *ledger_keys(place.prefix, thread_id), counts_key(place.prefix, thread_id)),
        ("ZREM", threads_key(place.prefix), thread_id),
        ("ZREM", runlog_key(place.prefix), thread_id),
    ]
    return None if replies[0] is None else replies[0].decode()


def delete_for_runs(place: Place, run_ids: Sequence[str]) -> Ops[None]:
    run_ids = [str(r) for r in run_ids]
    if not run_ids:
        return
    threads = yield [("SMEMBERS", run_key(place.prefix, r)) for r in run_ids]
    batch: list[Command] = []
    touched: list[str] = []
    for run_id, members in zip(run_ids, threads, strict=True):
        for t in members:
            thread = t.decode()
            keys = (*place.keys(thread), *ledger_keys(place.prefix, thread))
            batch += [run(DELETE_RUN, keys, run_id)]
            batch += [run(ORPHANS, place.keys(t.decode()))]  # the ledger's, as on SQL
            touched += [t.decode(), t.decode()]
    for thread_id, reply in zip(touched, (yield batch), strict=True):
        _hot(reply, thread_id)
    yield [("DEL", *(run_key(place.prefix, r) for r in run_ids))]


def copy_thread(place: Place, source: str, target: str) -> Ops[None]:
    """The source's data keys and run-ledger keys, restored under the target's
    (a copied row names its source until written again: the hash it is in is
    its thread's, `_runlog_rows.LedgerSnapshot.load_encoded`)."""
    src, dst = place.keys(source), place.keys(target)
    from_keys = (*src.data, *ledger_keys(place.prefix, source))
    to_keys = (*dst.data, *ledger_keys(place.prefix, target))
    n = len(from_keys)
    dumps = yield [("DUMP", k) for k in from_keys] + [
        ("EXISTS", src.archived),
        ("HKEYS", src.byrun),
    ]
    if dumps[n]:
        raise Archived(source)  # copied from its hot keys, once restored
    if not any(dumps[:n]):
        return
    batch: list[Command] = []
    if any(dumps[len(src.data) : n]):
        batch.append(index(place.prefix, target))  # listed before its rows land
    for key, dumped in zip(to_keys, dumps[:n], strict=True):
        if dumped is not None:
            batch.append(("RESTORE", key, place.ttl_ms, dumped, "REPLACE"))
    batch.append(place.registered(target))
    batch += [("SADD", run_key(place.prefix, r.decode()), target) for r in dumps[-1]]
    yield batch


def prune(place: Place, thread_ids: Sequence[str], strategy: str) -> Ops[None]:
    threads = keyable(_threads.check_prune_args(thread_ids, strategy))
    if strategy in _threads.DELETE_STRATEGIES:
        yield [("DEL", *place.keys(t), *ledger_keys(place.prefix, t)) for t in threads] + (
            [
                ("ZREM", threads_key(place.prefix), *threads),
                ("ZREM", runlog_key(place.prefix), *threads),
            ]
            if threads
            else []
        )
    elif threads:
        batch = [
            c for t in threads for c in (run(PRUNE, place.keys(t)), run(ORPHANS, place.keys(t)))
        ]
        for thread_id, reply in zip(
            [t for t in threads for _ in (0, 1)], (yield batch), strict=True
        ):
            _hot(reply, thread_id)


# -- the cold tier (`_tier`) -------------------------------------------------------------


def idle_threads(place: Place, older_than_ms: int, limit: int) -> Ops[list[str]]:
    """Threads whose last write is older than ``older_than_ms`` (the oldest first)."""
    before = int(time.time() * 1000) - older_than_ms
    key = threads_key(place.prefix)
    found = (yield [("ZRANGEBYSCORE", key, "-inf", before, "LIMIT", 0, limit)])[0]
    return [t.decode() for t in found]


def dump_thread(place: Place, thread_id: str) -> Ops[list[bytes | None] | None]:
    """The DUMP of a hot thread's data keys (None: nothing hot to demote)."""
    keys = place.keys(thread_id)
    dumps = yield [("EXISTS", keys.archived), *(("DUMP", k) for k in keys.data)]
    if dumps[0] or not any(dumps[1:]):
        return None
    return list(dumps[1:])


def demote(place: Place, thread_id: str, object_key: str, dumps: list[bytes | None]) -> Ops[bool]:
    """Drop the hot copy (its object is stored), unless written since the dump."""
    keys = place.keys(thread_id)
    reply = yield [run(DEMOTE, keys, object_key, *(d or b"" for d in dumps))]
    if reply[0]:
        yield [("ZREM", threads_key(place.prefix), thread_id)]
    return bool(reply[0])


def archived_object(place: Place, thread_id: str) -> Ops[str | None]:
    reply = (yield [("GET", place.keys(thread_id).archived)])[0]
    return None if reply is None else reply.decode()


def restore(place: Place, thread_id: str, dumps: list[bytes | None]) -> Ops[bool]:
    """The thread hot again, in one script (no write lands in between); False:
    another client restored it first."""
    keys = place.keys(thread_id)
    replies = yield [run(RESTORE, keys, *(d or b"" for d in dumps)), place.registered(thread_id)]
    return bool(replies[0])
