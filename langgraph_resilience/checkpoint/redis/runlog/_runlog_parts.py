"""``saver.history`` of the Redis savers: the run ledger's writes of their own
(``close_run``, ``fail_run``, ``reopen_run``, ``note_recovery``: `_runlog.apply`)
and its readers (what `run_report`, `recovery_metrics`, `list_runs` and
`check_deploy`'s ``heads`` read),
each the SQL savers' statements run on the saver's snapshot (`_runlog_rows`)
loaded with the rows of the threads read. Written once for both twins: a sync
saver drives an operation with ``saver._drive``; an async saver's a-methods
``await`` it and its sync methods send it to the saver's loop.

A reader of one thread reads it with one script (`_runlog.READ_LEDGER`): its run
rows, recoveries, steps, interrupts, tries, effects and `Worker` runs at one
instant. A reader across threads (``thread_id=None``) reads every thread the
index ``P:runlog`` lists and every thread with a `Worker` run, each thread
atomically, one after another (Redis has no snapshot across slots): a write
landing meanwhile on a thread already read is not seen, as if the read came
first for that thread. The SQL savers' reader is one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import langgraph_resilience.checkpoint.redis.ledger._runs as _runs
import langgraph_resilience.checkpoint.redis.runlog._steps as _steps
import langgraph_resilience.checkpoint.runlog._events as _events
import langgraph_resilience.checkpoint.runlog._run_log as _run_log
import langgraph_resilience.checkpoint.runlog._run_log_reads as _run_reads
from langgraph_resilience.checkpoint.ledger._runs import RunRecord
from langgraph_resilience.checkpoint.redis.ledger._effects import unpack
from langgraph_resilience.checkpoint.redis.runlog._runlog import (
    Held,
    apply,
    held_of,
    interrupted,
    load,
    pairs,
    read_command,
    run_row,
    step_of,
    text,
)
from langgraph_resilience.checkpoint.redis.runlog._runlog_rows import LedgerSnapshot
from langgraph_resilience.checkpoint.redis.store._keys import SEP, runlog_key
from langgraph_resilience.checkpoint.redis.store._ops import Ops, Place
from langgraph_resilience.checkpoint.redis.store._records import checkpoint_row, write_channel
from langgraph_resilience.checkpoint.runlog._events import StoredAttempt
from langgraph_resilience.checkpoint.runlog._heads import Head, read_heads
from langgraph_resilience.checkpoint.runlog._run_log_reads import Cursor, RunLogRecord
from langgraph_resilience.checkpoint.runlog._run_metrics import RunCounts, read_metrics
from langgraph_resilience.checkpoint.runlog._run_summaries import (
    ThreadLedger,
    list_summaries,
    read_thread_ledger,
)
from langgraph_resilience.checkpoint.saver._base import unseal
from langgraph_resilience.checkpoint.store._schema import ATTEMPTS, EFFECTS, RUNS, STEPS
from langgraph_resilience.checkpoint.store._store import SQLITE, Statements

__all__ = ["AsyncRedisHistory", "RedisHistory", "read_threads"]

T = TypeVar("T")
Make = Callable[[], Ops[T]]

#: Threads read per round trip by a reader across threads.
READ_BATCH = 64


def _attempt_rows(thread_id: str, flat: Any) -> Iterable[tuple[Any, ...]]:
    """The thread's failed tries (`_attempts`: field -> JSON map of records) as
    `ATTEMPTS` rows."""
    for field, tries in pairs(flat).items():
        ns, checkpoint_id, task_id = field.split(SEP)
        for raw in json.loads(tries).values():
            d = json.loads(raw)
            yield (
                thread_id,
                ns,
                checkpoint_id,
                task_id,
                int(d["attempt"]),
                d["node"],
                d.get("status") or "failed",
                d.get("kind"),
                d.get("error_type"),
                d.get("reason"),
                float(d.get("started_at") or 0.0),
                None if d.get("finished_at") is None else float(d["finished_at"]),
                None if d.get("wait") is None else float(d["wait"]),
                d.get("route"),
            )


def _effect_rows(thread_id: str, values: Iterable[Any]) -> Iterable[tuple[Any, ...]]:
    for raw in values:
        r = unpack(thread_id, raw)
        yield (
            thread_id,
            r.idempotency_key,
            r.checkpoint_ns,
            r.checkpoint_id,
            r.task_id,
            r.name,
            None,
            r.status,
            r.fencing_token,
            r.intent_at,
            r.outcome_at,
            r.outcome_type,
            r.outcome,
            r.error,
            r.owner,
            r.lease_until,
            None,
            r.how,
        )


def _runs_of(flat: Any) -> list[RunRecord]:
    return [_runs.record_of(raw) for f, raw in pairs(flat).items() if not f.startswith(SEP)]


def _load_head(snapshot: LedgerSnapshot, thread_id: str, held: Held) -> None:
    """The thread's head, when read (`read_command`'s ``head``: the record and its
    writes' headers follow the reader's six parts; the head is the first of
    ``held.checkpoints``)."""
    record, writes = held.rest[6:8]
    if not record:
        return
    checkpoint_id = held.checkpoints[0]
    row = checkpoint_row(thread_id, checkpoint_id, bytes(record))
    found = []
    for suffix, header in zip(writes[::2], writes[1::2], strict=True):
        task_id, _, idx = text(suffix).partition(SEP)
        found.append((task_id, int(idx), write_channel(bytes(header))))
    snapshot.load_head(thread_id, checkpoint_id, row, found)


def _load_full(snapshot: LedgerSnapshot, thread_id: str, held: Held) -> list[Any]:
    """A reader's read of one thread into the snapshot (lock held); its takeovers."""
    load(snapshot, thread_id, held)
    steps, marks, tries, effects, _, takeovers = held.rest[:6]
    if len(held.rest) > 6:
        _load_head(snapshot, thread_id, held)
    snapshot.load(STEPS, ((thread_id, *step_of(raw)[1:]) for raw in steps))
    snapshot.load_interrupts(thread_id, interrupted(marks))
    snapshot.load(ATTEMPTS, _attempt_rows(thread_id, tries))
    snapshot.load(EFFECTS, _effect_rows(thread_id, effects))
    return [(thread_id, key, json.loads(raw)) for key, raw in pairs(takeovers).items()]


