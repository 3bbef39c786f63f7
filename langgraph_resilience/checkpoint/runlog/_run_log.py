"""The run ledger: a row per run of a thread and a row per step that ran,
written when it happens, in the transaction of what it belongs to (both dialects).

What the rows are read from is what the saver is handed anyway, never
LangGraph's private writes decoded back:

- a run starts with its input checkpoint (``put``, metadata source ``input``,
  the top-level namespace), when the input carries the new-run marker
  (`state.new_run_marker`, added by the graph to a new input): the run's number
  is the one after the checkpoint's run log's, its ``task_spec`` the input
  without the marker, verbatim (the saver's serde), stored once, here;
- a step is the record its node's own run-log write carries (``{"resilience":
  {"step": ...}}``, `graph._step_log.log_update`), or that its node handed to
  the invoke's `_scope.RunScope` in place of that write (a step that changes
  nothing in the run log: most), stored by ``put_writes`` of its task in the
  transaction of the task's writes: never a step row without its writes, nor
  the reverse (both keep the first, as LangGraph's regular writes do);
- a write that ends the run (``status``: success, partial_complete), names its
  failed step, goes on with it (``running``: `retry_failed`) or resumes it
  (LangGraph's `RESUME_CHANNEL` write) updates the run's row in that same
  transaction, and the checkpoint after it gives the row the run's usage;
- a checkpoint that leaves a run nothing to do, its run log reading
  ``running`` (a loop a conditional edge stopped) or just told ``success``,
  ends its row ``success``, with its usage, unless a step of the run failed
  unrecovered (`PutLedger.ends`, `_run_end`); how a checkpoint ends its run is
  one decision (`put_end`), and the invoke's `RunScope` learns the run its put
  started and the one it ended for good (`stored_put`);
- what no checkpoint says is told by the one that knows: the driver when
  ``invoke`` / ``stream`` returns paused (a run stored only at its exit:
  `close_run`) or raised (`fail_run`), the `Worker` when it finishes, pauses or
  cancels a run (`finish_worker_run`, `cancel_worker_run`, in its own transaction).

A run nested in another (a resilient subgraph, a resilient graph invoked inside
a node: a non-empty namespace) has no row of its own; its steps are rows of
its namespace, numbered with the run of the thread latest started at or before
their checkpoint (checkpoint ids are time-ordered). Under a parent that keeps
no run log (a plain ``StateGraph`` running a resilient agent), the thread's
runs are the nested run log's own: its marker starts a run row, its end ends
it (`_OWN_START`, `_OWN_END`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata
from langgraph.graph import START

from langgraph_resilience._keys import GRAPH_VERSION_META, SERVER_RUN_KEY, WORKER_KEY
from langgraph_resilience._langgraph import (
    ERROR_CHANNEL,
    INTERRUPT_CHANNEL,
    RESUME_CHANNEL,
    triggers_none,
)
from langgraph_resilience._util._process import process_id
from langgraph_resilience.checkpoint.ledger._runs import fence_of
from langgraph_resilience.checkpoint.runlog._run_log_reads import CHANNEL, ENDED, STATUSES
from langgraph_resilience.checkpoint.runlog._run_sql import (
    NESTED_FAILED,
    OPEN_RUN,
    PAUSED_FOR,
    RUN_AT,
    SETTLED_RUN,
    START_NEXT_RUN,
    START_RUN,
    cancel_worker_run,
    finish_worker_run,
    hold_run,
)
from langgraph_resilience.checkpoint.runlog._scope import scope_of
from langgraph_resilience.checkpoint.runlog._step_rows import step_row
from langgraph_resilience.checkpoint.store._schema import (
    RECOVERIES,
    RECOVERY_PATHS,
    RUN_LOG,
    STEPS,
)
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt
from langgraph_resilience.classify import FailureKind
from langgraph_resilience.errors import ConfigError, describe

__all__ = [
    "PutEnd",
    "PutLedger",
    "WriteLedger",
    "cancel_worker_run",
    "close_run",
    "fail_run",
    "failing",
    "finish_worker_run",
    "ledger_of_put",
    "ledger_of_writes",
    "put_end",
    "put_statements",
    "reopen_run",
    "stored_put",
    "tried_task",
    "write_statements",
]

_ENDED_SQL = ", ".join(repr(s) for s in ENDED)


# -- what a put or a write tells ------------------------------------------------------


class PutLedger(NamedTuple):
    """What a checkpoint tells the ledger: the run it starts, or the end of the
    run its run log says ended (each a run row, upserted)."""

    start: tuple[Any, ...] | None = None
    end: tuple[Any, ...] | None = None  # the run's row, ended
    #: A run of a graph that keeps no run log (see `ledger_of_put`): its row
    #: starts numbered after the thread's latest, or ends.
    next_start: tuple[Any, ...] | None = None
    settle: tuple[str, str] | None = None  # (thread, checkpoint) of its end
    #: The row of a run ended ``success`` at a checkpoint that leaves it nothing
    #: to do (`put_end`: its run log still reads ``running``, or a step wrote
    #: the end): its end if no step of it failed unrecovered (`checked`, from
    #: the run's checkpoints).
    ends: tuple[Any, ...] | None = None
    #: The end (`end`, `ends`) is at a checkpoint that leaves the run nothing to
    #: run: LangGraph's loop stops there, so nothing after it is the run's.
    final: bool = False

    def stored_runs(self) -> tuple[int | None, int | None]:
        """(the run this put started, the run whose end it stored at a checkpoint
        that leaves it nothing to run), each None if not this put's; numbered
        rows only (a plain parent's run is numbered by the store)."""
        started = int(self.start[1]) if self.start is not None else None
        ended = int(self.end[1]) if self.end is not None and self.final else None
        return started, ended

    def checked(self, unrecovered: Sequence[str]) -> PutLedger:
        """This ledger, its run ended (`ends`) unless ``unrecovered`` names a step
        that failed unrecovered (`_run_end.unrecovered_steps`): the row then
        stays ``running``, for the one who saw the error to end it."""
        if self.ends is None:
            return self
        return self._replace(end=None if unrecovered else self.ends, ends=None)


def ledger_of_put(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: Mapping[str, Any],
    dumps: Callable[[Any], tuple[str, bytes]],
) -> PutLedger | None:
    """What a top-level checkpoint tells the ledger (None: most say nothing).

    A new run's input checkpoint (its input, the graph's input channel `START`,
    carries the new-run marker) starts the run's row. The checkpoint after the
    step that ended a run (its run log changed, and says ``success`` or
    ``partial_complete``) gives the row the run's usage: the run's driver then
    has nothing left to tell it (how a checkpoint ends its run: `put_end`).

    A graph no driver of ours runs and that keeps no run log (a plain
    ``StateGraph`` parent: ``create_supervisor``, ``create_swarm``; an
    ``@entrypoint``; a ``create_agent`` agent's first turn) is seen here
    only: its input checkpoint starts its run (numbered after the thread's
    latest run, or after its own run log's), and its first checkpoint that
    leaves no task to run (`_langgraph.triggers_none`) ends it: ``success``,
    or ``partial_complete`` when a graph nested in it ended short (its failed
    step, `ledger_of_writes`). One run per top-level invoke, whoever built
    the graph; the graphs nested in it are its steps.
    """
    configurable = config.get("configurable") or {}
    if configurable.get("checkpoint_ns"):
        return None  # a nested run: part of its parent's
    values = checkpoint.get("channel_values") or {}
    known = values.get(CHANNEL)
    own = _own_log(config, known)
    if metadata.get("source") != "input":
        nothing_left = triggers_none(checkpoint)
        end = put_end(metadata.get("source"), own, CHANNEL in new_versions, nothing_left)
        if end is None:
            return None
        if end.how == "settle":
            return PutLedger(settle=(str(configurable["thread_id"]), checkpoint["id"]))
        assert own is not None  # "left" and "told" read the graph's own run log
        if end.how == "left":
            return _ends(config, own)
        row = _run_row(
            config,
            int(own.get("run") or 1),
            _began(config, own),
            None,
            status=str(own.get("status")),
            ended=True,
            failed_step=_path_of(own.get("failed_step")),
            usage=_json(own.get("usage")),
        )
        if end.checked:
            return PutLedger(ends=row, final=True)
        return PutLedger(end=row, final=nothing_left)
    given = values.get(START)
    marker = given.get(CHANNEL) if isinstance(given, Mapping) else None
    if not isinstance(marker, Mapping) or marker.get("new_run") is None:
        return _unmarked_start(config, checkpoint, given, own, dumps)
    assert isinstance(given, Mapping)
    previous = int(known.get("run") or 0) if isinstance(known, Mapping) else 0
    spec_type, spec = dumps({k: v for k, v in given.items() if k != CHANNEL})
    started = float(marker["new_run"])
    return PutLedger(
        start=_run_row(config, previous + 1, started, checkpoint["id"], spec_type, spec)
    )


def _ends(config: RunnableConfig, log: Mapping[str, Any]) -> PutLedger:
    """The end of a run whose run log still reads ``running``, at a checkpoint
    that leaves it nothing to do (a loop a conditional edge stopped: no node
    knew it was the last): ``success``, with its usage so far (its invoke's
    tally's, else its run log's), if no step failed unrecovered (`PutLedger.checked`)."""
    run = int(log.get("run") or 1)
    scope = scope_of(config)
    tally = scope.tally(run) if scope is not None else None
    usage = dict(tally.usage) if tally is not None and tally.usage else log.get("usage")
    row = _run_row(
        config, run, _began(config, log), None, status="success", ended=True, usage=_json(usage)
    )
    return PutLedger(ends=row, final=True)


class PutEnd(NamedTuple):
    """How a checkpoint ends its run (`put_end`)."""

    how: Literal["settle", "left", "told"]
    #: The end is ``success`` at a checkpoint that leaves nothing to run: it is
    #: stored only if no step of the run failed unrecovered (`PutLedger.checked`).
    checked: bool = False


def put_end(
    source: Any, log: Mapping[str, Any] | None, log_changed: bool, nothing_left: bool
) -> PutEnd | None:
    """How a top-level checkpoint that is not a run's input ends its run, if it
    does (pure: `ledger_of_put` builds the row). ``source``: its metadata's;
    ``log``: the graph's own run log (`_own_log`; None: it keeps none);
    ``log_changed``: the step before it wrote the run log; ``nothing_left``: it
    triggers no task (`_langgraph.triggers_none`).

    - ``settle``: a graph that keeps no run log (a plain parent, an
      ``@entrypoint``), at a loop checkpoint that leaves nothing to run: the
      thread's latest run ends (`SETTLED_RUN`: ``success``, or
      ``partial_complete`` naming a nested graph's failed step);
    - ``left``: a run log that still reads ``running`` at a loop checkpoint
      that leaves nothing to run (a conditional edge stopped the run):
      ``success``, checked;
    - ``told``: the run log just changed to ``success`` or
      ``partial_complete`` (a step wrote the end): that end, with its usage;
      a ``success`` at a checkpoint that leaves nothing to run is checked (an
      error handler that failed lets LangGraph run the other branches to the
      end before it raises: the run is not a success);
    - None: the run goes on, or the checkpoint says nothing of its end.
    """
    loop = source == "loop"
    if log is None:
        return PutEnd("settle") if loop and nothing_left else None
    status = log.get("status")
    if status == "running" and loop:
        return PutEnd("left", checked=True) if nothing_left else None
    if log_changed and status in ("success", "partial_complete"):
        return PutEnd("told", checked=nothing_left and status == "success")
    return None


def stored_put(config: RunnableConfig, led: PutLedger | None) -> None:
    """After a put's transaction: the invoke's `RunScope` learns the run the put
    started and the run whose end it stored for good (`PutLedger.stored_runs`),
    what its driver tells the ledger if the invoke raises (`fail_run`)."""
    if led is None or (led.start is None and led.end is None):
        return
    if (scope := scope_of(config)) is not None:
        scope.stored(*led.stored_runs())


def _own_log(config: RunnableConfig, known: Any) -> Mapping[str, Any] | None:
    """The checkpoint's run log if it is the graph's own, else None: none, or
    one a graph nested in a plain parent of the same state schema (a
    `ResilientState` ``StateGraph`` no driver of ours runs) handed up with its
    output, which numbers no run (a nested run log never does): the parent's
    runs are then the saver's, as a plain parent's are."""
    if not isinstance(known, Mapping):
        return None
    if known.get("run") is None and scope_of(config) is None:
        return None
    return known


def _unmarked_start(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    given: Any,
    known: Any,
    dumps: Callable[[Any], tuple[str, bytes]],
) -> PutLedger | None:
    """The start of a run whose input carries no new-run marker: a graph no
    driver of ours runs (an invoke of ours puts a `RunScope` in the config and
    marks each new input it starts a run with). Numbered after its run log's
    run if it keeps one (an agent's, whose ``before_agent`` numbers it so), else
    after the thread's latest row."""
    if scope_of(config) is not None:
        return None  # our driver's invoke: it marks the inputs that start runs
    spec_type, spec = dumps(given)
    started = time.time()
    if isinstance(known, Mapping):
        previous = int(known.get("run") or 0)
        return PutLedger(
            start=_run_row(config, previous + 1, started, checkpoint["id"], spec_type, spec)
        )
    row = _run_row(config, 0, started, checkpoint["id"], spec_type, spec)
    return PutLedger(next_start=row)


def _began(config: RunnableConfig, known: Mapping[str, Any]) -> float:
    """When an ended run began, for its row if it has none yet (a run stored only
    at its exit, ``durability="exit"``): its invoke's, if that started it (a
    run log stored by an earlier release says it too)."""
    if (said := known.get("started_at")) is not None:
        return float(said)
    scope = scope_of(config)
    return scope.began if scope is not None and scope.began is not None else time.time()


def _run_row(
    config: RunnableConfig,
    run: int,
    started_at: float,
    checkpoint_id: str | None,
    spec_type: str | None = None,
    spec: bytes | None = None,
    *,
    status: str = "running",
    ended: bool = False,
    failed_step: str | None = None,
    usage: str | None = None,
) -> tuple[Any, ...]:
    """A run row, in the table's column order (its Worker run and worker from
    the config a `Worker` gives the run, or for a run of Agent Server the server's
    run id; its graph version from the metadata a versioned graph gives every run,
    as the run's checkpoints carry it)."""
    configurable = config.get("configurable") or {}
    fence = fence_of(config)
    worker = configurable.get(WORKER_KEY)
    version = (config.get("metadata") or {}).get(GRAPH_VERSION_META)
    now = time.time()
    return (
        str(configurable["thread_id"]),
        run,
        status,
        spec_type,
        spec,
        checkpoint_id,
        started_at,
        now if ended else None,
        now,
        failed_step,
        usage,
        fence.run_id if fence is not None else _server_run(config),
        None if worker is None else str(worker),
        None,  # paused_for
        None,  # error
        None if version is None else str(version),
        *_held_by(fence),
    )


def _held_by(fence: Any) -> tuple[str | None, float | None]:
    """(holder, seen_at) of a run row: this process, now, for a run no `Worker`
    holds (a Worker's run is judged by its lease and its claim's holder)."""
    return (None, None) if fence is not None else (process_id(), time.time())


def _server_run(config: RunnableConfig) -> str | None:
    """The run id Agent Server gave the run (its configurable or metadata), if any."""
    found = (config.get("configurable") or {}).get(SERVER_RUN_KEY)
    found = found or (config.get("metadata") or {}).get(SERVER_RUN_KEY)
    return None if found is None else str(found)


class WriteLedger(NamedTuple):
    """What one task's writes tell the ledger (see `ledger_of_writes`)."""

    thread_id: str
    ns: str
    checkpoint_id: str
    step: tuple[Any, ...] | None = None  # the step row
    run: int | None = None  # the run the write belongs to, when it says
    status: str | None = None  # success, partial_complete or running
    failed_step: str | None = None
    cleared: bool = False  # retry_failed: its failed steps are re-run
    resumed: bool = False
    task_id: str = ""
    clear: tuple[str, ...] = ()  # the paths retry_failed re-runs
    paused_for: str | None = None  # an interrupt: budget or human
    own_start: tuple[Any, ...] | None = None  # a nested run's marker's row (`_OWN_START`)
    own_end: str | None = None  # a nested run's end (see `_OWN_END`)
    start: tuple[Any, ...] | None = None  # a run started by a node's marker
    #: The failed step of a graph nested in a parent no driver of ours runs
    #: (a plain ``StateGraph``: a supervisor's, a swarm's) that ended short: the
    #: parent's run ends ``partial_complete`` naming it.
    nested_failed: str | None = None
    #: The step row's run is the one the checkpoint belongs to (a functional
    #: task's step: its record does not know its run's number).
    run_at: bool = False
    #: A top-level task raised (an entrypoint whose task failed for good).
    failed_entrypoint: bool = False
    #: What it raised, for a run no driver of ours nor a `Worker` runs (a plain
    #: ``StateGraph``, an ``@entrypoint``, an agent), whose run then ends
    #: ``error`` unless a failed step ends it short (`_RAISED`).
    raised: str | None = None
    #: The time of every row the writes store: when the saver was handed them,
    #: or a retry_failed's ``cleared_at`` (told before the steps it re-runs,
    #: which run beside the saver's write); one time however often the rows are
    #: decided (a Redis saver decides after a read, again when the ledger moved).
    at: float = 0.0


def ledger_of_writes(
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    handed: Mapping[str, Any] | None = None,
    *,
    summaries: bool = True,
) -> WriteLedger | None:
    """What a task's writes tell the ledger, or None (most writes of a step: only
    its own run-log write, read as given, and a resume's write count).

    ``handed``: the run-log entry the task's node handed over in place of a
    write (`_scope.RunScope.take`), read as its write would be; writes that
    are the task's error drop it (the step did not end with them)."""
    told = time.time()
    value: Any = None
    resumed = False
    paused: str | None = None
    failed = False
    raised: str | None = None
    for channel, v in writes:
        if channel == CHANNEL:
            value = v
        elif channel == RESUME_CHANNEL:
            resumed = True
        elif channel == INTERRUPT_CHANNEL:
            paused = _paused_for(v, paused)
        elif channel == ERROR_CHANNEL:
            failed = True
            raised = describe(v) if isinstance(v, BaseException) else str(v)
    if handed is not None and value is None and (not failed or handed.get("functional")):
        value = handed  # a functional task's failed step is the run's failed step
    if not isinstance(value, Mapping) and not resumed and paused is None:
        if failed and handed is None and _top_level(config):
            configurable = config.get("configurable") or {}
            thread, at = str(configurable["thread_id"]), str(configurable.get("checkpoint_id"))
            undriven = scope_of(config) is None and fence_of(config) is None
            return WriteLedger(
                thread,
                "",
                at,
                task_id=task_id,
                failed_entrypoint=True,
                raised=raised[:1000] if undriven and raised is not None else None,
                at=told,
            )
        return None
    configurable = config.get("configurable") or {}
    thread_id = str(configurable["thread_id"])
    ns = str(configurable.get("checkpoint_ns") or "")
    checkpoint_id = str(configurable.get("checkpoint_id"))
    if not isinstance(value, Mapping):
        if ns:
            return None  # a nested pause: its parent's task writes it too
        return WriteLedger(
            thread_id,
            ns,
            checkpoint_id,
            resumed=resumed,
            task_id=task_id,
            paused_for=paused,
            at=told,
        )
    step = value.get("step")
    row = None
    run = None
    if isinstance(step, Mapping) and step.get("path"):
        run = int(step.get("run") or 1)
        usage = step.get("usage") or value.get("usage")  # a tallied step's, or the log's
        path = str(step["path"])
        tried = tried_task(value, path) if _FAILED_KEYS & value.keys() else None
        record = {**step, "usage": usage} if usage is not step.get("usage") else step
        row = step_row(thread_id, ns, checkpoint_id, task_id, run, record, tried, summary=summaries)
    if ns:  # a nested run's: its steps only (its outcome is its parent's step's)
        # Its start or end under a parent that keeps no run log (a plain
        # StateGraph): the thread's runs are the nested run log's own.
        began = value.get("new_run")
        ended = value.get("status") if value.get("status") in ENDED else None
        if row is None and began is None and ended is None:
            return None
        short = None
        if value.get("status") == "partial_complete" and scope_of(config) is None:
            short = _nested_path(ns, _path_of(value.get("failed_step")))
        return WriteLedger(
            thread_id,
            ns,
            checkpoint_id,
            step=row,
            own_start=None if began is None else _run_row(config, 0, float(began), checkpoint_id),
            own_end=ended,
            nested_failed=short,
            at=told,
        )
    status = value.get("status")
    start = None
    if value.get("cleared_at") is not None:  # a retry_failed's, told before its steps re-ran
        told = float(value["cleared_at"])
    if value.get("new_run") is not None and value.get("run") is not None:
        # A marker that numbers its run (an agent's, written by a node).
        run = int(value["run"])
        start = _run_row(config, run, float(value["new_run"]), checkpoint_id)
    return WriteLedger(
        thread_id,
        ns,
        checkpoint_id,
        step=row,
        run=None if value.get("functional") else run,
        status=status if status in ("success", "partial_complete", "running") else None,
        failed_step=_path_of(value.get("failed_step")),
        cleared=bool(value.get("clear") or value.get("cleared")),
        resumed=resumed,
        start=start,
        task_id=task_id,
        clear=tuple(str(p) for p in value.get("clear") or ()),
        paused_for=paused,
        run_at=bool(value.get("functional")),
        at=told,
    )


_FAILED_KEYS = frozenset(("failed_step", "failed_steps"))


def tried_task(value: Mapping[str, Any], path: str) -> str | None:
    """The task whose tries a failed step's record stands for (``ns|id``), as its
    run-log write names it (the failed step, or one of the failed branches)."""
    for failed in [value.get("failed_step"), *(value.get("failed_steps") or [])]:
        if isinstance(failed, Mapping) and failed.get("path") == path and failed.get("task"):
            return str(failed["task"])
    return None


def _paused_for(value: Any, before: str | None) -> str:
    """Why an interrupt write pauses its run (``before``: an earlier write's word):
    ``budget``, ``wait`` (each a durable wait: a Retry-After), else ``human``."""
    reasons = set()
    for item in value if isinstance(value, (list, tuple)) else [value]:
        said = getattr(item, "value", item)
        reasons.add(said.get("reason") if isinstance(said, Mapping) else None)
    if before == "budget" or FailureKind.BUDGET_EXHAUSTED.value in reasons:
        return "budget"
    if before == "human" or reasons - {"retry_after"}:
        return "human"
    return "wait"


# -- statements ------------------------------------------------------------------------

_STEP_NAMES = ", ".join(STEPS.names)
_STEP = (
    f"INSERT INTO {STEPS.name} ({_STEP_NAMES}) VALUES "
    f"({', '.join('?' for _ in STEPS.names)}) ON CONFLICT DO NOTHING"
)
_NESTED_STEP = (
    f"INSERT INTO {STEPS.name} ({_STEP_NAMES}) VALUES (?, ?, ?, ?, coalesce({RUN_AT}, ?), "
    f"{', '.join('?' for _ in STEPS.names[5:])}) ON CONFLICT DO NOTHING"
)
# A functional task's step (`graph._functional`): its run is the checkpoint's,
# and a resumed task that failed before replaces its failed row.
_TASK_STEP = _NESTED_STEP.replace(
    "ON CONFLICT DO NOTHING",
    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id) DO UPDATE SET "
    "status = excluded.status, attempts = excluded.attempts, kinds = excluded.kinds, "
    "ended_at = excluded.ended_at",
)
# An entrypoint that raised after one of its tasks failed for good (the run's
# failed step): the run ends partial_complete, naming it; retry_failed re-runs it.
_FAILED_ENTRYPOINT = (
    f"UPDATE {RUN_LOG.name} SET status = 'partial_complete', ended_at = coalesce(ended_at, ?), "
    "updated_at = ? WHERE thread_id = ? AND status = 'running' AND failed_step IS NOT NULL "
    f"AND run = {RUN_AT}"
)
# A top-level task of a run no driver of ours runs raised, and no failed step
# ends the run short (`_FAILED_ENTRYPOINT`): LangGraph raises it to the caller,
# so the run ends ``error`` with it, as a driver's `fail_run` would end its own.
# Going on from its last checkpoint (``invoke(None)``) settles it again
# (`SETTLED_RUN`).
_RAISED = (
    f"UPDATE {RUN_LOG.name} SET status = 'error', ended_at = coalesce(ended_at, ?), "
    "updated_at = ?, error = ? WHERE thread_id = ? AND status = 'running' "
    f"AND failed_step IS NULL AND run = {RUN_AT}"
)
_UPDATE_RUN = (
    f"UPDATE {RUN_LOG.name} SET status = coalesce(?, status), "
    f"ended_at = CASE WHEN ? IN ({_ENDED_SQL}) THEN ? WHEN ? = 'running' THEN NULL "
    "ELSE ended_at END, "
    "failed_step = coalesce(CASE WHEN ? THEN NULL ELSE failed_step END, ?), updated_at = ? "
    "WHERE thread_id = ? AND run = {run}"
)
_RESUMED = (
    f"UPDATE {RUN_LOG.name} SET status = 'running', updated_at = ? "
    f"WHERE thread_id = ? AND status = 'paused' AND run = {RUN_AT}"
)

