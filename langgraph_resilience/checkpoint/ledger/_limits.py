"""The store side of shared limits (`langgraph_resilience.limits`): acquire,
pause, renew and read, both dialects, and the saver interfaces that run them.

An acquire asks for every limit of a try at once and takes all or none: for
each limit (sorted by name, so two acquirers lock in one order) it creates the
limit's row or checks its numbers, then refuses on a pause, a full set of live
holds or a full rate window; admitted by all, it stores a start (rate) and a
hold (concurrency) for each. Postgres runs those steps in one stored function,
one round trip (`_schema._PG_LIMIT_ACQUIRE`); SQLite runs the same
steps here, in one immediate transaction. Times are the store's clock
(`Dialect.now`).

A try's release costs no round trip of its own: its holds ride the saver's
next write (`_releases`), which in a node is the try's own; a ``Retry-After``
pauses its limits at once (`pause_limits`).

A hold names its process (`_process.process_id`): an acquirer on the same
machine, boot and PID namespace that finds that process gone (SIGKILLed) drops
its holds at once (``dead``), as the effect claims judge their holders;
elsewhere a hold ends when its lease runs out (renewed while the try runs).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, NamedTuple

from langgraph_resilience.checkpoint.ledger._releases import PendingReleases, Waiting, log_failure
from langgraph_resilience.checkpoint.saver._parts import AsyncPart as _AsyncPart
from langgraph_resilience.checkpoint.saver._parts import Part as _Part
from langgraph_resilience.checkpoint.store._schema import LIMIT_HOLDS, LIMIT_STARTS, LIMITS
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt

__all__ = [
    "Admission",
    "window",
    "AsyncLimits",
    "LimitAsk",
    "LimitRow",
    "Limits",
    "acquire",
    "nothing",
    "pause_limits",
    "read_limits",
    "renew",
]


def window(per: float) -> float:
    """How long a start counts against a rate of ``per`` seconds: ``per`` and a
    guard (2.5%, at most 25 ms) for the moment between a try's admission and
    its start, so the starts the tries see keep to the rate too (the Postgres
    function computes the same)."""
    return per + min(0.025, per * 0.025)


class LimitAsk(NamedTuple):
    """One limit as an acquire asks for it (0: no such bound)."""

    name: str
    concurrency: int
    rate: int
    per: float


class Admission(NamedTuple):
    """What an acquire answered: admitted (``why`` empty), or why not.

    ``why``: ``paused`` / ``rate`` (``wait``: seconds until it may admit),
    ``full`` (``holders``: the processes holding its slots), ``mismatch`` (the
    store holds the limit ``name`` with other numbers: ``stored``).
    """

    why: str = ""
    wait: float | None = None
    name: str = ""
    stored: tuple[int | None, int | None, float | None] = (None, None, None)
    holders: tuple[str, ...] = ()

    @property
    def admitted(self) -> bool:
        return not self.why


def _stored(row: Sequence[Any]) -> tuple[int | None, int | None, float | None]:
    conc, rate, per = row
    return (
        None if conc is None else int(conc),
        None if rate is None else int(rate),
        None if per is None else float(per),
    )


def _numbers_differ(ask: LimitAsk, stored: tuple[int | None, int | None, float | None]) -> bool:
    conc, rate, per = stored
    return (
        conc != (ask.concurrency or None)
        or rate != (ask.rate or None)
        or (rate is not None and per != ask.per)
    )


def acquire(
    d: Dialect,
    asks: Sequence[LimitAsk],
    hold: str,
    holder: str,
    lease: float,
    dead: Sequence[str],
    blamed: str,
    waited: float,
) -> Statements[Admission]:
    """Take every limit of ``asks`` for the hold ``hold`` of ``holder``, or none.

    ``dead``: holders judged gone (their holds are dropped); ``waited``: seconds
    the try waited since its last acquire, added to the limit ``blamed``.
    """
    asks = sorted(asks)
    if d.procedures:
        rows = yield Stmt(
            d.sql(
                "SELECT * FROM resilience_limit_acquire(?::text[], ?::integer[], ?::integer[], "
                "?::float8[], ?, ?, ?, ?::text[], ?, ?)"
            ),
            (
                [a.name for a in asks],
                [a.concurrency for a in asks],
                [a.rate for a in asks],
                [a.per for a in asks],
                hold,
                holder,
                lease,
                list(dead),
                blamed,
                waited,
            ),
            fetch=True,
        )
        wait, why, name, conc, rate, per, holders = rows[0]
        return Admission(
            why=str(why or ""),
            wait=None if wait is None else float(wait),
            name=str(name or ""),
            stored=_stored((conc, rate, per)),
            holders=tuple(holders or ()),
        )
    return (yield from _sqlite_acquire(d, asks, hold, holder, lease, dead, blamed, waited))


def _sqlite_acquire(
    d: Dialect,
    asks: Sequence[LimitAsk],
    hold: str,
    holder: str,
    lease: float,
    dead: Sequence[str],
    blamed: str,
    waited: float,
) -> Statements[Admission]:
    """`acquire`'s steps, one statement each (the caller's immediate transaction)."""
    now = float((yield Stmt(d.sql("SELECT NOW()"), fetch=True))[0][0])
    if waited > 0:
        yield Stmt(
            d.sql(f"UPDATE {LIMITS.name} SET waited = waited + ? WHERE name = ?"), (waited, blamed)
        )
    for ask in asks:
        yield Stmt(
            d.sql(
                f"INSERT INTO {LIMITS.name} (name, concurrency, rate, per, waited, created_at) "
                "VALUES (?, ?, ?, ?, 0, ?) ON CONFLICT DO NOTHING"
            ),
            (ask.name, ask.concurrency or None, ask.rate or None, ask.per, now),
        )
        row = (
            yield Stmt(
                d.sql(
                    f"SELECT concurrency, rate, per, paused_until FROM {LIMITS.name} WHERE name = ?"
                ),
                (ask.name,),
                fetch=True,
            )
        )[0]
        stored = _stored(row[:3])
        if _numbers_differ(ask, stored):
            return Admission("mismatch", name=ask.name, stored=stored)
        if row[3] is not None and float(row[3]) > now:
            return Admission("paused", float(row[3]) - now, ask.name, stored)
        if ask.concurrency:
            held = yield Stmt(
                d.sql(f"SELECT holder, lease_until FROM {LIMIT_HOLDS.name} WHERE name = ?"),
                (ask.name,),
                fetch=True,
            )
            live = [str(h) for h, until in held if float(until) >= now and h not in dead]
            if len(live) < len(held):
                yield Stmt(
                    d.sql(
                        f"DELETE FROM {LIMIT_HOLDS.name} WHERE name = ? "
                        "AND (lease_until < ? OR holder IN_LIST(?))"
                    ),
                    (ask.name, now, d.list_param(dead)),
                )
            if len(live) >= ask.concurrency:
                return Admission("full", None, ask.name, stored, tuple(sorted(set(live))))
        if ask.rate:
            since = now - window(ask.per)
            yield Stmt(
                d.sql(f"DELETE FROM {LIMIT_STARTS.name} WHERE name = ? AND at <= ?"),
                (ask.name, since),
            )
            count, oldest = (
                yield Stmt(
                    d.sql(
                        f"SELECT count(*), min(at) FROM {LIMIT_STARTS.name} "
                        "WHERE name = ? AND at > ?"
                    ),
                    (ask.name, since),
                    fetch=True,
                )
            )[0]
            if int(count) >= ask.rate:
                return Admission("rate", float(oldest) + window(ask.per) - now, ask.name, stored)
    for ask in asks:
        if ask.rate:
            yield Stmt(
                d.sql(f"INSERT INTO {LIMIT_STARTS.name} (name, hold, at) VALUES (?, ?, ?)"),
                (ask.name, hold, now),
            )
        if ask.concurrency:
            yield Stmt(
                d.sql(
                    f"INSERT INTO {LIMIT_HOLDS.name} (name, hold, holder, since, lease_until) "
                    "VALUES (?, ?, ?, ?, ?)"
                ),
                (ask.name, hold, holder, now, now + lease),
            )
    return Admission()


def pause_limits(
    d: Dialect, paused: Sequence[str], pause: float, reason: str = ""
) -> Statements[None]:
    """Pause ``paused`` for ``pause`` seconds from now (a longer pause already set
    stays). Nothing is fetched: on Postgres it is one round trip, with the
    slots waiting to be freed (`_releases`) riding along.

    Acquires, pauses and the releases that ride them commit without waiting for
    the disk (``relaxed``): a crash of the machine (SQLite) or of the server
    (Postgres) may lose the last of them, which costs a slot until its holder
    is judged gone or its lease runs out, or lets one more try start; an fsync
    per try would cost more. A release that rides a durable write (a node's
    writes) is as durable as it."""
    relax = "" if d.relax_commit is None else f" AND {d.relax_commit}"  # no WAL flush
    yield Stmt(
        d.sql(
            f"UPDATE {LIMITS.name} SET paused_until = NOW() + ?, pause_reason = ? "
            "WHERE name IN_LIST(?) AND (paused_until IS NULL OR paused_until < NOW() + ?)" + relax
        ),
        (pause, reason[:500], d.list_param(paused), pause),
    )


def nothing() -> Statements[None]:
    """A write of nothing but what rides it (`Limits.flush`)."""
    return
    yield


def renew(d: Dialect, hold: str, lease: float) -> Statements[bool]:
    """Extend a hold's lease while its try runs; False once it is not held."""
    rows = yield Stmt(
        d.sql(f"UPDATE {LIMIT_HOLDS.name} SET lease_until = NOW() + ? WHERE hold = ? RETURNING 1"),
        (lease, hold),
        fetch=True,
    )
    return bool(rows)


