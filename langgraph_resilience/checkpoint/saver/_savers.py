"""The saver methods both dialects share: the hooks a dialect supplies and the
mixin of the sync savers (its async twin is in `_asavers`).

A saver class puts its mixin before LangGraph's saver in its bases
(``class ResilientSqliteSaver(SyncResilience, SqliteSaver)``) and supplies the
dialect's I/O: ``_transact`` (statements in one transaction, retried),
``_query`` (statements that only read, retried), ``_call`` (a LangGraph method,
retried), the rows of a checkpoint and of writes, and ``_keep_latest``.

Every write goes through ``_write``: the one place a run's `Fence` is applied
(`_runs.fence_write`) and a store error is translated to the library's own.

A task's writes that hold a `LeaseLost` (its worker could not prove it held the
run's lease: the step stopped, it did not fail) are never stored
(`stops_on_lost_lease`): stored, they would mark the step failed for whoever
takes the run over, which would then never run it. Nor is the checkpoint that
would follow such a step (`Hooks._lease_stop`): the step has no writes, and a
checkpoint after it would read as if it had run.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, TypedDict, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from typing_extensions import Unpack

from langgraph_resilience._langgraph import ERROR_CHANNEL
from langgraph_resilience._store_errors import is_store_error
from langgraph_resilience._util._plans import Plan
from langgraph_resilience.checkpoint.archive._methods import SyncArchival
from langgraph_resilience.checkpoint.archive._sizes import channel_sizes, put_size
from langgraph_resilience.checkpoint.ledger import _ledger, _runs
from langgraph_resilience.checkpoint.ledger._ledger import EffectRecord
from langgraph_resilience.checkpoint.ledger._runs import Fence, RunRecord
from langgraph_resilience.checkpoint.runlog import _run_end, _run_log, _run_log_reads, _scope
from langgraph_resilience.checkpoint.runlog._history import History
from langgraph_resilience.checkpoint.saver import _base, _threads
from langgraph_resilience.checkpoint.saver._interfaces import Attempts, Effects, Runs
from langgraph_resilience.checkpoint.saver._parts import Interface
from langgraph_resilience.checkpoint.saver._threads import PutCheckpoint
from langgraph_resilience.checkpoint.store import _counters
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt, no_statements
from langgraph_resilience.checkpoint.store._store_retry import Translate
from langgraph_resilience.errors import LeaseLost

T = TypeVar("T")
WriteRows = tuple[str, list[tuple[Any, ...]]]


class Transaction(TypedDict, total=False):
    """The options every saver's ``_transact`` takes (each absent one at its default;
    a dialect's own may take more: `ResilientPostgresSaver`'s `PgTransaction`)."""

    translate: Translate | None  # a store error to the caller's own
    ok: str | None  # the counter a success adds to
    failed: str | None  # the counter each failed try adds to
    pipeline: bool  # the statements fetch nothing: one round trip where the store can
    flush: bool  # store the counts that are due with this write
    relaxed: bool  # a write that may skip waiting for the disk


def stops_on_lost_lease(writes: Sequence[tuple[str, Any]]) -> bool:
    """Whether a task's writes are those of a step stopped by a lost lease (an
    error write holding the live `LeaseLost`): none of them is stored."""
    for channel, value in writes:  # a loop, not any(): it runs on every write
        if channel == ERROR_CHANNEL and isinstance(value, LeaseLost):
            return True
    return False


#: Checkpoints remembered as stopped by a lost lease, at most.
_MAX_STOPS = 1024


class LeaseStops:
    """A step stopped by a lost lease: its writes, and the checkpoint after it, are
    not stored (every saver: the SQL `Hooks` and the Redis savers' `RedisCommon`)."""

    def _lease_stop(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]]) -> bool:
        """Whether ``writes`` are a step stopped by a lost lease (not to be stored);
        remembers the checkpoint it stopped at, for `_refuse_after_stop`."""
        if not stops_on_lost_lease(writes):
            return False
        stops: set[tuple[str, str, str | None]] = self.__dict__.setdefault("_lease_stops", set())
        if len(stops) >= _MAX_STOPS:
            stops.clear()  # a bound: a stopped run raises LeaseLost at once, so few wait here
        stops.add(_base.thread_key(config))
        return True

    def _refuse_after_stop(self, config: RunnableConfig) -> None:
        """Raise `LeaseLost` for a checkpoint whose parent saw a step stopped by a
        lost lease (``config``: the parent's)."""
        stops: set[tuple[str, str, str | None]] | None = self.__dict__.get("_lease_stops")
        if not stops:  # no step of this saver stopped so: nothing to refuse
            return
        key = _base.thread_key(config)
        if key in stops:
            stops.discard(key)
            raise LeaseLost(
                f"thread {key[0]!r}: a step at checkpoint {key[2]!r} stopped because its "
                "worker lost the run's lease; the checkpoint after it is not stored. The "
                "worker that takes the run over runs that step."
            )


