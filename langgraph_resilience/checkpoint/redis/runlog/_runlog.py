"""The run ledger on Redis: a thread's run rows, recoveries and recovery paths
(`_runlog_rows`) read whole, decided by the SQL savers' own statements on the
saver's snapshot, and stored back under a compare-and-set of the thread's
ledger version, in the very script of the write they belong to.

- A checkpoint or a task's writes that tell the ledger something (`put` and
  `put_writes` in `_ops`: ``ledger_of_put`` / ``ledger_of_writes`` decide) read
  the thread's rows first (`READ_LEDGER`, one round trip), run
  ``put_statements`` / ``write_statements`` on them (`decide`) and hand the
  changed rows to the ``put`` / ``put_writes`` script (`_scripts.LEDGER`): the
  script stores them only if the thread's ledger version is still the one read
  and only with the checkpoint or writes (after the fence, the fork check, the
  cold-tier guard), so a run row never lands without its checkpoint or writes,
  nor the reverse. A version that moved (another writer of the thread) stores
  nothing: the operation reads and decides again.
- What the driver, ``retry_failed`` and a resume tell the ledger on their own
  (``close_run``, ``fail_run``, ``reopen_run``, ``note_recovery``) is their own
  transaction in SQL too: `apply`, with `STORE_LEDGER` under the same check.
- A write with no ledger rows to store (most: a step whose only statement is
  its step row) carries none (`no_rows`) and costs no read.

The index ``P:runlog`` (`_keys.runlog_key`) lists the threads with ledger rows
for the readers across threads; a thread is added before its rows are stored
(in the same pipeline, before the script), so no row is ever unlisted; an entry
whose thread has no rows (a script refused, a thread expired) finds nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, NamedTuple, TypeVar

from langgraph.checkpoint.base import WRITES_IDX_MAP

from langgraph_resilience._langgraph import INTERRUPT_CHANNEL
from langgraph_resilience.checkpoint.ledger._runs import RunRecord
from langgraph_resilience.checkpoint.redis.runlog._runlog_rows import (
    LEDGER_TABLES,
    LedgerSnapshot,
    changes,
    latest_paused,
)
from langgraph_resilience.checkpoint.redis.store._keys import (
    SEP,
    ThreadKeys,
    ledger_keys,
    runlog_key,
    thread_keys,
)
from langgraph_resilience.checkpoint.redis.store._scripts import (
    _GUARD,
    _RENEW,
    ARCHIVED,
    LEDGER,
    Script,
)
from langgraph_resilience.checkpoint.redis.store._tier import Archived
from langgraph_resilience.checkpoint.store._schema import RUN_LOG, RUNS, STEPS
from langgraph_resilience.checkpoint.store._store import Statements

__all__ = [
    "NO_ROWS",
    "PAUSED",
    "READ_LEDGER",
    "RUNLOG_SCRIPTS",
    "STORE_LEDGER",
    "Decided",
    "Held",
    "apply",
    "decide",
    "read_ledger",
]

T = TypeVar("T")
Command = tuple[Any, ...]
Ops = Generator[list[Command], list[Any], T]

#: The ledger's version field in ``rl``.
VERSION = "\0v"

#: The field of ``rl`` that says the thread's latest run is held, its keys kept
#: without a TTL (``1``; ``0`` or none: they expire, `_scripts._RENEW`): paused
#: (its run row says so), or released by its `Worker` for a durable wait. Stored
#: beside the rows it is decided from, under the same compare-and-set (`decide`).
PAUSED = "\0p"

#: The LEDGER arguments of a write that carries no ledger rows.
NO_ROWS: tuple[str, int] = ("-", 0)

_STEP_AT = ThreadKeys._fields.index("st") + 1

#: KEYS: the thread's, its ledger keys, its ``runs`` and ``recov``. ARGV: 1 for a
#: reader's read (also the steps, the interrupts, the tries, the effects and the
#: `Worker`'s runs and takeovers), 0 for a write's; the interrupt's write index;
#: a step row's field to read ('' none); 1 to read the ledger rows only, also of
#: a thread in the cold tier (whose ledger stays hot: a `Worker`'s end); 1 (with a
#: reader's) to read also the head: the latest top-level checkpoint's record and
#: its writes' ``<task_id>\0<idx>`` and record headers (`check_deploy`). Returns
#: -7 (the thread is in the cold tier), or {rl, rc, rp, latest top-level member,
#: checkpoint ids of run rows that are top-level checkpoints, then the step row
#: (a write's) or the rest}.
READ_LEDGER = Script(
    "read_ledger",
    r"""
if ARGV[4] ~= '1' and redis.call('EXISTS', KEYS[7]) == 1 then return -7 end
local rl = redis.call('HGETALL', KEYS[11])
local tops = {}
for i = 2, #rl, 2 do
  local ok, row = pcall(cjson.decode, rl[i])
  if ok and type(row) == 'table' and type(row[6]) == 'string'
     and redis.call('HEXISTS', KEYS[1], '\0' .. row[6]) == 1 then
    table.insert(tops, row[6])
  end
