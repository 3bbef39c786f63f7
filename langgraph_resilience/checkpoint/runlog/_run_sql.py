"""The run rows' statements that start and settle a run, shared by the writes
that tell them (`_run_log`): a run's start (upserted: a run whose number a new
run takes again, on a branch of the thread's history, is replaced), the run a
checkpoint belongs to, a pause, and the run of a graph that keeps no run log
(a plain ``StateGraph`` parent, an ``@entrypoint``: `_run_log.ledger_of_put`)."""

from __future__ import annotations

import time

from langgraph_resilience._util._process import process_id
from langgraph_resilience.checkpoint.ledger._runs import Fence
from langgraph_resilience.checkpoint.runlog._run_log_reads import ENDED, STATUSES
from langgraph_resilience.checkpoint.store._schema import RUN_LOG, RUNS
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt

__all__ = [
    "NESTED_FAILED",
    "OPEN_RUN",
    "PAUSED_FOR",
    "RUN_AT",
    "SETTLED_RUN",
    "START_NEXT_RUN",
    "START_RUN",
    "TOLD_BY_CHECKPOINTS",
    "cancel_worker_run",
    "finish_worker_run",
    "hold_run",
]

_ENDED_SQL = ", ".join(repr(s) for s in ENDED)

PLACES = ", ".join("?" for _ in RUN_LOG.names)
START_RUN = (
    f"INSERT INTO {RUN_LOG.name} ({', '.join(RUN_LOG.names)}) VALUES ({PLACES}) "
    "ON CONFLICT (thread_id, run) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in RUN_LOG.names if c not in ("thread_id", "run"))
)
# The run of a thread latest started at or before a checkpoint (of any namespace:
# checkpoint ids are time-ordered): the run a nested step, or a write that does
# not say its run, belongs to.
RUN_AT = (
    f"(SELECT r.run FROM {RUN_LOG.name} r WHERE r.thread_id = ? AND r.checkpoint_id <= ? "
    "ORDER BY r.checkpoint_id DESC LIMIT 1)"
)
# A pause (an interrupt written at the top level) says so in the run's row, as
# the run's driver would when its invoke returns: a graph no driver of ours
# runs has no one else to say it. A durable wait (``paused_for`` ``wait``: the
# service's Retry-After) is no pause: the run is queued again for later.
PAUSED_FOR = (
    f"UPDATE {RUN_LOG.name} SET paused_for = ?, "
    "status = CASE WHEN status = 'running' AND ? <> 'wait' THEN 'paused' ELSE status END "
    f"WHERE thread_id = ? AND run = {RUN_AT}"
)
# A run started by an agent's marker (its ``before_agent``) after its input
# checkpoint started the row: the row keeps when and where it started.
OPEN_RUN = (
    f"{START_RUN.split(' ON CONFLICT')[0]} ON CONFLICT (thread_id, run) DO UPDATE SET "
    + ", ".join(
        f"{c} = coalesce({RUN_LOG.name}.{c}, excluded.{c})"
        if c in ("checkpoint_id", "task_spec_type", "task_spec")
        else f"{c} = {RUN_LOG.name}.{c}"
        if c == "started_at"
        else f"{c} = excluded.{c}"
        for c in RUN_LOG.names
        if c not in ("thread_id", "run")
    )
)
# A run of a graph that keeps no run log (`ledger_of_put`): it starts numbered
# after the thread's latest run, and ends at its first checkpoint that leaves no
# task to run, ``partial_complete`` if a graph nested in it ended short
# (`NESTED_FAILED`), else ``success`` (also after it raised, `_run_log._RAISED`,
# and went on: its error is then no longer its end).
START_NEXT_RUN = (
    f"INSERT INTO {RUN_LOG.name} ({', '.join(RUN_LOG.names)}) SELECT ?, "
    f"coalesce((SELECT max(r.run) FROM {RUN_LOG.name} r WHERE r.thread_id = ?), 0) + 1, "
    + ", ".join("?" for _ in RUN_LOG.names[2:])
)
SETTLED_RUN = (
    f"UPDATE {RUN_LOG.name} SET status = CASE WHEN failed_step IS NULL THEN 'success' "
    "ELSE 'partial_complete' END, "
    "ended_at = CASE WHEN status = 'error' THEN ? ELSE coalesce(ended_at, ?) END, "
    "error = NULL, updated_at = ? "
    f"WHERE thread_id = ? AND status IN ('running', 'paused', 'error') AND run = {RUN_AT}"
)
NESTED_FAILED = (
    f"UPDATE {RUN_LOG.name} SET failed_step = coalesce(failed_step, ?), updated_at = ? "
    f"WHERE thread_id = ? AND status = 'running' AND run = {RUN_AT}"
)


