"""`ResilientPostgresSaver`: LangGraph's `PostgresSaver` with the resilience store.

``aio``: its async twin, `AsyncResilientPostgresSaver`; ``_network``: how both
reach their server and how long they wait for it; ``_values``: the channel
values LangGraph would inline that Postgres cannot store.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager, nullcontext, suppress
from typing import Any, Generic, TypedDict, TypeVar, cast

from langgraph_resilience.errors import needs_extra

try:
    import psycopg
except ImportError as missing:  # the base install, without the `postgres` extra
    raise ImportError(needs_extra("the Postgres savers need", "postgres", missing)) from missing

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.base import BasePostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import Connection, Cursor, Pipeline
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from typing_extensions import Unpack

from langgraph_resilience._langgraph import (
    DeltaSnapshot,
    check_pg_rows,
    dump_pg_blobs,
    dump_pg_writes,
    route_cursor,
)
from langgraph_resilience._store_errors import is_transient_store_error
from langgraph_resilience.checkpoint.archive import Archive
from langgraph_resilience.checkpoint.postgres import _network, _values
from langgraph_resilience.checkpoint.postgres._network import (
    AsyncBoundedConnection,
    BoundedConnection,
    Conn,
    PgTimeouts,
    live_conninfo,
    target_of,
)
from langgraph_resilience.checkpoint.saver import _base, _threads
from langgraph_resilience.checkpoint.saver._savers import SyncResilience
from langgraph_resilience.checkpoint.store import _schema, _sums
from langgraph_resilience.checkpoint.store._store import POSTGRES, Statements, execute
from langgraph_resilience.checkpoint.store._store_retry import (
    DEFAULT_PG_STORE_RETRY,
    Translate,
    call_with_retry,
)
from langgraph_resilience.checkpoint.store._sums import blob_sum
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.policy import Backoff

__all__ = [
    "BoundedConnection",
    "PgTimeouts",
    "ResilientPostgresSaver",
    "pg_put",
    "pg_write_rows",
]

T = TypeVar("T")


def pg_put(
    saver: BasePostgresSaver,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> _threads.PutCheckpoint:
    """The rows PostgresSaver.put stores: primitives inline, the rest as blobs.

    When the saver's serde encrypts, primitives are blobs too (LangGraph's saver
    keeps them in the clear in the checkpoint's JSONB): each at its current
    version, also one unchanged since a checkpoint that kept it inline (the blob
    insert does nothing when the row is there)."""
    thread_id, ns, parent_id = _base.thread_key(config)
    copy = checkpoint.copy()
    copy["channel_values"] = copy["channel_values"].copy()
    blob_values = {}
    sealed = _base.encrypts(saver.serde)
    sealed_versions = {}
    for k, v in checkpoint["channel_values"].items():
        if isinstance(v, DeltaSnapshot):
            blob_values[k] = copy["channel_values"].pop(k)
            copy["channel_values"][k] = True
        elif v is None or isinstance(v, (str, int, float, bool)):
            if sealed and k in checkpoint["channel_versions"]:
                blob_values[k] = copy["channel_values"].pop(k)
                sealed_versions[k] = checkpoint["channel_versions"][k]
            else:
                _values.refuse_inline([(k, v)])  # NaN or NUL: no JSONB form (see _values)
        else:
            blob_values[k] = copy["channel_values"].pop(k)
    blob_versions = {
        **sealed_versions,
        **{k: v for k, v in new_versions.items() if k in blob_values},
    }
    blob_rows = [
        (*b, blob_sum(b[2], b[3], b[4], b[5]))
        for b in (
            dump_pg_blobs(saver, thread_id, ns, blob_values, blob_versions) if blob_versions else ()
        )
    ]
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
        upsert_sql=_sums.PG_PUT,
        blobs_sql=_sums.PG_BLOBS,
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
    _values.refuse_writes(writes, task_path)  # before any of it is stored (see _values)
    sql = _threads.writes_sql(
        writes, replace=_sums.PG_WRITES_REPLACE, keep_first=_sums.PG_WRITES_IGNORE
    )
    rows = dump_pg_writes(saver, thread_id, ns, str(checkpoint_id), task_id, task_path, writes)
    return sql, [(*r, _sums.write_sum(*r[2:6], r[6], r[7], r[8])) for r in rows]


def saver_timeouts(timeouts: PgTimeouts | None) -> PgTimeouts:
    if timeouts is not None and not isinstance(timeouts, PgTimeouts):
        raise ConfigError(
            "timeouts must be a langgraph_resilience.checkpoint.postgres.PgTimeouts, "
            f"got {type(timeouts).__name__}"
        )
    return timeouts or PgTimeouts()


def saver_target(conn: Any) -> tuple[str, str | None]:
    """Where a saver's connection or pool points (printable), and how to reopen
    a single connection (None for a pool)."""
    if isinstance(conn, (ConnectionPool, AsyncConnectionPool)):
        return target_of(str(conn.conninfo)), None
    live = live_conninfo(conn)
    return (target_of(live) if live else "<unknown>"), live


def missing_schema(exc: BaseException) -> ConfigError | None:
    """A clear error when the resilience tables were never created."""
    if getattr(exc, "sqlstate", None) in ("42P01", "42883"):  # undefined table / function
        return ConfigError(
            f"the resilience tables are missing ({exc}). Call saver.setup() once on this "
            "database before running graphs (LangGraph's Postgres savers need the same)."
        )
    return None


class PgTransaction(TypedDict, total=False):
    """The options of a Postgres saver's ``_transact`` (each absent one at its default)."""

    #: maps a store error to the caller's own (then the missing-schema error: `translation`)
    translate: Translate | None
    #: the counter a success adds to, and the one each failed try adds to
    ok: str | None
    failed: str | None
    #: store the counts that are due with this write
    flush: bool
    #: check the schema first, once per saver (default True)
    check: bool
    #: the statements fetch nothing: one round trip in an autocommit pipeline
    pipeline: bool
    #: a write that may skip waiting for the disk (Postgres relaxes in SQL: see
    #: _ledger.record_outcome)
    relaxed: bool
    #: what is due rides along (default True; False for a read)
    ride: bool
    #: one statement: without riders it runs by itself, its own implicit transaction
    alone: bool