# Recoveries made by a write (`RECOVERIES`), in its transaction, of the run the
# write belongs to (none for a thread without run rows): a resume of a paused
# run (budget or human, as it paused), a retry_failed (with the paths it
# re-runs). Params: key, checkpoint, at, then the run's thread, and `RUN_AT`'s
# thread and checkpoint.
_RECOVERY = (
    f"INSERT INTO {RECOVERIES.name} (thread_id, key, kind, run_id, owner, checkpoint_id, at, run) "
    "SELECT r.thread_id, ?, {kind}, r.run_id, NULL, ?, ?, r.run "
    f"FROM {RUN_LOG.name} r WHERE r.thread_id = ? AND r.run = {RUN_AT}{{where}} "
    "ON CONFLICT (thread_id, key) DO NOTHING"
)
# The continuation of a durable wait (the Retry-After's time passed) is no recovery.
_RESUME_RECOVERY = _RECOVERY.format(
    kind="coalesce(r.paused_for, 'human')", where=" AND coalesce(r.paused_for, '') <> 'wait'"
)
_RETRY_RECOVERY = _RECOVERY.format(kind="'retry_failed'", where="")
_RETRY_PATHS = (
    f"INSERT INTO {RECOVERY_PATHS.name} (thread_id, key, path) VALUES (?, ?, ?) "
    "ON CONFLICT DO NOTHING"
)
# A nested run's start or end on a thread with no run of its own top level (no
# run row started by a top-level checkpoint: its parent keeps no run log) is
# the thread's run: its marker starts the next run row (once: a write stored
# again adds none), numbered after the thread's last; its end ends the run
# latest started at its checkpoint. Params: the row's values less its number,
# then the thread three times and the checkpoint (`_OWN_START`); status, end
# time twice, then `RUN_AT`'s thread and checkpoint (`_OWN_END`).
_TOP_STARTED = (
    f"SELECT 1 FROM {RUN_LOG.name} t JOIN checkpoints c ON c.thread_id = t.thread_id "
    "AND c.checkpoint_ns = '' AND c.checkpoint_id = t.checkpoint_id WHERE t.thread_id = ?"
)
_OWN_START = (
    f"INSERT INTO {RUN_LOG.name} ({', '.join(RUN_LOG.names)}) SELECT ?, "
    f"coalesce((SELECT max(m.run) FROM {RUN_LOG.name} m WHERE m.thread_id = ?), 0) + 1, "
    f"{', '.join('?' for _ in RUN_LOG.names[2:])} WHERE NOT EXISTS ({_TOP_STARTED}) "
    f"AND NOT EXISTS (SELECT 1 FROM {RUN_LOG.name} o WHERE o.thread_id = ? "
    "AND o.checkpoint_id = ?)"
)
_OWN_END = (
    f"UPDATE {RUN_LOG.name} SET status = ?, ended_at = coalesce(ended_at, ?), updated_at = ? "
    f"WHERE thread_id = ? AND run = {RUN_AT} AND NOT EXISTS ({_TOP_STARTED})"
)
# How a run ended (its last checkpoint's word) or returned (its driver's, also
# paused or still running: no end time then), upserted: a run whose checkpoints
# were not stored as it went (durability "exit") gets its row then. An ended run
# keeps the time and the failed step it was first told.
_T = RUN_LOG.name
_ENDED_RUN = (
    f"{START_RUN.split(' ON CONFLICT')[0]} ON CONFLICT (thread_id, run) DO UPDATE SET "
    f"status = excluded.status, ended_at = CASE WHEN excluded.status IN ({_ENDED_SQL}) "
    f"THEN coalesce({_T}.ended_at, excluded.ended_at) ELSE NULL END, "
    f"usage = coalesce(excluded.usage, {_T}.usage), updated_at = excluded.updated_at, "
    f"failed_step = coalesce({_T}.failed_step, excluded.failed_step)"
)


