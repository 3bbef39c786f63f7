"""Runs of a compiled `ResilientStateGraph`: where one begins and how it ends.

A run is one task on a thread. Each new input (``invoke(input)``,
``stream(input)``, ``Worker.submit``) starts one: the input carries a marker
that the run log's reducer turns into a fresh run (numbered, its outcome fields
reset), so a second turn on a thread that ended ``partial_complete`` does not
inherit the first turn's failure. ``None``, ``Command(resume=...)`` and
`retry_failed` go on with the current run. A graph called as a subgraph is part
of its parent's run and adds no marker.

A run whose last node leaves through a conditional edge (a loop that stops when
a counter is reached) has no node that knows it is the last. Such a run is
stored as ``running`` and reported ``success`` when it has nothing left to do
(no next task, no interrupt): by ``invoke`` / ``ainvoke`` and by ``get_state``
/ ``aget_state``.

Nothing left to do is not enough for a `Worker` to store ``success``: no step of
the run may have failed without being recovered either (`unrecovered_steps`:
a task whose error was stored, not routed, and whose checkpoint the run went on
from without its writes). Such a run is given up as ``error`` naming the step.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.types import Command, StateSnapshot

from langgraph_resilience._langgraph import (
    ERROR_CHANNEL,
    ERROR_SOURCE_CHANNEL,
    INTERRUPT_CHANNEL,
    langgraph_config,
)
from langgraph_resilience.checkpoint import AsyncResilientSaver, ResilientSaver
from langgraph_resilience.checkpoint._route_text import is_routed
from langgraph_resilience.checkpoint._runs import FENCE_KEY
from langgraph_resilience.graph._task import in_parent_task
from langgraph_resilience.state import new_run_marker

__all__ = [
    "anoted",
    "nested",
    "note_resume",
    "settle_output",
    "settled",
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


def settled(snapshot: StateSnapshot) -> StateSnapshot:
    """A snapshot of a run with nothing left to do reads ``success``."""
    # No task left: none to run, and none whose writes wait to be applied (a
    # process that stopped after a step's writes and before the next checkpoint).
    done = (
        not snapshot.next
        and not snapshot.tasks
        and not snapshot.interrupts
        and bool(snapshot.created_at)
    )
    values = _settled_values(snapshot.values, done)
    return snapshot if values is snapshot.values else snapshot._replace(values=values)


def settle_output(out: Any, config: RunnableConfig | None, snapshot: Any) -> Any:
    """``invoke``'s output, reading ``success`` if the run has nothing left to
    do; ``snapshot()`` reads the stored state (None without a checkpointer)."""
    log = out.get(_LOG) if isinstance(out, Mapping) else None
    if not (isinstance(log, Mapping) and log.get("status") == "running") or nested(config):
        return out
    found = snapshot()
    if found is None:
        return _settled_values(out, INTERRUPT_CHANNEL not in out)
    return _status_of(out, found)


def _status_of(out: Mapping[str, Any], snapshot: StateSnapshot) -> Any:
    """``invoke``'s output with the status the stored run settled on."""
    log = snapshot.values.get(_LOG) if isinstance(snapshot.values, Mapping) else None
    status = log.get("status") if isinstance(log, Mapping) else None
    return {**out, _LOG: {**out[_LOG], "status": status}} if status == "success" else out


def unrecovered_steps(checkpoints: Iterable[CheckpointTuple]) -> list[str]:
    """The steps of a run that failed without being recovered, by its stored
    checkpoints (a run's, any order), at each checkpoint the run went on from (a
    ``loop`` checkpoint is its child): a task with an error write that carries no
    route (`is_routed`: no fallback or partial result took it), no write of its
    own, and that was handed to no error handler (a handler's failure counts as
    its node's). Each named ``'node' (error)``, or by its task id."""
    found = list(checkpoints)
    went_on = {
        (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        for t in found
        if (t.metadata or {}).get("source") == "loop"
    }
    failed: list[str] = []
    for stored in found:
        if stored.config["configurable"].get("checkpoint_id") not in went_on:
            continue
        tasks: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in stored.pending_writes or ():
            tasks.setdefault(task_id, []).append((channel, value))
        handed = [str(v) for w in tasks.values() for c, v in w if c == ERROR_SOURCE_CHANNEL]
        for task_id, writes in tasks.items():
            errors = [v for c, v in writes if c == ERROR_CHANNEL and not is_routed(v)]
            own = [c for c, _ in writes if c != ERROR_CHANNEL]  # ERROR_SOURCE: handed over
            if errors and not own:
                name = (
                    f"{', '.join(map(repr, handed))} (its error handler failed"
                    if handed
                    else (f"task {task_id!r} (")
                )
                failed.append(f"{name}: {str(errors[0])[:200]})")
    return failed


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
    if thread is None or not isinstance(saver, ResilientSaver):
        return
    try:
        key = _crash_key(graph.get_state(config), input, config)
        if key is not None:
            saver.history.note_recovery(thread, key, "crash", _host_pid())
    except Exception as exc:
        logger.debug("could not store the resume of thread %s: %s", thread, exc)


async def anoted(
    graph: Any, input: Any, config: RunnableConfig | None, stream: AsyncIterator[Any]
) -> AsyncIterator[Any]:
    """``stream``, after storing a resume after a crash (async `note_resume`)."""
    thread = _may_be_crash_resume(input, config)
    saver = getattr(graph, "checkpointer", None)
    if thread is not None and isinstance(saver, AsyncResilientSaver):
        try:
            key = _crash_key(await graph.aget_state(config), input, config)
            if key is not None:
                await saver.history.anote_recovery(thread, key, "crash", _host_pid())
        except Exception as exc:
            logger.debug("could not store the resume of thread %s: %s", thread, exc)
    try:
        async for item in stream:
            yield item
    finally:  # closed early (a consumer that stops): close LangGraph's stream too
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
