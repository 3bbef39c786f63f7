"""The effect ledger on Redis, written once for both twins: an effect's record in
the thread's ``fx`` hash (`_keys`), its operations (`_ops`-style generators the
savers drive) and the outcomes written behind, riding with the next write.

The semantics are the SQL ledger's (`ledger._ledger`): the intent is stored
before the call and held under a lease (`CLAIM`), a holder judged gone is taken
over by compare-and-set (`TAKE`, `judge_intent`), the holder renews its lease
while the call runs (`RENEW`), the outcome is stored as the call returns
(`OUTCOMES`, with its checksum, checked on every read). Each is one Lua script
(`_effects_lua`) on the thread's keys, so it expires, moves to the cold tier and
comes back with the thread's checkpoints. Under ``appendfsync always`` a
script's effects are on disk before its reply, as the SQL savers' durable
commit (``docs/redis.md``).

A record is JSON: the `EffectRecord` fields, times as text (exact through Lua),
the lease as milliseconds of the server's clock, the outcome's bytes in base64,
its sum and the arguments' digest.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any

from langgraph_resilience._util._process import executor_alive
from langgraph_resilience.checkpoint.ledger._ledger import (
    EffectRecord,
    IntentVerdict,
    OutcomeFields,
    PendingOutcomes,
    judge_intent,
)
from langgraph_resilience.checkpoint.ledger._runs import Fence
from langgraph_resilience.checkpoint.redis.ledger._effects_lua import CLAIM, OUTCOMES, RENEW, TAKE
from langgraph_resilience.checkpoint.redis.ledger._runs_fence import fence_command
from langgraph_resilience.checkpoint.redis.store._ops import Command, Ops, Place, T, _hot, run
from langgraph_resilience.checkpoint.redis.store._tier import Archived
from langgraph_resilience.checkpoint.store._sums import effect_mismatch, outcome_sum

__all__ = [
    "claim",
    "flush",
    "list_effects",
    "read_effect",
    "record_outcome",
    "renew",
    "riding",
]

#: How often a claim re-judges a record that changed hands under it.
_CLAIM_TRIES = 3


def _time(value: float | None) -> str | None:
    return None if value is None else repr(float(value))


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _blob(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _ms(seconds: float) -> int:
    return max(0, int(seconds * 1000))


def pack_intent(record: EffectRecord, args_digest: str | None) -> str:
    r = record
    return json.dumps(
        {
            "idempotency_key": r.idempotency_key,
            "name": r.name,
            "status": "intent",
            "intent_at": _time(r.intent_at),
            "outcome_at": None,
            "outcome_type": None,
            "outcome": None,
            "error": None,
            "checkpoint_ns": r.checkpoint_ns,
            "checkpoint_id": r.checkpoint_id,
            "task_id": r.task_id,
            "owner": r.owner,
            "fencing_token": r.fencing_token,
            "how": None,
            "outcome_sum": None,
            "args_digest": args_digest,
        }
    )


def pack_outcome(key: str, fields: OutcomeFields) -> str:
    f = fields
    return json.dumps(
        {
            "status": f.status,
            "outcome_at": _time(f.at),
            "outcome_type": f.outcome_type,
            "outcome": _blob(f.outcome),
            "error": f.error,
            "how": f.how,
            "outcome_sum": outcome_sum(key, f.status, f.outcome_type, f.outcome, f.error),
        }
    )


def unpack(thread_id: str, raw: bytes | str) -> EffectRecord:
    """A stored record, once its outcome matches its sum (an intent has none).

    Raises:
        CheckpointCorrupt: naming the thread, the effect's checkpoint and its key.
    """
    d = json.loads(raw)
    lease = d.get("lease_until")
    token = d.get("fencing_token")
    r = EffectRecord(
        idempotency_key=d["idempotency_key"],
        name=d["name"],
        status=d["status"],
        intent_at=float(d["intent_at"]),
        outcome_at=_float(d.get("outcome_at")),
        outcome_type=d.get("outcome_type"),
        outcome=None if d.get("outcome") is None else base64.b64decode(d["outcome"]),
        error=d.get("error"),
        checkpoint_ns=d.get("checkpoint_ns") or "",
        checkpoint_id=d.get("checkpoint_id") or "",
        task_id=d.get("task_id") or "",
        owner=d.get("owner"),
        lease_until=None if lease is None else float(lease) / 1000,
        fencing_token=None if token is None else int(token),
        how=d.get("how"),
    )
    stored = d.get("outcome_sum")
    actual = outcome_sum(r.idempotency_key, r.status, r.outcome_type, r.outcome, r.error)
    if stored is not None and int(stored) != actual:
        raise effect_mismatch(
            thread_id, r.checkpoint_ns, r.checkpoint_id, r.name, r.idempotency_key
        )
    return r


# -- reads ---------------------------------------------------------------------------------


def read_effect(place: Place, thread_id: str, key: str) -> Ops[EffectRecord | None]:
    keys = place.keys(thread_id)
    archived, raw = yield [("EXISTS", keys.archived), ("HGET", keys.fx, key)]
    if archived:
        raise Archived(thread_id)
    return None if raw is None else unpack(thread_id, raw)


def list_effects(place: Place, thread_id: str) -> Ops[list[EffectRecord]]:
    """A thread's effects, by intent time then key (as the SQL savers list them)."""
    keys = place.keys(thread_id)
    archived, found = yield [("EXISTS", keys.archived), ("HVALS", keys.fx)]
    if archived:
        raise Archived(thread_id)
    records = [unpack(thread_id, raw) for raw in found]
    return sorted(records, key=lambda r: (r.intent_at, r.idempotency_key))


