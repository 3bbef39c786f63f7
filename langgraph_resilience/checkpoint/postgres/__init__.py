"""`ResilientPostgresSaver`: LangGraph's `PostgresSaver` with the resilience store."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.postgres import PostgresSaver, _internal
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg import Connection, Cursor, Pipeline
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from langgraph_resilience.checkpoint import _base, _store
from langgraph_resilience.checkpoint._retry import (
    call_with_retry,
    is_transient_store_error,
)
from langgraph_resilience.checkpoint._savers import SyncResilience
from langgraph_resilience.checkpoint._store import POSTGRES, Statements
from langgraph_resilience.policy import Backoff

__all__ = ["ResilientPostgresSaver", "pg_put", "pg_write_rows"]

T = TypeVar("T")
CONNECT_KWARGS: dict[str, Any] = {
    "autocommit": True,
    "prepare_threshold": 0,
    "row_factory": dict_row,
}


def pg_put(
    saver: BasePostgresSaver,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> _store.PutCheckpoint:
    """The rows PostgresSaver.put stores: primitives inline, the rest as blobs."""
    thread_id, ns, parent_id = _base.thread_key(config)
    copy = checkpoint.copy()
    copy["channel_values"] = copy["channel_values"].copy()
    blob_values = {}
    for k, v in checkpoint["channel_values"].items():
        if isinstance(v, _DeltaSnapshot):
            blob_values[k] = copy["channel_values"].pop(k)
            copy["channel_values"][k] = True
        elif v is None or isinstance(v, (str, int, float, bool)):
            pass
        else:
            blob_values[k] = copy["channel_values"].pop(k)
    blob_versions = {k: v for k, v in new_versions.items() if k in blob_values}
    blob_rows = (
        saver._dump_blobs(thread_id, ns, blob_values, blob_versions) if blob_versions else []
    )
    row = (
        thread_id,
        ns,
        checkpoint["id"],
        parent_id,
        Jsonb(copy),
        Jsonb(get_serializable_checkpoint_metadata(config, metadata)),
    )
    return _store.PutCheckpoint(
        thread_id=thread_id,
        ns=ns,
        checkpoint_id=checkpoint["id"],
        parent_id=parent_id,
        check_fork=_store.needs_fork_check(metadata, parent_id),
        row=row,
        blob_rows=blob_rows,
    )


def pg_put_statements(saver: BasePostgresSaver, put: _store.PutCheckpoint) -> Statements[None]:
    return _store.put_checkpoint(
        POSTGRES,
        put,
        upsert_sql=saver.UPSERT_CHECKPOINTS_SQL,
        blobs_sql=saver.UPSERT_CHECKPOINT_BLOBS_SQL,
    )


def pg_write_rows(
    saver: BasePostgresSaver,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> tuple[str, list[tuple[Any, ...]]]:
    """The statement and rows PostgresSaver.put_writes stores."""
    thread_id, ns, checkpoint_id = _base.thread_key(config)
    sql = _store.writes_sql(
        writes,
        replace=saver.UPSERT_CHECKPOINT_WRITES_SQL,
        keep_first=saver.INSERT_CHECKPOINT_WRITES_SQL,
    )
    rows = saver._dump_writes(thread_id, ns, str(checkpoint_id), task_id, task_path, writes)
    return sql, list(rows)


class ResilientPostgresSaver(SyncResilience, PostgresSaver):
    """A drop-in `PostgresSaver` that survives store faults and refuses silent forks.

    On top of LangGraph's saver it:

    - keeps the resilience tables, created by `setup()` through its own migration
      list (LangGraph's ``MIGRATIONS`` is left alone);
    - writes each checkpoint (blobs, row, counters) in one transaction and
      retries it after a transient error (dropped connection, server restart,
      serialization failure) on a fresh connection, counting every try;
    - refuses, with `CheckpointConflict`, a checkpoint that continues a thread from
      a checkpoint that is no longer the latest of its namespace, in the same
      transaction as the write;
    - implements `copy_thread` and `delete_for_runs`, and extends `prune` and
      `delete_thread` to the resilience rows.

    Args:
        conn: a ``psycopg.Connection`` (autocommit, ``dict_row``) or a ``ConnectionPool``.
        pipe: a pipeline of ``conn``, as for `PostgresSaver`.
        serde: the serializer.
        store_retry: how transient store errors are retried.

    Example:
        >>> from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
        >>> DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
        >>> with ResilientPostgresSaver.from_conn_string(DSN) as saver:  # doctest: +SKIP
        ...     saver.setup()
    """

    _dialect = POSTGRES

    def __init__(
        self,
        conn: _internal.Conn,
        pipe: Pipeline | None = None,
        serde: SerializerProtocol | None = None,
        *,
        store_retry: Backoff | None = None,
    ) -> None:
        self._state = _base.make_state(store_retry)
        super().__init__(conn, pipe, serde)
        if isinstance(conn, Connection):
            self._state.conninfo = _base.live_conninfo(conn)

    # The connection lives in the shared state, so a copy of this saver (made by
    # compile() under strict msgpack) sees the fresh connection that replaced a
    # broken one.
    @property
    def conn(self) -> _internal.Conn:
        return self._state.conn  # type: ignore[no-any-return]

    @conn.setter
    def conn(self, value: _internal.Conn) -> None:
        self._state.conn = value

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str, *, pipeline: bool = False, store_retry: Backoff | None = None
    ) -> Iterator[ResilientPostgresSaver]:
        """Connect to Postgres with a DSN.

        Raises:
            StoreUnavailable: the server cannot be reached (the message names the
                DSN without its password).
        """
        try:
            conn: Connection[DictRow] = Connection.connect(conn_string, **CONNECT_KWARGS)
        except psycopg.Error as exc:
            raise _base.pg_unavailable(conn_string, exc) from exc
        saver = None
        try:
            if pipeline:
                with conn.pipeline() as pipe:
                    saver = cls(conn, pipe, store_retry=store_retry)
                    yield saver
            else:
                saver = cls(conn, store_retry=store_retry)
                yield saver
        finally:
            if saver is not None:
                _base.flush_quietly(saver._state, saver.flush_counters)
            conn.close()
            if saver is not None and saver.conn is not conn:
                saver.conn.close()

    def setup(self) -> None:
        """Run LangGraph's migrations, then the resilience ones (in one transaction).

        Raises:
            ConfigError: the database was migrated by a newer langgraph-resilience.
        """
        call_with_retry(
            lambda: super(ResilientPostgresSaver, self).setup(),
            backoff=self._state.backoff,
            on_failure=self._on_failure(None),
        )
        self._run(lambda: _store.migrate(POSTGRES, where="this Postgres database"), check=False)
        self._state.schema_checked = True

    # -- the transaction driver ----------------------------------------------

    @contextmanager
    def _transaction(self, pipeline: bool) -> Iterator[Cursor[DictRow]]:
        with self.lock:
            try:
                with _internal.get_connection(self.conn) as conn:
                    if (
                        pipeline
                        and self.pipe is None
                        and self.supports_pipeline
                        and conn.autocommit
                    ):
                        # One round trip: an autocommit pipeline runs everything up
                        # to its Sync as one implicit transaction, all or nothing.
                        with conn.pipeline(), conn.cursor(binary=True) as cur:
                            yield cur
                    else:
                        with conn.transaction(), conn.cursor(binary=True) as cur:
                            yield cur
                        if self.pipe is not None:
                            self.pipe.sync()
            except Exception as exc:
                # Replace a broken connection before the lock goes to the next
                # caller, so one outage fails one operation, not every queued one.
                if is_transient_store_error(exc):
                    self._reset_connection()
                raise

    def _run(
        self,
        statements: Callable[[], Statements[T]],
        *,
        ok: str | None = None,
        failed: str | None = None,
        flush: bool = False,
        translate: _base.Translate | None = None,
        check: bool = True,
        pipeline: bool = False,
        relaxed: bool = False,  # Postgres relaxes in SQL: see _store.record_outcome
        ride: bool = True,  # False for a read: nothing rides along
    ) -> T:
        def attempt() -> T:
            # Pipeline mode sends the whole transaction in one round trip, but it
            # can hand a fetch the rows of an earlier statement (after a NOTICE),
            # so only statement lists that fetch nothing use it.
            checked = self._state.schema_checked or not check
            with _base.Riders(self._state, ok, flush=flush, ride=ride) as riders:
                try:
                    with self._transaction(pipeline and checked) as cur:
                        if not checked:
                            _store.execute(cur, _store.check_schema(POSTGRES))
                        if riders:
                            _store.execute(cur, riders.statements(POSTGRES))
                        result = _store.execute(cur, statements())
                except Exception as exc:
                    mapped = (translate and translate(exc)) or _base.missing_schema(exc)
                    if mapped is not None:
                        raise mapped from exc
                    raise
            self._state.schema_checked = self._state.schema_checked or check
            return result

        return call_with_retry(
            attempt, backoff=self._state.backoff, on_failure=self._on_failure(failed)
        )

    def _on_failure(self, failed: str | None) -> Callable[[BaseException], None]:
        def on_failure(exc: BaseException) -> None:
            _base.count_failure(self._state, failed)
            self._reset_connection()

        return on_failure

    def _reset_connection(self) -> None:
        """Replace a broken connection (or drop a pool's broken ones) before a retry."""
        conn = self.conn
        if isinstance(conn, ConnectionPool):
            conn.check()
            return
        if not (conn.closed or conn.broken) or self.pipe is not None or not self._state.conninfo:
            return
        try:
            self.conn = Connection.connect(self._state.conninfo, **CONNECT_KWARGS)
        except psycopg.Error:
            return  # the next try fails on the closed connection and comes back here
        conn.close()

    def _call(self, op: Callable[[], T]) -> T:
        return call_with_retry(op, backoff=self._state.backoff, on_failure=self._on_failure(None))

    def _read(self, statements: Callable[[], Statements[T]]) -> T:
        return self._run(statements, ride=False)

    # -- the dialect's rows ------------------------------------------------------

    _prepare_put = pg_put
    _put_statements = pg_put_statements
    _write_rows = pg_write_rows

    def _keep_latest(self, thread_ids: list[str]) -> None:
        # LangGraph's own keep_latest (one transaction per thread), then our rows.
        self._call(lambda: PostgresSaver.prune(self, thread_ids, strategy="keep_latest"))
        self._run(lambda: _store.delete_orphans(POSTGRES, thread_ids))