def riders_of(state: _base.SaverState, options: PgTransaction) -> _base.Riders:
    """What rides along with one try of a transaction of these ``options``."""
    return _base.Riders(
        state,
        options.get("ok"),
        flush=options.get("flush", False),
        ride=options.get("ride", True),
        relaxed=options.get("relaxed", False),
    )


def translation(translate: Translate | None) -> Translate:
    """``translate``, then the missing-schema error."""
    if translate is None:
        return missing_schema
    return lambda exc: translate(exc) or missing_schema(exc)


L = TypeVar("L", bound=Callable[..., Iterator[CheckpointTuple]])

#: What `retried_list` and its async twin say of the `list` they wrap.
RETRIED_LIST_DOC = """As LangGraph's `list`, its query retried like any read (every row is read
before the first is yielded); an undecodable row raises `CheckpointCorrupt`."""


def retried_list(listing: L) -> L:
    """``listing`` (the saver's `list` below the Postgres saver), its first row
    fetched under the saver's retry (``_call``): LangGraph's query runs as the first
    row is asked for, so that is where the store fails."""

    @functools.wraps(listing)
    def list_(
        saver: Any, config: RunnableConfig | None, **options: Any
    ) -> Iterator[CheckpointTuple]:
        listed: Generator[CheckpointTuple, None, None] | None = None

        def first() -> CheckpointTuple | None:
            nonlocal listed
            listed = cast(Generator[CheckpointTuple, None, None], listing(saver, config, **options))
            return next(listed, None)

        item = saver._call(first)
        if item is None or listed is None:
            return
        try:
            yield item
            yield from listed
        finally:
            listed.close()  # a reader that stops early frees the saver's lock now

    list_.__doc__ = RETRIED_LIST_DOC
    return cast(L, list_)


ConnT = TypeVar("ConnT")
PipeT = TypeVar("PipeT")


