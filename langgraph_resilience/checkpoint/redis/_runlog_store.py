"""A thread's run ledger rows on Redis (`_runlog_rows`), read and written whole:
a ledger write reads the thread's rows, runs the SQL savers' statements on the
snapshot, and stores the rows they changed with one script, under a
compare-and-set of the thread's ledger version (changed meanwhile: read again,
decide again), so two writers of a thread never lose each other's rows.

Keys: the thread's ``rl``, ``rc`` and ``rp`` (`_keys`), among its data keys, so
the TTL (renewed by every write of the thread), demotion to the cold tier,
restore, copies and deletes move them with its checkpoints.

Not wired into the savers yet (docs/redis.md, "The run log on Redis").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from langgraph.checkpoint.base import WRITES_IDX_MAP

from langgraph_resilience._langgraph import INTERRUPT_CHANNEL
from langgraph_resilience.checkpoint.redis._keys import SEP, ThreadKeys
from langgraph_resilience.checkpoint.redis._ops import Ops, Place, run
from langgraph_resilience.checkpoint.redis._runlog_rows import LEDGER_TABLES, LedgerSnapshot
from langgraph_resilience.checkpoint.redis._scripts import _GUARD, _RENEW, ARCHIVED, Script
from langgraph_resilience.checkpoint.redis._tier import Archived
from langgraph_resilience.checkpoint.store._schema import STEPS
from langgraph_resilience.checkpoint.store._store import Statements

__all__ = ["RUNLOG_SCRIPTS", "STORE_LEDGER", "apply", "read_ledger", "read_thread"]

T = TypeVar("T")

VERSION = "\0v"

#: A ledger write's (or a reader's) statements, made anew for each try.
Writes = Callable[[], Statements[T]]


#: The ledger's keys among the thread's (`_keys.ThreadKeys`: every script's KEYS).
_TABLE_KEYS = (
    ThreadKeys._fields.index("rl") + 1,
    ThreadKeys._fields.index("rc") + 1,
    ThreadKeys._fields.index("rp") + 1,
)

#: KEYS: the thread's (`_keys.ThreadKeys`). ARGV: the version read (empty: none),
#: ttl_ms, then (KEYS index of the table, field, row) triples. Returns 1 (stored,
#: the thread's TTL renewed), 0 (the version moved: decide again) or -7 (the
#: thread is in the cold tier).
STORE_LEDGER = Script(
    "store_ledger",
    _RENEW
    + _GUARD
    + f"local rl = KEYS[{_TABLE_KEYS[0]}]\n"
    + r"""
local v = redis.call('HGET', rl, '\0v')
if (v or '') ~= ARGV[1] then return 0 end
for i = 3, #ARGV, 3 do redis.call('HSET', KEYS[tonumber(ARGV[i])], ARGV[i + 1], ARGV[i + 2]) end
redis.call('HINCRBY', rl, '\0v', 1)
renew(ARGV[2])
return 1
""",
)

RUNLOG_SCRIPTS: tuple[Script, ...] = (STORE_LEDGER,)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_ledger(place: Place, thread_id: str) -> Ops[tuple[str, dict[str, dict[str, str]]]]:
    """The thread's ledger version and rows (table name -> field -> encoded row)."""
    keys = place.keys(thread_id)
    tables = (keys.rl, keys.rc, keys.rp)
    archived, *found = yield [("EXISTS", keys.archived), *(("HGETALL", k) for k in tables)]
    if archived:
        raise Archived(thread_id)
    version = ""
    held: dict[str, dict[str, str]] = {}
    for table, rows in zip(LEDGER_TABLES, found, strict=True):
        fields = {_text(f): _text(v) for f, v in dict(rows).items()}
        if table is LEDGER_TABLES[0]:
            version = fields.pop(VERSION, "")
        held[table.name] = fields
    return version, held


def apply(place: Place, snapshot: LedgerSnapshot, thread_id: str, statements: Writes[T]) -> Ops[T]:
    """Run a ledger write's ``statements`` on the thread's rows and store what
    they changed, atomically (again from the start when another writer's rows
    landed in between)."""
    keys = place.keys(thread_id)
    while True:
        version, held = yield from read_ledger(place, thread_id)
        with snapshot.lock:
            snapshot.clear()
            for table in LEDGER_TABLES:
                snapshot.load_encoded(table, held[table.name].values(), thread_id)
            result: T = snapshot.run(statements())
            changed = snapshot.changes(held, thread_id)
            snapshot.clear()
        args: list[Any] = [version, place.ttl_ms]
        for at, table in zip(_TABLE_KEYS, LEDGER_TABLES, strict=True):
            for field, raw in changed.get(table.name, {}).items():
                args += [at, field, raw]
        (stored,) = yield [run(STORE_LEDGER, keys, *args)]
        if stored == ARCHIVED:
            raise Archived(thread_id)
        if stored == 1:
            return result


def _interrupted(fields: list[Any]) -> list[tuple[str, str]]:
    """The top-level tasks that wrote an interrupt, from the thread's write
    fields (``<ns> NUL <checkpoint_id> NUL <task_id> NUL <idx>``: an interrupt's
    idx is LangGraph's own, `WRITES_IDX_MAP`), their values never read."""
    idx = str(WRITES_IDX_MAP[INTERRUPT_CHANNEL])
    found = []
    for raw in fields:
        ns, checkpoint_id, task_id, at = _text(raw).split(SEP)
        if ns == "" and at == idx:
            found.append((checkpoint_id, task_id))
    return found


def read_thread(place: Place, snapshot: LedgerSnapshot, thread_id: str, reads: Writes[T]) -> Ops[T]:
    """Run a reader of one thread's ledger (`_run_summaries.read_thread_ledger`,
    `_run_log_reads.read_run_row`, ``list_run_rows`` of the thread) on its
    rows: its run rows, recoveries, step rows (`_steps`) and interrupts."""
    keys = place.keys(thread_id)
    version, held = yield from read_ledger(place, thread_id)
    del version
    steps, writes = yield [("HVALS", keys.st), ("HKEYS", keys.w)]
    with snapshot.lock:
        snapshot.clear()
        for table in LEDGER_TABLES:
            snapshot.load_encoded(table, held[table.name].values(), thread_id)
        rows = (json.loads(raw) for raw in steps)
        snapshot.load(STEPS, ((thread_id, *(r[c] for c in STEPS.names[1:])) for r in rows))
        snapshot.load_interrupts(thread_id, _interrupted(writes))
        found: T = snapshot.run(reads())
        snapshot.clear()
    return found