def read_threads(
    place: Place,
    thread_id: str | None,
    reads: Callable[[], Statements[T]],
    *,
    heads: bool = False,
) -> Ops[T]:
    """Run a reader of the run ledger on one thread's rows, or on every thread's
    (with ``heads``, each thread's head too, read in the same script)."""
    if thread_id is not None:
        threads = [thread_id]
        records: list[RunRecord] | None = None
    else:
        listed = (yield [("ZRANGE", runlog_key(place.prefix), 0, -1)])[0]
        records = yield from _runs.list_runs(place)
        threads = sorted({text(t) for t in listed} | {r.thread_id for r in records})
    helds: list[tuple[str, Held]] = []
    for i in range(0, len(threads), READ_BATCH):
        batch = threads[i : i + READ_BATCH]
        replies = yield [read_command(place.prefix, t, full=True, head=heads) for t in batch]
        helds += [(t, held_of(t, reply)) for t, reply in zip(batch, replies, strict=True)]
    snapshot = place.ledger
    with snapshot.lock:
        snapshot.clear()
        try:
            takeovers = []
            for t, held in helds:
                takeovers += _load_full(snapshot, t, held)
                if records is None:
                    snapshot.load(RUNS, (run_row(r) for r in _runs_of(held.rest[4])))
            if records is not None:
                snapshot.load(RUNS, (run_row(r) for r in records))
            for t, key, note in takeovers:
                at = float(note.get("at") or 0.0)
                cid = note.get("checkpoint_id")
                snapshot.load_takeover(
                    t, key, note.get("run_id"), note.get("owner"), cid or None, at
                )
            found: T = snapshot.run(reads())
        finally:
            snapshot.clear()
    return found


def _apply(place: Place, thread_id: str, statements: Callable[[], Statements[T]]) -> Make[T]:
    return lambda: apply(place.prefix, place.ttl_ms, place.ledger, thread_id, statements)


def _runs_of_thread(place: Place, thread_id: str | None) -> Ops[list[RunRecord]]:
    found = yield from _runs.list_runs(place)
    return [r for r in found if thread_id is None or r.thread_id == thread_id]


