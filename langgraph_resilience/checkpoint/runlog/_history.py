"""The saver's ``history`` part: what `recovery_metrics`, `run_report` and
`list_runs` read (see `_events`, `_run_log_reads`, `_run_metrics`), the
recoveries that leave no write of their own, the driver's word on how a run
returned (`_run_log.close_run`), and the heads of threads in flight (`_heads`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import langgraph_resilience.checkpoint.runlog._events as _events
import langgraph_resilience.checkpoint.runlog._run_log as _run_log
import langgraph_resilience.checkpoint.runlog._run_log_reads as _run_reads
import langgraph_resilience.checkpoint.store._storage as _storage
from langgraph_resilience.checkpoint.ledger._runs import RunRecord
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
from langgraph_resilience.checkpoint.saver._parts import AsyncPart as _AsyncPart
from langgraph_resilience.checkpoint.saver._parts import Part as _Part
from langgraph_resilience.checkpoint.store._storage import ThreadStorage

__all__ = ["AsyncHistory", "History"]


class History(_Part):
    """What `recovery_metrics` and `run_report` read, of one thread or of all
    (``thread_id=None``), and the recoveries that leave no write of their own
    (see `_events`); the run ledger's runs (`_run_log`: ``run_rows``,
    ``run_row``) and the driver's word on how a run returned (``close_run``)."""

    __slots__ = ()

    def runs(self, thread_id: str | None = None) -> list[RunRecord]:
        """`Worker` runs, oldest first."""
        d = self._saver._dialect
        return self._io._query(lambda: _events.read_thread_runs(d, thread_id))

    def attempts(self, thread_id: str) -> list[StoredAttempt]:
        """A thread's failed tries, oldest first."""
        d = self._saver._dialect
        found = self._io._query(lambda: _events.read_thread_attempts(d, thread_id))
        return [replace(a, reason=unseal(self._saver.serde, a.reason)) for a in found]

    def storage(self, thread_id: str) -> ThreadStorage:
        """What one thread takes up: bytes per channel, checkpoints, writes, ledger rows."""
        d, serde = self._saver._dialect, self._saver.serde
        return self._io._query(
            lambda: _storage.read_storage(d, thread_id, serde.loads_typed, serde.dumps_typed)
        )

    def note_recovery(self, thread_id: str, key: str, kind: str, owner: str | None = None) -> None:
        """Store one recovery of a thread that leaves no write of its own (once per key)."""
        d = self._saver._dialect
        self._io._write(lambda: _events.note_recovery(d, thread_id, key, kind, owner))

    # -- the run ledger (`_run_log`) ---------------------------------------------------

    def run_rows(
        self,
        thread_id: str | None = None,
        *,
        statuses: Sequence[str] = (),
        limit: int = 100,
        before: Cursor | None = None,
    ) -> list[RunLogRecord]:
        """The run ledger's runs, newest first, a page of ``limit`` (of one thread,
        in ``statuses``, after ``before``: `_run_log_reads.cursor_of` the page's last)."""
        d = self._saver._dialect
        return self._io._query(
            lambda: _run_reads.list_run_rows(
                d, thread_id=thread_id, statuses=statuses, limit=limit, before=before
            )
        )

    def metrics(self, since: float | None, nodes: Sequence[str] | None) -> RunCounts:
        """The run ledger's aggregates for `recovery_metrics` (`_run_metrics`)."""
        return self._io._query(lambda: read_metrics(self._saver._dialect, since, nodes))

    def summaries(self, statuses: Sequence[str] | None, limit: int) -> list[tuple[Any, ...]]:
        """A page of runs for `list_runs`, newest first (`_run_summaries`)."""
        return self._io._query(lambda: list_summaries(self._saver._dialect, statuses, limit))

    def thread_ledger(self, thread_id: str) -> ThreadLedger:
        """One thread's ledger rows, for `run_report` (`_run_summaries`)."""
        return self._io._query(lambda: read_thread_ledger(self._saver._dialect, thread_id))

    def heads(self) -> list[Head]:
        """The head of every thread in flight, for `check_deploy` (`_heads`)."""
        d, serde = self._saver._dialect, self._saver.serde
        return self._io._query(lambda: read_heads(d, serde.loads_typed))

    def run_row(self, thread_id: str, run: int) -> RunLogRecord | None:
        """One run of a thread, as the run ledger holds it (None: no row)."""
        d = self._saver._dialect
        return self._io._query(lambda: _run_reads.read_run_row(d, thread_id, run))

    def tally(self, thread_id: str, run: int) -> tuple[dict[str, int], dict[str, float]]:
        """A run's loop counts and usage, from its step rows (`_run_log_reads.read_tally`)."""
        d = self._saver._dialect
        return self._io._query(lambda: _run_reads.read_tally(d, thread_id, run))

    def close_run(
        self,
        thread_id: str,
        run: int,
        status: str,
        usage: Mapping[str, float] | None = None,
        started_at: float | None = None,
    ) -> None:
        """What a run's driver saw when it returned (`_run_log.close_run`)."""
        d = self._saver._dialect
        close = _run_log.close_run
        self._io._write(lambda: close(d, thread_id, run, status, usage, started_at), pipeline=True)

    def reopen_run(
        self, thread_id: str, run: int, checkpoint_id: str, paths: Sequence[str]
    ) -> None:
        """`retry_failed` takes up a plain parent's run again (`_run_log.reopen_run`)."""
        d = self._saver._dialect
        reopen = _run_log.reopen_run
        self._io._write(lambda: reopen(d, thread_id, run, checkpoint_id, paths), pipeline=True)

    def fail_run(
        self,
        thread_id: str,
        run: int | None,
        ended: bool,
        continued: bool,
        error: str | None = None,
    ) -> None:
        """A run's driver raised ``error`` (`_run_log.fail_run`)."""
        d = self._saver._dialect
        fail = _run_log.fail_run
        self._io._write(lambda: fail(d, thread_id, run, ended, continued, error), pipeline=True)