def put_statements(d: Dialect, led: PutLedger | None) -> Statements[None]:
    """What a checkpoint stores in the ledger, in its transaction: a run's row as
    it starts (one whose number a new run takes again, on a branch of the
    thread's history, is replaced), or its end."""
    if led is None:
        return
    if led.start is not None:
        yield Stmt(d.sql(START_RUN), led.start)
    if led.next_start is not None:
        row = led.next_start
        yield Stmt(d.sql(START_NEXT_RUN), (row[0], row[0], *row[2:]))
    if led.end is not None:
        yield Stmt(d.sql(_ENDED_RUN), led.end)
    if led.settle is not None:
        thread, checkpoint_id = led.settle
        now = time.time()
        yield Stmt(d.sql(SETTLED_RUN), (now, now, now, thread, thread, checkpoint_id))


def write_statements(d: Dialect, led: WriteLedger | None) -> Statements[None]:
    """What a task's writes store in the ledger, in their transaction (nothing, or
    one statement for a step; a run's start, end, failure or resume adds one),
    timed when the saver was handed them (``led.at``)."""
    if led is None:
        return
    if led.start is not None:
        yield Stmt(d.sql(OPEN_RUN), led.start)
    if led.step is not None:
        if led.ns or led.run_at:
            step = led.step
            nested = (*step[:4], led.thread_id, led.checkpoint_id, step[4], *step[5:])
            yield Stmt(d.sql(_TASK_STEP if led.run_at else _NESTED_STEP), nested)
        else:
            yield Stmt(d.sql(_STEP), led.step)
    if led.status is not None or led.failed_step is not None or led.cleared:
        s, now = led.status, led.at
        params: tuple[Any, ...] = (s, s, now, s, led.cleared, led.failed_step, now, led.thread_id)
        if led.run is not None:
            yield Stmt(d.sql(_UPDATE_RUN.format(run="?")), (*params, led.run))
        else:
            where = (led.thread_id, led.checkpoint_id)
            yield Stmt(d.sql(_UPDATE_RUN.format(run=RUN_AT)), (*params, *where))
    if led.own_start is not None:
        thread, checkpoint, row = led.thread_id, led.checkpoint_id, led.own_start
        yield Stmt(d.sql(_OWN_START), (thread, thread, *row[2:], thread, thread, checkpoint))
    at = (led.thread_id, led.thread_id, led.checkpoint_id)
    if led.own_end is not None:
        now = led.at
        yield Stmt(d.sql(_OWN_END), (led.own_end, now, now, *at, led.thread_id))
    if led.nested_failed is not None:
        yield Stmt(d.sql(NESTED_FAILED), (led.nested_failed, led.at, *at))
    if led.failed_entrypoint:
        now = led.at
        yield Stmt(d.sql(_FAILED_ENTRYPOINT), (now, now, *at))
    if led.raised is not None:
        now = led.at
        yield Stmt(d.sql(_RAISED), (now, now, led.raised, *at))
    if led.paused_for is not None:
        yield Stmt(d.sql(PAUSED_FOR), (led.paused_for, led.paused_for, *at))
    if led.resumed:
        now = led.at
        key = f"resume:{led.checkpoint_id}"
        yield Stmt(d.sql(_RESUME_RECOVERY), (key, led.checkpoint_id, now, *at))
        yield Stmt(d.sql(_RESUMED), (now, *at))
    if led.resumed or led.status == "running":  # this process goes on with the run
        yield from hold_run(d, led.thread_id)
    if led.clear:
        key = f"retry_failed:{led.checkpoint_id}"  # one a checkpoint
        yield Stmt(d.sql(_RETRY_RECOVERY), (key, led.checkpoint_id, led.at, *at))
        paths = [(led.thread_id, key, p) for p in dict.fromkeys(led.clear)]
        yield Stmt(d.sql(_RETRY_PATHS), paths, many=True)