class RedisHistory:
    """The run ledger on Redis (`runlog._history.History`'s methods the package
    uses: what `run_report`, `recovery_metrics`, `list_runs`, `check_deploy`
    and the drivers need)."""

    __slots__ = ("_saver",)

    def __init__(self, saver: Any) -> None:
        self._saver = saver

    @property
    def _place(self) -> Place:
        return self._saver.place  # type: ignore[no-any-return]

    def _go(self, make: Make[T]) -> T:
        return self._saver._drive(make)  # type: ignore[no-any-return]

    def _read(self, thread_id: str | None, reads: Callable[[], Statements[T]]) -> Make[T]:
        return lambda: read_threads(self._place, thread_id, reads)

    # -- what each method runs (both twins) ------------------------------------------

    def _m_runs(self, thread_id: str | None) -> Make[list[RunRecord]]:
        return lambda: _runs_of_thread(self._place, thread_id)

    def _m_attempts(self, thread_id: str) -> Make[list[StoredAttempt]]:
        return self._read(thread_id, lambda: _events.read_thread_attempts(SQLITE, thread_id))

    def _unsealed(self, found: list[StoredAttempt]) -> list[StoredAttempt]:
        return [replace(a, reason=unseal(self._saver.serde, a.reason)) for a in found]

    def _m_note(self, thread_id: str, key: str, kind: str, owner: str | None) -> Make[None]:
        note = _events.note_recovery
        return _apply(self._place, thread_id, lambda: note(SQLITE, thread_id, key, kind, owner))

    def _m_run_rows(
        self,
        thread_id: str | None,
        statuses: Sequence[str],
        limit: int,
        before: Cursor | None,
    ) -> Make[list[RunLogRecord]]:
        return self._read(
            thread_id,
            lambda: _run_reads.list_run_rows(
                SQLITE, thread_id=thread_id, statuses=statuses, limit=limit, before=before
            ),
        )

    def _m_metrics(self, since: float | None, nodes: Sequence[str] | None) -> Make[RunCounts]:
        return self._read(None, lambda: read_metrics(SQLITE, since, nodes))

    def _m_summaries(
        self, statuses: Sequence[str] | None, limit: int
    ) -> Make[list[tuple[Any, ...]]]:
        return self._read(None, lambda: list_summaries(SQLITE, statuses, limit))

    def _m_heads(self) -> Make[list[Head]]:
        loads = self._saver.serde.loads_typed
        return lambda: read_threads(
            self._place, None, lambda: read_heads(SQLITE, loads), heads=True
        )

    def _m_thread_ledger(self, thread_id: str) -> Make[ThreadLedger]:
        return self._read(thread_id, lambda: read_thread_ledger(SQLITE, thread_id))

    def _m_run_row(self, thread_id: str, run: int) -> Make[RunLogRecord | None]:
        return self._read(thread_id, lambda: _run_reads.read_run_row(SQLITE, thread_id, run))

    def _m_tally(self, thread_id: str, run: int) -> Make[tuple[dict[str, int], dict[str, float]]]:
        return lambda: _steps.tally(self._place, str(thread_id), run)

    def _m_close(
        self,
        thread_id: str,
        run: int,
        status: str,
        usage: Mapping[str, float] | None,
        started_at: float | None,
    ) -> Make[None]:
        close = _run_log.close_run
        return _apply(
            self._place, thread_id, lambda: close(SQLITE, thread_id, run, status, usage, started_at)
        )

    def _m_reopen(
        self, thread_id: str, run: int, checkpoint_id: str, paths: Sequence[str]
    ) -> Make[None]:
        reopen = _run_log.reopen_run
        return _apply(
            self._place, thread_id, lambda: reopen(SQLITE, thread_id, run, checkpoint_id, paths)
        )

    def _m_fail(
        self, thread_id: str, run: int | None, ended: bool, continued: bool, error: str | None
    ) -> Make[None]:
        fail = _run_log.fail_run
        return _apply(
            self._place,
            thread_id,
            lambda: fail(SQLITE, thread_id, run, ended, continued, error),
        )

    # -- the sync methods --------------------------------------------------------------

    def runs(self, thread_id: str | None = None) -> list[RunRecord]:
        """`Worker` runs, oldest first."""
        return self._go(self._m_runs(thread_id))

    def attempts(self, thread_id: str) -> list[StoredAttempt]:
        """A thread's failed tries, oldest first."""
        return self._unsealed(self._go(self._m_attempts(thread_id)))

    def note_recovery(self, thread_id: str, key: str, kind: str, owner: str | None = None) -> None:
        """Store one recovery of a thread that leaves no write of its own (once per key)."""
        self._go(self._m_note(thread_id, key, kind, owner))

    def run_rows(
        self,
        thread_id: str | None = None,
        *,
        statuses: Sequence[str] = (),
        limit: int = 100,
        before: Cursor | None = None,
    ) -> list[RunLogRecord]:
        """The run ledger's runs, newest first, a page of ``limit``."""
        return self._go(self._m_run_rows(thread_id, statuses, limit, before))

    def metrics(self, since: float | None, nodes: Sequence[str] | None) -> RunCounts:
        """The run ledger's aggregates for `recovery_metrics` (`_run_metrics`)."""
        return self._go(self._m_metrics(since, nodes))

    def summaries(self, statuses: Sequence[str] | None, limit: int) -> list[tuple[Any, ...]]:
        """A page of runs for `list_runs`, newest first (`_run_summaries`)."""
        return self._go(self._m_summaries(statuses, limit))

    def thread_ledger(self, thread_id: str) -> ThreadLedger:
        """One thread's ledger rows, for `run_report` (`_run_summaries`)."""
        return self._go(self._m_thread_ledger(thread_id))

    def heads(self) -> list[Head]:
        """The head of every thread in flight, newest first, for `check_deploy`
        (`runlog._heads.read_heads`, run on each thread's rows and head)."""
        return self._go(self._m_heads())

    def run_row(self, thread_id: str, run: int) -> RunLogRecord | None:
        """One run of a thread, as the run ledger holds it (None: no row)."""
        return self._go(self._m_run_row(thread_id, run))

    def tally(self, thread_id: str, run: int) -> tuple[dict[str, int], dict[str, float]]:
        """A run's loop counts and usage, from its step rows."""
        return self._go(self._m_tally(thread_id, run))

    def close_run(
        self,
        thread_id: str,
        run: int,
        status: str,
        usage: Mapping[str, float] | None = None,
        started_at: float | None = None,
    ) -> None:
        """What a run's driver saw when it returned (`_run_log.close_run`)."""
        self._go(self._m_close(thread_id, run, status, usage, started_at))

    def reopen_run(
        self, thread_id: str, run: int, checkpoint_id: str, paths: Sequence[str]
    ) -> None:
        """`retry_failed` takes up a plain parent's run again (`_run_log.reopen_run`)."""
        self._go(self._m_reopen(thread_id, run, checkpoint_id, paths))

    def fail_run(
        self,
        thread_id: str,
        run: int | None,
        ended: bool,
        continued: bool,
        error: str | None = None,
    ) -> None:
        """A run's driver raised ``error`` (`_run_log.fail_run`)."""
        self._go(self._m_fail(thread_id, run, ended, continued, error))


