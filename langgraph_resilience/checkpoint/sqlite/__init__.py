"""`ResilientSqliteSaver`: LangGraph's `SqliteSaver` with the resilience store."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing, contextmanager
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver

from langgraph_resilience.checkpoint import _base, _store
from langgraph_resilience.checkpoint._retry import call_with_retry, is_store_error
from langgraph_resilience.checkpoint._store import SQLITE, Statements
from langgraph_resilience.policy import Backoff

__all__ = ["ResilientSqliteSaver", "sqlite_put", "sqlite_write_rows"]

T = TypeVar("T")


def sqlite_put(
    serde: SerializerProtocol,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
) -> _store.PutCheckpoint:
    """The row SqliteSaver.put stores, and whether the fork check applies."""
    thread_id, ns, parent_id = _base.thread_key(config)
    type_, blob = serde.dumps_typed(checkpoint)
    meta = json.dumps(get_checkpoint_metadata(config, metadata), ensure_ascii=False)
    row = (thread_id, ns, checkpoint["id"], parent_id, type_, blob, meta.encode("utf-8", "ignore"))
    return _store.PutCheckpoint(
        thread_id=thread_id,
        ns=ns,
        checkpoint_id=checkpoint["id"],
        parent_id=parent_id,
        check_fork=_store.needs_fork_check(metadata, parent_id),
        row=row,
    )


def sqlite_write_rows(
    serde: SerializerProtocol,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> tuple[str, list[tuple[Any, ...]]]:
    """The statement and rows SqliteSaver.put_writes stores."""
    thread_id, ns, checkpoint_id = _base.thread_key(config)
    sql = (
        _store.SQLITE_WRITES_REPLACE
        if all(w[0] in WRITES_IDX_MAP for w in writes)
        else _store.SQLITE_WRITES_IGNORE
    )
    rows = [
        (
            thread_id,
            ns,
            str(checkpoint_id),
            task_id,
            task_path,
            WRITES_IDX_MAP.get(channel, idx),
            channel,
            *serde.dumps_typed(value),
        )
        for idx, (channel, value) in enumerate(writes)
    ]
    return sql, rows


def sqlite_connect(conn_string: str) -> sqlite3.Connection:
    """Open a SQLite database with a clear error for a bad path."""
    if (error := _base.sqlite_path_error(conn_string)) is not None:
        raise error
    try:
        return sqlite3.connect(conn_string, check_same_thread=False)
    except sqlite3.Error as exc:
        raise _base.sqlite_unavailable(conn_string, exc) from exc


class ResilientSqliteSaver(SqliteSaver):
    """A drop-in `SqliteSaver` that survives store faults and refuses silent forks.

    On top of LangGraph's saver it:

    - keeps the resilience tables (runs and leases, node attempts, side effects,
      counters), created by `setup()` through its own migration list;
    - retries a checkpoint or write that fails on a transient store error
      ("database is locked") with backoff, counting every try;
    - refuses, with `CheckpointConflict`, a checkpoint that continues a thread from
      a checkpoint that is no longer the latest of its namespace;
    - implements `copy_thread`, `delete_for_runs` and `prune`, and deletes a
      thread's resilience rows with it.

    Args:
        conn: an open ``sqlite3.Connection`` (``check_same_thread=False``).
        serde: the serializer, as for `SqliteSaver`.
        store_retry: how transient store errors are retried.

    Example:
        >>> from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
        >>> with ResilientSqliteSaver.from_conn_string(":memory:") as saver:
        ...     saver.setup()
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        serde: SerializerProtocol | None = None,
        store_retry: Backoff | None = None,
    ) -> None:
        super().__init__(conn, serde=serde)
        self._state = _base.make_state(store_retry)

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str, *, store_retry: Backoff | None = None
    ) -> Iterator[ResilientSqliteSaver]:
        """Open (or create) a SQLite database file, or ``":memory:"``.

        Raises:
            ConfigError: the file's directory does not exist.
            StoreUnavailable: SQLite cannot open the file.
        """
        with closing(sqlite_connect(conn_string)) as conn:
            saver = cls(conn, store_retry=store_retry)
            try:
                yield saver
            finally:
                _base.flush_quietly(saver._state, saver.flush_counters)

    # -- setup ---------------------------------------------------------------

    def setup(self) -> None:
        """Create LangGraph's tables and bring the resilience tables up to date.

        Called automatically (under the saver's lock) before first use.

        Raises:
            ConfigError: the database was migrated by a newer langgraph-resilience.
        """
        if self.is_setup:
            return
        super().setup()
        try:
            self._in_transaction(
                lambda cur: _store.execute(
                    cur, _store.migrate(SQLITE, where="this SQLite database")
                )
            )
        except BaseException:
            self.is_setup = False
            raise

    def _in_transaction(self, body: Callable[[sqlite3.Cursor], T]) -> T:
        """Run ``body`` in one BEGIN IMMEDIATE transaction (caller holds the lock)."""
        if self.conn.in_transaction:
            self.conn.commit()
        cur = self.conn.cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
            result = body(cur)
            self.conn.commit()
            return result
        except BaseException:
            self.conn.rollback()
            raise
        finally:
            cur.close()

    # -- the transaction driver ----------------------------------------------

    def _run(
        self,
        statements: Callable[[], Statements[T]],
        *,
        ok: str | None = None,
        failed: str | None = None,
        flush: bool = False,
    ) -> T:
        def attempt() -> T:
            with self.lock:
                self.setup()
                with _base.counted(self._state, ok, flush=flush) as deltas:

                    def body(cur: sqlite3.Cursor) -> T:
                        result = _store.execute(cur, statements())
                        _store.execute(cur, _store.bump(SQLITE, self._state.counters.scope, deltas))
                        return result

                    return self._in_transaction(body)

        return call_with_retry(
            attempt,
            backoff=self._state.backoff,
            on_failure=lambda exc: _base.count_failure(self._state, failed),
        )

    def _read(self, statements: Callable[[], Statements[T]]) -> T:
        def attempt() -> T:
            with self.cursor(transaction=False) as cur:
                return _store.execute(cur, statements())

        return call_with_retry(attempt, backoff=self._state.backoff, on_failure=lambda exc: None)

    # -- checkpoints and writes ----------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; refuse one that would fork the thread.

        Raises:
            CheckpointConflict: another process moved the thread past this
                checkpoint's parent.
        """
        put = sqlite_put(self.serde, config, checkpoint, metadata)
        self._run(
            lambda: _store.put_checkpoint(SQLITE, put),
            ok=_store.CHECKPOINT_OK,
            failed=_store.CHECKPOINT_FAILED,
        )
        return {
            "configurable": {
                "thread_id": config["configurable"]["thread_id"],
                "checkpoint_ns": put.ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes, retrying transient store errors."""
        sql, rows = sqlite_write_rows(self.serde, config, writes, task_id, task_path)
        self._run(
            lambda: _store.put_writes(sql, rows),
            ok=_store.WRITES_OK,
            failed=_store.WRITES_FAILED,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """As `SqliteSaver.get_tuple`; an undecodable row raises `CheckpointCorrupt`."""
        try:
            return call_with_retry(
                lambda: super(ResilientSqliteSaver, self).get_tuple(config),
                backoff=self._state.backoff,
                on_failure=lambda exc: None,
            )
        except Exception as exc:
            raise self._corrupt(config, exc) from exc

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """As `SqliteSaver.list`; an undecodable row raises `CheckpointCorrupt`."""
        listed = cast(
            Generator[CheckpointTuple, None, None],
            super().list(config, filter=filter, before=before, limit=limit),
        )
        while True:
            try:
                item = next(listed)
            except StopIteration:
                return
            except Exception as exc:
                listed.close()
                raise _base.corrupt(config, None, exc) from exc
            yield item

    def _corrupt(self, config: RunnableConfig, exc: BaseException) -> BaseException:
        thread_id, ns, checkpoint_id = _base.thread_key(config)
        if checkpoint_id is None and not is_store_error(exc):
            checkpoint_id = self._read(lambda: _store.locate_checkpoint(SQLITE, thread_id, ns))
        return _base.corrupt(config, checkpoint_id, exc)

    def flush_counters(self) -> None:
        """Store the save counts this saver holds in memory (run on close)."""
        self._run(_store.no_statements, flush=True)

    def read_counters(self) -> dict[str, int]:
        """Checkpoint and write tries stored so far, summed over every process."""
        return self._read(lambda: _store.read_counters(SQLITE, self._state.counters))

    # -- thread maintenance ----------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints, writes and resilience rows."""
        self._run(lambda: _store.delete_threads(SQLITE, [str(thread_id)]))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints, writes and resilience rows to a new thread.

        Raises:
            ConfigError: the target thread already has checkpoints.
        """
        self._run(lambda: _store.copy_thread(SQLITE, source_thread_id, target_thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and writes, resilience rows) of the given runs."""
        self._run(lambda: _store.delete_for_runs(SQLITE, run_ids))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only the latest checkpoint per namespace, or delete the threads.

        Raises:
            ConfigError: unknown strategy, or a single str for ``thread_ids``.
            NotImplementedError: ``keep_latest`` on a thread using a DeltaChannel.
        """
        ids = _store.check_prune_args(thread_ids, strategy)
        if not ids:
            return
        if strategy == "delete":
            self._run(lambda: _store.delete_threads(SQLITE, ids))
        else:
            self._run(lambda: _store.sqlite_keep_latest(ids))