def close_run(
    d: Dialect,
    thread_id: str,
    run: int,
    status: str,
    usage: Mapping[str, float] | None,
    started_at: float | None = None,
) -> Statements[None]:
    """What the driver saw when ``invoke`` / ``stream`` returned: the run ended
    (``success``, ``partial_complete``), paused, or is still ``running``; its usage.
    ``started_at``: when the call began, the start of a row the run did not have
    (a run stored only at its exit, that no step's write ended: it left through a
    conditional edge to END, or paused)."""
    if status not in STATUSES:
        raise ConfigError(f"a run row's status is one of {', '.join(STATUSES)}, got {status!r}")
    now = time.time()
    ended = now if status in ENDED else None
    began = now if started_at is None else float(started_at)
    row = (thread_id, int(run), status, None, None, None, began, ended, now, None, _json(usage))
    yield Stmt(d.sql(_ENDED_RUN), (*row, None, None, None, None, None, None, None))


# A run of a graph that keeps no run log (a plain ``StateGraph`` parent) that
# ended short, taken up again by `retry_failed` from a fork of its history: the
# row goes on (``running``, no failed step, no end) and the recovery is stored,
# once a key, with the paths it re-runs. The run then ends as its steps do, at
# its first checkpoint that leaves nothing to run (`SETTLED_RUN`, `NESTED_FAILED`).
_REOPEN = (
    f"UPDATE {RUN_LOG.name} SET status = 'running', ended_at = NULL, failed_step = NULL, "
    "updated_at = ? WHERE thread_id = ? AND run = ? AND status = 'partial_complete'"
)
_REOPEN_RECOVERY = (
    f"INSERT INTO {RECOVERIES.name} (thread_id, key, kind, run_id, owner, checkpoint_id, at, run) "
    f"SELECT r.thread_id, ?, 'retry_failed', r.run_id, NULL, ?, ?, r.run FROM {RUN_LOG.name} r "
    "WHERE r.thread_id = ? AND r.run = ? ON CONFLICT (thread_id, key) DO NOTHING"
)


