"""The run ledger's reads (`_run_log` writes the rows): the records of its runs,
paged newest first, and the step records of a thread, in the form
``saver.step_history`` lists them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_resilience.checkpoint.runlog._step_rows import (
    ROW_FIELDS,
    STEP_FIELDS,
    record_fields,
    usage_of,
)
from langgraph_resilience.checkpoint.store._schema import RUN_LOG, STEPS
from langgraph_resilience.checkpoint.store._store import (
    Dialect,
    Row,
    Statements,
    Stmt,
    from_row,
    select_list,
)
from langgraph_resilience.errors import ConfigError

__all__ = [
    "CHANNEL",
    "ENDED",
    "STATUSES",
    "STEP_FIELDS",
    "Cursor",
    "RunLogRecord",
    "cursor_of",
    "list_run_rows",
    "read_run_row",
    "read_steps",
    "read_tally",
    "step_order",
    "tally_rows",
]

#: The run-log channel of a `ResilientState`.
CHANNEL = "resilience"
#: The statuses of a run that ended.
ENDED = ("success", "partial_complete", "error", "cancelled")
#: Every status a run row can be in.
STATUSES = ("running", "paused", *ENDED)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunLogRecord:
    """One run of a thread, as the ledger stores it (``resilience_run_log``).

    Attributes:
        thread_id / run: the thread and the run's number on it (1, 2, ...).
        status: running, paused, success, partial_complete, error or cancelled.
        task_spec_type / task_spec: the run's input, serialized with the saver's
            serde (`task_spec_of` reads it back).
        checkpoint_id: the run's input checkpoint.
        started_at / ended_at / updated_at: epoch seconds (ended_at None while open).
        failed_step: the path of the step that ended it short (None if none).
        usage: what it used (JSON text: tokens, cost, seconds, steps), set when
            its driver or `Worker` saw it end or pause (`used`).
        run_id / worker: the `Worker` run and worker that ran it (None for a
            plain ``invoke``).
        paused_for: why it last paused: ``budget`` (its `Budget` ran out),
            ``human`` (an ``interrupt()``) or ``wait`` (a durable wait: a
            Retry-After longer than its ``max_wait``; no pause, no recovery
            when it goes on); None if it never paused.
        error: the error a run that ended ``error`` ended on (``Type: message``).
        graph_version: the `ResilientStateGraph` ``version`` it ran on (as text).
        holder / seen_at: the process driving a run no `Worker` holds
            (`_process.process_id`) and when it was last seen doing so (epoch
            seconds: its start, a resume, a retry); None for a `Worker` run
            and for rows stored before schema version 3.
    """

    thread_id: str
    run: int
    status: str
    task_spec_type: str | None
    task_spec: bytes | None
    checkpoint_id: str | None
    started_at: float
    ended_at: float | None
    updated_at: float
    failed_step: str | None
    usage: str | None
    run_id: str | None
    worker: str | None
    paused_for: str | None = None
    error: str | None = None
    graph_version: str | None = None
    holder: str | None = None
    seen_at: float | None = None

    def used(self) -> dict[str, float]:
        """``usage`` decoded (empty when not known)."""
        return dict(json.loads(self.usage)) if self.usage else {}

    def task_spec_of(self, loads: Callable[[tuple[str, bytes]], Any]) -> Any:
        """The run's input, as it was given (``loads``: the saver's ``serde.loads_typed``)."""
        if self.task_spec_type is None or self.task_spec is None:
            return None
        return loads((self.task_spec_type, bytes(self.task_spec)))


_RUN_COLUMNS = select_list(RunLogRecord)
assert tuple(_RUN_COLUMNS.split(", ")) == RUN_LOG.names  # one order: the table's


def step_order(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """How step records are ordered: by run, then start (then path)."""
    return (record.get("run") or 1, record.get("started_at") or 0.0, record.get("path") or "")


def read_steps(d: Dialect, thread_id: str, run: int | None) -> Statements[list[dict[str, Any]]]:
    """A thread's step records from the ledger, by run then start (one run's if
    ``run``), in one statement."""
    where, params = ("AND s.run = ? ", (int(run),)) if run is not None else ("", ())
    rows = yield Stmt(
        d.sql(
            "SELECT s.checkpoint_ns, s.checkpoint_id, s.task_id, "
            f"{', '.join('s.' + f for f in ROW_FIELDS)} FROM {STEPS.name} s "
            f"WHERE s.thread_id = ? {where}"
        ),
        (thread_id, *params),
        fetch=True,
    )
    found = [step_record(r) for r in rows]
    found.sort(key=step_order)
    return found


def step_record(row: Row) -> dict[str, Any]:
    """A step record (as `saver.step_history` lists it) from a step row."""
    ns, checkpoint_id, task_id, *values = row
    record = record_fields(dict(zip(ROW_FIELDS, values, strict=True)))
    record.update(checkpoint_ns=ns, checkpoint_id=checkpoint_id, task_id=task_id)
    return record


def read_run_row(d: Dialect, thread_id: str, run: int) -> Statements[RunLogRecord | None]:
    rows = yield Stmt(
        d.sql(f"SELECT {_RUN_COLUMNS} FROM {RUN_LOG.name} WHERE thread_id = ? AND run = ?"),
        (thread_id, int(run)),
        fetch=True,
    )
    return from_row(RunLogRecord, rows[0]) if rows else None


def read_tally(
    d: Dialect, thread_id: str, run: int
) -> Statements[tuple[dict[str, int], dict[str, float]]]:
    """A run's loop counts and usage, from its top-level step rows (`_scope.Tally`):
    executions per path without its iteration (``review#3`` counts as
    ``review``) of the steps that ran (completed or degraded), usage summed."""
    rows = yield Stmt(
        d.sql(
            f"SELECT path, status, usage, seconds FROM {STEPS.name} "
            "WHERE thread_id = ? AND checkpoint_ns = '' AND run = ?"
        ),
        (thread_id, int(run)),
        fetch=True,
    )
    return tally_rows(rows)


def tally_rows(rows: Iterable[Sequence[Any]]) -> tuple[dict[str, int], dict[str, float]]:
    """`read_tally`'s sums, from (path, status, usage, seconds) of a run's
    top-level step rows (the Redis savers' too, `redis.runlog._steps`)."""
    counts: dict[str, int] = {}
    usage: dict[str, float] = {}
    for path, status, used, seconds in rows:
        if status in ("completed", "degraded"):
            base = str(path).partition("#")[0]
            counts[base] = counts.get(base, 0) + 1
        for key, value in (usage_of(used, seconds) or {}).items():
            usage[key] = usage.get(key, 0) + value
    return counts, usage


#: A page's position: (started_at, thread_id, run) of the last row of the page before.
Cursor = tuple[float, str, int]


def list_run_rows(
    d: Dialect,
    *,
    thread_id: str | None = None,
    statuses: Sequence[str] = (),
    limit: int = 100,
    before: Cursor | None = None,
) -> Statements[list[RunLogRecord]]:
    """Run rows, newest first (by start), ``limit`` at a time: of one thread or
    all, in ``statuses`` if given, after the page ending at ``before`` (the
    `cursor_of` its last row)."""
    if isinstance(statuses, str):
        statuses = (statuses,)
    unknown = sorted(set(statuses) - set(STATUSES))
    if unknown:
        raise ConfigError(f"unknown run status(es) {unknown}; one of {', '.join(STATUSES)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"limit must be an int >= 1, got {limit!r}")
    where: list[str] = []
    params: list[Any] = []
    if thread_id is not None:
        where.append("thread_id = ?")
        params.append(str(thread_id))
    if statuses:
        where.append("status IN_LIST(?)")
        params.append(d.list_param(statuses))
    if before is not None:
        started, thread, run = before
        where.append("(started_at, thread_id, run) < (?, ?, ?)")
        params += [float(started), str(thread), int(run)]
    clause = f"WHERE {' AND '.join(where)} " if where else ""
    rows = yield Stmt(
        d.sql(
            f"SELECT {_RUN_COLUMNS} FROM {RUN_LOG.name} {clause}"
            "ORDER BY started_at DESC, thread_id DESC, run DESC LIMIT ?"
        ),
        (*params, int(limit)),
        fetch=True,
    )
    return [from_row(RunLogRecord, r) for r in rows]


def cursor_of(record: RunLogRecord) -> Cursor:
    """Where the page after ``record`` starts (``before=`` of `list_run_rows`)."""
    return (record.started_at, record.thread_id, record.run)
