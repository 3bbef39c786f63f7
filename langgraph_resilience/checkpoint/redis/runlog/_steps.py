"""The run log's step rows on Redis: a task's step row, as the SQL savers' put
path makes it (`runlog._run_log.ledger_of_writes`, `runlog._step_rows.step_row`),
stored with the task's writes in one script (`_scripts.PUT_WRITES`, the thread's
``st`` hash: `_keys`), and read back as ``step_history`` lists it
(`runlog._run_log_reads.step_record`, `step_order`). Written once for both twins.

A row is JSON: the step row's columns (``STEPS.names``), so a record read back is
the SQL savers' record field for field. A step whose run is a run row (a
subgraph's inner steps, an ``@entrypoint``'s tasks) is decided on the thread's
run rows (`_runlog`), as the rest of the run ledger.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_resilience.checkpoint.redis.store._ops import Ops, Place
from langgraph_resilience.checkpoint.redis.store._tier import Archived
from langgraph_resilience.checkpoint.runlog import _scope
from langgraph_resilience.checkpoint.runlog._run_log import WriteLedger, ledger_of_writes
from langgraph_resilience.checkpoint.runlog._run_log_reads import (
    step_order,
    step_record,
    tally_rows,
)
from langgraph_resilience.checkpoint.runlog._step_rows import ROW_FIELDS
from langgraph_resilience.checkpoint.saver._base import encrypts

__all__ = [
    "landed",
    "step_history",
    "step_of_writes",
    "tally",
]

#: A task's writes landed (or failed): its held step is the store's to list.
landed = _scope.landed


def step_of_writes(
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    serde: SerializerProtocol,
) -> WriteLedger | None:
    """What a task's writes tell the run ledger (its step row, its run's), or None.
    Takes the record the task's node handed over (`_scope.take`), as the SQL put
    path does: call it once per ``put_writes``, outside the retried operation."""
    handed = _scope.take(config, task_id)
    return ledger_of_writes(config, writes, task_id, handed, summaries=not encrypts(serde))


def _rows(place: Place, thread_id: str) -> Ops[list[dict[str, Any]]]:
    keys = place.keys(thread_id)
    archived, found = yield [("EXISTS", keys.archived), ("HVALS", keys.st)]
    if archived:
        raise Archived(thread_id)
    return [json.loads(raw) for raw in found]


def step_history(place: Place, thread_id: str, run: int | None) -> Ops[list[dict[str, Any]]]:
    """A thread's step records, by run then start (one run's if ``run``)."""
    rows = yield from _rows(place, thread_id)
    records = [
        step_record(
            (r["checkpoint_ns"], r["checkpoint_id"], r["task_id"], *(r[f] for f in ROW_FIELDS))
        )
        for r in rows
        if run is None or r["run"] == int(run)
    ]
    records.sort(key=step_order)
    return records


def tally(place: Place, thread_id: str, run: int) -> Ops[tuple[dict[str, int], dict[str, float]]]:
    """A run's loop counts and usage, as the SQL savers' ``history.tally``."""
    rows = yield from _rows(place, thread_id)
    return tally_rows(
        (r["path"], r["status"], r["usage"], r["seconds"])
        for r in rows
        if r["checkpoint_ns"] == "" and r["run"] == int(run)
    )
