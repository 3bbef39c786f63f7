"""A ``create_agent`` agent resumed after a crash, stored as a crash recovery.

A `ResilientStateGraph` stores a resume after a crash when it is invoked
(`_lifecycle.note_resume`); an agent's graph is LangChain's, so the agent's
first call in the resumed process stores it instead: a top-level task that
goes on from a checkpoint whose run was still ``running``, with no interrupt
answered (a human's answer or a budget top-up is a recovery of its own kind),
not a `Worker`'s run (its claim stores a takeover) nor `retry_failed`'s (the
run it goes on from had ended). Once per checkpoint and process. Never fails
the call.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from langgraph_resilience._keys import FENCE_KEY, RETRY_FAILED_KEY
from langgraph_resilience._langgraph import CHECKPOINTER_KEY, INTERRUPT_CHANNEL, RESUME_CHANNEL
from langgraph_resilience.checkpoint import AsyncRunLedger, RunLedger
from langgraph_resilience.graph._task import TaskContext

__all__ = ["anote_agent_resume", "note_agent_resume"]

logger = logging.getLogger("langgraph_resilience.agents")


def _candidate(task: TaskContext | None) -> tuple[Any, RunnableConfig, str] | None:
    """(the saver, the thread's head config, the thread) of a task that may go on
    after a crash, or None."""
    if task is None or not task.resuming or not task.top_level or task.thread_id is None:
        return None
    configurable = task.config.get("configurable") or {}
    if FENCE_KEY in configurable or configurable.get(RETRY_FAILED_KEY):
        return None
    head: RunnableConfig = {"configurable": {"thread_id": task.thread_id, "checkpoint_ns": ""}}
    return configurable.get(CHECKPOINTER_KEY), head, task.thread_id


def _crash_key(found: Any) -> str | None:
    """The recovery's key if the head checkpoint ``found`` left a run under way and
    no interrupt to answer."""
    if found is None:
        return None
    log = (found.checkpoint.get("channel_values") or {}).get("resilience")
    if not isinstance(log, Mapping) or log.get("status") != "running":
        return None
    if any(w[1] in (INTERRUPT_CHANNEL, RESUME_CHANNEL) for w in found.pending_writes or ()):
        return None
    checkpoint = found.config["configurable"].get("checkpoint_id")
    return f"crash:{checkpoint}:{_host_pid()}"


def _host_pid() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def note_agent_resume(task: TaskContext | None) -> None:
    """Store the resume after a crash this call goes on from, if it is one."""
    found = _candidate(task)
    if found is None or not isinstance(found[0], RunLedger):
        return
    saver, head, thread = found
    try:
        key = _crash_key(saver.get_tuple(head))
        if key is not None:
            saver.history.note_recovery(thread, key, "crash", _host_pid())
    except Exception as exc:
        logger.debug("could not store the resume of thread %s: %s", thread, exc)


async def anote_agent_resume(task: TaskContext | None) -> None:
    """Async twin of `note_agent_resume`."""
    found = _candidate(task)
    if found is None or not isinstance(found[0], AsyncRunLedger):
        return
    saver, head, thread = found
    try:
        key = _crash_key(await saver.aget_tuple(head))
        if key is not None:
            await saver.history.anote_recovery(thread, key, "crash", _host_pid())
    except Exception as exc:
        logger.debug("could not store the resume of thread %s: %s", thread, exc)
