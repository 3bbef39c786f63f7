"""`ResilientSqliteSaver`: LangGraph's `SqliteSaver` with the resilience store.

``aio``: its async twin, `AsyncResilientSqliteSaver`.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from typing import Any, Generic, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver

from langgraph_resilience._store_errors import is_unavailable_error
from langgraph_resilience.checkpoint.archive import Archive
from langgraph_resilience.checkpoint.saver import _base, _threads
from langgraph_resilience.checkpoint.saver._savers import SyncResilience
from langgraph_resilience.checkpoint.store import _schema
from langgraph_resilience.checkpoint.store._store import SQLITE, Statements, execute
from langgraph_resilience.checkpoint.store._store_retry import Translate, call_with_retry
from langgraph_resilience.checkpoint.store._sums import (
    _config_of,
    checkpoint_sum,
    sqlite_keys,
    sqlite_read,
    sqlite_tuple,
    write_sum,
)
from langgraph_resilience.errors import ConfigError, StoreUnavailable
from langgraph_resilience.policy import Backoff

__all__ = ["ResilientSqliteSaver", "VerifiedSqliteReads", "sqlite_put", "sqlite_write_rows"]

T = TypeVar("T")


def sqlite_put(
    saver: BaseCheckpointSaver[str],
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> _threads.PutCheckpoint:
    """The row SqliteSaver.put stores, and whether the fork check applies."""
    thread_id, ns, parent_id = _base.thread_key(config)
    type_, blob = saver.serde.dumps_typed(checkpoint)
    meta = json.dumps(get_checkpoint_metadata(config, metadata), ensure_ascii=False).encode(
        "utf-8", "ignore"
    )
    crc = checkpoint_sum(checkpoint["id"], type_, blob, meta)
    row = (thread_id, ns, checkpoint["id"], parent_id, type_, blob, meta, crc)
    return _threads.PutCheckpoint(
        thread_id=thread_id,
        ns=ns,
        checkpoint_id=checkpoint["id"],
        parent_id=parent_id,
        check_fork=_threads.continues_head(thread_id, ns, parent_id),
        row=row,
    )


def sqlite_write_rows(
    saver: BaseCheckpointSaver[str],
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> tuple[str, list[tuple[Any, ...]]]:
    """The statement and rows SqliteSaver.put_writes stores."""
    thread_id, ns, checkpoint_id = _base.thread_key(config)
    sql = _threads.writes_sql(
        writes, replace=_threads.SQLITE_WRITES_REPLACE, keep_first=_threads.SQLITE_WRITES_IGNORE
    )
    rows = []
    for idx, (channel, value) in enumerate(writes):
        index = WRITES_IDX_MAP.get(channel, idx)
        type_, data = saver.serde.dumps_typed(value)
        crc = write_sum(str(checkpoint_id), task_id, task_path, index, channel, type_, data)
        rows.append(
            (
                thread_id,
                ns,
                str(checkpoint_id),
                task_id,
                task_path,
                index,
                channel,
                type_,
                data,
                crc,
            )
        )
    return sql, rows


def sqlite_path_error(conn_string: str) -> ConfigError | None:
    """A clear error for a SQLite URL given as a path, or a path whose
    directory is missing."""
    if conn_string.startswith(("sqlite:", "sqlite+")):
        path = conn_string.split(":///", 1)[-1] if ":///" in conn_string else "runs.db"
        return ConfigError(
            f"cannot open SQLite database {conn_string!r}: the savers take a file path, "
            f"not a URL. Pass {path!r} (or \":memory:\", or a sqlite3 'file:' URI)."
        )
    if conn_string == ":memory:" or conn_string.startswith("file:"):
        return None
    directory = os.path.dirname(os.path.abspath(conn_string))
    if not os.path.isdir(directory):
        return ConfigError(
            f"cannot open SQLite database {conn_string!r}: directory {directory!r} "
            "does not exist. Create it first (os.makedirs), or pass another path "
            'or ":memory:".'
        )
    return None


def sqlite_final(state: _base.SaverState) -> Callable[[BaseException, int], BaseException | None]:
    """What a SQLite error no retry can fix is: a read-only or corrupt file is the
    caller's to fix (a `ConfigError` naming the file and what to do)."""

    def final(exc: BaseException, attempts: int) -> BaseException | None:
        text = str(exc).lower()
        where = repr(state.conninfo) if state.conninfo else "this SQLite database"
        if is_unavailable_error(exc):  # the disk is full
            return StoreUnavailable(
                f"SQLite database {where} could not be written after {attempts} tries: {exc}. "
                "Free space on its file system; nothing of this call was stored, and the "
                "run resumes from its last checkpoint (an effect's outcome held in memory "
                "is stored with this saver's next write).",
                target=state.conninfo or ":memory:",
                attempts=attempts,
            )
        if "readonly" in text or "read-only" in text:
            return ConfigError(
                f"SQLite database {where} is read-only for this process ({exc}). Give it "
                "write permission on the file and on its directory (SQLite writes a journal "
                "beside the file), or open a copy it can write."
            )
        if "not a database" in text or "malformed" in text:
            return ConfigError(
                f"SQLite database {where} is not a SQLite database or is damaged ({exc}). "
                "Restore it from a backup, or point the saver at another file; nothing "
                "was written to it."
            )
        return None

    return final


