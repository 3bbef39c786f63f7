"""The step history of threads stored before the run ledger: read from the
steps' own writes (a thread the ledger holds is read from its step rows,
`_run_log.read_steps`, in the same form).

A node's run-log update carried its step's record (``{"resilience": {"step":
...}}``; since the invoke's run scope, most steps hand it to the saver instead,
and it is only a row: `with_rows` adds those to a thread begun before the
ledger). LangGraph stores that update with the task's other writes, in the
transaction that marks the task done, so the record is never stored without the
step's results, nor the reverse, and it costs no write of its own. The state
keeps none of it; the whole history is read
back from the writes with ``saver.step_history(thread_id, run=...)``, oldest
first. (Pruning a thread's old checkpoints removes their writes, and so their
steps, with them.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langgraph_resilience.checkpoint.runlog._run_log_reads import CHANNEL, STEP_FIELDS, step_order
from langgraph_resilience.checkpoint.store._store import Dialect, Row, Statements, Stmt

__all__ = ["decode_steps", "read_step_writes", "with_rows"]

_FIELDS = tuple(f for f in STEP_FIELDS if f != "usage")  # usage: the update's


def read_step_writes(d: Dialect, thread_id: str) -> Statements[list[Row]]:
    """A thread's run-log writes: (namespace, checkpoint, task, type, value)."""
    value = d.writes.columns[-1].name  # LangGraph names it value (SQLite) or blob
    rows = yield Stmt(
        d.sql(
            f"SELECT checkpoint_ns, checkpoint_id, task_id, type, {value} "
            f"FROM {d.writes.name} WHERE thread_id = ? AND channel = ?"
        ),
        (thread_id, CHANNEL),
        fetch=True,
    )
    return rows


def decode_steps(
    rows: Sequence[Row], loads: Callable[[tuple[str, bytes]], Any], run: int | None
) -> list[dict[str, Any]]:
    """The step records among the writes, oldest first (one run's if ``run``)."""
    found = []
    for ns, checkpoint_id, task_id, type_, value in rows:
        update = loads((type_, bytes(value)))
        step = update.get("step") if isinstance(update, Mapping) else None
        if not isinstance(step, Mapping) or "path" not in step:
            continue
        if run is not None and int(step.get("run") or 1) != run:
            continue
        record: dict[str, Any] = {k: step.get(k) for k in _FIELDS}
        record["run"] = int(step.get("run") or 1)
        record["kinds"] = list(step.get("kinds") or [])
        usage = update.get("usage")
        record["usage"] = dict(usage) if isinstance(usage, Mapping) else None
        record.update(checkpoint_ns=ns, checkpoint_id=checkpoint_id, task_id=task_id)
        found.append(record)
    found.sort(key=step_order)
    return found


def with_rows(
    decoded: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """A thread's steps decoded from its writes, with those only its step rows
    hold (stored since the ledger, by a step that handed its record to the saver
    in place of a run-log write): one record per task, the row's where both are."""
    if not rows:
        return list(decoded)
    held = {_task_key(r) for r in rows}
    found = [r for r in decoded if _task_key(r) not in held] + list(rows)
    found.sort(key=step_order)
    return found


def _task_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    return (record["checkpoint_ns"], record["checkpoint_id"], record["task_id"])