# -- writes --------------------------------------------------------------------------------


def _found(thread_id: str, reply: list[Any]) -> tuple[EffectRecord, float]:
    return unpack(thread_id, reply[1]), int(reply[2]) / 1000


def claim(
    place: Place,
    thread_id: str,
    record: EffectRecord,
    args_digest: str | None,
    lease: float,
    fence: Fence | None = None,
) -> Ops[IntentVerdict]:
    """Store the intent, held by ``record.owner`` for ``lease`` seconds, or find who
    holds it and take it over when its holder is gone (`_ledger.claim_intent`).
    The first ``CLAIM`` wins a race for the key; a takeover is a compare-and-set
    on the holder judged gone, so two takers cannot both win either. Under a
    `Worker` both are fenced by its run's token (`_runs_fence`)."""
    r, keys, ttl = record, place.script_keys(thread_id), place.ttl_ms

    def fenced(command: Command) -> Command:
        return fence_command(place.prefix, thread_id, command, fence)

    reply = yield [
        fenced(run(CLAIM, keys, r.idempotency_key, pack_intent(r, args_digest), _ms(lease), ttl)),
        place.registered(thread_id),
    ]
    reply = _hot(reply[0], thread_id)
    if int(reply[0]) == 1:
        return IntentVerdict("new")
    found, now = _found(thread_id, reply)
    for _ in range(_CLAIM_TRIES):
        alive = None if found.owner is None else executor_alive(found.owner)
        verdict = judge_intent(found, r, now, alive)
        if verdict == "busy":
            return IntentVerdict("busy", found, max(0.0, (found.lease_until or now) - now))
        if verdict == "done":
            return IntentVerdict("done", found)
        token = "" if r.fencing_token is None else str(r.fencing_token)
        taken = yield [
            fenced(
                run(
                    TAKE,
                    keys,
                    r.idempotency_key,
                    found.status,
                    found.owner or "",
                    r.owner or "",
                    token,
                    _ms(lease),
                    ttl,
                )
            )
        ]
        taken = _hot(taken[0], thread_id)
        if int(taken[0]) == 1:
            return IntentVerdict("took_over", found)
        if len(taken) < 3:  # deleted under us (the thread was deleted)
            break
        found, now = _found(thread_id, taken)
    return IntentVerdict("busy", found, 0.0)  # it changed hands under us each time


def renew(place: Place, thread_id: str, key: str, owner: str, lease: float) -> Ops[bool]:
    """Extend the holder's lease while its call runs (0: let it go now); False
    once it is no longer held."""
    keys = place.script_keys(thread_id)
    reply = yield [run(RENEW, keys, key, owner, _ms(lease), place.ttl_ms)]
    return bool(_hot(reply[0], thread_id))


def outcome_commands(
    place: Place, outcomes: dict[tuple[str, str], OutcomeFields], *, again: bool = False
) -> list[tuple[str, Command]]:
    """One ``OUTCOMES`` script a thread (its keys' slot), for these outcomes."""
    by_thread: dict[str, list[Any]] = {}
    for (thread_id, key), fields in sorted(outcomes.items()):
        by_thread.setdefault(thread_id, []).extend(
            (key, "1" if again else "0", pack_outcome(key, fields))
        )
    return [
        (t, run(OUTCOMES, place.script_keys(t), place.ttl_ms, *args))
        for t, args in by_thread.items()
    ]


def _checked(sent: Iterable[tuple[str, Command]], replies: Iterable[Any]) -> None:
    for (thread_id, _), reply in zip(sent, replies, strict=True):
        _hot(reply, thread_id)


def record_outcome(
    place: Place, thread_id: str, key: str, fields: OutcomeFields, fence: Fence | None = None
) -> Ops[None]:
    """The outcome (or the error) after the call, stored at once: one script, on
    disk before its reply under ``appendfsync always``; fenced under a `Worker`."""
    sent = [
        (t, fence_command(place.prefix, t, c, fence))
        for t, c in outcome_commands(place, {(thread_id, key): fields})
    ]
    _checked(sent, (yield [c for _, c in sent]))


def riding(outcomes: PendingOutcomes, place: Place, op: Ops[T]) -> Ops[T]:
    """``op`` with the outcomes written behind stored first, in its first round
    trip (before its own commands, so its write carries them); given back if that
    round trip fails (storing one again is a no-op)."""
    taken = outcomes.take_all()
    if not taken:
        return (yield from op)
    try:
        sent = outcome_commands(place, taken)
        try:
            batch = next(op)
        except StopIteration as stop:  # nothing of its own to write
            _checked(sent, (yield [c for _, c in sent]))
            return stop.value  # type: ignore[no-any-return]
        replies = yield [c for _, c in sent] + batch
        _checked(sent, replies[: len(sent)])
    except BaseException:
        outcomes.give_back(taken)
        raise
    try:
        batch = op.send(replies[len(sent) :])
        while True:
            batch = op.send((yield batch))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def flush(outcomes: PendingOutcomes, place: Place) -> Ops[None]:
    """Store every outcome written behind now (a saver closing)."""
    yield from riding(outcomes, place, _nothing())


def _nothing() -> Ops[None]:
    return
    yield  # a generator with no round trip
