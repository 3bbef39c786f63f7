"""`ResilientPostgresSaver`: LangGraph's `PostgresSaver` with the resilience store."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
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
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from langgraph_resilience._store_errors import is_transient_store_error
from langgraph_resilience.checkpoint import _base, _schema, _threads
from langgraph_resilience.checkpoint._retry import Translate, call_with_retry
from langgraph_resilience.checkpoint._savers import SyncResilience
from langgraph_resilience.checkpoint._store import POSTGRES, Statements, execute
from langgraph_resilience.errors import ConfigError, StoreUnavailable
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
) -> _threads.PutCheckpoint:
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
    return _threads.PutCheckpoint(
        thread_id=thread_id,
        ns=ns,
        checkpoint_id=checkpoint["id"],
        parent_id=parent_id,
        check_fork=_threads.continues_head(thread_id, ns, parent_id),
        row=row,
        blob_rows=blob_rows,
    )


def pg_put_statements(saver: BasePostgresSaver, put: _threads.PutCheckpoint) -> Statements[None]:
    return _threads.put_checkpoint(
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
    sql = _threads.writes_sql(
        writes,
        replace=saver.UPSERT_CHECKPOINT_WRITES_SQL,
        keep_first=saver.INSERT_CHECKPOINT_WRITES_SQL,
    )
    rows = saver._dump_writes(thread_id, ns, str(checkpoint_id), task_id, task_path, writes)
    return sql, list(rows)


def masked_dsn(conninfo: str) -> str:
    """A DSN safe to print: the password is removed."""
    try:
        params = conninfo_to_dict(conninfo)
    except Exception:
        return "<unparseable DSN>"
    params.pop("password", None)
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None})


def pg_unavailable(conninfo: str, exc: BaseException) -> StoreUnavailable:
    target = masked_dsn(conninfo)
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StoreUnavailable(
        f"cannot connect to Postgres at {target!r}: {reason}. Check that the server is "
        "running and that host, port, database and user in the DSN are right.",
        target=target,
        attempts=1,
    )


def live_conninfo(conn: Any) -> str | None:
    """How to reopen a psycopg connection (its DSN plus the password)."""
    info = getattr(conn, "info", None)
    if info is None:
        return None
    password = getattr(info, "password", None)
    return make_conninfo(info.dsn, **({"password": password} if password else {}))


def missing_schema(exc: BaseException) -> ConfigError | None:
    """A clear error when the resilience tables were never created."""
    if getattr(exc, "sqlstate", None) in ("42P01", "42883"):  # undefined table / function
        return ConfigError(
            f"the resilience tables are missing ({exc}). Call saver.setup() once on this "
            "database before running graphs (LangGraph's Postgres savers need the same)."
        )
    return None


def translation(translate: Translate | None) -> Translate:
    """``translate``, then the missing-schema error."""
    if translate is None:
        return missing_schema
    return lambda exc: translate(exc) or missing_schema(exc)


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
            self._state.conninfo = live_conninfo(conn)

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
            raise pg_unavailable(conn_string, exc) from exc
        saver = None
        try:
            with conn.pipeline() if pipeline else nullcontext() as pipe:
                saver = cls(conn, pipe, store_retry=store_retry)
                try:
                    yield saver
                finally:
                    # Still inside the pipeline block: the flush's transaction syncs it.
                    _base.flush_quietly(saver._state, saver.flush_counters)
        finally:
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
        self._transact(
            lambda: _schema.migrate(POSTGRES, where="this Postgres database"), check=False
        )
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

    def _transact(
        self,
        statements: Callable[[], Statements[T]],
        *,
        translate: Translate | None = None,
        ok: str | None = None,
        failed: str | None = None,
        flush: bool = False,
        check: bool = True,
        pipeline: bool = False,
        relaxed: bool = False,  # Postgres relaxes in SQL: see _ledger.record_outcome
        ride: bool = True,  # False for a read: nothing rides along
    ) -> T:
        def attempt() -> T:
            # Pipeline mode sends the whole transaction in one round trip, but it
            # can hand a fetch the rows of an earlier statement (after a NOTICE),
            # so only statement lists that fetch nothing use it.
            checked = self._state.schema_checked or not check
            with (
                _base.Riders(self._state, ok, flush=flush, ride=ride) as riders,
                self._transaction(pipeline and checked) as cur,
            ):
                if not checked:
                    execute(cur, _schema.check_schema(POSTGRES))
                if riders:
                    execute(cur, riders.statements(POSTGRES))
                result = execute(cur, statements())
            self._state.schema_checked = self._state.schema_checked or check
            return result

        return call_with_retry(
            attempt,
            backoff=self._state.backoff,
            on_failure=self._on_failure(failed),
            translate=translation(translate),
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

    def _query(self, statements: Callable[[], Statements[T]]) -> T:
        return self._transact(statements, ride=False)

    # -- the dialect's rows ------------------------------------------------------

    _prepare_put = pg_put
    _put_statements = pg_put_statements
    _write_rows = pg_write_rows

    def _keep_latest(self, thread_ids: list[str]) -> None:
        # LangGraph's own keep_latest (one transaction per thread), then our rows.
        self._call(lambda: PostgresSaver.prune(self, thread_ids, strategy="keep_latest"))
        self._transact(lambda: _threads.delete_orphans(POSTGRES, thread_ids))