class PgSaverBase(Generic[ConnT, PipeT]):
    """What the two Postgres savers share but their I/O: how they are made, the
    connection they keep in the shared state, the dialect's rows, and how a try
    decides to replace the saver's own connection."""

    _dialect = POSTGRES
    SELECT_SQL = _sums.PG_SELECT  # with the sums (`_sums.pg_checked`)

    _state: _base.SaverState
    _timeouts: PgTimeouts
    _target: str
    pipe: PipeT | None

    def __init__(
        self,
        conn: ConnT,
        pipe: PipeT | None = None,
        serde: SerializerProtocol | None = None,
        *,
        store_retry: Backoff | None = None,
        archive: Archive | str | None = None,
        warn_checkpoint_bytes: int | None = _base.WARN_BYTES,
        max_checkpoint_bytes: int | None = None,
        timeouts: PgTimeouts | None = None,
    ) -> None:
        self._state = _base.make_state(store_retry, DEFAULT_PG_STORE_RETRY)
        _base.set_lifecycle(self._state, archive, warn_checkpoint_bytes, max_checkpoint_bytes)
        self._timeouts = saver_timeouts(timeouts)
        # LangGraph's (Async)PostgresSaver, further along the saver's MRO.
        super().__init__(conn, pipe, serde)  # type: ignore[call-arg]
        self._target, live = saver_target(conn)
        if live is not None:
            self._state.conninfo = self._timeouts.conninfo(live)
        if isinstance(conn, (BoundedConnection, AsyncBoundedConnection)):
            conn.read_timeout = self._timeouts.read_timeout

    # The connection lives in the shared state, so a copy of this saver (made by
    # compile() under strict msgpack) sees the fresh connection that replaced a
    # broken one.
    @property
    def conn(self) -> ConnT:
        return self._state.conn  # type: ignore[no-any-return]

    @conn.setter
    def conn(self, value: ConnT) -> None:
        self._state.conn = value

    def _replacement(self, conn: Any) -> str | None:
        """The conninfo to open a fresh connection with, when the saver's own
        ``conn`` must be replaced before a try (None: use it as it is)."""
        conninfo = self._state.conninfo
        if self.pipe is not None or conninfo is None:
            return None
        return (
            conninfo if _network.needs_new_connection(conn, suspect=self._state.suspect) else None
        )

    def _give_up(self, exc: BaseException, attempts: int) -> BaseException | None:
        return _network.give_up(self._target, self._state.backoff, exc, attempts)


@contextmanager
def connecting(conn_string: str) -> Iterator[None]:
    """Opening the saver's connection: a failure raises `StoreUnavailable`, naming
    the DSN without its password."""
    try:
        yield
    except psycopg.Error as exc:
        raise _network.unavailable(target_of(conn_string), exc, 1, 0.0, connecting=True) from exc


@contextmanager
def suspecting(state: _base.SaverState) -> Iterator[None]:
    """Around one try's connection: a transient failure makes the next try check
    its connection before using it; a success clears the doubt."""
    try:
        yield
    except Exception as exc:
        state.suspect = state.suspect or is_transient_store_error(exc)
        raise
    state.suspect = False