def reopen_run(
    d: Dialect, thread_id: str, run: int, checkpoint_id: str, paths: Sequence[str]
) -> Statements[None]:
    """`retry_failed` takes up run ``run`` of a plain parent that ended
    ``partial_complete`` again, from the fork ``checkpoint_id`` of its history:
    the row is running again, its failed step cleared, and a ``retry_failed``
    recovery naming ``paths`` is stored (once per fork)."""
    now = time.time()
    key = f"retry_failed:{checkpoint_id}"
    yield Stmt(d.sql(_REOPEN_RECOVERY), (key, checkpoint_id, now, thread_id, int(run)))
    rows = [(thread_id, key, p) for p in dict.fromkeys(paths)]
    if rows:
        yield Stmt(d.sql(_RETRY_PATHS), rows, many=True)
    yield Stmt(d.sql(_REOPEN), (now, thread_id, int(run)))


_FAIL_SET = f"UPDATE {RUN_LOG.name} SET status = 'error', ended_at = ?, updated_at = ?, error = ? "
# The call's own run: still running, or ``success`` that a step wrote before
# LangGraph raised another branch's error (no checkpoint ended the run).
_FAILED_RUN = f"{_FAIL_SET}WHERE thread_id = ? AND run = ? AND status IN ('running', 'success')"
# The thread's latest run, still running (a call that went on with it and
# raised before anything of it named its run).
_FAILED_LATEST = (
    f"{_FAIL_SET}WHERE thread_id = ? AND status = 'running' "
    f"AND run = (SELECT max(run) FROM {RUN_LOG.name} WHERE thread_id = ?)"
)

