"""Shared limits on Redis, written once for both twins: acquire, pause, renew,
read, and the releases that ride the saver's next write (`_ops`-style
generators the savers drive; the scripts are `_limits_lua`).

The semantics are the SQL savers' (`ledger._limits`): a try asks for every
limit it names at once and holds all or none; a limit refuses on a pause, a
full set of live holds or a full rate window, judged by the server's clock; a
hold names its process, so an acquirer on its machine that finds it gone
(SIGKILLed) drops its holds at once (``dead``), and elsewhere a hold ends when
its lease runs out (renewed while its try runs).

A limit is global: its keys are under a hash tag of its own (`_keys.limit_keys`),
so each limit's check and take is one script, atomic. A try under several limits
sends one script per limit, in name order, in one round trip; when one refuses,
what the others took for it is given back at once (a second round trip). In
between, another try may find those limits taken a moment (it waits, as for a
full limit): never more admitted than the bounds, at worst one less for a
moment.

A release costs no round trip of its own, as on SQL: its holds ride the saver's
next write (`releasing`, in the first round trip of every write of the saver:
its checkpoints and writes, the ledgers', and the acquires, pauses and renewals
here), else are stored on their own within `_releases.BOUND` (a write of
`nothing`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from langgraph_resilience.checkpoint.ledger._limits import Admission, LimitAsk, LimitRow, window
from langgraph_resilience.checkpoint.ledger._releases import PendingReleases, Waiting
from langgraph_resilience.checkpoint.redis.ledger._limits_lua import (
    LIMIT_ACQUIRE,
    LIMIT_PAUSE,
    LIMIT_RENEW,
)
from langgraph_resilience.checkpoint.redis.store._keys import limit_keys, limits_key
from langgraph_resilience.checkpoint.redis.store._ops import Command, Ops, Place, T, run

__all__ = ["acquire", "nothing", "pause", "read", "releasing", "renew"]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _number(value: int) -> str:
    return str(value) if value else ""


def _stored(conc: Any, rate: Any, per: Any) -> tuple[int | None, int | None, float | None]:
    c, r, p = _text(conc), _text(rate), _text(per)
    return (int(c) if c else None, int(r) if r else None, float(p) if p else None)


def _ms(seconds: float) -> str:
    return repr(max(0.0, float(seconds)) * 1000)


def _answer(ask: LimitAsk, reply: Sequence[Any]) -> Admission:
    why, rest = _text(reply[0]), list(reply[1:])
    if why == "ok":
        return Admission()
    if why == "mismatch":
        return Admission("mismatch", name=ask.name, stored=_stored(*rest))
    if why == "full":
        holders = tuple(sorted({_text(h) for h in rest}))
        return Admission("full", None, ask.name, holders=holders)
    return Admission(why, float(_text(rest[0])), ask.name)


def _undo(place: Place, asks: Sequence[LimitAsk], hold: str) -> list[Command]:
    """Give back what ``hold`` took of ``asks`` (a slot, a start)."""
    undo: list[Command] = []
    for ask in asks:
        keys = limit_keys(place.prefix, ask.name)
        if ask.concurrency:
            undo.append(("HDEL", keys.holds, hold))
        if ask.rate:
            undo.append(("ZREM", keys.starts, hold))
    return undo


def acquire(
    place: Place,
    asks: Sequence[LimitAsk],
    hold: str,
    holder: str,
    lease: float,
    dead: Sequence[str],
    blamed: str,
    waited: float,
) -> Ops[Admission]:
    """Take every limit of ``asks`` for the hold ``hold`` of ``holder``, or none.

    ``dead``: holders judged gone (their holds are dropped); ``waited``: seconds
    the try waited since its last acquire, added to the limit ``blamed``.
    """
    asks = sorted(asks)
    batch: list[Command] = [("SADD", limits_key(place.prefix), *(a.name for a in asks))]
    for ask in asks:
        batch.append(
            run(
                LIMIT_ACQUIRE,
                limit_keys(place.prefix, ask.name),
                _number(ask.concurrency),
                _number(ask.rate),
                repr(float(ask.per)),
                hold,
                holder,
                _ms(lease),
                _ms(window(ask.per)),
                repr(float(waited)) if ask.name == blamed and waited > 0 else "0",
                *dead,
            )
        )
    replies = yield batch
    answers = [_answer(ask, reply) for ask, reply in zip(asks, replies[1:], strict=True)]
    refused = next((a for a in answers if not a.admitted), None)
    if refused is None:
        return Admission()
    taken = [ask for ask, a in zip(asks, answers, strict=True) if a.admitted]
    if taken:
        yield _undo(place, taken, hold)
    return refused


def pause(place: Place, paused: Sequence[str], seconds: float, reason: str = "") -> Ops[None]:
    """Pause ``paused`` for ``seconds`` from now (a longer pause already set stays)."""
    yield [
        run(LIMIT_PAUSE, limit_keys(place.prefix, name), _ms(seconds), reason[:500])
        for name in paused
    ]


def renew(place: Place, hold: str, names: Sequence[str], lease: float) -> Ops[bool]:
    """Extend a hold's lease on ``names`` while its try runs; False once it is
    held on none of them."""
    if not names:
        return False
    replies = yield [run(LIMIT_RENEW, limit_keys(place.prefix, n), hold, _ms(lease)) for n in names]
    return any(int(r) for r in replies)


def _free(place: Place, holds: Mapping[str, Waiting]) -> list[Command]:
    return [
        ("HDEL", limit_keys(place.prefix, name).holds, hold)
        for hold, w in sorted(holds.items())
        for name in w.names
    ]


def releasing(releases: PendingReleases, place: Place, op: Ops[T]) -> Ops[T]:
    """``op`` with the slots of ended tries freed in its first round trip (before
    its own commands); given back if that round trip fails (freeing one again
    is a no-op)."""
    taken = releases.take_all()
    if not taken:
        return (yield from op)
    freed = _free(place, taken)
    try:
        try:
            batch = next(op)
        except StopIteration as stop:  # nothing of its own to write
            yield freed
            return stop.value  # type: ignore[no-any-return]
        replies = yield freed + batch
    except BaseException:
        releases.give_back(taken)
        raise
    try:
        batch = op.send(replies[len(freed) :])
        while True:
            batch = op.send((yield batch))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def nothing() -> Ops[None]:
    """A write of nothing but what rides it (the slots waiting: ``flush``)."""
    return
    yield  # a generator with no round trip


def _now_ms(reply: Any) -> float:
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) / 1000


def _fields(raw: Any) -> dict[str, str]:
    if isinstance(raw, dict):
        return {_text(k): _text(v) for k, v in raw.items()}
    items = list(raw)
    return {_text(items[i]): _text(items[i + 1]) for i in range(0, len(items), 2)}


def read(place: Place, ended: Collection[str] = ()) -> Ops[list[LimitRow]]:
    """Every limit on the server, by name, with its live holds and the starts of
    its current window; ``ended``: holds whose tries ended, still to be freed
    (left out)."""
    (names,) = yield [("SMEMBERS", limits_key(place.prefix))]
    found = sorted(_text(n) for n in names)
    if not found:
        return []
    batch: list[Command] = [("TIME",)]
    for name in found:
        keys = limit_keys(place.prefix, name)
        batch += [
            ("HGETALL", keys.definition),
            ("HGETALL", keys.holds),
            ("ZRANGE", keys.starts, 0, -1, "WITHSCORES"),
        ]
    replies = yield batch
    now = _now_ms(replies[0])
    rows = []
    for i, name in enumerate(found):
        definition, holds, starts = replies[1 + 3 * i : 4 + 3 * i]
        d = _fields(definition)
        if not d:
            continue
        conc, rate, per = _stored(d.get("concurrency", ""), d.get("rate", ""), d.get("per", ""))
        live = []
        for hold, value in _fields(holds).items():
            holder, until, since = value.rsplit("\n", 2)
            if float(until) >= now and hold not in ended:
                live.append((float(since), holder))
        window_start = now - float(per or 0.0) * 1000
        paused_until = float(d.get("paused_until") or 0.0)
        rows.append(
            LimitRow(
                name=name,
                concurrency=conc,
                rate=rate,
                per=per,
                holders=tuple(h for _, h in sorted(live)),
                starts=sum(1 for _, score in _scored(starts) if score > window_start),
                paused_for=max(0.0, (paused_until - now) / 1000),
                pause_reason=d.get("pause_reason"),
                waited=float(d.get("waited") or 0.0),
            )
        )
    return rows


def _scored(reply: Any) -> list[tuple[str, float]]:
    items = list(reply)
    if items and isinstance(items[0], (list, tuple)):
        return [(_text(m), float(s)) for m, s in items]
    return [(_text(items[i]), float(items[i + 1])) for i in range(0, len(items), 2)]