@route_cursor
@check_pg_rows(_sums.pg_checked)
class ResilientPostgresSaver(PgSaverBase[Conn, Pipeline], SyncResilience, PostgresSaver):
    """A drop-in `PostgresSaver` that survives store faults and refuses silent forks.

    On top of LangGraph's saver it:

    - keeps the resilience tables, created by `setup()` through its own migration
      list (LangGraph's ``MIGRATIONS`` is left alone);
    - writes each checkpoint (blobs, row, counters) in one transaction and
      retries it after a transient error (dropped connection, server restart,
      serialization failure), counting every try;
    - reconnects before every try whose connection is gone, so it rides out an
      outage as long as its retry window (``store_retry``; by default ten tries
      over 11.1 s), and then raises `StoreUnavailable` naming the server;
    - bounds every wait on the connections it opens itself (``timeouts``, see
      `PgTimeouts`): a call returns or raises within ``store_retry.max_attempts *
      (timeouts.connect + timeouts.read)`` plus the retry window, even when the
      network swallows everything;
    - refuses, with `CheckpointConflict`, a checkpoint that continues a thread from
      a checkpoint that is no longer the latest of its namespace, in the same
      transaction as the write;
    - implements `copy_thread` and `delete_for_runs`, and extends `prune` and
      `delete_thread` to the resilience rows.

    Connections you pass yourself keep the settings you gave them. A single
    connection that breaks is replaced by one the saver opens with the same
    parameters plus the ``timeouts`` they leave unset (your object stays broken; the
    saver closes the replacement's predecessor). A pool hands out fresh connections
    by itself; after a failed try the saver skips pooled connections the server has
    closed. Give the pool the bounds too: a conninfo from ``PgTimeouts().conninfo(dsn)``
    and ``connection_class=BoundedConnection`` (see the README, "Network faults").
    In pipeline mode (``pipe``) a broken connection cannot be replaced.

    Args:
        conn: a ``psycopg.Connection`` (autocommit, ``dict_row``) or a ``ConnectionPool``.
        pipe: a pipeline of ``conn``, as for `PostgresSaver`.
        serde: the serializer.
        store_retry: how transient store errors are retried (default
            ``DEFAULT_PG_STORE_RETRY``: ten tries, fixed waits adding up to 11.1 s).
        timeouts: the bounded waits of the connections the saver opens
            (default ``PgTimeouts()``), and the ``read`` bound it sets on every
            `BoundedConnection` it uses.
        archive: the cold tier (an `Archive` or its URL): ``archive_idle`` moves idle
            threads there, and reading an archived thread restores it.
        warn_checkpoint_bytes: log a warning past this checkpoint size (None: never).
        max_checkpoint_bytes: refuse a larger checkpoint with a `ConfigError`.

    Example:
        >>> from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
        >>> DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
        >>> with ResilientPostgresSaver.from_conn_string(DSN) as saver:  # doctest: +SKIP
        ...     saver.setup()
    """

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        store_retry: Backoff | None = None,
        timeouts: PgTimeouts | None = None,
        **lifecycle: Any,
    ) -> Iterator[ResilientPostgresSaver]:
        """Connect to Postgres with a DSN, adding the ``timeouts`` it does not set.

        Raises:
            StoreUnavailable: the server cannot be reached (the message names the
                DSN without its password).
        """
        bounds = saver_timeouts(timeouts)
        with connecting(conn_string):
            conn = _network.connect(bounds.conninfo(conn_string), bounds.read_timeout)
        saver = None
        try:
            with conn.pipeline() if pipeline else nullcontext() as pipe:
                saver = cls(conn, pipe, store_retry=store_retry, timeouts=bounds, **lifecycle)
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
            StoreUnavailable: the server could not be reached within the retry window.
        """
        with self._setup_lock():  # one process at a time (LangGraph's migrations race)
            self._call(lambda: super(ResilientPostgresSaver, self).setup())
            self._transact(
                lambda: _schema.migrate(POSTGRES, where="this Postgres database"), check=False
            )
        self._state.schema_checked = True

    @contextmanager
    def _setup_lock(self) -> Iterator[None]:
        """`_schema.SETUP_LOCK` held around ``setup()``: on the saver's own
        connection, or on one opened for it beside a pool (whose connections
        LangGraph's setup takes)."""
        pool, read = self.conn, self._timeouts.read_timeout
        own = not isinstance(pool, ConnectionPool)
        conn: Any = pool
        if isinstance(pool, ConnectionPool):
            conn = self._call(lambda: _network.connect_beside(pool, read))
        try:
            self._call(lambda: conn.execute(_schema.SETUP_LOCK).fetchone())
            try:
                yield
            finally:
                with suppress(Exception):  # a lost connection has let go of it
                    conn.execute(_schema.SETUP_UNLOCK).fetchone()
        finally:
            if not own:
                conn.close()

    # -- the connection of a try ---------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[Connection[DictRow]]:
        """The connection one try runs on, under the saver's lock: its own one,
        replaced first if it is gone, or one of the pool's. A transient failure
        makes the next try check its connection before using it."""
        with self.lock, suspecting(self._state):
            if isinstance(self.conn, ConnectionPool):
                with _network.pooled(self.conn, self._state.suspect, self._timeouts) as conn:
                    yield conn
            else:
                yield self._own_connection()

    def _own_connection(self) -> Connection[DictRow]:
        conn = self.conn
        assert isinstance(conn, Connection)
        conninfo = self._replacement(conn)
        if conninfo is None:
            return conn
        # Fails while the server is down: then this try fails, and the next one
        # reconnects again (not only the try right after the failure).
        fresh = _network.connect(conninfo, self._timeouts.read_timeout)
        self.conn = fresh
        conn.close()
        return fresh

    @contextmanager
    def _open_cursor(self, *, pipeline: bool = False) -> Iterator[Cursor[DictRow]]:
        """LangGraph's cursor (as `PostgresSaver`'s), on `_connection`: the cursor
        every query of LangGraph's own methods opens (`route_cursor`)."""
        with self._connection() as conn:
            if self.pipe:
                try:
                    with conn.cursor(binary=True, row_factory=dict_row) as cur:
                        yield cur
                finally:
                    if pipeline:
                        self.pipe.sync()
            elif pipeline and self.supports_pipeline:
                with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur
            elif pipeline:
                with conn.transaction(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur
            else:
                with conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur

    # -- the transaction driver ----------------------------------------------

    @contextmanager
    def _transaction(self, pipeline: bool, alone: bool = False) -> Iterator[Cursor[DictRow]]:
        with self._connection() as conn:
            if alone and self.pipe is None and conn.autocommit:
                # One statement, its own implicit transaction: one round trip even
                # when it fetches (a pipeline's fetch waits once more, for its Sync).
                with conn.cursor(binary=True) as cur:
                    yield cur
            elif pipeline and self.pipe is None and self.supports_pipeline and conn.autocommit:
                # One round trip: an autocommit pipeline runs everything up
                # to its Sync as one implicit transaction, all or nothing.
                with conn.pipeline(), conn.cursor(binary=True) as cur:
                    yield cur
            else:
                with conn.transaction(), conn.cursor(binary=True) as cur:
                    yield cur
                if self.pipe is not None:
                    self.pipe.sync()

    def _transact(
        self,
        statements: Callable[[], Statements[T]],
        **options: Unpack[PgTransaction],
    ) -> T:
        check = options.get("check", True)
        pipeline, alone = options.get("pipeline", False), options.get("alone", False)

        def attempt() -> T:
            # Pipeline mode sends the whole transaction in one round trip, but it
            # can hand a fetch the rows of an earlier statement (after a NOTICE),
            # so only statement lists that fetch nothing use it.
            checked = self._state.schema_checked or not check
            with (
                riders_of(self._state, options) as riders,
                self._transaction(
                    pipeline and checked, alone and checked and not riders.riding
                ) as cur,
            ):
                if not checked:
                    execute(cur, _schema.check_schema(POSTGRES))
                if riders.riding:
                    execute(cur, riders.statements(POSTGRES))
                result = execute(cur, statements())
            self._state.schema_checked = self._state.schema_checked or check
            return result

        return call_with_retry(
            attempt,
            backoff=self._state.backoff,
            on_failure=self._on_failure(options.get("failed")),
            translate=translation(options.get("translate")),
            give_up=self._give_up,
        )

    def _on_failure(self, failed: str | None) -> Callable[[BaseException], None]:
        def on_failure(exc: BaseException) -> None:
            _base.count_failure(self._state, failed)

        return on_failure

    def _call(self, op: Callable[[], T]) -> T:
        return call_with_retry(
            op,
            backoff=self._state.backoff,
            on_failure=self._on_failure(None),
            give_up=self._give_up,
        )

    def _query(self, statements: Callable[[], Statements[T]]) -> T:
        # A read runs its statements as they come, each its own implicit transaction
        # (one round trip apiece, no BEGIN and COMMIT), as LangGraph's own reads do:
        # under READ COMMITTED a transaction around them would not make them one view.
        return self._transact(statements, ride=False, alone=True)

    # -- the dialect's rows ------------------------------------------------------

    _prepare_put = pg_put
    _put_statements = pg_put_statements
    _write_rows = pg_write_rows

    def _keep_latest(self, thread_ids: list[str]) -> None:
        # LangGraph's own keep_latest (one transaction per thread), then our rows.
        self._call(lambda: PostgresSaver.prune(self, thread_ids, strategy="keep_latest"))
        self._transact(lambda: _threads.delete_orphans(POSTGRES, thread_ids))

    # -- reads LangGraph runs --------------------------------------------------------

    list = retried_list(SyncResilience.list)