@dataclass(frozen=True, kw_only=True, slots=True)
class LimitRow:
    """A limit as the store holds it now (`read_limits`).

    Attributes:
        holders: the processes holding its slots (one entry per hold).
        starts: tries started in the current window of ``per`` seconds.
        paused_for: seconds its pause still lasts (0: not paused).
        waited: seconds tries waited for it, in all.
    """

    name: str
    concurrency: int | None
    rate: int | None
    per: float | None
    holders: tuple[str, ...]
    starts: int
    paused_for: float
    pause_reason: str | None
    waited: float


def read_limits(d: Dialect, ended: Collection[str] = ()) -> Statements[list[LimitRow]]:
    """Every limit in the store, by name, with its live holds and starts;
    ``ended``: holds whose tries ended, still to be freed (left out)."""
    now = float((yield Stmt(d.sql("SELECT NOW()"), fetch=True))[0][0])
    limits = yield Stmt(
        f"SELECT name, concurrency, rate, per, paused_until, pause_reason, waited "
        f"FROM {LIMITS.name} ORDER BY name",
        fetch=True,
    )
    holds = yield Stmt(
        d.sql(
            f"SELECT name, holder, hold FROM {LIMIT_HOLDS.name} WHERE lease_until >= ? "
            "ORDER BY since"
        ),
        (now,),
        fetch=True,
    )
    holds = [(n, h) for n, h, hold in holds if hold not in ended]
    starts = yield Stmt(
        d.sql(
            f"SELECT s.name, count(*) FROM {LIMIT_STARTS.name} s JOIN {LIMITS.name} l "
            "ON l.name = s.name WHERE s.at > ? - l.per GROUP BY s.name"
        ),
        (now,),
        fetch=True,
    )
    started = {str(n): int(c) for n, c in starts}
    found = []
    for name, conc, rate, per, paused_until, reason, waited in limits:
        stored = _stored((conc, rate, per))
        found.append(
            LimitRow(
                name=str(name),
                concurrency=stored[0],
                rate=stored[1],
                per=stored[2],
                holders=tuple(str(h) for n, h in holds if n == name),
                starts=started.get(str(name), 0),
                paused_for=max(0.0, float(paused_until or 0.0) - now),
                pause_reason=None if reason is None else str(reason),
                waited=float(waited or 0.0),
            )
        )
    return found