end
local head = redis.call('ZREVRANGEBYLEX', KEYS[2], '(\1', '[\0', 'LIMIT', 0, 1)
local out = {rl, redis.call('HGETALL', KEYS[12]), redis.call('HGETALL', KEYS[13]), head, tops}
if ARGV[1] == '1' then
  table.insert(out, redis.call('HVALS', KEYS[10]))
  local marks = {}
  local suffix = '\0' .. ARGV[2]
  for _, f in ipairs(redis.call('HKEYS', KEYS[3])) do
    if string.sub(f, 1, 1) == '\0' and string.sub(f, -#suffix) == suffix then
      table.insert(marks, f)
    end
  end
  table.insert(out, marks)
  table.insert(out, redis.call('HGETALL', KEYS[9]))
  table.insert(out, redis.call('HVALS', KEYS[8]))
  table.insert(out, redis.call('HGETALL', KEYS[14]))
  table.insert(out, redis.call('HGETALL', KEYS[15]))
  if ARGV[5] == '1' and head[1] then
    table.insert(out, redis.call('HGET', KEYS[1], head[1]) or '')
    local ws = {}
    for line in string.gmatch(redis.call('HGET', KEYS[4], head[1]) or '', '[^\n]+') do
      local rec = redis.call('HGET', KEYS[3], head[1] .. '\0' .. line)
      if rec then
        table.insert(ws, line)
        table.insert(ws, string.sub(rec, 1, (string.find(rec, '\n', 1, true) or 0) - 1))
      end
    end
    table.insert(out, ws)
  end
elseif ARGV[3] ~= '' then
  table.insert(out, redis.call('HGET', KEYS[10], ARGV[3]) or '')
else
  table.insert(out, '')
end
return out
""",
)

#: KEYS: the thread's, then its ledger keys. ARGV: ttl_ms, then the ledger's rows
#: (`_scripts.LEDGER`, at 2). Returns 1 (stored, the thread's TTL renewed), 0
#: (the ledger moved: decide again) or -7 (the thread is in the cold tier).
STORE_LEDGER = Script(
    "store_ledger",
    _RENEW
    + _GUARD
    + LEDGER
    + r"""
if ledger_moved(2) then return 0 end
ledger_store(2)
renew(ARGV[1])
return 1
""",
)

RUNLOG_SCRIPTS: tuple[Script, ...] = (READ_LEDGER, STORE_LEDGER)


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def pairs(flat: list[Any]) -> dict[str, str]:
    """A ``HGETALL`` reply as a dict of texts (flat, or already a dict)."""
    if isinstance(flat, dict):
        return {text(k): text(v) for k, v in flat.items()}
    return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)}


def script_keys(prefix: str, thread_id: str) -> tuple[str, ...]:
    """A ledger script's KEYS: the thread's, then its ledger keys."""
    return (*thread_keys(prefix, thread_id), *ledger_keys(prefix, thread_id))


def read_keys(prefix: str, thread_id: str) -> tuple[str, ...]:
    base = f"{prefix}:{{{thread_id}}}"
    return (*script_keys(prefix, thread_id), f"{base}:runs", f"{base}:recov")


class Held(NamedTuple):
    """A thread's ledger as `READ_LEDGER` found it."""

    version: str
    rows: dict[str, dict[str, str]]  # table name -> field -> encoded row
    checkpoints: list[str]  # top-level checkpoint ids the statements may look for
    step: str  # a write's step row as stored ('' none)
    rest: list[Any]  # a reader's: steps, interrupts, tries, effects, runs, takeovers
    paused: bool = False  # the thread is held (`PAUSED`), as stored


def _interrupt_idx() -> str:
    return str(WRITES_IDX_MAP[INTERRUPT_CHANNEL])


def held_of(thread_id: str, reply: Any) -> Held:
    if isinstance(reply, int) and reply == ARCHIVED:
        raise Archived(thread_id)
    found = [pairs(reply[i]) for i in range(3)]
    version = found[0].pop(VERSION, "")
    paused = found[0].pop(PAUSED, "") == "1"
    head = [text(m)[1:] for m in reply[3]]
    tops = [text(c) for c in reply[4]]
    rest = list(reply[5:])
    step = text(rest[0]) if len(rest) == 1 else ""
    rows = {t.name: f for t, f in zip(LEDGER_TABLES, found, strict=True)}
    return Held(version, rows, [*head, *tops], step, rest if len(rest) > 1 else [], paused)


def read_command(
    prefix: str,
    thread_id: str,
    *,
    full: bool,
    step_field: str = "",
    rows_only: bool = False,
    head: bool = False,
) -> Command:
    keys = read_keys(prefix, thread_id)
    return (
        "EVALSHA",
        READ_LEDGER.sha,
        len(keys),
        *keys,
        "1" if full else "0",
        _interrupt_idx(),
        step_field,
        "1" if rows_only else "0",
        "1" if head else "0",
    )


def read_ledger(prefix: str, thread_id: str, step_field: str = "") -> Ops[Held]:
    """The thread's ledger, as a write decides on it (and its step row if asked)."""
    reply = (yield [read_command(prefix, thread_id, full=False, step_field=step_field)])[0]
    return held_of(thread_id, reply)


def load(snapshot: LedgerSnapshot, thread_id: str, held: Held) -> None:
    """The thread's ledger rows into the snapshot (with the lock held)."""
    for table in LEDGER_TABLES:
        snapshot.load_encoded(table, held.rows[table.name].values(), thread_id)
    snapshot.load_checkpoints(thread_id, held.checkpoints)


def step_of(raw: str | bytes) -> tuple[Any, ...]:
    """A step row as ``st`` keeps it (JSON of its columns) as a `STEPS` row."""
    found = json.loads(raw)
    return tuple(found.get(c) for c in STEPS.names)


class Decided(NamedTuple):
    """What a write's ledger statements changed: the LEDGER arguments of its
    script (the version they were decided on, checked even when no row
    changed, and the changed rows), a new step row (its field and row: stored
    once, as the SQL ``ON CONFLICT DO NOTHING``) and what the statements
    returned."""

    args: tuple[Any, ...]
    step: tuple[str, str] | None
    result: Any

    @property
    def stores(self) -> bool:
        """Whether rows are stored (else at most the version is checked)."""
        return bool(self.args[0] != "-" and int(self.args[1]) > 0)


def decide(
    snapshot: LedgerSnapshot,
    thread_id: str,
    held: Held,
    statements: Callable[[], Statements[Any]],
    *,
    rl: int = 11,
    runs: Sequence[RunRecord] = (),
    waiting: bool = False,
) -> Decided:
    """Run a write's ledger statements on the thread's rows (and ``runs``, its
    `Worker` runs the statements join); the rows they changed, as the LEDGER
    arguments of a script whose KEYS[rl] is the thread's ``rl``, with `PAUSED`
    when it changes: the thread's latest run paused after them, or ``waiting``
    (its `Worker` releases it for a durable wait)."""
    at = {t.name: rl + i for i, t in enumerate(LEDGER_TABLES)}
    with snapshot.lock:
        snapshot.clear()
        try:
            load(snapshot, thread_id, held)
            snapshot.load(RUNS, (run_row(r) for r in runs))
            if held.step:
                snapshot.load(STEPS, [(thread_id, *step_of(held.step)[1:])])
            before = snapshot.encoded(thread_id)
            result = snapshot.run(statements())
            after = snapshot.encoded(thread_id)
        finally:
            snapshot.clear()
    changed = changes(before, after)
    triples: list[Any] = []
    for table in LEDGER_TABLES:
        for field, raw in changed.get(table.name, {}).items():
            triples += [at[table.name], field, raw]
    new_step = None
    for field, raw in changed.get(STEPS.name, {}).items():
        if field in before[STEPS.name]:
            triples += [_STEP_AT, field, raw]  # a functional task's row, replaced
        else:
            new_step = (field, raw)
    held_now = waiting or latest_paused(after[RUN_LOG.name].values())
    if held_now != held.paused:
        triples += [rl, PAUSED, "1" if held_now else "0"]
    # No row changed is a decision too, on the rows read: the script checks the
    # version all the same (a write landing in between may change the verdict).
    return Decided((held.version, len(triples) // 3, *triples), new_step, result)


def run_row(record: RunRecord) -> tuple[Any, ...]:
    """A `Worker` run's record as its `RUNS` row."""
    return tuple(getattr(record, c) for c in RUNS.names)


def index(prefix: str, thread_id: str) -> Command:
    """The thread listed among those with ledger rows (before its rows land)."""
    return ("ZADD", runlog_key(prefix), "NX", int(time.time() * 1000), thread_id)


def apply(
    prefix: str,
    ttl_ms: int,
    snapshot: LedgerSnapshot,
    thread_id: str,
    statements: Callable[[], Statements[T]],
) -> Ops[T]:
    """A ledger write of its own (``close_run``, ``note_recovery``, ...): run on
    the thread's rows and stored with one script (read and decided again when
    another writer's rows landed in between)."""
    keys = script_keys(prefix, thread_id)
    while True:
        held = yield from read_ledger(prefix, thread_id)
        decided = decide(snapshot, thread_id, held, statements)
        if not decided.stores:
            return decided.result  # type: ignore[no-any-return]
        command = ("EVALSHA", STORE_LEDGER.sha, len(keys), *keys, ttl_ms, *decided.args)
        stored = (yield [index(prefix, thread_id), command])[1]
        if stored == ARCHIVED:
            raise Archived(thread_id)
        if stored == 1:
            return decided.result  # type: ignore[no-any-return]


def interrupted(fields: list[Any]) -> list[tuple[str, str]]:
    """(checkpoint_id, task_id) of the top-level interrupt writes `READ_LEDGER`
    found (their fields: ``NUL <checkpoint_id> NUL <task_id> NUL <idx>``)."""
    found = []
    for raw in fields:
        _, checkpoint_id, task_id, _ = text(raw).split(SEP)
        found.append((checkpoint_id, task_id))
    return found
