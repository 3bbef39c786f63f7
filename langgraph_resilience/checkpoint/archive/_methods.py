"""The lifecycle methods of the resilient savers: ``archive_idle``, the restore
on read, ``prune_history`` (the mixins `SyncArchival` and `AsyncArchival`, in
the bases of `_savers.SyncResilience` and `_asavers.AsyncResilience`).

The restore check costs nothing on a hot thread: it runs only when the hot
read found no checkpoint (one indexed read of the thread's archive row).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig

from langgraph_resilience.checkpoint.archive import _moves
from langgraph_resilience.checkpoint.archive._codec import thread_prefix
from langgraph_resilience.checkpoint.archive._drivers import (
    adrive,
    archive_of_saver,
    drive,
    preparer,
)
from langgraph_resilience.checkpoint.archive._moves import ArchiveReport
from langgraph_resilience.checkpoint.archive._objects import Archive
from langgraph_resilience.checkpoint.saver import _retention
from langgraph_resilience.checkpoint.saver._retention import Pruned
from langgraph_resilience.errors import ArchiveError

__all__ = ["AsyncArchival", "SyncArchival"]

logger = logging.getLogger("langgraph_resilience")

#: Restore outcomes after which a read that found nothing reads again: this call
#: restored the thread, another reader did (maybe since this one's hot read).
READ_AGAIN = ("restored", "lost", "hot")
#: How long an archiver holds a thread before another may take it over.
DEFAULT_CLAIM_TTL = 300.0
Pause = Callable[[str, str], None]


def _thread_of(config: RunnableConfig | None) -> str | None:
    thread_id = ((config or {}).get("configurable") or {}).get("thread_id")
    return None if thread_id is None else str(thread_id)


def _archival(
    saver: Any,
    older_than: timedelta | float,
    limit: int,
    claim_ttl: float,
    pause: Pause | None,
) -> _moves.Moves:
    archive_of_saver(saver)
    return _moves.archive_threads(
        saver._dialect,
        saver.serde.dumps_typed,
        older_than=_moves.seconds_of(older_than, "older_than"),
        now=time.time(),
        limit=limit,
        claim_ttl=claim_ttl,
        pause=pause,
    )


def _restoring(saver: Any, thread_id: str) -> _moves.Moves:
    archive = saver._state.archive
    return _moves.restore(
        saver._dialect,
        thread_id,
        archive.where if archive is not None else str,
        preparer(saver),
        saver._put_statements,
    )


def _pruning(
    saver: Any,
    older_than: timedelta | float | None,
    keep_last: int | None,
    runs_older_than: timedelta | float | None,
    thread_ids: list[str] | None,
) -> Any:
    _retention.check_keep_last(keep_last)
    before = None
    if older_than is not None:
        before = _moves.id_before(time.time() - _moves.seconds_of(older_than, "older_than"))
    runs_idle = None
    if runs_older_than is not None:
        runs_idle = _moves.seconds_of(runs_older_than, "runs_older_than")
    ids = None if thread_ids is None else [str(t) for t in thread_ids]
    d = saver._dialect
    return lambda: _retention.prune_history(
        d, before_id=before, keep_last=keep_last, runs_idle=runs_idle, thread_ids=ids
    )


class SyncArchival:
    """``archive_idle``, ``restore_thread`` and ``prune_history`` of the sync savers."""

    def archive_idle(
        self,
        older_than: timedelta | float = timedelta(hours=24),
        *,
        limit: int = 1000,
        claim_ttl: float = DEFAULT_CLAIM_TTL,
        _pause: Pause | None = None,
    ) -> ArchiveReport:
        """Move threads idle for ``older_than`` (no checkpoint, run or restore since,
        no open run) into this saver's archive: their checkpoints, writes (step
        records included) and node attempts. Runs and side effects stay hot.

        Safe to run from many processes at once and to run again after a crash:
        nothing is deleted hot before its object is confirmed, and an object is
        never written twice.

        Args:
            older_than: idle time (timedelta or seconds).
            limit: at most this many threads per call (call again for more).
            claim_ttl: seconds an archiver holds a thread; a crashed archiver's
                threads are taken over after it.

        Example:
            >>> report = saver.archive_idle(timedelta(hours=24))  # doctest: +SKIP
            >>> report.archived  # doctest: +SKIP
            ['job-41', 'job-42']
        """
        saver: Any = self
        moves = _archival(saver, older_than, limit, claim_ttl, _pause)
        return drive(saver, saver._state.archive, moves)  # type: ignore[no-any-return]

    def restore_thread(self, thread_id: str) -> bool:
        """Bring an archived thread back into the hot tier (reads do it by themselves);
        False if it was not archived or another process restored it first.

        Raises:
            ArchiveError: an object cannot be read (names the thread and the object).
        """
        saver: Any = self
        outcome: str = drive(saver, saver._state.archive, _restoring(saver, str(thread_id)))
        return outcome == "restored"

    def _restored(self, config: RunnableConfig | None) -> bool:
        """After a hot read found nothing: whether the thread was archived (and is
        now restored, by this call or another's)."""
        thread_id = _thread_of(config)
        if thread_id is None:
            return False
        saver: Any = self
        return drive(saver, saver._state.archive, _restoring(saver, thread_id)) in READ_AGAIN

    def _drop_archived(self, thread_id: str) -> None:
        """After a thread's rows were deleted: its objects too (a failure is logged;
        the objects left are dropped or replaced by a later archival of the id)."""
        saver: Any = self
        archive: Archive | None = saver._state.archive
        if archive is not None:
            try:
                archive.drop(archive.keys(thread_prefix(thread_id)))
            except ArchiveError as exc:
                logger.warning("deleted thread %r but not its archived objects: %s", thread_id, exc)

    def prune_history(
        self,
        *,
        older_than: timedelta | float | None = None,
        keep_last: int | None = None,
        runs_older_than: timedelta | float | None = None,
        thread_ids: list[str] | None = None,
    ) -> Pruned:
        """Retention: delete old checkpoints (by age, or beyond the newest
        ``keep_last`` of each namespace; the latest always stays) with their
        writes, node attempts and step rows, and the records of runs that ended
        ``runs_older_than`` ago. Side effects stay (the exactly-once ledger).

        Example:
            >>> month = timedelta(days=30)
            >>> saver.prune_history(keep_last=20, runs_older_than=month)  # doctest: +SKIP
            Pruned(checkpoints=180, runs=12)
        """
        saver: Any = self
        statements = _pruning(saver, older_than, keep_last, runs_older_than, thread_ids)
        return saver._transact(statements)  # type: ignore[no-any-return]


class AsyncArchival:
    """The async twins (``aarchive_idle``, ...), and sync bridges to them."""

    async def aarchive_idle(
        self,
        older_than: timedelta | float = timedelta(hours=24),
        *,
        limit: int = 1000,
        claim_ttl: float = DEFAULT_CLAIM_TTL,
        _pause: Pause | None = None,
    ) -> ArchiveReport:
        """Async twin of `SyncArchival.archive_idle`."""
        saver: Any = self
        moves = _archival(saver, older_than, limit, claim_ttl, _pause)
        return await adrive(saver, saver._state.archive, moves)  # type: ignore[no-any-return]

    async def arestore_thread(self, thread_id: str) -> bool:
        """Async twin of `SyncArchival.restore_thread`."""
        saver: Any = self
        moves = _restoring(saver, str(thread_id))
        outcome: str = await adrive(saver, saver._state.archive, moves)
        return outcome == "restored"

    async def _arestored(self, config: RunnableConfig | None) -> bool:
        thread_id = _thread_of(config)
        if thread_id is None:
            return False
        saver: Any = self
        return await adrive(saver, saver._state.archive, _restoring(saver, thread_id)) in READ_AGAIN

    async def _adrop_archived(self, thread_id: str) -> None:
        """Async twin of `SyncArchival._drop_archived`."""
        saver: Any = self
        archive: Archive | None = saver._state.archive
        if archive is not None:
            try:
                await archive.adrop(await archive.akeys(thread_prefix(thread_id)))
            except ArchiveError as exc:
                logger.warning("deleted thread %r but not its archived objects: %s", thread_id, exc)

    async def aprune_history(
        self,
        *,
        older_than: timedelta | float | None = None,
        keep_last: int | None = None,
        runs_older_than: timedelta | float | None = None,
        thread_ids: list[str] | None = None,
    ) -> Pruned:
        """Async twin of `SyncArchival.prune_history`."""
        saver: Any = self
        statements = _pruning(saver, older_than, keep_last, runs_older_than, thread_ids)
        return await saver._transact(statements)  # type: ignore[no-any-return]

    def _bridged(self, coro: Any) -> Any:
        saver: Any = self
        return saver._bridge(coro)

    def archive_idle(
        self,
        older_than: timedelta | float = timedelta(hours=24),
        *,
        limit: int = 1000,
        claim_ttl: float = DEFAULT_CLAIM_TTL,
    ) -> ArchiveReport:
        """Sync bridge to `aarchive_idle` (from a thread other than the loop's)."""
        return self._bridged(  # type: ignore[no-any-return]
            self.aarchive_idle(older_than, limit=limit, claim_ttl=claim_ttl)
        )

    def restore_thread(self, thread_id: str) -> bool:
        return bool(self._bridged(self.arestore_thread(thread_id)))

    def prune_history(
        self,
        *,
        older_than: timedelta | float | None = None,
        keep_last: int | None = None,
        runs_older_than: timedelta | float | None = None,
        thread_ids: list[str] | None = None,
    ) -> Pruned:
        return self._bridged(  # type: ignore[no-any-return]
            self.aprune_history(
                older_than=older_than,
                keep_last=keep_last,
                runs_older_than=runs_older_than,
                thread_ids=thread_ids,
            )
        )
