"""A thread's run ledger rows on Redis (`_runlog_rows`), read and written whole:
a ledger write reads the thread's rows, runs the SQL savers' statements on the
snapshot, and stores the rows they changed with one script, under a
compare-and-set of the thread's ledger version (changed meanwhile: read again,
decide again), so two writers of a thread never lose each other's rows.

Keys (the thread's hash tag, so one script touches one slot):

- ``P:{T}:rl`` (hash): run -> the run row; field ``\\0v``: the ledger's version;
- ``P:{T}:rc`` (hash): key -> a recovery row;
- ``P:{T}:rp`` (hash): key NUL path -> a recovery path row.

Not wired into the savers yet (docs/redis.md, "The run log on Redis").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from langgraph_resilience.checkpoint.redis._ops import Ops, Place, run
from langgraph_resilience.checkpoint.redis._runlog_rows import LEDGER_TABLES, LedgerSnapshot
from langgraph_resilience.checkpoint.redis._scripts import ARCHIVED, Script
from langgraph_resilience.checkpoint.redis._tier import Archived
from langgraph_resilience.checkpoint.store._store import Statements

__all__ = ["LedgerKeys", "RUNLOG_SCRIPTS", "STORE_LEDGER", "apply", "ledger_keys", "read_ledger"]

T = TypeVar("T")

VERSION = "\0v"


class LedgerKeys(NamedTuple):
    rl: str
    rc: str
    rp: str
    archived: str


def ledger_keys(place: Place, thread_id: str) -> LedgerKeys:
    base = f"{place.prefix}:{{{thread_id}}}"
    return LedgerKeys(f"{base}:rl", f"{base}:rc", f"{base}:rp", place.keys(thread_id).archived)


#: KEYS: rl, rc, rp, the cold-tier marker. ARGV: the version read (empty: none),
#: ttl_ms, then (table 1..3, field, row) triples. Returns 1 (stored), 0 (the
#: version moved: decide again) or -7 (the thread is in the cold tier).
STORE_LEDGER = Script(
    "store_ledger",
    r"""
if redis.call('EXISTS', KEYS[4]) == 1 then return -7 end
local v = redis.call('HGET', KEYS[1], '\0v')
if (v or '') ~= ARGV[1] then return 0 end
for i = 3, #ARGV, 3 do redis.call('HSET', KEYS[tonumber(ARGV[i])], ARGV[i + 1], ARGV[i + 2]) end
redis.call('HINCRBY', KEYS[1], '\0v', 1)
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  for i = 1, 3 do
    if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end
return 1
""",
)

RUNLOG_SCRIPTS: tuple[Script, ...] = (STORE_LEDGER,)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_ledger(place: Place, thread_id: str) -> Ops[tuple[str, dict[str, dict[str, str]]]]:
    """The thread's ledger version and rows (table name -> field -> encoded row)."""
    keys = ledger_keys(place, thread_id)
    archived, *found = yield [("EXISTS", keys.archived), *(("HGETALL", k) for k in keys[:3])]
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


def apply(
    place: Place,
    snapshot: LedgerSnapshot,
    thread_id: str,
    statements: Callable[[], Statements[T]],
) -> Ops[T]:
    """Run a ledger write's ``statements`` on the thread's rows and store what
    they changed, atomically (again from the start when another writer's rows
    landed in between)."""
    keys = ledger_keys(place, thread_id)
    while True:
        version, held = yield from read_ledger(place, thread_id)
        with snapshot.lock:
            snapshot.clear()
            for table in LEDGER_TABLES:
                snapshot.load_encoded(table, held[table.name].values())
            result: T = snapshot.run(statements())
            changed = snapshot.changes(held, thread_id)
            snapshot.clear()
        args: list[Any] = [version, place.ttl_ms]
        for i, table in enumerate(LEDGER_TABLES, start=1):
            for field, raw in changed.get(table.name, {}).items():
                args += [i, field, raw]
        (stored,) = yield [run(STORE_LEDGER, keys, *args)]
        if stored == ARCHIVED:
            raise Archived(thread_id)
        if stored == 1:
            return result
