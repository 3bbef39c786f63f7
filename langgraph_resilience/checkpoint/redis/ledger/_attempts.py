"""The attempts ledger on Redis: a task's failed tries in the thread's ``at`` hash
(`_keys`), under the field ``<ns>\\0<checkpoint_id>\\0<task_id>``: a JSON map of
the try's number to its record (JSON too), replaced whole by one script
(`_effects_lua.ATTEMPT`), so a try stored again (a retried write) is the same
try. The operations are written once for both twins (`_effects_parts` drives them).
"""

from __future__ import annotations

import json
from dataclasses import asdict

from langgraph_resilience.checkpoint.ledger._ledger import AttemptKey, AttemptRecord
from langgraph_resilience.checkpoint.ledger._runs import Fence
from langgraph_resilience.checkpoint.redis.ledger._effects_lua import ATTEMPT
from langgraph_resilience.checkpoint.redis.ledger._runs_fence import fence_command
from langgraph_resilience.checkpoint.redis.store._keys import SEP
from langgraph_resilience.checkpoint.redis.store._ops import Ops, Place, _hot, run
from langgraph_resilience.checkpoint.redis.store._tier import Archived

__all__ = ["read_attempts", "record_attempt"]

#: The float fields of a try, kept as text (exact through Lua's ``cjson``).
_TIMES = ("finished_at", "wait")


def _field(key: AttemptKey) -> str:
    _, ns, checkpoint_id, task_id = key
    return SEP.join((ns, checkpoint_id, task_id))


def pack_attempt(record: AttemptRecord, started_at: float) -> str:
    d = asdict(record)
    for name in _TIMES:
        d[name] = None if d[name] is None else repr(float(d[name]))
    d["started_at"] = repr(float(started_at))
    return json.dumps(d)


def unpack_attempt(raw: str) -> AttemptRecord:
    d = json.loads(raw)
    d.pop("started_at", None)
    for name in _TIMES:
        d[name] = None if d[name] is None else float(d[name])
    return AttemptRecord(**d)


def record_attempt(
    place: Place,
    key: AttemptKey,
    record: AttemptRecord,
    started_at: float,
    fence: Fence | None = None,
) -> Ops[None]:
    """Store a failed try (before the wait that follows it), idempotently; fenced
    under a `Worker`."""
    thread_id = key[0]
    packed = pack_attempt(record, started_at)
    command = run(
        ATTEMPT,
        place.script_keys(thread_id),
        _field(key),
        str(record.attempt),
        packed,
        place.ttl_ms,
    )
    reply = yield [
        fence_command(place.prefix, thread_id, command, fence),
        place.registered(thread_id),
    ]
    _hot(reply[0], thread_id)


def read_attempts(place: Place, key: AttemptKey) -> Ops[list[AttemptRecord]]:
    """The failed tries stored for a task, by number."""
    keys = place.keys(key[0])
    archived, raw = yield [("EXISTS", keys.archived), ("HGET", keys.at, _field(key))]
    if archived:
        raise Archived(key[0])
    tries = {} if raw is None else json.loads(raw)
    return [unpack_attempt(tries[n]) for n in sorted(tries, key=int)]
