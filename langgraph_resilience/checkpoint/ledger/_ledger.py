"""The step ledger: failed tries of node tasks, and side-effect intents and outcomes.

Both are keyed by the task that made them (thread, namespace, checkpoint, task
id), so they are copied and deleted with the thread's checkpoints
(`_threads`). An effect's outcome is stored as its call returns
(`record_outcome`), or, for ``side_effect(defer_outcome=True)``, written behind
(`PendingOutcomes`): it rides along with the saver's next write. Every
statement that stores an outcome stores its checksum (`_sums.outcome_sum`)
with it, and every read of an effect checks it (`_checked`) before anything
replays it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from langgraph_resilience._util._process import executor_alive
from langgraph_resilience.checkpoint.store._schema import ATTEMPTS, EFFECTS
from langgraph_resilience.checkpoint.store._store import (
    Dialect,
    Row,
    Statements,
    Stmt,
    from_row,
    select_list,
)
from langgraph_resilience.checkpoint.store._sums import effect_mismatch, outcome_sum

__all__ = [
    "AttemptKey",
    "AttemptRecord",
    "EffectRecord",
    "IntentVerdict",
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
        status: ``"failed"``, or ``"waiting"`` when the run was released until
            the service's ``Retry-After`` (a durable wait, under a `Worker`).
        wait: seconds waited before the next try (backoff, or the durable
            wait), None when the try had no next one.
        route: where the try that gave up sent its step (JSON text of the
            route: `graph._routes.route_of`, to a fallback or the partial
            result), None for any other try. The node's error handler reads it
            back when it runs after a crash (`read_route`).
    """

    attempt: int
    node: str
    kind: str | None = None
    error_type: str | None = None
    reason: str | None = None
    finished_at: float | None = None
    status: str = "failed"
    wait: float | None = None
    route: str | None = None


_INSERT_ATTEMPT = (
    f"INSERT INTO {ATTEMPTS.name} (thread_id, checkpoint_ns, checkpoint_id, task_id, "
    "attempt, node, status, kind, error_type, reason, started_at, finished_at, wait, route) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, attempt) DO UPDATE SET "
    "status = excluded.status, kind = excluded.kind, error_type = excluded.error_type, "
    "reason = excluded.reason, finished_at = excluded.finished_at, wait = excluded.wait, "
    "route = excluded.route"
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
    tried = (r.attempt, r.node, r.status, r.kind, r.error_type, r.reason)
    params = (*key, *tried, started_at, r.finished_at, r.wait, r.route)
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
        owner: the executor that holds the intent (`langgraph_resilience._util._process`).
        lease_until: until when the owner's claim holds (database clock, epoch
            seconds); the owner renews it while the call runs.
        fencing_token: the owner's fencing token when it ran under a `Worker`:
            a worker that took the run over (a higher token) takes the claim too.
        how: how the stored outcome came about: ``"called"`` (the call made
            once), ``"reconciled"`` (``reconcile`` or `settle_effect` found it
            happened), ``"reexecuted"`` (called again under the same key: the
            first call's outcome was never recorded) or ``"replayed"`` (a later
            try found it recorded and returned it without calling). None for an
            intent, or a record stored before schema 2.
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
    owner: str | None = None
    lease_until: float | None = None
    fencing_token: int | None = None
    how: str | None = None


class OutcomeFields(NamedTuple):
    """An effect's outcome (or error), as `record_outcome` stores it."""

    status: str  # done | failed
    at: float
    outcome_type: str | None
    outcome: bytes | None
    error: str | None
    how: str | None = None  # called | reconciled | reexecuted (`EffectRecord.how`)


# A record is read with its outcome's sum last (`_checked` strips it).
_EFFECT_COLUMNS = f"{select_list(EffectRecord)}, outcome_sum"
_OUTCOME = (
    f"UPDATE {EFFECTS.name} SET status = ?, outcome_at = ?, outcome_type = ?, "
    "outcome = ?, error = ?, how = ?, outcome_sum = ? WHERE thread_id = ? AND idempotency_key = ?"
)


def _outcome_params(thread_id: str, key: str, fields: OutcomeFields) -> tuple[object, ...]:
    f = fields
    return (*f, outcome_sum(key, f.status, f.outcome_type, f.outcome, f.error), thread_id, key)