class Hooks(LeaseStops, BaseCheckpointSaver[str]):
    """What a dialect supplies (pure parts; the I/O hooks are on each mixin)."""

    _dialect: ClassVar[Dialect]
    _state: _base.SaverState

    def _prepare_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> PutCheckpoint:
        raise NotImplementedError

    def _put_statements(self, put: PutCheckpoint) -> Statements[None]:
        return _threads.put_checkpoint(self._dialect, put)

    def _put_and_runs(
        self, put: PutCheckpoint, ledger: _run_log.PutLedger | None
    ) -> Statements[None]:
        """A checkpoint, and the run it starts or ends (`_run_log.ledger_of_put`)."""
        yield from self._put_statements(put)
        yield from _run_log.put_statements(self._dialect, ledger)

    def _writes_and_steps(
        self, sql: str, rows: list[tuple[Any, ...]], ledger: _run_log.WriteLedger | None
    ) -> Statements[None]:
        """A task's writes, and what they tell the run ledger (its step's row)."""
        if rows:
            yield Stmt(sql, rows, many=True)
            yield from _run_log.write_statements(self._dialect, ledger)

    def _write_rows(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> WriteRows:
        raise NotImplementedError

    def _checked_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[PutCheckpoint, _run_log.PutLedger | None]:
        """The checkpoint ready to store (`_prepare_put`, with a value the serde
        cannot store named by its channel, within the size budget) and what it
        tells the run ledger (a run's input: with the serde); `LeaseLost` after a
        step stopped by a lost lease (`_refuse_after_stop`)."""
        self._refuse_after_stop(config)
        try:
            put = self._prepare_put(config, checkpoint, metadata, new_versions)
        except TypeError as exc:
            values = list(checkpoint.get("channel_values", {}).items())
            raise _base.unstorable(self.serde, values, "", exc) from exc
        self._state.sizes.check(
            put_size(put.row, put.blob_rows),
            lambda: f"checkpoint {put.checkpoint_id} of thread {put.thread_id!r}",
            lambda: channel_sizes(checkpoint.get("channel_values", {}), self.serde.dumps_typed),
            self._state.counters.add,
        )
        dumps = self.serde.dumps_typed
        return put, _run_log.ledger_of_put(config, checkpoint, metadata, new_versions, dumps)

    def _own_options(self) -> dict[str, Any]:
        """How this saver was built (its store retry, a Postgres saver's timeouts),
        to build another on the same store (`lease_saver`)."""
        options: dict[str, Any] = {
            "store_retry": self._state.backoff,
            "archive": self._state.archive,
        }
        sizes = self._state.sizes
        options.update(warn_checkpoint_bytes=sizes.warn_bytes, max_checkpoint_bytes=sizes.max_bytes)
        if (timeouts := getattr(self, "_timeouts", None)) is not None:
            options["timeouts"] = timeouts
        return options

    def _lease_steps(self, pool: Any) -> Generator[str, Any, Any]:
        """How `lease_saver` finds its saver, the I/O left to its driver: yields
        the SQL whose rows name a SQLite database's file; returns a saver of its
        own on this saver's ``pool``, the target to open one from (a conninfo, a
        file), or this saver (an in-memory SQLite database cannot be opened twice)."""
        conn: Any = getattr(self, "conn", None)
        if isinstance(conn, pool):
            return cast(Any, type(self))(conn, **self._own_options())
        if self._dialect.name == "postgres":
            target = self._state.conninfo
        else:
            target = _runs.sqlite_file((yield _runs.SQLITE_DATABASE_LIST))
        return target or self

    def _checked_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        handed: Any,
    ) -> tuple[str, list[tuple[Any, ...]], _run_log.WriteLedger | None] | None:
        """A task's rows (`_write_rows`, with a value the serde cannot store named
        by its channel) and what they tell the run ledger (``handed``: the step's
        record its node handed over); None for a step stopped by a lost lease."""
        if self._lease_stop(config, writes):
            return None
        try:
            sql, rows = self._write_rows(config, writes, task_id, task_path)
        except TypeError as exc:
            raise _base.unstorable(self.serde, writes, task_path, exc) from exc
        summaries = not _base.encrypts(self.serde)
        ledger = _run_log.ledger_of_writes(config, writes, task_id, handed, summaries=summaries)
        return sql, rows, ledger


PUT: dict[str, Any] = {
    "ok": _counters.CHECKPOINT_OK,
    "failed": _counters.CHECKPOINT_FAILED,
    "pipeline": True,
}
WRITES: dict[str, Any] = {
    "ok": _counters.WRITES_OK,
    "failed": _counters.WRITES_FAILED,
    "pipeline": True,
}


