"""Runs of a compiled `ResilientStateGraph`: where one begins and how it ends.

A run is one task on a thread. Each new input (``invoke(input)``,
``stream(input)``, ``Worker.submit``) starts one: the input carries a marker
that the run log's reducer turns into a fresh run (numbered, its outcome fields
reset), so a second turn on a thread that ended ``partial_complete`` does not
inherit the first turn's failure. ``None``, ``Command(resume=...)`` and
`retry_failed` go on with the current run. A graph called as a subgraph is part
of its parent's run and adds no marker; when it ends short (``partial_complete``)
the step that ran it fails (`ended`), whether it was added as a node or invoked
inside a node's function.

A run whose last node leaves through a conditional edge (a loop that stops when
a counter is reached) has no node that knows it is the last. Its run log stays
``running``; the saver ends its row at the checkpoint that leaves it nothing to
do (`checkpoint.runlog._run_end`), ``success`` unless a step of it failed
unrecovered (`unrecovered_steps`: a task whose error was stored, not routed,
and whose checkpoint the run went on from without its writes): the row then
stays ``running`` until its driver (`_closing.failed`) or its `Worker` ends it
``error``, and a process killed before that never leaves a ``success``.

The row's status is the one every reader returns: ``get_state`` / ``aget_state``
and ``invoke``'s output read it for a top-level run whose run log reads
``running`` with nothing left (`stored_run`, `returned_status`), and list no
checkpoints; only a run no ledger holds (a saver without one, a nested
namespace) is settled from its listed checkpoints (`may_settle`, `settled`).
The driver tells the row only that a run returned paused (`_closing.close_run`),
or that the call raised (`_closing.failed`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.types import Command, StateSnapshot

from langgraph_resilience._keys import FENCE_KEY, REPLAYED_SCOPES_KEY, RETRY_FAILED_KEY
from langgraph_resilience._langgraph import (
    INTERRUPT_CHANNEL,
    langgraph_config,
)
from langgraph_resilience.checkpoint import (
    AsyncResilientSaver,
    AsyncRunLedger,
    AsyncRunQueueSaver,
    ResilientSaver,
    RunLedger,
    RunQueueSaver,
)
from langgraph_resilience.checkpoint.ledger._runs import RunRecord
from langgraph_resilience.checkpoint.runlog._run_end import (
    arun_part,
    run_begins,
    run_part,
    unrecovered_steps,
)
from langgraph_resilience.checkpoint.runlog._run_log_reads import ENDED, RunLogRecord
from langgraph_resilience.graph._step_log import nested_stop
from langgraph_resilience.graph._task import in_parent_task
from langgraph_resilience.state import new_run_marker

__all__ = [
    "anote_resume",
    "anoted",
    "asettle_by_hand",
    "asettle_paused",
    "aby_hand_row",
    "by_hand_end",
    "by_hand_outcome",
    "by_hand_row",
    "ended",
    "ended_status",
    "nested",
    "note_resume",
    "settle_by_hand",
    "settle_paused",
    "arun_part",
    "may_settle",
    "returned_status",
    "stored_run",
    "with_stored",
    "run_begins",
    "run_part",
    "settle_output",
    "to_settle",
    "settled",
    "settled_by_hand",
    "unrecovered_steps",
    "with_marker",
]

_LOG = "resilience"
logger = logging.getLogger("langgraph_resilience")


def nested(config: RunnableConfig | None) -> bool:
    """Whether the graph runs as a subgraph (inside a parent's task)."""
    return in_parent_task(ensure_config(config))


def with_marker(input: Any, config: RunnableConfig | None) -> Any:
    """The input, marked as the start of a new run if it is one."""
    if isinstance(input, Mapping) and _LOG not in input and not nested(config):
        return {**input, _LOG: new_run_marker(time.time())}
    return input


def _settled_values(values: Any, done: bool) -> Any:
    log = values.get(_LOG) if isinstance(values, Mapping) else None
    if done and isinstance(log, Mapping) and log.get("status") == "running":
        return {**values, _LOG: {**log, "status": "success"}}
    return values


def _nothing_left(snapshot: StateSnapshot) -> bool:
    # No task left: none to run, and none whose writes wait to be applied (a
    # process that stopped after a step's writes and before the next checkpoint).
    return (
        not snapshot.next
        and not snapshot.tasks
        and not snapshot.interrupts
        and bool(snapshot.created_at)
    )


def may_settle(snapshot: StateSnapshot) -> tuple[RunnableConfig, RunnableConfig] | None:
    """How to list the checkpoints before a snapshot that `settled` would turn
    ``success`` (its run reads ``running`` with nothing left to do) when no run
    ledger holds its run (a saver without one, a nested namespace): ``(config,
    before)`` for a saver's ``list``; None for any other snapshot."""
    log = snapshot.values.get(_LOG) if isinstance(snapshot.values, Mapping) else None
    running = isinstance(log, Mapping) and log.get("status") == "running"
    if not (running and _nothing_left(snapshot)) or snapshot.parent_config is None:
        return None
    configurable = snapshot.config["configurable"]
    ns = configurable.get("checkpoint_ns", "")
    where: RunnableConfig = {
        "configurable": {"thread_id": configurable["thread_id"], "checkpoint_ns": ns}
    }
    return where, snapshot.config


def stored_run(snapshot: StateSnapshot, head: bool) -> tuple[str, int] | None:
    """(thread, run) whose ledger row says how a top-level snapshot's run stands,
    when its run log reads ``running``: with nothing left to do (the saver wrote
    its end at that checkpoint, `checkpoint.runlog._run_log.PutLedger.ends`), or
    at the thread's ``head`` (its latest checkpoint: a run that raised there, or
    was cancelled, is ``error`` / ``cancelled`` in its row); and at the head when
    it reads ``success`` (a step told it, then LangGraph raised another branch's
    error: the row says ``error``); None for any other snapshot, which reads as
    its run log says."""
    log = snapshot.values.get(_LOG) if isinstance(snapshot.values, Mapping) else None
    said = log.get("status") if isinstance(log, Mapping) else None
    if said != "running" and not (said == "success" and head):
        return None
    assert isinstance(log, Mapping)
    configurable = snapshot.config["configurable"]
    if configurable.get("checkpoint_ns") or not (head or _nothing_left(snapshot)):
        return None
    return str(configurable["thread_id"]), int(log.get("run") or 1)


#: The statuses a run with steps left reads from its row: an end no step told
#: (never ``success``: a run whose process died before its driver said it raised
#: must not read it).
_UNTOLD_ENDS = ("error", "cancelled")


def returned_status(said: str, stored: str | None, nothing_left: bool) -> str:
    """The status a run reads (`get_state`, ``invoke``'s output): the one its
    ledger row stores, which every reader returns (``said``: its run log's,
    for a run with no row; with steps left, only an end no step told)."""
    if stored is None or not (nothing_left or stored in _UNTOLD_ENDS):
        return said
    return stored


def with_stored(snapshot: StateSnapshot, stored: str | None) -> StateSnapshot:
    """A snapshot reading the status its run's ledger row stores (`stored_run`)."""
    log = snapshot.values[_LOG]
    status = returned_status(str(log.get("status")), stored, _nothing_left(snapshot))
    if status == log.get("status"):
        return snapshot
    return snapshot._replace(values={**snapshot.values, _LOG: {**log, "status": status}})


def settled(snapshot: StateSnapshot, earlier: Iterable[CheckpointTuple] = ()) -> StateSnapshot:
    """A snapshot of a run with nothing left to do reads ``success``, unless a step
    of the run failed unrecovered (``earlier``: the run's checkpoints before this
    one, `run_part` of those listed from `may_settle`'s config)."""
    done = _nothing_left(snapshot)
    if done and snapshot.parent_config is not None:
        meta = cast(Any, snapshot.metadata or {})
        head = CheckpointTuple(snapshot.config, cast(Any, {}), meta, snapshot.parent_config)
        done = not unrecovered_steps([head, *earlier])
    values = _settled_values(snapshot.values, done)
    return snapshot if values is snapshot.values else snapshot._replace(values=values)


def ended(out: Any, config: RunnableConfig | None) -> None:
    """A run nested in another's step (a graph invoked inside a node function)
    that ended short tells that step, which fails naming the inner step
    (`_step_log.nested_stop`); a top-level run tells no one."""
    log = out.get(_LOG) if isinstance(out, Mapping) else None
    if isinstance(log, Mapping) and log.get("status") == "partial_complete" and nested(config):
        nested_stop(out)


def to_settle(out: Any, config: RunnableConfig | None) -> bool:
    """Whether ``invoke``'s output may have to be settled (`settle_output`): a
    top-level run it left ``running``, which the stored state tells."""
    log = out.get(_LOG) if isinstance(out, Mapping) else None
    return isinstance(log, Mapping) and log.get("status") == "running" and not nested(config)


def settle_output(out: Any, config: RunnableConfig | None, found: StateSnapshot | None) -> Any:
    """``invoke``'s output, reading ``success`` if the run has nothing left to
    do; ``found``: the stored state, read when `to_settle` (None without a
    checkpointer)."""
    if not to_settle(out, config):
        return out
    if found is None:
        return _settled_values(out, INTERRUPT_CHANNEL not in out)
    return _status_of(out, found)


def _status_of(out: Mapping[str, Any], snapshot: StateSnapshot) -> Any:
    """``invoke``'s output with the status the stored run reads (`get_state`'s)."""
    log = snapshot.values.get(_LOG) if isinstance(snapshot.values, Mapping) else None
    status = log.get("status") if isinstance(log, Mapping) else None
    if status is None or status == out[_LOG].get("status"):
        return out
    return {**out, _LOG: {**out[_LOG], "status": status}}


# -- resumes after a crash (for `recovery_metrics`) ------------------------------------


def _may_be_crash_resume(input: Any, config: RunnableConfig | None) -> str | None:
    """The thread of a top-level resume without a `Worker`, or None: ``invoke(None)``,
    or a re-entry into a run (its input again, under the run id the thread's latest
    checkpoint carries: LangGraph resumes it, as the Agent Server's re-run of a run
    whose worker died does). Nothing else is looked at: a Command costs nothing."""
    if isinstance(input, Command) or not config or nested(config):
        return None
    if input is not None and _reentry_run(config) is None:
        return None
    configurable = config.get("configurable") or {}
    if FENCE_KEY in configurable or configurable.get("thread_id") is None:
        return None  # a Worker's run: a takeover is stored by its claim
    if configurable.get(RETRY_FAILED_KEY):
        return None  # retry_failed going on after a subgraph: counted as retry_failed
    if (configurable.get(REPLAYED_SCOPES_KEY) or {}).get("travel"):
        return None  # a time travel or a fork (`_travel`): no crash to recover from
    return str(configurable["thread_id"])


def _reentry_run(config: RunnableConfig | None) -> str | None:
    """The run id LangGraph matches against the latest checkpoint's: ``run_id`` of
    the config's metadata, or of its configurable (LangGraph's config copies it)."""
    found = (langgraph_config(config).get("metadata") or {}).get("run_id")
    return str(found) if found else None


def _crash_key(snapshot: StateSnapshot, input: Any, config: RunnableConfig | None) -> str | None:
    """A resume of a run left with steps to do and no interrupt: after a crash."""
    if not snapshot.next or snapshot.interrupts:
        return None
    if input is not None and (snapshot.metadata or {}).get("run_id") != _reentry_run(config):
        return None  # a new input: a new run, not a re-entry
    checkpoint = (snapshot.config.get("configurable") or {}).get("checkpoint_id")
    # os.urandom, not uuid4: a program seeding uuid4 must not see its ids shift.
    return f"crash:{checkpoint}:{os.urandom(6).hex()}"


def _host_pid() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def note_resume(graph: Any, input: Any, config: RunnableConfig | None) -> None:
    """Store a resume after a crash (``invoke(None)`` on a thread whose run has
    steps left and no interrupt) as a recovery. Never fails the run."""
    thread = _may_be_crash_resume(input, config)
    saver = getattr(graph, "checkpointer", None)
    if thread is None or not isinstance(saver, RunLedger):
        return
    try:
        key = _crash_key(graph.get_state(config), input, config)
        if key is not None:
            saver.history.note_recovery(thread, key, "crash", _host_pid())
    except Exception as exc:
        logger.debug("could not store the resume of thread %s: %s", thread, exc)


async def anote_resume(graph: Any, input: Any, config: RunnableConfig | None) -> None:
    """Async twin of `note_resume`."""
    thread = _may_be_crash_resume(input, config)
    saver = getattr(graph, "checkpointer", None)
    if thread is None or not isinstance(saver, AsyncRunLedger):
        return
    try:
        key = _crash_key(await graph.aget_state(config), input, config)
        if key is not None:
            await saver.history.anote_recovery(thread, key, "crash", _host_pid())
    except Exception as exc:
        logger.debug("could not store the resume of thread %s: %s", thread, exc)


def anoted(
    graph: Any, input: Any, config: RunnableConfig | None, stream: AsyncIterator[Any]
) -> AsyncIterator[Any]:
    """``stream``, storing a resume after a crash first when it is read
    (`anote_resume`: an async stream's first read is where it may await); the
    stream as it is when the call is no resume of a thread on an async saver."""
    if _may_be_crash_resume(input, config) is None:
        return stream
    if not isinstance(getattr(graph, "checkpointer", None), AsyncRunLedger):
        return stream
    return _noted(graph, input, config, stream)


async def _noted(
    graph: Any, input: Any, config: RunnableConfig | None, stream: AsyncIterator[Any]
) -> AsyncIterator[Any]:
    await anote_resume(graph, input, config)
    try:
        async for item in stream:
            yield item
    finally:  # closed early (a consumer that stops): close LangGraph's stream too
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


# -- a Worker's paused run, resumed by hand ----------------------------------------------


def ended_status(values: dict[str, Any], paused: bool) -> str:
    """The status a run that ran to a stop is left in."""
    if paused:
        return "paused"
    outcome = values.get("resilience") if isinstance(values, dict) else None
    if isinstance(outcome, dict) and outcome.get("status") == "partial_complete":
        return "partial_complete"
    return "success"


def settled_by_hand(snapshot: StateSnapshot) -> str | None:
    """The status a paused run's thread reached after it was resumed outside the
    worker (``graph.invoke(Command(resume=...))``), by its state, or None while it
    still waits (interrupts pending, or steps left): for a saver that keeps no
    run ledger (Redis), whose runs have no row to say it (`by_hand_end`)."""
    if not snapshot.created_at or snapshot.interrupts or snapshot.next or snapshot.tasks:
        return None
    return ended_status(dict(snapshot.values), paused=False)


def by_hand_end(snapshot: StateSnapshot, row: RunLogRecord | None) -> str | None:
    """The status a paused `Worker` run resumed by hand ended with: the one its
    run's ledger row stores (``row``, `by_hand_row`), once it is an end, so the
    queue row and the ledger row never disagree; None while the row is open
    (paused again, or still running: one that failed unrecovered and whose
    driver died never reads ``success``). No row (a saver without a run
    ledger): its thread's state's (`settled_by_hand`)."""
    if row is None:
        return settled_by_hand(snapshot)
    return row.status if row.status in ENDED else None


def by_hand_outcome(
    run_id: str, snapshot: StateSnapshot, row: RunLogRecord | None
) -> dict[str, Any]:
    """The outcome a paused run resumed by hand is settled with: the thread's
    values and, for one that ended ``error``, the error its ledger row stores
    (and its failed step, if the row names one)."""
    outcome: dict[str, Any] = {"values": dict(snapshot.values), "resumed": "by hand"}
    if row is not None and row.status == "error":
        step = f" at step {row.failed_step!r}" if row.failed_step else ""
        outcome["error"] = (
            f"run {run_id!r} was resumed by hand and ended error{step}: "
            f"{row.error or 'its call raised'}. Fix the cause, then submit the thread again."
        )
    return outcome


def _run_of(snapshot: StateSnapshot) -> int | None:
    log = snapshot.values.get(_LOG) if isinstance(snapshot.values, Mapping) else None
    run = log.get("run") if isinstance(log, Mapping) else None
    return None if run is None else int(run)


def by_hand_row(saver: Any, thread: str, snapshot: StateSnapshot) -> RunLogRecord | None:
    """The ledger row of the run a thread's state is in (one point read), or
    None for a saver that keeps no run ledger."""
    run = _run_of(snapshot)
    if run is None or not isinstance(saver, RunLedger):
        return None
    return saver.history.run_row(thread, run)


async def aby_hand_row(saver: Any, thread: str, snapshot: StateSnapshot) -> RunLogRecord | None:
    """Async twin of `by_hand_row`."""
    run = _run_of(snapshot)
    if run is None or not isinstance(saver, AsyncRunLedger):
        return None
    return await saver.history.arun_row(thread, run)


def _by_hand(input: Any, config: RunnableConfig | None) -> str | None:
    """The thread of a top-level ``invoke(Command(resume=...))`` outside a
    `Worker`, or None: nothing else is looked at."""
    if not isinstance(input, Command) or input.resume is None or not config or nested(config):
        return None
    configurable = config.get("configurable") or {}
    if FENCE_KEY in configurable or configurable.get("thread_id") is None:
        return None  # a Worker's own resume: it ends the run's record itself
    return str(configurable["thread_id"])


def _paused_of(thread: str, runs: Iterable[RunRecord]) -> list[str]:
    return [r.run_id for r in runs if r.thread_id == thread]


def settle_paused(saver: Any, thread: str, state: Callable[[], StateSnapshot]) -> bool:
    """End the `Worker` runs paused on ``thread`` that were resumed by hand and
    have ended, with the status their run's ledger row stores (`by_hand_end`);
    False if none had. ``state``: reads the thread's state."""
    paused = _paused_of(thread, saver.list_runs(("paused",)))
    if not paused:
        return False
    snapshot = state()
    row = by_hand_row(saver, thread, snapshot)
    status = by_hand_end(snapshot, row)
    if status is None:
        return False
    dumps = saver.serde.dumps_typed
    return any(
        [saver.runs.settle(r, status, dumps(by_hand_outcome(r, snapshot, row))) for r in paused]
    )


async def asettle_paused(
    saver: Any, thread: str, state: Callable[[], Awaitable[StateSnapshot]]
) -> bool:
    """Async twin of `settle_paused`."""
    paused = _paused_of(thread, await saver.alist_runs(("paused",)))
    if not paused:
        return False
    snapshot = await state()
    row = await aby_hand_row(saver, thread, snapshot)
    status = by_hand_end(snapshot, row)
    if status is None:
        return False
    dumps = saver.serde.dumps_typed
    return any(
        [
            await saver.runs.asettle(r, status, dumps(by_hand_outcome(r, snapshot, row)))
            for r in paused
        ]
    )


def settle_by_hand(graph: Any, input: Any, config: RunnableConfig | None) -> None:
    """A `Worker` run paused on the thread and resumed by hand
    (``graph.invoke(Command(resume=...))``) that has now ended: its record reads
    the status its run's ledger row stores (``success``, ``partial_complete``),
    at once, not at the thread's next submit. Never fails the run."""
    thread = _by_hand(input, config)
    saver = getattr(graph, "checkpointer", None)
    if thread is None or not isinstance(saver, (ResilientSaver, RunQueueSaver)):
        return
    try:
        settle_paused(saver, thread, lambda: graph.get_state(config))
    except Exception as exc:
        logger.debug("could not settle the paused runs of thread %s: %s", thread, exc)


async def asettle_by_hand(graph: Any, input: Any, config: RunnableConfig | None) -> None:
    """Async twin of `settle_by_hand`."""
    thread = _by_hand(input, config)
    saver = getattr(graph, "checkpointer", None)
    if thread is None or not isinstance(saver, (AsyncResilientSaver, AsyncRunQueueSaver)):
        return
    try:
        await asettle_paused(saver, thread, lambda: graph.aget_state(config))
    except Exception as exc:
        logger.debug("could not settle the paused runs of thread %s: %s", thread, exc)
