"""`ResilientRedisSaver`: a LangGraph checkpointer on plain Redis >= 7 (no modules).

``aio``: its async twin, `AsyncResilientRedisSaver`. Beside the twins, three
rooms, as the SQL savers' ``store/``, ``ledger/`` and ``runlog/``:
``store/`` (how a thread is kept: the key schema, the Lua that stores and reads
it, the records, every operation written once for both twins, the driver, the
server's durability, the cold tier, the save counters), ``ledger/`` (what a step
leaves outside its checkpoint: effects, failed attempts, shared `Limit`s, the run
queue under leases) and ``runlog/`` (the run ledger: step rows, run rows and
recoveries, and what `run_report`, `recovery_metrics`, `list_runs` and
`check_deploy` read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import redis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

import langgraph_resilience.checkpoint.redis.ledger._runs as _runs
from langgraph_resilience.checkpoint.archive._moves import ArchiveReport
from langgraph_resilience.checkpoint.archive._objects import Archive
from langgraph_resilience.checkpoint.archive._sizes import DEFAULT_WARN_BYTES
from langgraph_resilience.checkpoint.redis.ledger._runs_saver import RunsSaver
from langgraph_resilience.checkpoint.redis.runlog import _steps
from langgraph_resilience.checkpoint.redis.runlog._runlog_parts import RedisHistory
from langgraph_resilience.checkpoint.redis.store import _ops
from langgraph_resilience.checkpoint.redis.store._common import (
    DEFAULT_TTL,
    RedisCommon,
    check_version,
    config_reply,
    judge,
)
from langgraph_resilience.checkpoint.redis.store._counts import counted, read_counts
from langgraph_resilience.checkpoint.redis.store._driver import ALL_SCRIPTS, drive, retried
from langgraph_resilience.checkpoint.redis.store._durability import Durability
from langgraph_resilience.checkpoint.redis.store._ops import Ops, T
from langgraph_resilience.checkpoint.redis.store._tier import Archived, pack_dumps, unpack_dumps
from langgraph_resilience.checkpoint.runlog import _run_end, _run_log
from langgraph_resilience.checkpoint.saver import _threads
from langgraph_resilience.checkpoint.saver._base import flush_quietly
from langgraph_resilience.checkpoint.store._counters import (
    CHECKPOINT_FAILED,
    CHECKPOINT_OK,
    WRITES_FAILED,
)
from langgraph_resilience.errors import ArchiveError
from langgraph_resilience.policy import Backoff

__all__ = ["ResilientRedisSaver"]


class ResilientRedisSaver(RunsSaver, RedisCommon):
    """A checkpointer on plain Redis: atomic checkpoints and writes (Lua), a
    second put of a checkpoint a no-op, no silent forks (`CheckpointConflict`),
    checksums on every read, a TTL on each thread renewed by every write.

    Args:
        conn: a ``redis.Redis`` or ``redis.RedisCluster`` client (bytes replies:
            ``decode_responses=False``; docs/redis.md, Redis Cluster).
        prefix: the first part of every key (docs/redis.md, the key schema).
        ttl: how long a thread's keys live after its last write (None: forever).
        store_retry: how a transient Redis error is retried.
        serde: LangGraph's serializer (default: ``JsonPlusSerializer``).
        archive: the cold tier (an `Archive` or its URL): keys then never expire,
            and `archive_idle` demotes threads idle past ``ttl`` (`_tier`).
        warn_checkpoint_bytes: the size budget, as the SQL savers': a warning
            (naming the largest channels) above this many bytes.
        max_checkpoint_bytes: a refusal (`ConfigError`, nothing stored) above this.

    Example:
        >>> with ResilientRedisSaver.from_conn_string("redis://127.0.0.1:6379/0") as saver:
        ...     saver.setup()  # doctest: +SKIP
    """

    def __init__(
        self,
        conn: redis.Redis | redis.RedisCluster,
        *,
        prefix: str = "lgr",
        ttl: float | timedelta | None = DEFAULT_TTL,
        store_retry: Backoff | None = None,
        serde: SerializerProtocol | None = None,
        archive: Archive | str | None = None,
        warn_checkpoint_bytes: int | None = DEFAULT_WARN_BYTES,
        max_checkpoint_bytes: int | None = None,
    ) -> None:
        super().__init__(
            conn,
            prefix=prefix,
            ttl=ttl,
            store_retry=store_retry,
            serde=serde,
            archive=archive,
            warn_checkpoint_bytes=warn_checkpoint_bytes,
            max_checkpoint_bytes=max_checkpoint_bytes,
        )

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Iterator[ResilientRedisSaver]:
        """A saver on a new client for ``redis://`` (or ``rediss://``, ``unix://``) URL."""
        conn = redis.Redis.from_url(conn_string, decode_responses=False)
        try:
            saver = cls(conn, **kwargs)
            yield saver
            flush_quietly(saver._state, saver.effects.flush)  # outcomes written behind
        finally:
            conn.close()

    def _run(self, op: Ops[T], failed: str | None = None) -> T:
        return drive(self.conn, op, self.backoff, self.target, self._failed(failed))

    def _drive(self, make: Callable[[], Ops[T]], failed: str | None = None) -> T:
        """Run an operation (each failed try counted as ``failed``, a save counter);
        on a thread in the cold tier, restore it and run again."""
        while True:
            try:
                return self._run(make(), failed)
            except Archived as found:
                self._restore(found.thread_id)

    def _restore(self, thread_id: str) -> None:
        key = self._run(_ops.archived_object(self.place, thread_id))
        if key is not None:  # else another client restored it meanwhile
            archive = self._archive_for(thread_id)
            try:
                body = archive.read(key)
            except ArchiveError:
                if self._run(_ops.archived_object(self.place, thread_id)) != key:
                    return  # another client restored it (and dropped the object) first
                raise
            if self._run(_ops.restore(self.place, thread_id, unpack_dumps(body))):
                archive.drop([key])

    def archive_idle(
        self,
        older_than: float | timedelta | None = None,
        *,
        limit: int = 1000,
        thread_ids: Sequence[str] = (),
    ) -> ArchiveReport:
        """Demote threads to the cold tier: those idle for ``older_than`` (default:
        the saver's ``ttl``; at most ``limit``), or the given ``thread_ids``. A
        thread written while it is being moved stays hot (``skipped``); one whose
        object could not be stored stays hot too (``failed``).

        Example:
            >>> saver.archive_idle(older_than=3600).archived  # doctest: +SKIP
            ['job-41', 'job-42']
        """
        idle = self._idle_ms(older_than)
        archive = self._archive_for("")
        threads = list(thread_ids) or self._run(_ops.idle_threads(self.place, idle, limit))
        report = ArchiveReport(archived=[], skipped=[], failed={})
        for thread_id in threads:
            dumps = self._run(_ops.dump_thread(self.place, thread_id))
            if dumps is None:
                continue
            key = self._object_key(thread_id)
            try:
                archive.put_new(key, pack_dumps(dumps))
            except ArchiveError as exc:
                report.failed[thread_id] = exc
                continue
            if self._run(_ops.demote(self.place, thread_id, key, dumps)):
                report.archived.append(thread_id)
            else:  # written meanwhile: it stays hot
                report.skipped.append(thread_id)
                archive.drop([key])
        return report

    def restore_thread(self, thread_id: str) -> bool:
        """Bring a demoted thread back now (reads and writes do it themselves);
        False: it was not in the cold tier."""
        if self._run(_ops.archived_object(self.place, thread_id)) is None:
            return False
        self._restore(thread_id)
        return True

    def setup(self) -> Durability:
        """Check the server (Redis >= 7), load the scripts, and say what it keeps on
        disk (warns once when a crash of the server would lose checkpoints).

        A lost connection is tried again as every call is (``store_retry``), then
        raises `StoreUnavailable`."""
        config = retried(self._server_config, self.backoff, self.target)
        self.durability = judge(config, self.target)
        return self.durability

    def _server_config(self) -> dict[str, str] | None:
        """``setup()``'s round trips, repeated whole after a lost connection: the
        version checked, every script loaded, what the server keeps on disk
        (None: ``CONFIG`` refused)."""
        check_version(self.conn.info("server"), self.target)
        for script in ALL_SCRIPTS:
            self.conn.script_load(script.source)
        try:
            return config_reply(self.conn.config_get("append*") | self.conn.config_get("save"))
        except redis.ResponseError:
            return None

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._drive(lambda: _ops.get_tuple(self.place, self.serde, config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        op = lambda: _ops.list_(  # noqa: E731
            self.place, self.serde, config, filter=filter, before=before, limit=limit
        )
        yield from self._drive(op)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; a second put of a stored one is a no-op (it keeps the first)."""
        return self._put(config, checkpoint, metadata, new_versions, replace=False)

    def replace_checkpoint(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint again under its own id, replacing it (`ReplacingSaver`):
        `put`'s script but for the no-op (`_scripts.REPLACE`), under the same
        fencing, cold-tier restore and checksum; its writes stay."""
        return self._put(config, checkpoint, metadata, new_versions, replace=True)

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        *,
        replace: bool,
    ) -> RunnableConfig:
        self._refuse_after_stop(config)  # the checkpoint after a lease-stopped step
        led = self._put_ledger(config, checkpoint, metadata, new_versions)
        led = _run_end.end_checked(led, config, checkpoint, metadata, self.list)
        with counted(self._state.counters, CHECKPOINT_OK) as counts:
            op = lambda: self._riding(  # noqa: E731
                _ops.put(
                    self.place,
                    self.serde,
                    config,
                    checkpoint,
                    metadata,
                    new_versions,
                    led,
                    counts,
                    replace=replace,
                )
            )
            if not _ops.decides_rows(led):
                done = self._drive(op, CHECKPOINT_FAILED)
            else:
                with self.place.ledger_lock(str(config["configurable"]["thread_id"])):
                    done = self._drive(op, CHECKPOINT_FAILED)
        _run_log.stored_put(config, led)  # the invoke's scope: its run, its end
        return done

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        led = _steps.step_of_writes(config, writes, task_id, self.serde)
        try:
            if self._lease_stop(config, writes):  # a step stopped, not failed
                return
            with self._counted_writes(writes) as counts:
                op = lambda: self._riding(  # noqa: E731
                    _ops.put_writes(
                        self.place, self.serde, config, writes, task_id, task_path, led, counts
                    )
                )
                if not _ops.decides_rows(led):
                    self._drive(op, WRITES_FAILED)
                else:
                    with self.place.ledger_lock(str(config["configurable"]["thread_id"])):
                        self._drive(op, WRITES_FAILED)
        finally:
            _steps.landed(config, task_id)  # its step, if any, is the store's to list

    def read_counters(self, since: float | None = None) -> dict[str, int]:
        """The save counters of every thread (`_counts`), as the SQL savers' read."""
        return self._run(read_counts(self.place, self._state.counters, since))

    @property
    def history(self) -> RedisHistory:
        """The run ledger (`_runlog_parts`): what `run_report`, `recovery_metrics`
        and `list_runs` read, and what a run's driver tells it."""
        return RedisHistory(self)

    def step_history(self, thread_id: str, *, run: int | None = None) -> Sequence[dict[str, Any]]:
        """Every step record of a thread's top-level runs, by run then start (one
        run's with ``run=``), as the SQL savers list them (`_steps`)."""
        return self._drive(lambda: _steps.step_history(self.place, str(thread_id), run))

    def delete_thread(self, thread_id: str) -> None:
        self._run(_runs.drop_threads(self.place, [str(thread_id)]))  # its runs first
        demoted = self._drive(lambda: _ops.delete_thread(self.place, str(thread_id)))
        if demoted is not None and self.archive is not None:
            self.archive.drop([demoted])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._drive(lambda: _ops.delete_for_runs(self.place, run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._drive(
            lambda: _ops.copy_thread(self.place, str(source_thread_id), str(target_thread_id))
        )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy in _threads.DELETE_STRATEGIES:
            self._run(
                _runs.drop_threads(self.place, _threads.check_prune_args(thread_ids, strategy))
            )
        self._drive(lambda: _ops.prune(self.place, thread_ids, strategy))