def sqlite_unavailable(conn_string: str, exc: Exception) -> StoreUnavailable:
    return StoreUnavailable(
        f"cannot open SQLite database {conn_string!r}: {exc}", target=conn_string, attempts=1
    )


def sqlite_connect(conn_string: str) -> sqlite3.Connection:
    """Open a SQLite database with a clear error for a bad path."""
    if (error := sqlite_path_error(conn_string)) is not None:
        raise error
    try:
        return sqlite3.connect(conn_string, check_same_thread=False)
    except sqlite3.Error as exc:
        raise sqlite_unavailable(conn_string, exc) from exc


ConnT = TypeVar("ConnT")


class SqliteSaverBase(_base.SqliteSetupShared, Generic[ConnT]):
    """What the two SQLite savers share but their I/O: how they are made, and the
    dialect's rows."""

    _dialect = SQLITE

    def __init__(
        self,
        conn: ConnT,
        *,
        serde: SerializerProtocol | None = None,
        store_retry: Backoff | None = None,
        archive: Archive | str | None = None,
        warn_checkpoint_bytes: int | None = _base.WARN_BYTES,
        max_checkpoint_bytes: int | None = None,
    ) -> None:
        # The state first: LangGraph's __init__ sets is_setup, which lives in it.
        self._state = _base.make_state(store_retry)
        # LangGraph's (Async)SqliteSaver, further along the saver's MRO.
        super().__init__(conn, serde=serde)  # type: ignore[call-arg]
        _base.set_lifecycle(self._state, archive, warn_checkpoint_bytes, max_checkpoint_bytes)

    _prepare_put = sqlite_put
    _write_rows = sqlite_write_rows


