"""A step record as its step row stores it (``resilience_steps``), and read back:
the one place that knows what a row leaves out (both dialects, every writer and
reader of the rows).

A row leaves out what its other columns already say (most rows: a completed
step of one try, no failure):

- ``usage`` of one step, ``{"steps": 1, "seconds": s}``: ``s`` is the REAL
  column ``seconds``; any other key (tokens, cost) stays JSON in ``usage``
  (NULL when none). Any other usage (steps other than 1, seconds not a finite
  float) is JSON whole, as before, with ``seconds`` NULL;
- ``kinds`` with no failed try (``[]``): NULL;
- ``node`` when the path names it (`node_of_path`: ``node``, ``node#3``,
  ``research/node``, ``node[2]``): ``''``; a node the path does not name (a
  subgraph's failed inner step under its parent's node) is stored (`node_sql`
  reads it in SQL).

``status`` is stored as the plain word (``completed``, ``failed``, ``degraded``,
``fallback``, ...): ``WHERE status = 'completed'`` counts what it says.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from langgraph_resilience.checkpoint.store._store import Dialect

__all__ = [
    "ROW_FIELDS",
    "STEP_FIELDS",
    "node_of_path",
    "node_sql",
    "record_fields",
    "step_row",
    "usage_of",
]

#: How a node its path names is stored.
_NAMED = ""
#: The fields of a step record (`saver.step_history`) besides its task's key.
STEP_FIELDS = (
    "run",
    "path",
    "node",
    "status",
    "attempts",
    "kinds",
    "started_at",
    "ended_at",
    "summary",
    "run_id",
    "worker",
    "usage",
)
#: The step columns a record is read from besides its task's key: its fields, then
#: ``seconds``, the lean usage's (`record_fields` folds it into ``usage``).
ROW_FIELDS = (*STEP_FIELDS, "seconds")


def node_of_path(path: str) -> str:
    """The node a step path names: its last segment without the `Send` index or
    the loop iteration (``research/fetch#2`` and ``work[3]`` name ``fetch``, ``work``)."""
    return path.rpartition("/")[2].partition("#")[0].partition("[")[0]


def node_sql(d: Dialect, table: str) -> str:
    """A step row's node in SQL (``table``: the row's alias): its ``node``, or the
    one its path names when it is ``''`` (`node_of_path`, the same steps)."""
    pos = "instr" if d.name == "sqlite" else "strpos"
    path = f"{table}.path"
    # After the last '/': the path less its longest prefix ending in '/'.
    last = f"replace({path}, rtrim({path}, replace({path}, '/', '')), '')"
    before_hash = f"substr({last}, 1, {pos}({last} || '#', '#') - 1)"
    named = f"substr({before_hash}, 1, {pos}({before_hash} || '[', '[') - 1)"
    return f"coalesce(nullif({table}.node, ''), {named})"


def _lean_usage(usage: Any) -> tuple[str | None, float | None]:
    """(``usage`` column, ``seconds`` column) of a record's usage."""
    if not isinstance(usage, Mapping):
        return None, None
    steps, seconds = usage.get("steps"), usage.get("seconds")
    if type(steps) is int and steps == 1 and type(seconds) is float and math.isfinite(seconds):
        rest = {k: v for k, v in usage.items() if k not in ("steps", "seconds")}
        return (json.dumps(rest) if rest else None), seconds
    return json.dumps(dict(usage)), None


def step_row(
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    task_id: str,
    run: int,
    step: Mapping[str, Any],
    tried: str | None,
    *,
    summary: bool = True,
) -> tuple[Any, ...]:
    """A step record's row, in the table's column order (``STEPS.names``);
    ``summary=False`` (an encrypting serde) leaves the output's summary out (the
    run log in the encrypted checkpoint keeps it)."""
    path = str(step.get("path"))
    node = str(step.get("node") or "")
    status = str(step.get("status") or "")
    kinds = step.get("kinds")
    usage, seconds = _lean_usage(step.get("usage"))
    return (
        thread_id,
        ns,
        checkpoint_id,
        task_id,
        run,
        path,
        _NAMED if node == node_of_path(path) else node,
        status,
        int(step.get("attempts") or 0),
        json.dumps(list(kinds)) if kinds else None,
        step.get("started_at"),
        step.get("ended_at"),
        step.get("summary") if summary else None,
        step.get("run_id"),
        step.get("worker"),
        usage,
        tried,
        seconds,
    )


def usage_of(usage: str | None, seconds: float | None) -> dict[str, Any] | None:
    """A step's usage from its row's ``usage`` and ``seconds`` (None: none stored)."""
    if seconds is None:
        return dict(json.loads(usage)) if usage else None
    return {"steps": 1, "seconds": float(seconds), **(json.loads(usage) if usage else {})}


def record_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """A step record's fields (``ROW_FIELDS`` less ``seconds``) from its row's
    columns, by name: what the row left out, given back."""
    record = {k: v for k, v in values.items() if k != "seconds"}
    record["node"] = values["node"] or node_of_path(str(values["path"]))
    record["status"] = str(values["status"])
    record["kinds"] = json.loads(values["kinds"]) if values["kinds"] else []
    record["usage"] = usage_of(values["usage"], values["seconds"])
    for key in ("started_at", "ended_at"):
        if record[key] is not None:
            record[key] = float(record[key])
    record["attempts"] = int(record["attempts"])
    return record