def _checked(thread_id: str, row: Row) -> EffectRecord:
    """The record of a row read with `_EFFECT_COLUMNS`, once its outcome matches
    its sum (a row with none passes: stored before the checksums, or an intent).

    Raises:
        CheckpointCorrupt: naming the thread, the effect's checkpoint and its key.
    """
    r, stored = from_row(EffectRecord, row[:-1]), row[-1]
    actual = outcome_sum(r.idempotency_key, r.status, r.outcome_type, r.outcome, r.error)
    if stored is not None and int(stored) != actual:
        raise effect_mismatch(
            thread_id, r.checkpoint_ns, r.checkpoint_id, r.name, r.idempotency_key
        )
    return r


def read_effect(d: Dialect, thread_id: str, key: str) -> Statements[EffectRecord | None]:
    rows = yield Stmt(
        d.sql(
            f"SELECT {_EFFECT_COLUMNS} FROM {EFFECTS.name} "
            "WHERE thread_id = ? AND idempotency_key = ?"
        ),
        (thread_id, key),
        fetch=True,
    )
    return _checked(thread_id, rows[0]) if rows else None


def list_effects(d: Dialect, thread_id: str) -> Statements[list[EffectRecord]]:
    rows = yield Stmt(
        d.sql(
            f"SELECT {_EFFECT_COLUMNS} FROM {EFFECTS.name} WHERE thread_id = ? "
            "ORDER BY intent_at, idempotency_key"
        ),
        (thread_id,),
        fetch=True,
    )
    return [_checked(thread_id, r) for r in rows]


class IntentVerdict(NamedTuple):
    """What claiming an effect's intent found.

    Attributes:
        verdict: ``"new"`` (the intent is stored and ours; nothing was there),
            ``"took_over"`` (an earlier intent without outcome, or a failed call,
            is now ours: settle it, then call), ``"done"`` (the outcome is
            recorded: replay it) or ``"busy"`` (another executor holds a live
            claim: its call may be in flight; do not call).
        record: what was stored before the claim (None for ``"new"``).
        wait: for ``"busy"``, seconds until the holder's lease runs out.
    """

    verdict: str
    record: EffectRecord | None = None
    wait: float = 0.0


def judge_intent(found: EffectRecord, mine: EffectRecord, now: float, alive: bool | None) -> str:
    """May the claim ``mine`` take the stored record ``found``? (pure; ``alive``:
    is its holder's process running, as `executor_alive` tells, None when it
    cannot tell). A holder is gone when its process is, when its lease ran out,
    or when it ran under a run lease that ``mine`` has since taken over."""
    if found.status == "done":
        return "done"
    superseded = (
        mine.fencing_token is not None
        and found.fencing_token is not None
        and found.fencing_token < mine.fencing_token
    )
    live = (
        found.status == "intent"
        and found.owner is not None
        and found.owner != mine.owner
        and found.lease_until is not None
        and found.lease_until > now
        and alive is not False
        and not superseded
    )
    return "busy" if live else "took_over"


_CLAIM_TRIES = 3


def claim_intent(
    d: Dialect,
    thread_id: str,
    record: EffectRecord,
    args_digest: str | None,
    lease: float,
    first: bool = False,
) -> Statements[IntentVerdict]:
    """Store the intent before the call, held by ``record.owner`` for ``lease``
    seconds; or find who holds it, and take it over when its holder is gone.

    Two executors that race for one key (two processes resuming the same head)
    meet here: the first insert wins, the second finds it ``"busy"``. The
    takeover is a compare-and-set on the holder it judged gone, so two takers
    cannot both win either.

    ``first``: the first try of a task that is not being resumed, whose key no
    other executor can hold (two executors of one task both resume it): the
    intent is stored without reading back, in the write's one round trip.
    """
    r = record
    insert = yield Stmt(
        d.sql(
            f"INSERT INTO {EFFECTS.name} (thread_id, idempotency_key, checkpoint_ns, "
            "checkpoint_id, task_id, name, args_digest, status, intent_at, owner, "
            "fencing_token, lease_until) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 'intent', ?, ?, ?, NOW() + ?) "
            "ON CONFLICT (thread_id, idempotency_key) DO NOTHING"
            + ("" if first else " RETURNING 1")
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
            r.owner,
            r.fencing_token,
            lease,
        ),
        fetch=not first,
    )
    if first or insert:
        return IntentVerdict("new")
    for _ in range(_CLAIM_TRIES):
        rows = yield Stmt(
            d.sql(
                f"SELECT {_EFFECT_COLUMNS}, NOW() FROM {EFFECTS.name} "
                "WHERE thread_id = ? AND idempotency_key = ?"
            ),
            (thread_id, r.idempotency_key),
            fetch=True,
        )
        found, now = _checked(thread_id, rows[0][:-1]), float(rows[0][-1])
        alive = None if found.owner is None else executor_alive(found.owner)
        verdict = judge_intent(found, r, now, alive)
        if verdict == "busy":
            return IntentVerdict("busy", found, max(0.0, (found.lease_until or now) - now))
        if verdict == "done":
            return IntentVerdict("done", found)
        taken = yield Stmt(
            d.sql(
                # the new call's outcome brings its own sum
                f"UPDATE {EFFECTS.name} SET status = 'intent', owner = ?, fencing_token = ?, "
                "lease_until = NOW() + ?, outcome_sum = NULL "
                "WHERE thread_id = ? AND idempotency_key = ? "
                "AND status = ? AND coalesce(owner, '') = ? RETURNING 1"
            ),
            (
                r.owner,
                r.fencing_token,
                lease,
                thread_id,
                r.idempotency_key,
                found.status,
                found.owner or "",
            ),
            fetch=True,
        )
        if taken:
            return IntentVerdict("took_over", found)
    return IntentVerdict("busy", found, 0.0)  # it changed hands under us each time


