"""The step ledger: failed tries of node tasks, and side-effect intents and outcomes.

Both are keyed by the task that made them (thread, namespace, checkpoint, task
id), so they are copied and deleted with the thread's checkpoints
(`_threads`). Effect outcomes may be written behind (`PendingOutcomes`): they
ride along with the saver's next write.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from langgraph_resilience.checkpoint._schema import ATTEMPTS, EFFECTS
from langgraph_resilience.checkpoint._store import (
    Dialect,
    Statements,
    Stmt,
    from_row,
    select_list,
)

__all__ = [
    "AttemptKey",
    "AttemptRecord",
    "EffectRecord",
    "OutcomeFields",
    "PendingOutcomes",
]

#: Which task a failed try belongs to: (thread_id, checkpoint_ns, checkpoint_id, task_id).
AttemptKey = tuple[str, str, str, str]


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptRecord:
    """One failed try of a task, as stored.

    Attributes:
        attempt: the try's number, from 1.
        node: the node that ran.
        kind: the failure kind (`FailureKind` value).
        error_type: the exception's class name.
        reason: the exception's message (first 500 characters).
        finished_at: when the try failed (epoch seconds).
    """

    attempt: int
    node: str
    kind: str | None = None
    error_type: str | None = None
    reason: str | None = None
    finished_at: float | None = None


_INSERT_ATTEMPT = (
    f"INSERT INTO {ATTEMPTS.name} (thread_id, checkpoint_ns, checkpoint_id, task_id, "
    "attempt, node, status, kind, error_type, reason, started_at, finished_at) "
    "VALUES (?, ?, ?, ?, ?, ?, 'failed', ?, ?, ?, ?, ?) "
    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, attempt) DO UPDATE SET "
    "kind = excluded.kind, error_type = excluded.error_type, reason = excluded.reason, "
    "finished_at = excluded.finished_at"
)
_SELECT_ATTEMPTS = (
    f"SELECT {select_list(AttemptRecord)} FROM {ATTEMPTS.name} "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? AND task_id = ? "
    "ORDER BY attempt"
)


def record_attempt(
    d: Dialect, key: AttemptKey, record: AttemptRecord, started_at: float
) -> Statements[None]:
    """Store a failed try (before the wait that follows it), idempotently."""
    r = record
    params = (*key, r.attempt, r.node, r.kind, r.error_type, r.reason, started_at, r.finished_at)
    yield Stmt(d.sql(_INSERT_ATTEMPT), params)


def read_attempts(d: Dialect, key: AttemptKey) -> Statements[list[AttemptRecord]]:
    rows = yield Stmt(d.sql(_SELECT_ATTEMPTS), key, fetch=True)
    return [from_row(AttemptRecord, r) for r in rows]


# -- side effects ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class EffectRecord:
    """One side effect of a thread, as stored.

    Attributes:
        idempotency_key: the effect's key (the same across retries and resumes).
        name: the effect's name (`side_effect(name=...)`).
        status: ``"intent"`` (started, outcome unknown), ``"done"`` or ``"failed"``.
        intent_at / outcome_at: epoch seconds.
        outcome_type / outcome: the result, serialized with the saver's serde
            (``saver.serde.loads_typed((outcome_type, outcome))``).
        error: the error of a failed call.
        checkpoint_ns / checkpoint_id / task_id: the task that made the call.
    """

    idempotency_key: str
    name: str
    status: str
    intent_at: float
    outcome_at: float | None = None
    outcome_type: str | None = None
    outcome: bytes | None = None
    error: str | None = None
    checkpoint_ns: str = ""
    checkpoint_id: str = ""
    task_id: str = ""


class OutcomeFields(NamedTuple):
    """An effect's outcome (or error), as `record_outcome` stores it."""

    status: str  # done | failed
    at: float
    outcome_type: str | None
    outcome: bytes | None
    error: str | None


_EFFECT_COLUMNS = select_list(EffectRecord)
_OUTCOME = (
    f"UPDATE {EFFECTS.name} SET status = ?, outcome_at = ?, outcome_type = ?, "
    "outcome = ?, error = ? WHERE thread_id = ? AND idempotency_key = ?"
)


