"""Runs, leases and fencing: the store side of `Worker`.

A run is queued (`submit_run`), claimed under a time-bounded lease with a
fencing token that grows with every claim (`claim_runs`), renewed
(`renew_leases`) and ended, paused or released (`finish_run`). Every write a
worker makes for a run carries its `Fence`; `fence_write` is the one way a
saver applies it: the write is refused, in its own transaction, once another
worker holds the run (`LeaseLost`).
How a lease is judged over (its time, its holder) is `_lease_judge`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig

from langgraph_resilience.checkpoint.ledger._lease_judge import (
    Claimant,
    dead_holders,
    lease_values,
    taken_over,
)
from langgraph_resilience.checkpoint.store._schema import LEASE_MARKER, OPEN_STATUSES, RUNS
from langgraph_resilience.checkpoint.store._store import (
    Dialect,
    Statements,
    Stmt,
    from_row,
    select_list,
)
from langgraph_resilience.errors import ConfigError, LeaseLost, RunStateError

__all__ = [
    "FENCE_KEY",
    "WORKER_KEY",
    "Fence",
    "RunRecord",
    "fence_of",
    "fence_write",
]

T = TypeVar("T")
Translate = Callable[[BaseException], BaseException | None]
Blob = tuple[str, bytes]

#: Every status a run can be in. ``OPEN_STATUSES`` (queued, running, paused) hold
#: the thread; queued (when due) and running ones are work for some worker.
RUN_STATUSES = (
    "queued",
    "running",
    "paused",
    "success",
    "partial_complete",
    "error",
    "cancelled",
)
_IN_OPEN = f"status IN ({', '.join(repr(s) for s in OPEN_STATUSES)})"
#: A queued run whose wait (if any) is over: some worker may take it now.
_DUE = "(status = 'queued' AND (not_before IS NULL OR not_before <= NOW()))"


@dataclass(frozen=True, kw_only=True, slots=True)
class Fence:
    """The run a write belongs to and the fencing token its worker holds."""

    run_id: str
    token: int


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecord:
    """One run, as stored: its status and lease, and what it was given and gave back.

    Attributes:
        run_id / thread_id: the run and the thread it runs on.
        status: queued, running, paused, success, partial_complete or error.
        owner: the worker holding its lease (while running).
        fencing_token: grows with every claim.
        lease_expires_at: epoch seconds, by the database's clock.
        attempts: claims so far.
        recoveries: claims of the run after its worker's lease had expired.
        input_type / input, budget_type / budget, outcome_type / outcome: what
            it was given and gave back, serialized with the saver's serde.
        created_at / updated_at: epoch seconds.
        resume_type / resume: the value a paused run was resumed with (answers
            to its interrupts), until it pauses or ends again.
        claim_token: the token of the claim that took it last (made by the
            claiming saver once per `claim_runs` call, so that a retry of that
            call finds the runs its first try claimed).
        not_before: epoch seconds (database clock) before which a queued run is
            not claimed: it waits for a service that asked to be called again
            later (a ``Retry-After`` longer than its node's ``Backoff.max_wait``).
        holder: the process that claimed or last renewed it (host, boot, PID
            namespace, pid and start time): a claimer on that machine that finds
            the process gone takes the run over at once.
        lease_clock / lease_ticks: SQLite only: the boot clock the lease was
            renewed on, and its reading when the lease ends (judged by it when the
            claimer reads the same clock).
    """

    run_id: str
    thread_id: str
    status: str
    owner: str | None
    fencing_token: int
    lease_expires_at: float | None
    attempts: int
    recoveries: int
    input_type: str | None
    input: bytes | None
    budget_type: str | None
    budget: bytes | None
    outcome_type: str | None
    outcome: bytes | None
    created_at: float
    updated_at: float
    claim_token: str | None = None
    resume_type: str | None = None
    resume: bytes | None = None
    not_before: float | None = None
    holder: str | None = None
    lease_clock: str | None = None
    lease_ticks: float | None = None


_RUN_COLUMNS = select_list(RunRecord)

# -- fencing --------------------------------------------------------------------------------

# Where a `Worker` puts the run's fence in a run's config; every checkpoint,
# write, attempt and effect record of that run is checked against it.
FENCE_KEY = "__lgr_fence"
#: The id of the `Worker` running the run (its steps name it in their records).
WORKER_KEY = "__lgr_worker"


def fence_of(config: RunnableConfig | None) -> Fence | None:
    """The fence a run's config carries, if a `Worker` runs it."""
    found = ((config or {}).get("configurable") or {}).get(FENCE_KEY)
    if found is None or isinstance(found, Fence):
        return found
    run_id, token = found  # a config that went through a serializer
    return Fence(run_id=str(run_id), token=int(token))


def fence_write(
    d: Dialect,
    fence: Fence | None,
    statements: Callable[[], Statements[T]],
    translate: Translate | None = None,
) -> tuple[Callable[[], Statements[T]], Translate | None]:
    """A write and its error translation, fenced when ``fence`` is given.

    The fenced statements check the fence first, in the write's transaction
    (Postgres: a stored function that also holds the run's row until the commit;
    SQLite: a read in the same immediate transaction), and the translation maps
    the Postgres check's error to `LeaseLost` before anything ``translate`` maps.
    """
    if fence is None:
        return statements, translate

    def fenced() -> Statements[T]:
        yield from _check_fence(d, fence)
        return (yield from statements())

    def mapped(exc: BaseException) -> BaseException | None:
        return lease_lost(exc, fence) or (translate(exc) if translate else None)

    return fenced, mapped


# A Postgres fenced write also takes this shared advisory lock (keyed by its run)
# until its commit: it marks the session as one of our fenced writes of that run,
# so a claim can find it in pg_locks (`_end_stalled_writers`). Shared: writes of
# one run never wait for each other, and nothing ever takes it exclusively.
_FENCE_LOCK = "hashtext('resilience_fence'), hashtext(?)"


def _check_fence(d: Dialect, fence: Fence) -> Statements[None]:
    if d.procedures:
        yield Stmt(
            d.sql(
                f"SELECT resilience_check_fence(?, ?), pg_advisory_xact_lock_shared({_FENCE_LOCK})"
            ),
            (fence.run_id, fence.token, fence.run_id),
        )
        return
    rows = yield Stmt(
        d.sql(f"SELECT fencing_token FROM {RUNS.name} WHERE run_id = ?"),
        (fence.run_id,),
        fetch=True,
    )
    current = int(rows[0][0]) if rows else None
    if current != fence.token:
        raise lease_lost_error(fence, current)


def lease_lost_error(fence: Fence, current: int | None) -> LeaseLost:
    held = "the run is gone" if current is None else f"the run's token is now {current}"
    return LeaseLost(
        f"run {fence.run_id!r}: this worker's lease (fencing token {fence.token}) was "
        f"taken over ({held}); its write was refused. Another worker resumes the run "
        "from its last checkpoint; this one must stop working on it."
    )


def lease_lost(exc: BaseException, fence: Fence) -> LeaseLost | None:
    """The `LeaseLost` behind a Postgres error raised by the fencing check."""
    diag = getattr(exc, "diag", None)
    if diag is None or getattr(diag, "message_primary", None) != LEASE_MARKER:
        return None
    detail = str(diag.message_detail)
    return lease_lost_error(fence, None if detail == "none" else int(detail))


# -- runs ------------------------------------------------------------------------------------


def one_open_run(thread_id: str, detail: str = "") -> RunStateError:
    return RunStateError(
        f"thread {thread_id!r} already has an open run (queued, running or paused){detail}; "
        "a thread runs one run at a time. Submit to another thread_id (or none, for a new "
        "one), or wait until that run ends."
    )


def open_run_conflict(exc: BaseException, thread_id: str) -> RunStateError | None:
    """The `RunStateError` behind the unique index refusing a second open run."""
    text = str(exc)
    if "resilience_runs_one_open" in text or "resilience_runs.thread_id" in text:
        return one_open_run(thread_id)
    return None


def submit_run(
    d: Dialect, run_id: str, thread_id: str, input_: Blob | None, budget: Blob | None
) -> Statements[None]:
    """A queued run. A thread with an open run takes no second one (`RunStateError`).

    Idempotent by ``run_id`` (made by the caller): a retry whose first try was
    committed, its reply lost with the connection, finds its own run and is done.
    """
    rows = yield Stmt(
        d.sql(
            f"SELECT run_id, thread_id, status FROM {RUNS.name} "
            f"WHERE run_id = ? OR (thread_id = ? AND {_IN_OPEN})"
        ),
        (run_id, thread_id),
        fetch=True,
    )
    for found_id, found_thread, _ in rows:
        if found_id != run_id:
            continue
        if found_thread == thread_id:
            return  # stored by an earlier try of this very call
        raise ConfigError(
            f"run id {run_id!r} is already taken by a run of thread {found_thread!r}; "
            "submit with a new run id (Worker.submit makes a fresh one)"
        )
    if rows:
        raise one_open_run(thread_id, f" (run {rows[0][0]!r}, {rows[0][2]})")
    yield Stmt(
        d.sql(
            f"INSERT INTO {RUNS.name} (run_id, thread_id, status, input_type, input, "
            "budget_type, budget, created_at, updated_at) "
            "VALUES (?, ?, 'queued', ?, ?, ?, ?, NOW(), NOW())"
        ),
        (run_id, thread_id, *(input_ or (None, None)), *(budget or (None, None))),
    )


def claim_runs(
    d: Dialect,
    owner: str,
    limit: int,
    lease_ttl: float,
    claim_token: str,
    who: Claimant | None = None,
    dead: Sequence[str] | None = None,
) -> Statements[list[RunRecord]]:
    """Claim up to ``limit`` runs: running ones whose lease expired or whose holder
    is known gone first (a recovery), then queued ones whose wait
    (``not_before``) is over, oldest first within each. Each claim bumps the
    fencing token; the runs are returned oldest first.

    Recoveries go first because a taken-over run was started earlier, holds
    partial progress (and maybe an effect waiting to be settled), and would
    otherwise wait behind every queued run of a backlog.

    ``claim_token`` names this claim (the caller makes one per call): a retry
    whose first try was committed, its reply lost with the connection, returns
    the runs that try claimed instead of claiming more (which would leave those
    running under a lease nobody renews, then count their takeover as a
    recovery).

    ``who``: the claiming process and its clock (default: this one, now);
    ``dead``: the holders known gone (default: read here, `dead_holders`).
    """
    who = Claimant.here() if who is None else who
    rows = yield Stmt(
        d.sql(
            f"SELECT {_RUN_COLUMNS} FROM {RUNS.name} "
            "WHERE status = 'running' AND claim_token = ? AND owner = ?"
        ),
        (claim_token, owner),
        fetch=True,
    )
    if not rows:
        if dead is None:
            dead = yield from dead_holders(d, who)
        gone, gone_params = taken_over(d, who.clock, dead)
        yield from _end_stalled_writers(d, gone, gone_params)
        rows = yield Stmt(
            d.sql(
                f"UPDATE {RUNS.name} SET status = 'running', owner = ?, claim_token = ?, "
                "fencing_token = fencing_token + 1, lease_expires_at = NOW() + ?, "
                "holder = ?, lease_clock = ?, lease_ticks = ?, "
                "attempts = attempts + 1, "
                "recoveries = recoveries + CASE WHEN status = 'running' THEN 1 ELSE 0 END, "
                "not_before = NULL, updated_at = NOW() "
                f"WHERE run_id IN (SELECT run_id FROM {RUNS.name} "
                f"WHERE {_DUE} OR {gone} "
                "ORDER BY status = 'queued', created_at LIMIT ? SKIP_LOCKED) "
                f"RETURNING {_RUN_COLUMNS}"
            ),
            (
                owner,
                claim_token,
                float(lease_ttl),
                *lease_values(d, who, lease_ttl),
                *gone_params,
                int(limit),
            ),
            fetch=True,
        )
    return sorted((from_row(RunRecord, r) for r in rows), key=lambda r: r.created_at)


def _end_stalled_writers(d: Dialect, gone: str, params: tuple[Any, ...]) -> Statements[None]:
    """End the sessions of fenced writes of runs a claim takes over (Postgres).

    A fenced write holds its run's row (``FOR SHARE``) until it commits, and a
    claim skips a locked row. A writer cut off mid-pipeline leaves its session
    waiting for the pipeline's ``Sync``: not idle in a transaction, no statement
    running, so no server timeout ends it (PostgreSQL < 17 has no
    ``transaction_timeout``), and through a proxy or pooler TCP keepalives are
    answered. Once the run's lease is over (or its holder is known gone), its
    writer has no right to commit anything: its session, found by the fence's
    advisory lock, is terminated (its transaction rolls back, as when its client
    crashed; the writer's retry is refused by the fence). Only sessions this
    role may signal are ended (no permission error fails the claim); a session
    still exiting is claimed at the next poll.
    """
    if not d.procedures:
        return  # SQLite: a write holds the whole database for its one transaction
    yield Stmt(
        d.sql(
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid "
            "JOIN pg_roles ro ON ro.oid = a.usesysid "
            # The gate first (a one-time filter): a poll with no lease over reads no locks.
            f"WHERE EXISTS (SELECT 1 FROM {RUNS.name} WHERE {gone}) "
            "AND l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted "
            "AND l.pid <> pg_backend_pid() "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.classid = hashtext('resilience_fence')::oid "
            f"AND l.objid IN (SELECT hashtext(run_id)::oid FROM {RUNS.name} WHERE {gone}) "
            "AND pg_has_role(a.usesysid, 'MEMBER') "
            "AND (NOT ro.rolsuper OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user))"
        ),
        (*params, *params),
        fetch=True,
    )


def renew_leases(
    d: Dialect,
    owner: str,
    fences: Sequence[Fence],
    lease_ttl: float,
    who: Claimant | None = None,
) -> Statements[list[str]]:
    """Extend the leases this worker still holds; returns their run ids."""
    if not fences:
        return []
    who = Claimant.here() if who is None else who
    rows = yield Stmt(
        d.sql(
            f"UPDATE {RUNS.name} SET lease_expires_at = NOW() + ?, holder = ?, "
            "lease_clock = ?, lease_ticks = ?, updated_at = NOW() "
            "WHERE owner = ? AND status = 'running' AND run_id IN_LIST(?) "
            "RETURNING run_id, fencing_token"
        ),
        (
            float(lease_ttl),
            *lease_values(d, who, lease_ttl),
            owner,
            d.list_param(f.run_id for f in fences),
        ),
        fetch=True,
    )
    held = {(str(r[0]), int(r[1])) for r in rows}
    return [f.run_id for f in fences if (f.run_id, f.token) in held]


def finish_run(
    d: Dialect, fence: Fence, status: str, outcome: Blob | None, wait: float | None = None
) -> Statements[bool]:
    """End (or release, ``status="queued"``; or pause) a run this worker holds.
    False when the lease was lost meanwhile (nothing is changed).

    ``wait``: seconds (from now, by the database's clock) before a released run
    may be claimed again.
    """
    if wait is not None and status != "queued":
        raise ConfigError(f"only a released run (queued) waits; got status {status!r}")
    if status not in RUN_STATUSES or status == "running":
        raise ConfigError(
            f"a run cannot be finished as {status!r}; use one of "
            f"{', '.join(s for s in RUN_STATUSES if s != 'running')}"
        )
    rows = yield Stmt(
        d.sql(
            f"UPDATE {RUNS.name} SET status = ?, owner = NULL, lease_expires_at = NULL, "
            "outcome_type = ?, outcome = ?, resume_type = NULL, resume = NULL, "
            "not_before = NOW() + ?, updated_at = NOW() "
            "WHERE run_id = ? AND fencing_token = ? AND status = 'running' RETURNING run_id"
        ),
        (
            status,
            *(outcome or (None, None)),
            None if wait is None else float(wait),
            fence.run_id,
            fence.token,
        ),
        fetch=True,
    )
    return bool(rows)


def requeue_run(
    d: Dialect, run_id: str, budget: Blob | None, resume: Blob | None = None
) -> Statements[bool]:
    """Queue a paused run again (with a new budget, and the value its interrupts
    are answered with, if given)."""
    rows = yield Stmt(
        d.sql(
            f"UPDATE {RUNS.name} SET status = 'queued', "
            "budget_type = coalesce(?, budget_type), budget = coalesce(?, budget), "
            "resume_type = ?, resume = ?, "
            "updated_at = NOW() WHERE run_id = ? AND status = 'paused' RETURNING run_id"
        ),
        (*(budget or (None, None)), *(resume or (None, None)), run_id),
        fetch=True,
    )
    return bool(rows)


def settle_paused(d: Dialect, run_id: str, status: str, outcome: Blob) -> Statements[bool]:
    """End a paused run whose thread went on without a worker (resumed by hand)
    with the status its thread reached."""
    rows = yield Stmt(
        d.sql(
            f"UPDATE {RUNS.name} SET status = ?, outcome_type = ?, outcome = ?, "
            "resume_type = NULL, resume = NULL, updated_at = NOW() "
            "WHERE run_id = ? AND status = 'paused' RETURNING run_id"
        ),
        (status, *outcome, run_id),
        fetch=True,
    )
    return bool(rows)


def cancel_run(d: Dialect, run_id: str, outcome: Blob) -> Statements[str | None]:
    """End an open run as ``cancelled``; returns the status it had (None: it was
    not open). A running one is fenced like a takeover: its token grows, so its
    worker's next write, renewal or side effect is refused and it stops there."""
    rows = yield Stmt(
        d.sql(f"SELECT status FROM {RUNS.name} WHERE run_id = ? AND {_IN_OPEN}"),
        (run_id,),
        fetch=True,
    )
    if not rows:
        return None
    done = yield Stmt(
        d.sql(
            f"UPDATE {RUNS.name} SET status = 'cancelled', fencing_token = fencing_token + 1, "
            "owner = NULL, lease_expires_at = NULL, outcome_type = ?, outcome = ?, "
            f"resume_type = NULL, resume = NULL, updated_at = NOW() "
            f"WHERE run_id = ? AND status = ? RETURNING run_id"
        ),
        (*outcome, run_id, rows[0][0]),
        fetch=True,
    )
    return str(rows[0][0]) if done else None


def read_run(d: Dialect, run_id: str) -> Statements[RunRecord | None]:
    rows = yield Stmt(
        d.sql(f"SELECT {_RUN_COLUMNS} FROM {RUNS.name} WHERE run_id = ?"), (run_id,), fetch=True
    )
    return from_row(RunRecord, rows[0]) if rows else None


def list_runs(d: Dialect, statuses: Sequence[str] = ()) -> Statements[list[RunRecord]]:
    where = "WHERE status IN_LIST(?) " if statuses else ""
    params: Any = (d.list_param(statuses),) if statuses else ()
    rows = yield Stmt(
        d.sql(f"SELECT {_RUN_COLUMNS} FROM {RUNS.name} {where}ORDER BY created_at, run_id"),
        params,
        fetch=True,
    )
    return [from_row(RunRecord, r) for r in rows]


#: What `sqlite_file` reads, on a SQLite connection.
SQLITE_DATABASE_LIST = "PRAGMA database_list"


def sqlite_file(database_list: Sequence[Sequence[Any]]) -> str | None:
    """The file of a SQLite connection's main database, from its ``PRAGMA
    database_list`` rows (None in memory: it cannot be opened again)."""
    return next((str(r[2]) for r in database_list if r[1] == "main" and r[2]), None)


def active_runs(d: Dialect) -> Statements[int]:
    """Runs some worker has to run now: queued (and due), or running under a lease.
    A paused run is open, it holds its thread, but waits for `Worker.resume`; a
    queued run waiting for its ``not_before`` time is work for later."""
    rows = yield Stmt(
        d.sql(f"SELECT count(*) FROM {RUNS.name} WHERE {_DUE} OR status = 'running'"),
        fetch=True,
    )
    return int(rows[0][0])