def renew_intent(
    d: Dialect, thread_id: str, key: str, owner: str, lease: float
) -> Statements[bool]:
    """Extend the holder's lease while its call runs; False once it is no longer
    held (settled, or taken over after the lease ran out)."""
    rows = yield Stmt(
        d.sql(
            f"UPDATE {EFFECTS.name} SET lease_until = NOW() + ? "
            "WHERE thread_id = ? AND idempotency_key = ? AND owner = ? "
            "AND status = 'intent' AND lease_until > NOW() RETURNING 1"
        ),
        (lease, thread_id, key, owner),
        fetch=True,
    )
    return bool(rows)


def record_outcome(d: Dialect, thread_id: str, key: str, fields: OutcomeFields) -> Statements[None]:
    """The outcome (or the error) after the call, stored at once: one statement
    (with its checksum), in a write of its own as the call returns.

    Every effect's, except those with ``defer_outcome=True``, which write it
    behind (`PendingOutcomes`). It is a durable commit (the server's own
    ``synchronous_commit``, SQLite's ``synchronous``): when control returns to
    the node the outcome is on disk, so the store and this process dying
    together (one host's crash) cannot turn it back into an open intent that
    ``reexecute`` calls again. The fsync this costs is small beside the call.
    """
    yield Stmt(d.sql(_OUTCOME), _outcome_params(thread_id, key, fields))


def store_outcomes(
    d: Dialect, outcomes: dict[tuple[str, str], OutcomeFields], *, again: bool = False
) -> Statements[None]:
    """Outcomes written behind, stored with another write. ``again``: outcomes
    committed without waiting for the disk, stored again by a durable write where
    the intent is still without one (a server crash lost them); where the outcome
    is there, the statement changes nothing."""
    if outcomes:
        rows = [_outcome_params(thread, key, f) for (thread, key), f in sorted(outcomes.items())]
        sql = _OUTCOME + " AND status = 'intent'" if again else _OUTCOME
        yield Stmt(d.sql(sql), rows, many=True)


@dataclass
class PendingOutcomes:
    """Effect outcomes written behind: they ride along with the saver's next write.

    The outcomes of ``side_effect(defer_outcome=True)``, and an outcome whose
    own write the store refused (`Effects.record` holds it here before it
    raises). That write is, in a node, the next effect's intent or the node's own writes
    (`put_writes`), which LangGraph stores as the node ends; a failed try stores
    its attempt. A process killed before then loses the outcome, and the intent
    stays without one, which ``reconcile`` (or a call with the same idempotency
    key) settles, as for a kill during the call. Reads of this saver see them.
    """

    waiting: dict[tuple[str, str], OutcomeFields] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Outcomes committed without waiting for the disk: riders (written behind) of a
    # relaxed write, such as a limit's release (`record_outcome` itself is durable).
    # A server crash before its next durable commit loses them
    # (the intent is back without outcome, though the node ran on), so the saver's
    # next durable write stores them again where the intent is still open (a no-op
    # otherwise: `store_outcomes` ``again``) and forgets them once it committed.
    relaxed: dict[tuple[str, str], OutcomeFields] = field(default_factory=dict)

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

    def committed_relaxed(self, outcomes: dict[tuple[str, str], OutcomeFields]) -> None:
        """Outcomes a write committed without waiting for the disk: kept until a
        durable write stores them again."""
        if outcomes:
            with self.lock:
                self.relaxed = {**self.relaxed, **outcomes}

    def take_relaxed(self) -> dict[tuple[str, str], OutcomeFields]:
        if not self.relaxed:  # unlocked peek
            return {}
        with self.lock:
            taken, self.relaxed = self.relaxed, {}
        return taken

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
