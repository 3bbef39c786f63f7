"""A top-level run's end, decided where it is written: by the saver, at the
checkpoint that leaves the run nothing to do, from what the checkpoint and the
run's earlier checkpoints say (pure functions; the saver does the listing).

A run whose run log still reads ``running`` at a checkpoint that triggers no
task (a loop stopped by a conditional edge: no node knows it is the last) ended
``success``, unless a step of it failed unrecovered (`unrecovered_steps`: a task
whose error was stored, and whose checkpoint the run went on from without its
writes), in which case its row stays ``running`` until the one who saw the error
(its driver, its `Worker`) ends it ``error``: a run whose process died there
never reads ``success``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata, CheckpointTuple

from langgraph_resilience._langgraph import ERROR_CHANNEL, ERROR_SOURCE_CHANNEL
from langgraph_resilience.errors import message_of

if TYPE_CHECKING:
    from langgraph_resilience.checkpoint.runlog._run_log import PutLedger

__all__ = [
    "aend_checked",
    "arun_part",
    "end_checked",
    "run_begins",
    "run_listing",
    "run_part",
    "unrecovered_steps",
]


def run_begins(stored: CheckpointTuple) -> bool:
    """Whether a checkpoint is the first of its run (its input started the run)."""
    return (stored.metadata or {}).get("source") == "input"


def run_part(listed: Iterable[CheckpointTuple]) -> Iterator[CheckpointTuple]:
    """Of a thread's checkpoints, newest first (as a saver lists them), those of
    its latest run: back to the one its input started it with. A saver's listing
    is closed once read that far (it may hold the saver's connection)."""
    try:
        for stored in listed:
            yield stored
            if run_begins(stored):
                return
    finally:
        close = getattr(listed, "close", None)
        if close is not None:
            close()


async def arun_part(listed: AsyncIterator[CheckpointTuple]) -> list[CheckpointTuple]:
    """Async twin of `run_part` (reads no further than the run's first checkpoint)."""
    found = []
    try:
        async for stored in listed:
            found.append(stored)
            if run_begins(stored):
                break
    finally:
        close = getattr(listed, "aclose", None)
        if close is not None:
            await close()
    return found


def unrecovered_steps(checkpoints: Iterable[CheckpointTuple]) -> list[str]:
    """The steps of a run that failed without being recovered, by its stored
    checkpoints (a run's, any order), at each checkpoint the run went on from (a
    ``loop`` checkpoint is its child): a task with an error write, no write of
    its own, and that was handed to no error handler (LangGraph's marker of the
    hand-over is a write of the failed task: a routed error's handler then
    routed it; a handler's failure counts as its node's). Each named ``'node'
    (error)``, or by its task id."""
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
            errors = [v for c, v in writes if c == ERROR_CHANNEL]
            own = [c for c, _ in writes if c != ERROR_CHANNEL]  # ERROR_SOURCE: handed over
            if errors and not own:
                name = (
                    f"{', '.join(map(repr, handed))} (its error handler failed"
                    if handed
                    else (f"task {task_id!r} (")
                )
                failed.append(f"{name}: {message_of(errors[0])[:200]})")
    return failed


def run_listing(
    config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
) -> tuple[RunnableConfig, RunnableConfig, CheckpointTuple]:
    """How the saver lists a run's checkpoints before the one it is putting
    (``(where, before)`` for its ``list``), and that checkpoint as the newest of
    them (its parent is ``config``'s: the run went on from it)."""
    configurable = config.get("configurable") or {}
    thread = str(configurable["thread_id"])
    where: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    this: RunnableConfig = {
        "configurable": {
            "thread_id": thread,
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint["id"],
        }
    }
    head = CheckpointTuple(
        this, checkpoint, metadata, config if configurable.get("checkpoint_id") else None
    )
    return where, this, head


def end_checked(
    led: PutLedger | None,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    list_: Callable[..., Iterator[CheckpointTuple]],
) -> PutLedger | None:
    """``led`` (what a put tells the run ledger), its run's end checked against
    the run's steps when it ends one (`PutLedger.ends`, `PutLedger.checked`):
    the run's earlier checkpoints read through ``list_``, the saver's ``list``."""
    if led is None or led.ends is None:
        return led
    where, before, head = run_listing(config, checkpoint, metadata)
    earlier = run_part(list_(where, before=before))
    return led.checked(unrecovered_steps([head, *earlier]))


async def aend_checked(
    led: PutLedger | None,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    alist: Callable[..., AsyncIterator[CheckpointTuple]],
) -> PutLedger | None:
    """Async twin of `end_checked` (``alist``: the saver's ``alist``)."""
    if led is None or led.ends is None:
        return led
    where, before, head = run_listing(config, checkpoint, metadata)
    earlier = await arun_part(alist(where, before=before))
    return led.checked(unrecovered_steps([head, *earlier]))
