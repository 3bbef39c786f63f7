"""The two drivers of `_moves`: each operation on the saver's store or its archive,
sync and async (they differ only in the I/O lines)."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig

from langgraph_resilience._util._plans import Plan
from langgraph_resilience.checkpoint.archive._codec import ArchivedCheckpoint
from langgraph_resilience.checkpoint.archive._moves import (
    Drop,
    Fetch,
    Keys,
    Moves,
    Overwrite,
    Put,
    Sql,
    Tuples,
)
from langgraph_resilience.checkpoint.archive._objects import Archive
from langgraph_resilience.errors import ConfigError

__all__ = ["archive_of_saver", "drive", "adrive", "preparer"]


def archive_of_saver(saver: Any) -> Archive:
    archive = saver._state.archive
    if archive is None:
        raise ConfigError(
            "this saver has no archive: open it with archive=Archive('file:///var/lib/app/"
            "archive') (or an s3:// URL) to archive threads"
        )
    return archive  # type: ignore[no-any-return]


def preparer(saver: Any) -> Any:
    """How an archived checkpoint becomes the saver's rows again (its own put
    rows, without the fork check: the thread is being put back as it was)."""

    def prepare(item: ArchivedCheckpoint) -> Any:
        checkpoint = saver.serde.loads_typed(item.checkpoint)
        metadata = saver.serde.loads_typed(item.metadata)
        config: RunnableConfig = {
            "configurable": {
                "thread_id": item.thread_id,
                "checkpoint_ns": item.ns,
                "checkpoint_id": item.parent_id,
            }
        }
        versions = dict(checkpoint.get("channel_versions") or {})
        put = saver._prepare_put(config, checkpoint, metadata, versions)
        return put._replace(check_fork=False)

    return prepare


def _listed(saver: Any, thread_id: str) -> list[Any]:
    return list(saver.list({"configurable": {"thread_id": thread_id}}))


def drive(saver: Any, archive: Archive | None, moves: Moves) -> Any:
    """Run the moves against a sync saver."""
    plan: Plan[Any, Any] = Plan(moves)
    for op in plan:
        try:
            match op:
                case Sql(statements, write):
                    plan.reply = saver._transact(statements) if write else saver._query(statements)
                case Tuples(thread_id):
                    plan.reply = _listed(saver, thread_id)
                case Put(key, body):
                    plan.reply = _need(archive).put_new(key, body)
                case Overwrite(key, body):
                    _need(archive).overwrite(key, body)
                case Fetch(key):
                    plan.reply = _need(archive).read(key)
                case Keys(prefix):
                    plan.reply = _need(archive).keys(prefix)
                case Drop(keys):
                    _need(archive).drop(keys)
        except Exception as exc:
            plan.fail(exc)
    return plan.value


async def adrive(saver: Any, archive: Archive | None, moves: Moves) -> Any:
    """Async twin of `drive`."""
    plan: Plan[Any, Any] = Plan(moves)
    for op in plan:
        try:
            match op:
                case Sql(statements, write):
                    if write:
                        plan.reply = await saver._transact(statements)
                    else:
                        plan.reply = await saver._query(statements)
                case Tuples(thread_id):
                    config = {"configurable": {"thread_id": thread_id}}
                    plan.reply = [t async for t in saver.alist(config)]
                case Put(key, body):
                    plan.reply = await _need(archive).aput_new(key, body)
                case Overwrite(key, body):
                    await _need(archive).aoverwrite(key, body)
                case Fetch(key):
                    plan.reply = await _need(archive).aread(key)
                case Keys(prefix):
                    plan.reply = await _need(archive).akeys(prefix)
                case Drop(keys):
                    await _need(archive).adrop(keys)
        except Exception as exc:
            plan.fail(exc)
    return plan.value


def _need(archive: Archive | None) -> Archive:
    if archive is None:
        raise ConfigError("this saver has no archive (archive= when opening it)")
    return archive
