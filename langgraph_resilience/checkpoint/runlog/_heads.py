"""The head of every thread in flight, in one read: what ``check_deploy`` plans over.

A thread is in flight when its newest run in the run ledger is ``running``,
``paused`` or ``partial_complete``; its head is its latest top-level checkpoint
(the thread's state), read with its metadata and verified against its sum as
every read is. Both dialects, one statement: the newest run by the ledger's
primary key, the latest checkpoint by LangGraph's.

SQLite keeps a checkpoint whole, so its head carries every channel value;
Postgres keeps primitives inline (the edges' triggers among them) and other
values as blobs, which are not read here: a head whose pending ``Send``\\ s sit
in a blob says so (`Head.sends_in_blob`), and its reader reads that thread in
full.

Beside each head, two facts of the ledger: the paths of the steps its newest
run degraded (top level), and the names of the side effects recorded at its
head (a top-level task's: a nested graph's have checkpoints of their own) by
the tasks that will run again (a task whose only writes are its
interrupt, its error or a resume value; LangGraph re-runs it from its first
line, replaying its effects by key). Each is one more statement over the same
threads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from langgraph_resilience._langgraph import (
    ERROR_CHANNEL,
    INTERRUPT_CHANNEL,
    RESUME_CHANNEL,
    TASKS_CHANNEL,
)
from langgraph_resilience.checkpoint.store._schema import EFFECTS, RUN_LOG, STEPS, SUM
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt
from langgraph_resilience.checkpoint.store._sums import checkpoint_sum, pg_checkpoint_sum, verify

__all__ = ["IN_FLIGHT", "Head", "read_heads"]

#: The statuses of a run whose thread is in flight.
IN_FLIGHT = ("running", "paused", "partial_complete")


class Head(NamedTuple):
    """A thread in flight: its newest run's status and failed step, its head."""

    thread_id: str
    status: str
    failed_step: str | None  # the failed step's path (a partial result)
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    degraded: tuple[str, ...] = ()  # the paths of the steps its newest run degraded
    effects: tuple[str, ...] = ()  # the effects recorded by the tasks that run again

    @property
    def sends_in_blob(self) -> bool:
        """Whether pending ``Send``\\ s are stored apart (Postgres): read them in full."""
        values = self.checkpoint.get("channel_values") or {}
        return TASKS_CHANNEL not in values and TASKS_CHANNEL in (
            self.checkpoint.get("updated_channels") or ()
        )


_HEADS = f"""
SELECT r.thread_id, r.status, r.failed_step, c.checkpoint_id, {{columns}}
FROM {RUN_LOG.name} r
JOIN checkpoints c ON c.thread_id = r.thread_id AND c.checkpoint_ns = ''
WHERE r.status IN (?, ?, ?)
  AND r.run = (SELECT MAX(r2.run) FROM {RUN_LOG.name} r2 WHERE r2.thread_id = r.thread_id)
  AND c.checkpoint_id = (
      SELECT MAX(c2.checkpoint_id) FROM checkpoints c2
      WHERE c2.thread_id = r.thread_id AND c2.checkpoint_ns = '')
ORDER BY r.updated_at DESC
"""
_SQLITE = _HEADS.format(columns=f"c.type, c.checkpoint, c.metadata, c.{SUM}")
_POSTGRES = _HEADS.format(
    columns=f"NULL, c.checkpoint, c.metadata, c.{SUM}, "
    + pg_checkpoint_sum("c.checkpoint", "c.metadata", "c.checkpoint_id")
)


_NEWEST = f"(SELECT MAX(r2.run) FROM {RUN_LOG.name} r2 WHERE r2.thread_id = r.thread_id)"
_DEGRADED = f"""
SELECT s.thread_id, s.path FROM {STEPS.name} s
JOIN {RUN_LOG.name} r ON r.thread_id = s.thread_id AND r.run = s.run
WHERE s.status = 'degraded' AND s.checkpoint_ns = '' AND r.status IN (?, ?, ?)
  AND r.run = {_NEWEST}
"""
_EFFECTS = """
SELECT DISTINCT e.thread_id, e.name FROM {effects} e
JOIN {runs} r ON r.thread_id = e.thread_id
WHERE r.status IN (?, ?, ?) AND r.run = {newest}
  AND e.checkpoint_id = (
      SELECT MAX(c2.checkpoint_id) FROM checkpoints c2
      WHERE c2.thread_id = e.thread_id AND c2.checkpoint_ns = '')
  AND NOT EXISTS (
      SELECT 1 FROM {writes} w WHERE w.thread_id = e.thread_id AND w.checkpoint_ns = ''
      AND w.checkpoint_id = e.checkpoint_id AND w.task_id = e.task_id
      AND w.channel NOT IN (?, ?, ?))
"""
_RERUN = (INTERRUPT_CHANNEL, ERROR_CHANNEL, RESUME_CHANNEL)  # a task with only these re-runs


def read_heads(
    d: Dialect, loads_typed: Callable[[tuple[str, bytes]], Any]
) -> Statements[list[Head]]:
    """The head of every thread in flight, newest first.

    Raises:
        CheckpointCorrupt: a head's row does not match its sum.
    """
    sql = _POSTGRES if d.procedures else _SQLITE
    rows = yield Stmt(d.sql(sql), IN_FLIGHT, fetch=True)
    degraded: dict[str, list[str]] = {}
    for thread, path in (yield Stmt(d.sql(_DEGRADED), IN_FLIGHT, fetch=True)):
        degraded.setdefault(str(thread), []).append(str(path))
    effects: dict[str, list[str]] = {}
    sql = _EFFECTS.format(
        effects=EFFECTS.name, runs=RUN_LOG.name, newest=_NEWEST, writes=d.writes.name
    )
    for thread, name in (yield Stmt(d.sql(sql), (*IN_FLIGHT, *_RERUN), fetch=True)):
        effects.setdefault(str(thread), []).append(str(name))
    heads = []
    for row in rows:
        thread, status, failed, checkpoint_id, type_, blob, metadata, stored = row[:8]
        where = (str(thread), "", str(checkpoint_id))
        if d.procedures:
            verify(stored, int(row[8]), where, "the checkpoint row")
            checkpoint = _mapping(blob)
            meta = _mapping(metadata)
        else:
            actual = checkpoint_sum(checkpoint_id, type_, blob, metadata)
            verify(stored, actual, where, "the checkpoint row (its state or metadata)")
            checkpoint = loads_typed((type_, blob))
            meta = json.loads(metadata) if metadata is not None else {}
        thread = str(thread)
        heads.append(
            Head(
                thread,
                str(status),
                None if failed is None else str(failed),
                checkpoint,
                meta,
                tuple(degraded.get(thread, ())),
                tuple(effects.get(thread, ())),
            )
        )
    return heads


def _mapping(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str | bytes):
        return dict(json.loads(value))
    return {}