class SyncResilience(Hooks, SyncArchival):
    """put, put_writes, reads, the ledgers' interfaces, the README's methods and thread
    maintenance of the sync savers."""

    def _transact(
        self, statements: Callable[[], Statements[T]], **options: Unpack[Transaction]
    ) -> T:
        raise NotImplementedError

    def _query(self, statements: Callable[[], Statements[T]]) -> T:
        raise NotImplementedError

    def _call(self, op: Callable[[], T]) -> T:
        raise NotImplementedError

    def _keep_latest(self, thread_ids: list[str]) -> None:
        raise NotImplementedError

    def _write(
        self,
        statements: Callable[[], Statements[T]],
        *,
        fence: Fence | None = None,
        translate: Translate | None = None,
        **options: Any,
    ) -> T:
        """Run a write in one transaction, fenced if ``fence`` is given."""
        if fence is not None:
            statements, translate = _runs.fence_write(self._dialect, fence, statements, translate)
        return self._transact(statements, translate=translate, **options)

    # -- checkpoints and writes -------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint in one transaction; refuse one that would fork the thread.

        Raises:
            CheckpointConflict: another process moved the thread past this
                checkpoint's parent.
            LeaseLost: the run's worker no longer holds its lease.
        """
        put, ledger = self._checked_put(config, checkpoint, metadata, new_versions)
        # A checked put's own transaction refuses an archived thread: its end check
        # reads the hot tier, restoring nothing (a restore would let the put split it).
        listing = self._hot_list if put.check_fork else self.list
        ledger = _run_end.end_checked(ledger, config, checkpoint, metadata, listing)
        self._write(
            lambda: self._put_and_runs(put, ledger),
            fence=_runs.fence_of(config),
            translate=put.fork_conflict,
            **PUT,
        )
        _run_log.stored_put(config, ledger)  # the invoke's scope: its run, its end
        return _threads.wrote(config, put)

    def replace_checkpoint(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint again under its own id, replacing it (`ReplacingSaver`):
        `put`, whose row replaces one of the same id (its writes stay)."""
        return self.put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes, retrying transient store errors (none of a step
        stopped by a lost lease: `stops_on_lost_lease`)."""
        handed = _scope.take(config, task_id)  # a step's record its node handed over
        try:
            rows = self._checked_writes(config, writes, task_id, task_path, handed)
            if rows is not None:
                self._write(
                    lambda: self._writes_and_steps(*rows), fence=_runs.fence_of(config), **WRITES
                )
        finally:
            _scope.landed(config, task_id)  # its step, if any, is the store's to list

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """As LangGraph's `get_tuple`; an undecodable row raises `CheckpointCorrupt`."""
        config = _base.check_config_thread(config)  # a bad id: ConfigError, not a driver's
        try:
            found = self._call(lambda: super(SyncResilience, self).get_tuple(config))
            if found is None and self._restored(config):  # was archived: read it again
                found = self._call(lambda: super(SyncResilience, self).get_tuple(config))
            return _threads.saw_latest(config, found)
        except Exception as exc:
            thread_id, ns, checkpoint_id = _base.thread_key(config)
            if checkpoint_id is None and not is_store_error(exc):
                d = self._dialect
                checkpoint_id = self._query(lambda: _threads.locate_checkpoint(d, thread_id, ns))
            raise _base.corrupt(config, checkpoint_id, exc) from exc

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """As LangGraph's `list` (``filter``, ``before``, ``limit``); an undecodable row
        raises `CheckpointCorrupt`."""
        yield from self._listing(config, filter, before, limit, restore=True)

    def _hot_list(
        self, config: RunnableConfig | None, *, before: RunnableConfig | None = None
    ) -> Iterator[CheckpointTuple]:
        """`list` of the hot tier only: an archived thread lists nothing, and stays
        archived."""
        return self._listing(config, None, before, None, restore=False)

    def _listing(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
        *,
        restore: bool,
    ) -> Iterator[CheckpointTuple]:
        """`list`; an archived thread restored and listed again if ``restore``."""
        if config is not None:
            config = _base.check_config_thread(config)
        listed = cast(
            Generator[CheckpointTuple, None, None],
            super().list(config, filter=filter, before=before, limit=limit),
        )
        found = False
        while True:
            try:
                item = next(listed)
            except StopIteration:
                if found or not restore or not self._restored(config):
                    return
                found = True  # was archived: list it again, once
                listed = cast(Any, super().list(config, filter=filter, before=before, limit=limit))
                continue
            except Exception as exc:
                listed.close()
                raise _base.corrupt(config, None, exc) from exc
            found = True
            yield item

    # -- counters --------------------------------------------------------------------------

    def flush_counters(self) -> None:
        """Store the save counts and effect outcomes this saver holds in memory (run on
        close)."""
        self._transact(no_statements, flush=True)

    def read_counters(self, since: float | None = None) -> dict[str, int]:
        """Checkpoint and write tries stored so far, summed over every process
        (``since``: epoch seconds; counts are kept per hour)."""
        counters = self._state.counters
        return self._query(lambda: _counters.read_counters(self._dialect, counters, since))

    # -- the ledgers (`_interfaces`): the store side of side effects, nodes, `Worker` ----

    #: The class of `effects` (a `FaultPlan` taps a subclass of it on one saver).
    _effects_type: ClassVar[type[Effects]] = Effects
    effects = Interface[Effects](
        "_effects_type", "The side-effect ledger (the store side of `side_effect`)."
    )
    attempts = Interface(
        Attempts, "The failed tries of tasks (the store side of the node wrapper)."
    )
    runs = Interface(Runs, "The run queue under leases (the store side of `Worker`).")
    history = Interface(History, "What `recovery_metrics` and `run_report` read.")

    # -- what the README documents ----------------------------------------------------

    def list_effects(self, thread_id: str) -> Sequence[EffectRecord]:
        """A thread's side effects: key, name, intent and outcome times, status."""
        found = self._query(lambda: _ledger.list_effects(self._dialect, str(thread_id)))
        return self._state.outcomes.overlay(str(thread_id), found)

    def step_history(self, thread_id: str, *, run: int | None = None) -> Sequence[dict[str, Any]]:
        """Every step record of a thread, by run then start (one run's with ``run=``):
        run, path, node, status, attempts, kinds, started_at, ended_at, summary,
        run_id, worker, usage, and its task's checkpoint_ns, checkpoint_id, task_id.

        Read from the run ledger's step rows (an archived thread's, once restored)."""
        d = self._dialect
        found = self._query(lambda: _run_log_reads.read_steps(d, str(thread_id), run))
        if not found and self._restored({"configurable": {"thread_id": thread_id}}):
            found = self._query(lambda: _run_log_reads.read_steps(d, str(thread_id), run))
        return found

    def read_run(self, run_id: str) -> RunRecord | None:
        """A run: status, claims, owner, lease expiry, fencing token, outcome."""
        return self._query(lambda: _runs.read_run(self._dialect, str(run_id)))

    def list_runs(self, statuses: Sequence[str] = ()) -> Sequence[RunRecord]:
        """Runs, oldest first; only those in ``statuses`` if given."""
        return self._query(lambda: _runs.list_runs(self._dialect, statuses))

    def active_runs(self) -> int:
        """How many runs are queued or running (work some worker has to do)."""
        return self._query(lambda: _runs.active_runs(self._dialect))

    @contextmanager
    def lease_saver(self) -> Iterator[SyncResilience]:
        """This store through a connection and a lock of its own, for a `Worker`'s
        claims, renewals and run ends: they never wait behind a write of this saver
        (a write that hangs holds its lock). On a pool: a saver of its own on the
        same pool. An in-memory SQLite database cannot be opened twice: this saver.

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        plan = Plan(self._lease_steps(_base.ConnectionPool))
        for sql in plan:
            with cast(Any, self).lock:
                plan.reply = cast(Any, self).conn.execute(sql).fetchall()
        if not isinstance(plan.value, str):
            yield plan.value
            return
        with cast(Any, type(self)).from_conn_string(plan.value, **self._own_options()) as own:
            yield own

    # -- thread maintenance ----------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints, writes (and blobs) and resilience rows."""
        self._write(lambda: _threads.delete_threads(self._dialect, [str(thread_id)]))
        self._drop_archived(str(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints, writes (and blobs) and resilience rows.

        Raises:
            ConfigError: the target thread already has checkpoints.
        """
        d = self._dialect
        self._restored({"configurable": {"thread_id": source_thread_id}})
        self._write(lambda: _threads.copy_thread(d, source_thread_id, target_thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (with writes, freed blobs, resilience rows) of runs."""
        self._write(lambda: _threads.delete_for_runs(self._dialect, run_ids))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only the latest checkpoint per namespace, or delete the threads
        (``"delete"``, or ``"delete_all"`` as Agent Server's gRPC servicer says).

        The resilience rows of deleted checkpoints go with them.

        Raises:
            ConfigError: unknown strategy, or a single str for ``thread_ids``.
            NotImplementedError: ``keep_latest`` on a thread using a DeltaChannel.
        """
        ids = _threads.check_prune_args(thread_ids, strategy)
        if not ids:
            return
        if strategy in _threads.DELETE_STRATEGIES:
            self._write(lambda: _threads.delete_threads(self._dialect, ids))
        else:
            self._keep_latest(ids)
