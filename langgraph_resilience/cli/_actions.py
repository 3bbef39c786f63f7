"""What the command line does to threads and runs: resume a thread from its last
checkpoint, re-run its failed step (`retry_failed`), cancel a run. Each returns a
record of what came of it; printing is the caller's (`_cli_render`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from langgraph_resilience.checkpoint import ResilientSaver
from langgraph_resilience.cli._store import one_line
from langgraph_resilience.errors import RunStateError
from langgraph_resilience.graph._retry_failed import retry_failed
from langgraph_resilience.worker._controls import RunControls

__all__ = ["Acted", "cancel_run", "resume_thread", "retry_thread", "thread_status"]

# How a thread can stand after an action: the run's own statuses, plus these.
SKIPPED = "skipped"  # nothing was done: the reason says why
ERROR = "error"  # the graph raised


@dataclass(frozen=True, kw_only=True)
class Acted:
    """What came of acting on one thread.

    Attributes:
        thread_id: the thread.
        status: ``success``, ``partial_complete``, ``paused``, ``running``,
            ``skipped`` (nothing done, see ``detail``) or ``error`` (the graph raised).
        detail: the failed step and why, the reason it was skipped, or the error.
    """

    thread_id: str
    status: str
    detail: str = ""

    def __post_init__(self) -> None:
        if not self.thread_id or not self.status:
            raise ValueError(f"Acted needs a thread_id and a status, got {self!r}")

    @property
    def ok(self) -> bool:
        return self.status == "success"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def thread_status(graph: CompiledStateGraph[Any, Any, Any, Any], thread_id: str) -> Acted:
    """Where a thread stands now, from its latest checkpoint."""
    snapshot = graph.get_state(_config(thread_id))
    log = snapshot.values.get("resilience") if isinstance(snapshot.values, Mapping) else None
    log = log if isinstance(log, Mapping) else {}
    if snapshot.next and any(task.interrupts for task in snapshot.tasks):
        return Acted(thread_id=thread_id, status="paused", detail="waiting for an answer")
    status = str(log.get("status") or ("running" if snapshot.next else "success"))
    if status == "running" and not snapshot.next:
        status = "success"
    failed = log.get("failed_step")
    detail = ""
    if status == "partial_complete" and isinstance(failed, Mapping):
        kind = failed.get("kind", "?")
        why = failed.get("message") or failed.get("reason") or ""
        detail = f"{failed.get('path', '?')} failed ({kind}): {why}".strip()
    return Acted(thread_id=thread_id, status=status, detail=detail)


def _held_by_worker(saver: ResilientSaver, thread_id: str) -> str | None:
    """Why a thread must not be driven by hand: a worker has (or will take) its run."""
    for run in saver.list_runs(("queued", "running")):
        if run.thread_id != thread_id:
            continue
        cancel = f"`langgraph-resilience cancel {run.run_id}`"
        if run.status == "running" and (run.lease_expires_at or 0.0) < time.time():
            return (
                f"run {run.run_id} is running but its worker {run.owner}'s lease ran out: "
                f"start a `langgraph-resilience worker` (it takes the run over), or {cancel}"
            )
        who = f" by {run.owner}" if run.owner else ""
        return f"run {run.run_id} is {run.status}{who}: let its worker finish it, or {cancel}"
    return None


def resume_thread(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    saver: ResilientSaver,
    thread_id: str,
    *,
    value: Any = None,
) -> Acted:
    """Continue a thread from its last checkpoint (after a crash, or a pause:
    ``value`` answers its interrupts); completed steps are not run again."""
    held = _held_by_worker(saver, thread_id)
    if held:
        return Acted(thread_id=thread_id, status=SKIPPED, detail=held)
    before = graph.get_state(_config(thread_id))
    if not before.next:
        now = thread_status(graph, thread_id)
        return Acted(
            thread_id=thread_id,
            status=SKIPPED,
            detail=f"nothing to resume: its last run ended ({now.status})",
        )
    try:
        graph.invoke(None if value is None else Command(resume=value), _config(thread_id))
    except Exception as exc:
        return Acted(thread_id=thread_id, status=ERROR, detail=one_line(exc))
    return thread_status(graph, thread_id)


def retry_thread(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    saver: ResilientSaver,
    thread_id: str,
    *,
    step: str | None = None,
    update: Mapping[str, Any] | None = None,
) -> Acted:
    """`retry_failed` on a thread: re-run its failed step (or ``step``) and go on."""
    held = _held_by_worker(saver, thread_id)
    if held:
        return Acted(thread_id=thread_id, status=SKIPPED, detail=held)
    try:
        retry_failed(graph, _config(thread_id), update=update, step=step)
    except RunStateError as exc:
        return Acted(thread_id=thread_id, status=SKIPPED, detail=one_line(exc))
    except Exception as exc:
        return Acted(thread_id=thread_id, status=ERROR, detail=one_line(exc))
    return thread_status(graph, thread_id)


def cancel_run(saver: ResilientSaver, run_id: str, reason: str) -> str:
    """End an open run as ``cancelled``; returns the status it had.

    Raises:
        RunStateError: the run does not exist or has already ended.
    """
    controls = RunControls()
    controls.saver = saver
    return controls.cancel(run_id, reason)