class VerifiedSqliteReads(SqliteSaver):
    """`SqliteSaver`'s reads, each row checked against its sum before it is decoded
    (`_sums`); the resilient saver's own reads (retries, archive) wrap these."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        with self.cursor(transaction=False) as cur:
            read = execute(cur, sqlite_read(config))
        return None if read is None else sqlite_tuple(self.serde, read)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        with self.cursor(transaction=False) as cur:
            keys = execute(cur, sqlite_keys(config, filter, before, limit))
        for key in keys:
            found = self.get_tuple(_config_of(*key))
            if found is not None:  # deleted since it was listed
                yield found


class ResilientSqliteSaver(
    SqliteSaverBase[sqlite3.Connection], SyncResilience, VerifiedSqliteReads
):
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
        archive: the cold tier (an `Archive` or its URL): ``archive_idle`` moves idle
            threads there, and reading an archived thread restores it.
        warn_checkpoint_bytes: log a warning past this checkpoint size (None: never).
        max_checkpoint_bytes: refuse a larger checkpoint with a `ConfigError`.

    Example:
        >>> from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
        >>> with ResilientSqliteSaver.from_conn_string(":memory:") as saver:
        ...     saver.setup()
    """

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str, *, store_retry: Backoff | None = None, **lifecycle: Any
    ) -> Iterator[ResilientSqliteSaver]:
        """Open (or create) a SQLite database file, or ``":memory:"``.

        Raises:
            ConfigError: the file's directory does not exist.
            StoreUnavailable: SQLite cannot open the file.
        """
        with closing(sqlite_connect(conn_string)) as conn:
            saver = cls(conn, store_retry=store_retry, **lifecycle)
            saver._state.conninfo = conn_string  # named in errors
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
        self._synchronous = int(self.conn.execute("PRAGMA synchronous").fetchone()[0])
        try:
            self._in_transaction(lambda: _schema.migrate(SQLITE, where="this SQLite database"))
        except BaseException:
            self.is_setup = False
            raise

    def _in_transaction(
        self,
        statements: Callable[[], Statements[T]],
        riders: _base.Riders | None = None,
        *,
        immediate: bool = True,
        relaxed: bool = False,
    ) -> T:
        """Run the statements, and store ``riders``, in one transaction (caller holds the lock).

        ``immediate`` takes the write lock up front (BEGIN IMMEDIATE). A
        checkpoint or writes (``pipeline``) needs only a deferred BEGIN: in WAL
        mode a transaction that read a snapshot another process has since moved
        past cannot write ("database is locked"), and the retry reads afresh.
        """
        if self.conn.in_transaction:
            self.conn.commit()
        cur = self.conn.cursor()
        if relaxed:  # committed without fsync; see _ledger.record_outcome
            cur.execute("PRAGMA synchronous = NORMAL")
        try:
            cur.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            if riders is not None and riders.riding:
                execute(cur, riders.statements(SQLITE))
            result = execute(cur, statements())
            self.conn.commit()
            return result
        except BaseException:
            self.conn.rollback()
            raise
        finally:
            if relaxed:
                cur.execute(f"PRAGMA synchronous = {self._synchronous}")
            cur.close()

    # -- the transaction driver ----------------------------------------------

    def _transact(
        self,
        statements: Callable[[], Statements[T]],
        *,
        translate: Translate | None = None,
        ok: str | None = None,
        failed: str | None = None,
        pipeline: bool = False,
        flush: bool = False,
        relaxed: bool = False,
        alone: bool = False,  # Postgres only: every SQLite transaction is local
    ) -> T:
        state = self._state

        def attempt() -> T:
            with self.lock:
                if not state.is_setup:  # `is_setup`, read without its property
                    self.setup()
                with _base.Riders(state, ok, flush=flush, relaxed=relaxed) as riders:
                    return self._in_transaction(
                        statements, riders, immediate=not pipeline, relaxed=relaxed
                    )

        return call_with_retry(
            attempt,
            backoff=state.backoff,
            on_failure=lambda exc: _base.count_failure(state, failed),
            translate=translate,
            give_up=self._give_up,
        )

    def _give_up(self, exc: BaseException, attempts: int) -> BaseException | None:
        return sqlite_final(self._state)(exc, attempts)

    def _query(self, statements: Callable[[], Statements[T]]) -> T:
        def attempt() -> T:
            with self.cursor(transaction=False) as cur:
                return execute(cur, statements())

        return self._call(attempt)

    def _call(self, op: Callable[[], T]) -> T:
        return call_with_retry(
            op,
            backoff=self._state.backoff,
            on_failure=lambda exc: None,
            give_up=self._give_up,
        )

    # -- the dialect's rows ------------------------------------------------------

    def _keep_latest(self, thread_ids: list[str]) -> None:
        self._transact(lambda: _threads.sqlite_keep_latest(thread_ids))
