"""The reads behind `recovery_metrics` and `run_report`, and the two recoveries
that nothing else stores (both dialects).

Nothing here runs on a step's happy path. A run's history is read from what is
already stored: the writes of its run-log channel (each step's record, the
markers of new runs, partial results and `retry_failed`), LangGraph's own
resume, interrupt and error writes (`_langgraph`'s channels), the attempts, effects and
runs tables. Two recoveries leave no write of their own and get a row in
``resilience_recoveries``: a `Worker`'s takeover of a run whose lease expired
(stored in the claim's own transaction) and a resume after a crash
(`note_recovery`). The saver's ``history`` interface runs these reads
(`_interfaces.History`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph_resilience._langgraph import (
    BRANCH_PREFIX,
    ERROR_CHANNEL,
    ERROR_SOURCE_CHANNEL,
    INTERRUPT_CHANNEL,
    RESUME_CHANNEL,
    TASKS_CHANNEL,
)
from langgraph_resilience.checkpoint.ledger._lease_judge import Claimant, dead_holders, taken_over
from langgraph_resilience.checkpoint.ledger._runs import RunRecord, claim_runs
from langgraph_resilience.checkpoint.store._schema import ATTEMPTS, RECOVERIES, RUN_LOG, RUNS
from langgraph_resilience.checkpoint.store._store import (
    Dialect,
    Row,
    Statements,
    Stmt,
    from_row,
    select_list,
)

__all__ = [
    "RUN_LOG_CHANNELS",
    "RecoveryRecord",
    "StoredAttempt",
    "claim_noting",
    "note_recovery",
    "read_recoveries",
    "read_run_log",
    "read_thread_attempts",
    "read_thread_runs",
]

#: The channels whose writes tell a run's story (values read); writes to the
#: `BRANCH_PREFIX` channels and Sends (`TASKS_CHANNEL`) are read
#: without their values (a run that wrote none in its last step has nothing left
#: to do). `ERROR_SOURCE_CHANNEL` marks an error that goes to the node's error
#: handler.
RUN_LOG_CHANNELS = (
    "resilience",
    RESUME_CHANNEL,
    INTERRUPT_CHANNEL,
    ERROR_CHANNEL,
    ERROR_SOURCE_CHANNEL,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoveryRecord:
    """A recovery stored in ``resilience_recoveries``.

    Attributes:
        thread_id: the thread recovered.
        key: unique per thread (``takeover:<run id>:<n>`` for a run's n-th takeover).
        kind: one of ``crash``, ``takeover``, ``retry_failed``, ``budget``, ``human``.
        run_id: the `Worker` run taken over (None for a crash resume).
        owner: the worker that took it over (host/pid of a crash resume).
        checkpoint_id: the thread's latest checkpoint then: the one resumed.
        at: when (epoch seconds: the database's clock for a crash or a takeover,
            the writer's for the kinds a write makes).
        run: the run of the thread it resumed (None: stored before version 26
            on a thread without run rows).
    """

    thread_id: str
    key: str
    kind: str
    run_id: str | None
    owner: str | None
    checkpoint_id: str | None
    at: float
    run: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredAttempt:
    """A failed try as `run_report` reads it: its task and its times."""

    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    attempt: int
    node: str
    kind: str | None
    error_type: str | None
    reason: str | None
    started_at: float
    finished_at: float | None
    wait: float | None


# The run it resumed: the Worker run's row, else the thread's latest run.
_NOTE = (
    f"INSERT INTO {RECOVERIES.name} (thread_id, key, kind, run_id, owner, checkpoint_id, at, run) "
    "SELECT ?, ?, ?, ?, ?, (SELECT max(checkpoint_id) FROM checkpoints "
    "WHERE thread_id = ? AND checkpoint_ns = ''), NOW(), coalesce("
    f"(SELECT max(run) FROM {RUN_LOG.name} WHERE run_id = ?), "
    f"(SELECT max(run) FROM {RUN_LOG.name} WHERE thread_id = ?)) WHERE 1 = 1 "
    "ON CONFLICT (thread_id, key) DO NOTHING"
)


def claim_noting(
    d: Dialect,
    owner: str,
    limit: int,
    lease_ttl: float,
    claim_token: str,
    who: Claimant | None = None,
) -> Statements[list[RunRecord]]:
    """`claim_runs`, storing a takeover for each claimed run whose lease had
    expired or whose holder was gone (in the claim's transaction: a takeover is
    never claimed unnoted)."""
    who = Claimant.here() if who is None else who
    dead = yield from dead_holders(d, who)
    gone_sql, gone_params = taken_over(d, who.clock, dead)
    expired = yield Stmt(
        d.sql(f"SELECT run_id FROM {RUNS.name} WHERE {gone_sql}"), gone_params, fetch=True
    )
    claimed = yield from claim_runs(d, owner, limit, lease_ttl, claim_token, who, dead)
    gone = {str(r[0]) for r in expired}
    rows = [
        (
            r.thread_id,
            f"takeover:{r.run_id}:{r.recoveries}",
            "takeover",
            r.run_id,
            owner,
            r.thread_id,
            r.run_id,
            r.thread_id,
        )
        for r in claimed
        if r.run_id in gone
    ]
    if rows:
        yield Stmt(d.sql(_NOTE), rows, many=True)
    return claimed


def note_recovery(
    d: Dialect, thread_id: str, key: str, kind: str, owner: str | None = None
) -> Statements[None]:
    """Store one recovery of a thread (once per ``key``) that ``owner`` made."""
    yield Stmt(d.sql(_NOTE), (thread_id, key, kind, None, owner, thread_id, None, thread_id))


def read_recoveries(d: Dialect, thread_id: str | None = None) -> Statements[list[RecoveryRecord]]:
    where, params = ("WHERE thread_id = ? ", (thread_id,)) if thread_id is not None else ("", ())
    rows = yield Stmt(
        d.sql(
            f"SELECT {select_list(RecoveryRecord)} FROM {RECOVERIES.name} {where}"
            "ORDER BY at, thread_id, key"
        ),
        params,
        fetch=True,
    )
    return [from_row(RecoveryRecord, r) for r in rows]


def read_run_log(d: Dialect, thread_id: str | None = None) -> Statements[list[Row]]:
    """The writes that tell runs' stories: (thread, namespace, checkpoint, task,
    idx, channel, type, value); the value only for `RUN_LOG_CHANNELS`."""
    value = d.writes.columns[-1].name  # LangGraph names it value (SQLite) or blob
    named = d.list_param(RUN_LOG_CHANNELS)
    where = "AND thread_id = ? " if thread_id is not None else ""
    rows = yield Stmt(
        d.sql(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, "
            f"CASE WHEN channel IN_LIST(?) THEN {value} END FROM {d.writes.name} "
            "WHERE (channel IN_LIST(?) OR substr(channel, 1, ?) = ? OR channel = ?) "
            f"{where}"
        ),
        (
            named,
            named,
            len(BRANCH_PREFIX),
            BRANCH_PREFIX,
            TASKS_CHANNEL,
            *((thread_id,) if thread_id is not None else ()),
        ),
        fetch=True,
    )
    return rows


def read_thread_attempts(d: Dialect, thread_id: str) -> Statements[list[StoredAttempt]]:
    rows = yield Stmt(
        d.sql(
            f"SELECT {select_list(StoredAttempt)} FROM {ATTEMPTS.name} WHERE thread_id = ? "
            "ORDER BY started_at, attempt"
        ),
        (thread_id,),
        fetch=True,
    )
    return [from_row(StoredAttempt, r) for r in rows]


def read_thread_runs(d: Dialect, thread_id: str | None = None) -> Statements[list[RunRecord]]:
    """`Worker` runs, oldest first: of one thread, or all."""
    where = "WHERE thread_id = ? " if thread_id is not None else ""
    params: Any = (thread_id,) if thread_id is not None else ()
    rows = yield Stmt(
        d.sql(
            f"SELECT {select_list(RunRecord)} FROM {RUNS.name} {where}ORDER BY created_at, run_id"
        ),
        params,
        fetch=True,
    )
    return [from_row(RunRecord, r) for r in rows]
