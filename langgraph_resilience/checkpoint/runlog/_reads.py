"""How `recovery_metrics`, `run_report` and `list_runs` read the store: written
once as generators of `Read`, run by a sync driver (`drive`) or an async one
(`adrive`).

A `Read` carries the read twice, as a call on a sync saver and as one on an
async saver, so that no method is looked up by name; the constructors below are
the reads there are, each with its own reply type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.pregel import Pregel

from langgraph_resilience._util._plans import Plan
from langgraph_resilience.checkpoint._protocol import (
    AsyncEffectLedger,
    AsyncRunLedger,
    AsyncSaveCounters,
    EffectLedger,
    RunLedger,
    SaveCounters,
)
from langgraph_resilience.checkpoint.ledger._ledger import EffectRecord
from langgraph_resilience.checkpoint.ledger._runs import RunRecord
from langgraph_resilience.checkpoint.runlog._events import StoredAttempt
from langgraph_resilience.checkpoint.runlog._run_log_reads import Cursor, RunLogRecord
from langgraph_resilience.checkpoint.runlog._run_metrics import RunCounts
from langgraph_resilience.checkpoint.runlog._run_summaries import ThreadLedger
from langgraph_resilience.errors import ConfigError

__all__ = [
    "Read",
    "Reads",
    "SaverOrGraph",
    "adrive",
    "async_saver_of",
    "checkpoint",
    "counters",
    "drive",
    "effects",
    "metrics",
    "run_rows",
    "runs",
    "saver_of",
    "summaries",
    "thread_ledger",
    "thread_attempts",
]

T = TypeVar("T")

#: What the history's entry points take: a resilient saver, or a graph compiled
#: with one.
SaverOrGraph: TypeAlias = "BaseCheckpointSaver[Any] | Pregel[Any, Any, Any, Any]"


@dataclass(frozen=True, kw_only=True, slots=True)
class Read(Generic[T]):
    """One read of the store: ``sync`` on a sync saver, ``async_`` on an async one."""

    sync: Callable[[RunLedger], T]
    async_: Callable[[AsyncRunLedger], Awaitable[T]]


Reads = Generator[Read[Any], Any, T]


def run_rows(
    thread_id: str | None = None,
    *,
    statuses: Sequence[str] = (),
    limit: int = 100,
    before: Cursor | None = None,
) -> Read[list[RunLogRecord]]:
    """A page of the run ledger's runs, newest first (`History.run_rows`)."""
    return Read(
        sync=lambda s: s.history.run_rows(thread_id, statuses=statuses, limit=limit, before=before),
        async_=lambda s: s.history.arun_rows(
            thread_id, statuses=statuses, limit=limit, before=before
        ),
    )


def metrics(since: float | None, nodes: Sequence[str] | None) -> Read[RunCounts]:
    """The run ledger's aggregates for `recovery_metrics` (`_run_metrics`)."""
    return Read(
        sync=lambda s: s.history.metrics(since, nodes),
        async_=lambda s: s.history.ametrics(since, nodes),
    )


def summaries(statuses: Sequence[str] | None, limit: int) -> Read[list[tuple[Any, ...]]]:
    """A page of runs for `list_runs`, newest first (`_run_summaries`)."""
    return Read(
        sync=lambda s: s.history.summaries(statuses, limit),
        async_=lambda s: s.history.asummaries(statuses, limit),
    )


def thread_ledger(thread_id: str) -> Read[ThreadLedger]:
    """One thread's ledger rows, for `run_report` (`_run_summaries`)."""
    return Read(
        sync=lambda s: s.history.thread_ledger(thread_id),
        async_=lambda s: s.history.athread_ledger(thread_id),
    )


def runs(thread_id: str | None) -> Read[list[RunRecord]]:
    return Read(
        sync=lambda s: s.history.runs(thread_id), async_=lambda s: s.history.aruns(thread_id)
    )


def thread_attempts(thread_id: str) -> Read[list[StoredAttempt]]:
    return Read(
        sync=lambda s: s.history.attempts(thread_id),
        async_=lambda s: s.history.aattempts(thread_id),
    )


def effects(thread_id: str) -> Read[Sequence[EffectRecord]]:
    return Read(
        sync=lambda s: s.list_effects(thread_id), async_=lambda s: s.alist_effects(thread_id)
    )


def counters(since: float | None) -> Read[dict[str, int]]:
    """The save counters (`store._counters`; on Redis, `redis.store._counts`); none on a
    saver that keeps none."""
    return Read(
        sync=lambda s: s.read_counters(since) if isinstance(s, SaveCounters) else {},
        async_=lambda s: _acounters(s, since),
    )


async def _acounters(saver: AsyncRunLedger, since: float | None) -> dict[str, int]:
    if isinstance(saver, AsyncSaveCounters):
        return await saver.aread_counters(since)
    return {}


def checkpoint(config: RunnableConfig) -> Read[CheckpointTuple | None]:
    return Read(sync=lambda s: s.get_tuple(config), async_=lambda s: s.aget_tuple(config))


def _checkpointer(target: object) -> object:
    """The saver itself, or the saver of a compiled graph."""
    return getattr(target, "checkpointer", None) or target


#: What each reader wants, named in its `ConfigError` (`_of`).
_WANTED: dict[Any, str] = {
    RunLedger: "ResilientSqliteSaver, ResilientPostgresSaver or ResilientRedisSaver",
    AsyncRunLedger: (
        "AsyncResilientSqliteSaver, AsyncResilientPostgresSaver or AsyncResilientRedisSaver"
    ),
    EffectLedger: "a resilient saver (SQLite, Postgres or Redis)",
    AsyncEffectLedger: "an async resilient saver (SQLite, Postgres or Redis)",
}


def _of(target: object, what: str, kind: Any) -> Any:
    """The saver of ``target`` (`_checkpointer`) if it is a ``kind``; else the
    `ConfigError` that names what ``what`` wants."""
    saver = _checkpointer(target)
    if not isinstance(saver, kind):
        raise ConfigError(
            f"{what} reads a resilient saver's store: pass {_WANTED[kind]} (or a graph "
            "compiled with one; the a-prefixed twin takes an async saver, the other a sync "
            f"one), got {type(saver).__name__}"
        )
    return saver


def saver_of(target: object, what: str) -> RunLedger:
    """The saver (or a compiled graph's) as a keeper of the run ledger."""
    return cast(RunLedger, _of(target, what, RunLedger))


def async_saver_of(target: object, what: str) -> AsyncRunLedger:
    return cast(AsyncRunLedger, _of(target, what, AsyncRunLedger))


def ledger_of(target: object, what: str) -> EffectLedger:
    """As `saver_of`, for what needs only the step ledger (the Redis savers too)."""
    return cast(EffectLedger, _of(target, what, EffectLedger))


def async_ledger_of(target: object, what: str) -> AsyncEffectLedger:
    return cast(AsyncEffectLedger, _of(target, what, AsyncEffectLedger))


def drive(saver: RunLedger, reads: Reads[T]) -> T:
    plan = Plan(reads)
    for op in plan:
        plan.reply = op.sync(saver)
    return plan.value


async def adrive(saver: AsyncRunLedger, reads: Reads[T]) -> T:
    plan = Plan(reads)
    for op in plan:
        plan.reply = await op.async_(saver)
    return plan.value
