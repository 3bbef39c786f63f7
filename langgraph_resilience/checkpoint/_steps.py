"""The step history: one row per step of every run, stored with the step's writes.

A node's run-log update carries its step's record (``{"resilience": {"step":
...}}``); the saver takes it out of the task's writes and stores it in the same
transaction (`put_writes`), which is what marks the task done for LangGraph. So
a step is never recorded complete without its writes, nor the reverse, and the
state keeps only a bounded window (`state.RECENT_STEPS`) while the whole history
is read with ``saver.step_history(thread_id, run=...)``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig

from langgraph_resilience.checkpoint._schema import STEPS
from langgraph_resilience.checkpoint._store import Dialect, Statements, Stmt

__all__ = ["read_steps", "step_rows", "store_steps"]

#: The run-log channel of a `ResilientState`.
CHANNEL = "resilience"
_FIELDS = ("run", "path", "node", "status", "attempts", "kinds", "started_at", "ended_at")
_COLUMNS = ", ".join(c.name for c in STEPS.columns)
_UPSERT = (
    f"INSERT INTO {STEPS.name} ({_COLUMNS}) VALUES ({', '.join('?' * len(STEPS.columns))}) "
    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id) DO UPDATE SET "
    + ", ".join(f"{f} = excluded.{f}" for f in (*_FIELDS, "summary"))
)


def step_rows(
    config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str
) -> list[tuple[Any, ...]]:
    """The step records among a task's writes, as rows (none for most writes)."""
    rows = []
    for channel, value in writes:
        if channel != CHANNEL or not isinstance(value, Mapping):
            continue
        step = value.get("step")
        if not isinstance(step, Mapping) or "path" not in step:
            continue
        conf = config.get("configurable") or {}
        rows.append(
            (
                str(conf.get("thread_id")),
                str(conf.get("checkpoint_ns") or ""),
                str(conf.get("checkpoint_id") or ""),
                task_id,
                int(step.get("run") or 1),
                str(step["path"]),
                str(step.get("node") or ""),
                str(step.get("status") or ""),
                int(step.get("attempts") or 0),
                json.dumps(list(step.get("kinds") or [])),
                float(step.get("started_at") or 0.0),
                float(step.get("ended_at") or 0.0),
                str(step.get("summary") or ""),
            )
        )
    return rows


def store_steps(d: Dialect, rows: Sequence[tuple[Any, ...]]) -> Statements[None]:
    if rows:
        yield Stmt(d.sql(_UPSERT), list(rows), many=True)


def read_steps(d: Dialect, thread_id: str, run: int | None) -> Statements[list[dict[str, Any]]]:
    """A thread's step records, oldest first (one run's, if ``run`` is given)."""
    where = "thread_id = ?" + ("" if run is None else " AND run = ?")
    params: tuple[Any, ...] = (thread_id,) if run is None else (thread_id, run)
    rows = yield Stmt(
        d.sql(
            f"SELECT {', '.join(_FIELDS)}, summary, checkpoint_ns FROM {STEPS.name} "
            f"WHERE {where} ORDER BY run, ended_at, path"
        ),
        params,
        fetch=True,
    )
    found = []
    for row in rows:
        record = dict(zip((*_FIELDS, "summary", "checkpoint_ns"), row, strict=True))
        record["kinds"] = json.loads(record["kinds"] or "[]")
        found.append(record)
    return found