# -- the interfaces --------------------------------------------------------------------------


#: How an acquire is written, by ``Dialect.procedures``: on Postgres one round trip,
#: alone; on SQLite at once (an immediate transaction).
_TAKING: dict[bool, dict[str, Any]] = {
    p: {"pipeline": p, "alone": p, "relaxed": True} for p in (True, False)
}


class Limits(_Part):
    """Shared limits on a sync saver (`langgraph_resilience.limits` runs them)."""

    __slots__ = ()

    def acquire(
        self,
        asks: Sequence[LimitAsk],
        hold: str,
        holder: str,
        lease: float,
        dead: Sequence[str] = (),
        blamed: str = "",
        waited: float = 0.0,
    ) -> Admission:
        """Take every limit of ``asks``, or none (`acquire`)."""
        d = self._saver._dialect
        return self._io._write(
            lambda: acquire(d, asks, hold, holder, lease, dead, blamed, waited),
            **_TAKING[d.procedures],
        )

    def defer(self, hold: str, names: tuple[str, ...], lease: float) -> None:
        """Free the hold ``hold`` on ``names`` (its try ended) with the saver's next
        write, or on its own within `_releases.BOUND` (`flush`)."""
        forget_at = time.monotonic() + lease
        self._saver._state.releases.add(hold, Waiting(names, forget_at), self.flush)

    def pause(self, paused: Sequence[str], pause: float, reason: str = "") -> None:
        """Pause limits after a ``Retry-After`` (`pause_limits`), at once."""
        d = self._saver._dialect
        self._io._write(
            lambda: pause_limits(d, paused, pause, reason), pipeline=d.procedures, relaxed=True
        )

    def flush(self) -> None:
        """Free the slots waiting for a write (`_releases`) in a write of their own."""
        d = self._saver._dialect
        self._io._write(nothing, pipeline=d.procedures, relaxed=True)

    def renew(self, hold: str, lease: float, names: Sequence[str] = ()) -> bool:
        """Extend a hold's lease (`renew`; ``names``, the limits it holds, are for
        a store that finds a hold by its limit: Redis)."""
        d = self._saver._dialect
        return self._io._write(lambda: renew(d, hold, lease))

    def read(self) -> list[LimitRow]:
        """Every limit in the store (`read_limits`), as it is once this saver's
        releases waiting for a write are stored."""
        d, ended = self._saver._dialect, self._saver._state.releases.waiting
        return self._io._query(lambda: read_limits(d, ended))