class AsyncHistory(History, _AsyncPart):
    """`History` with the a-prefixed methods of an async saver."""

    __slots__ = ()

    async def aruns(self, thread_id: str | None = None) -> list[RunRecord]:
        """Async twin of `History.runs`."""
        d = self._saver._dialect
        return await self._saver._query(lambda: _events.read_thread_runs(d, thread_id))

    async def aattempts(self, thread_id: str) -> list[StoredAttempt]:
        """Async twin of `History.attempts`."""
        d = self._saver._dialect
        found = await self._saver._query(lambda: _events.read_thread_attempts(d, thread_id))
        return [replace(a, reason=unseal(self._saver.serde, a.reason)) for a in found]

    async def astorage(self, thread_id: str) -> ThreadStorage:
        """Async twin of `History.storage`."""
        d, serde = self._saver._dialect, self._saver.serde
        return await self._saver._query(
            lambda: _storage.read_storage(d, thread_id, serde.loads_typed, serde.dumps_typed)
        )

    async def aheads(self) -> list[Head]:
        """Async twin of `History.heads`."""
        d, serde = self._saver._dialect, self._saver.serde
        return await self._saver._query(lambda: read_heads(d, serde.loads_typed))

    async def anote_recovery(
        self, thread_id: str, key: str, kind: str, owner: str | None = None
    ) -> None:
        """Async twin of `History.note_recovery`."""
        d = self._saver._dialect
        await self._saver._write(lambda: _events.note_recovery(d, thread_id, key, kind, owner))

    async def arun_rows(
        self,
        thread_id: str | None = None,
        *,
        statuses: Sequence[str] = (),
        limit: int = 100,
        before: Cursor | None = None,
    ) -> list[RunLogRecord]:
        """Async twin of `History.run_rows`."""
        d = self._saver._dialect
        return await self._saver._query(
            lambda: _run_reads.list_run_rows(
                d, thread_id=thread_id, statuses=statuses, limit=limit, before=before
            )
        )

    async def ametrics(self, since: float | None, nodes: Sequence[str] | None) -> RunCounts:
        return await self._saver._query(lambda: read_metrics(self._saver._dialect, since, nodes))

    async def asummaries(self, statuses: Sequence[str] | None, limit: int) -> list[tuple[Any, ...]]:
        d = self._saver._dialect
        return await self._saver._query(lambda: list_summaries(d, statuses, limit))

    async def athread_ledger(self, thread_id: str) -> ThreadLedger:
        d = self._saver._dialect
        return await self._saver._query(lambda: read_thread_ledger(d, thread_id))

    async def arun_row(self, thread_id: str, run: int) -> RunLogRecord | None:
        """Async twin of `History.run_row`."""
        d = self._saver._dialect
        return await self._saver._query(lambda: _run_reads.read_run_row(d, thread_id, run))

    async def atally(self, thread_id: str, run: int) -> tuple[dict[str, int], dict[str, float]]:
        """Async twin of `History.tally`."""
        d = self._saver._dialect
        return await self._saver._query(lambda: _run_reads.read_tally(d, thread_id, run))

    async def aclose_run(
        self,
        thread_id: str,
        run: int,
        status: str,
        usage: Mapping[str, float] | None = None,
        started_at: float | None = None,
    ) -> None:
        """Async twin of `History.close_run`."""
        d = self._saver._dialect
        close = _run_log.close_run
        write = lambda: close(d, thread_id, run, status, usage, started_at)  # noqa: E731
        await self._saver._write(write, pipeline=True)

    async def areopen_run(
        self, thread_id: str, run: int, checkpoint_id: str, paths: Sequence[str]
    ) -> None:
        """Async twin of `History.reopen_run`."""
        d = self._saver._dialect
        reopen = _run_log.reopen_run
        write = lambda: reopen(d, thread_id, run, checkpoint_id, paths)  # noqa: E731
        await self._saver._write(write, pipeline=True)

    async def afail_run(
        self,
        thread_id: str,
        run: int | None,
        ended: bool,
        continued: bool,
        error: str | None = None,
    ) -> None:
        """Async twin of `History.fail_run`."""
        d = self._saver._dialect
        fail = _run_log.fail_run
        write = lambda: fail(d, thread_id, run, ended, continued, error)  # noqa: E731
        await self._saver._write(write, pipeline=True)