Failing = Literal["run", "latest"]


def failing(run: int | None, ended: bool, continued: bool) -> Failing | None:
    """Which row a top-level ``invoke`` / ``stream`` that raised ends ``error``
    (pure; its `RunScope.outcome` gives ``run`` and ``ended``):

    - None when the saver stored the run's end during the call (``ended``: at
      the checkpoint that left it nothing to run; what raised came after the
      run, e.g. a callback), or when the call stored nothing of a run and went
      on with none (a new input that was never stored: an earlier run stays);
    - ``run``: the call's run ``run`` (it started it, or its steps ran in it);
    - ``latest``: the thread's latest run, if still running (``continued``: a
      resume or a retry that raised before anything of the run named it).
    """
    if ended:
        return None
    if run is not None:
        return "run"
    return "latest" if continued else None


def fail_run(
    d: Dialect,
    thread_id: str,
    run: int | None,
    ended: bool,
    continued: bool,
    error: str | None = None,
) -> Statements[None]:
    """A top-level ``invoke`` / ``stream`` raised (not under a `Worker`, which
    stores its runs' ends): the call's run ends ``error`` as `failing` decides,
    by its number, never by comparing clocks. ``error``: what it raised
    (``Type: message``), kept as the run's ``error``."""
    which = failing(run, ended, continued)
    if which is None:
        return
    now = time.time()
    said = None if error is None else error[:1000]
    if which == "run":
        yield Stmt(d.sql(_FAILED_RUN), (now, now, said, thread_id, run))
    else:
        yield Stmt(d.sql(_FAILED_LATEST), (now, now, said, thread_id, thread_id))


def _top_level(config: RunnableConfig) -> bool:
    configurable = config.get("configurable") or {}
    return not configurable.get("checkpoint_ns") and configurable.get("thread_id") is not None


def _path_of(failed: Any) -> str | None:
    """The path of a run log's failed step (None if none)."""
    return str(failed["path"]) if isinstance(failed, Mapping) and failed.get("path") else None


def _nested_path(ns: str, path: str | None) -> str | None:
    """A nested graph's step path as its top-level parent names it: led by the
    nodes of its namespace (``mailer:<task>`` + ``tools/send_email`` ->
    ``mailer/tools/send_email``), the path `retry_failed` reads its node from."""
    if path is None:
        return None
    prefix = "/".join(part.split(":", 1)[0] for part in ns.split("|") if part)
    return path if not prefix or path.startswith(prefix + "/") else f"{prefix}/{path}"


def _json(usage: Mapping[str, float] | None) -> str | None:
    return json.dumps(dict(usage)) if usage else None