def _logged(pending: PendingReleases) -> Callable[[Future[None]], None]:
    def logged(done: Future[None]) -> None:
        if not done.cancelled() and (exc := done.exception()) is not None:
            log_failure(pending, exc)

    return logged


class AsyncLimits(Limits, _AsyncPart):
    """`Limits` with the a-prefixed methods of an async saver."""

    __slots__ = ()

    async def aacquire(self, *ask: Any) -> Admission:
        """Async twin of `Limits.acquire` (its arguments, in its order)."""
        d = self._saver._dialect
        return await self._saver._write(lambda: acquire(d, *ask), **_TAKING[d.procedures])

    async def apause(self, paused: Sequence[str], pause: float, reason: str = "") -> None:
        """Async twin of `Limits.pause`."""
        d = self._saver._dialect
        await self._saver._write(
            lambda: pause_limits(d, paused, pause, reason), pipeline=d.procedures, relaxed=True
        )

    def flush(self) -> None:
        """`Limits.flush` on the saver's event loop, not waited for (called from
        the releases' thread, which serves every saver of the process)."""
        write = self._flushing()
        try:
            done = asyncio.run_coroutine_threadsafe(write, self._saver.loop)  # type: ignore[attr-defined]
        except BaseException:  # the loop is closed: the saver is gone with it
            write.close()
            raise
        done.add_done_callback(_logged(self._saver._state.releases))

    def _flushing(self) -> Coroutine[Any, Any, None]:
        """The write `flush` runs on the saver's loop."""
        d = self._saver._dialect
        return self._saver._write(nothing, pipeline=d.procedures, relaxed=True)

    async def aread(self) -> list[LimitRow]:
        """Async twin of `Limits.read`."""
        d, ended = self._saver._dialect, self._saver._state.releases.waiting
        return await self._saver._query(lambda: read_limits(d, ended))