def read_effect(d: Dialect, thread_id: str, key: str) -> Statements[EffectRecord | None]:
    rows = yield Stmt(
        d.sql(
            f"SELECT {_EFFECT_COLUMNS} FROM {EFFECTS.name} "
            "WHERE thread_id = ? AND idempotency_key = ?"
        ),
        (thread_id, key),
        fetch=True,
    )
    return from_row(EffectRecord, rows[0]) if rows else None


def list_effects(d: Dialect, thread_id: str) -> Statements[list[EffectRecord]]:
    rows = yield Stmt(
        d.sql(
            f"SELECT {_EFFECT_COLUMNS} FROM {EFFECTS.name} WHERE thread_id = ? "
            "ORDER BY intent_at, idempotency_key"
        ),
        (thread_id,),
        fetch=True,
    )
    return [from_row(EffectRecord, r) for r in rows]


def record_intent(
    d: Dialect, thread_id: str, record: EffectRecord, args_digest: str | None
) -> Statements[None]:
    """The intent, before the call (a second intent for the key changes nothing)."""
    r = record
    yield Stmt(
        d.sql(
            f"INSERT INTO {EFFECTS.name} (thread_id, idempotency_key, checkpoint_ns, "
            "checkpoint_id, task_id, name, args_digest, status, intent_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 'intent', ?) "
            "ON CONFLICT (thread_id, idempotency_key) DO NOTHING"
        ),
        (
            thread_id,
            r.idempotency_key,
            r.checkpoint_ns,
            r.checkpoint_id,
            r.task_id,
            r.name,
            args_digest,
            r.intent_at,
        ),
    )


def record_outcome(d: Dialect, thread_id: str, key: str, fields: OutcomeFields) -> Statements[None]:
    """The outcome (or the error) after the call, stored at once.

    Used for effects with ``on_unknown="raise"``; the others write it behind
    (`PendingOutcomes`). It is committed without waiting for the disk (Postgres
    ``synchronous_commit`` off for this transaction; SQLite's driver lowers
    ``synchronous`` around it): a process crash keeps it, and if a server or
    power failure loses it, the intent stays without outcome, which
    ``reconcile`` (or a call with the same idempotency key) settles.
    """
    if d.relax_commit is not None:
        yield Stmt(d.relax_commit)
    yield Stmt(d.sql(_OUTCOME), (*fields, thread_id, key))


def store_outcomes(d: Dialect, outcomes: dict[tuple[str, str], OutcomeFields]) -> Statements[None]:
    """Outcomes written behind, stored with another write."""
    if outcomes:
        rows = [(*fields, thread, key) for (thread, key), fields in sorted(outcomes.items())]
        yield Stmt(d.sql(_OUTCOME), rows, many=True)


@dataclass
class PendingOutcomes:
    """Effect outcomes written behind: they ride along with the saver's next write.

    That write is, in a node, the next effect's intent or the node's own writes
    (`put_writes`), which LangGraph stores as the node ends; a failed try stores
    its attempt. A process killed before then loses the outcome, and the intent
    stays without one, which ``reconcile`` (or a call with the same idempotency
    key) settles, as for a kill during the call. Reads of this saver see them.
    """

    waiting: dict[tuple[str, str], OutcomeFields] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, thread_id: str, key: str, fields: OutcomeFields) -> None:
        with self.lock:
            self.waiting[(thread_id, key)] = fields

    def take_all(self) -> dict[tuple[str, str], OutcomeFields]:
        if not self.waiting:  # unlocked peek: the common case, nothing waits
            return {}
        with self.lock:
            taken, self.waiting = self.waiting, {}
        return taken

    def give_back(self, taken: dict[tuple[str, str], OutcomeFields]) -> None:
        """Undo a take after the transaction failed after all (newer ones win)."""
        with self.lock:
            self.waiting = {**taken, **self.waiting}

    def overlay(self, thread_id: str, records: list[EffectRecord]) -> list[EffectRecord]:
        """Stored records as they are once their waiting outcomes are stored."""
        if not self.waiting:
            return records
        return [self._applied(thread_id, r) for r in records]

    def _applied(self, thread_id: str, record: EffectRecord) -> EffectRecord:
        fields = self.waiting.get((thread_id, record.idempotency_key))
        if fields is None:
            return record
        return replace(
            record,
            status=fields.status,
            outcome_at=fields.at,
            outcome_type=fields.outcome_type,
            outcome=fields.outcome,
            error=fields.error,
        )