class AsyncRedisHistory(RedisHistory):
    """`RedisHistory` with the a-prefixed methods of an async saver (its sync
    methods run on the saver's loop)."""

    __slots__ = ()

    def _go(self, make: Make[T]) -> T:
        return self._saver._bridge(self._saver._drive(make))  # type: ignore[no-any-return]

    async def _ago(self, make: Make[T]) -> T:
        drive: Callable[[Make[T]], Coroutine[Any, Any, T]] = self._saver._drive
        return await drive(make)

    async def aruns(self, thread_id: str | None = None) -> list[RunRecord]:
        """Async twin of `runs`."""
        return await self._ago(self._m_runs(thread_id))

    async def aattempts(self, thread_id: str) -> list[StoredAttempt]:
        """Async twin of `attempts`."""
        return self._unsealed(await self._ago(self._m_attempts(thread_id)))

    async def anote_recovery(
        self, thread_id: str, key: str, kind: str, owner: str | None = None
    ) -> None:
        """Async twin of `note_recovery`."""
        await self._ago(self._m_note(thread_id, key, kind, owner))

    async def arun_rows(
        self,
        thread_id: str | None = None,
        *,
        statuses: Sequence[str] = (),
        limit: int = 100,
        before: Cursor | None = None,
    ) -> list[RunLogRecord]:
        """Async twin of `run_rows`."""
        return await self._ago(self._m_run_rows(thread_id, statuses, limit, before))

    async def ametrics(self, since: float | None, nodes: Sequence[str] | None) -> RunCounts:
        return await self._ago(self._m_metrics(since, nodes))

    async def asummaries(self, statuses: Sequence[str] | None, limit: int) -> list[tuple[Any, ...]]:
        return await self._ago(self._m_summaries(statuses, limit))

    async def athread_ledger(self, thread_id: str) -> ThreadLedger:
        return await self._ago(self._m_thread_ledger(thread_id))

    async def aheads(self) -> list[Head]:
        """Async twin of `heads`."""
        return await self._ago(self._m_heads())

    async def arun_row(self, thread_id: str, run: int) -> RunLogRecord | None:
        """Async twin of `run_row`."""
        return await self._ago(self._m_run_row(thread_id, run))

    async def atally(self, thread_id: str, run: int) -> tuple[dict[str, int], dict[str, float]]:
        """Async twin of `tally`."""
        return await self._ago(self._m_tally(thread_id, run))

    async def aclose_run(
        self,
        thread_id: str,
        run: int,
        status: str,
        usage: Mapping[str, float] | None = None,
        started_at: float | None = None,
    ) -> None:
        """Async twin of `close_run`."""
        await self._ago(self._m_close(thread_id, run, status, usage, started_at))

    async def areopen_run(
        self, thread_id: str, run: int, checkpoint_id: str, paths: Sequence[str]
    ) -> None:
        """Async twin of `reopen_run`."""
        await self._ago(self._m_reopen(thread_id, run, checkpoint_id, paths))

    async def afail_run(
        self,
        thread_id: str,
        run: int | None,
        ended: bool,
        continued: bool,
        error: str | None = None,
    ) -> None:
        """Async twin of `fail_run`."""
        await self._ago(self._m_fail(thread_id, run, ended, continued, error))