# A run that goes on in a process (a resume, a retry_failed, a resume after a
# crash) is held by it from now: the thread's latest run, if a process (not a
# Worker) holds it. Params: holder, now, then the thread twice.
_HELD_RUN = (
    f"UPDATE {RUN_LOG.name} SET holder = ?, seen_at = ? WHERE thread_id = ? "
    f"AND status = 'running' AND holder IS NOT NULL AND run = (SELECT max(m.run) "
    f"FROM {RUN_LOG.name} m WHERE m.thread_id = ?)"
)


def hold_run(d: Dialect, thread_id: str) -> Statements[None]:
    """This process goes on with the thread's latest run (`_HELD_RUN`)."""
    yield Stmt(d.sql(_HELD_RUN), (process_id(), time.time(), thread_id, thread_id))


# A status a run's driver or Worker saw (params: status, status, now): an ended
# run keeps the time it ended first; an open one has none.
_SET_STATUS = (
    f"status = ?, ended_at = CASE WHEN ? IN ({_ENDED_SQL}) THEN coalesce(ended_at, ?) ELSE NULL END"
)


#: The ends a run's checkpoints tell (the saver writes them, in the transaction
#: of the checkpoint or write that ends the run: `_run_log.ledger_of_put`,
#: `_run_log.ledger_of_writes`); a `Worker` finishing such a run tells only who held it.
TOLD_BY_CHECKPOINTS = ("success", "partial_complete")
_WORKER_END = (
    f"UPDATE {RUN_LOG.name} SET {{status}}"
    f"worker = coalesce(worker, (SELECT owner FROM {RUNS.name} WHERE run_id = ?)), "
    f"updated_at = ? WHERE run_id = ? AND EXISTS (SELECT 1 FROM {RUNS.name} "
    "WHERE run_id = ? AND fencing_token = ? AND status = 'running')"
)


def finish_worker_run(
    d: Dialect, fence: Fence, status: str, error: str | None = None
) -> Statements[None]:
    """A `Worker` ends or pauses its run (in `_runs.finish_run`'s transaction,
    before the run's own row): the ledger's row of that run says who held it,
    and what no checkpoint of the run told (`TOLD_BY_CHECKPOINTS`): an ``error``
    with the error it ended on (``Type: message``, as a plain invoke's row keeps
    it: `_run_log.fail_run`), a pause. A released run (queued again) goes on:
    nothing changes."""
    if status not in STATUSES:
        return
    now = time.time()
    ids = (fence.run_id, now, fence.run_id, fence.run_id, fence.token)
    if status in TOLD_BY_CHECKPOINTS:
        yield Stmt(d.sql(_WORKER_END.format(status="")), ids)
        return
    said = error[:1000] if error is not None and status == "error" else None
    told = f"{_SET_STATUS}, error = coalesce(?, error), "
    yield Stmt(d.sql(_WORKER_END.format(status=told)), (status, status, now, said, *ids))


def cancel_worker_run(d: Dialect, run_id: str) -> Statements[None]:
    """A `Worker` run cancelled: its ledger row too, unless it had ended."""
    now = time.time()
    yield Stmt(
        d.sql(
            f"UPDATE {RUN_LOG.name} SET status = 'cancelled', ended_at = coalesce(ended_at, ?), "
            f"updated_at = ? WHERE run_id = ? AND status NOT IN ({_ENDED_SQL})"
        ),
        (now, now, run_id),
    )
