"""The reads behind `recovery_metrics` and `run_report`, and the two recoveries
that nothing else stores (both dialects).

Nothing here runs on a step's happy path. A run's history is read from the
run ledger's rows (`_run_log` writes them) and the attempts, effects and runs
tables, never from LangGraph's writes. Two recoveries leave no write of their own and get a row in
``resilience_recoveries``: a `Worker`'s takeover of a run whose lease expired
(stored in the claim's own transaction) and a resume after a crash
(`note_recovery`). The saver's ``history`` interface runs these reads
(`_interfaces.History`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph_resilience.checkpoint.ledger._lease_judge import Claimant, dead_holders, taken_over
from langgraph_resilience.checkpoint.ledger._runs import RunRecord, claim_runs
from langgraph_resilience.checkpoint.runlog._run_sql import hold_run
from langgraph_resilience.checkpoint.store._schema import ATTEMPTS, RECOVERIES, RUN_LOG, RUNS
from langgraph_resilience.checkpoint.store._store import (
    Dialect,
    Statements,
    Stmt,
    from_row,
    select_list,
)

__all__ = [
    "RecoveryRecord",
    "StoredAttempt",
    "claim_noting",
    "note_recovery",
    "read_recoveries",
    "read_thread_attempts",
    "read_thread_runs",
]


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
        run: the run of the thread it resumed (None: a thread without run rows).
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
    """Store one recovery of a thread (once per ``key``) that ``owner`` made; a
    resume after a crash is this process going on with the run (`hold_run`)."""
    yield Stmt(d.sql(_NOTE), (thread_id, key, kind, None, owner, thread_id, None, thread_id))
    if kind == "crash":
        yield from hold_run(d, thread_id)


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
