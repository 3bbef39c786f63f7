"""The run log's step rows on Redis: a task's step row, as the SQL savers' put
path makes it (`runlog._run_log.ledger_of_writes`, `runlog._step_rows.step_row`),
stored with the task's writes in one script (`_scripts.PUT_WRITES`, the thread's
``st`` hash: `_keys`), and read back as ``step_history`` lists it
(`runlog._run_log_reads.step_record`, `step_order`). Written once for both twins.

A row is JSON: the step row's columns (``STEPS.names``), so a record read back is
the SQL savers' record field for field. Kept: the steps of a top-level graph's
runs. Not kept yet (the run rows they need are the SQL savers' run log): a
subgraph's inner steps and an ``@entrypoint``'s tasks, whose run is the run row
the checkpoint belongs to; nor the run rows, recoveries and their readers
(``run_report``, ``recovery_metrics``), which refuse a Redis saver.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_resilience.checkpoint.redis._keys import SEP
from langgraph_resilience.checkpoint.redis._ops import Ops, Place
from langgraph_resilience.checkpoint.redis._tier import Archived
from langgraph_resilience.checkpoint.runlog import _scope
from langgraph_resilience.checkpoint.runlog._run_log import ledger_of_writes
from langgraph_resilience.checkpoint.runlog._run_log_reads import (
    step_order,
    step_record,
    tally_rows,
)
from langgraph_resilience.checkpoint.runlog._step_rows import ROW_FIELDS
from langgraph_resilience.checkpoint.saver._base import encrypts
from langgraph_resilience.checkpoint.store._schema import STEPS

__all__ = [
    "AsyncStepTally",
    "StepTally",
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
) -> tuple[str, str] | None:
    """The step row a task's writes carry (its field in ``st``, its JSON), or None.
    Takes the record the task's node handed over (`_scope.take`), as the SQL put
    path does: call it once per ``put_writes``, outside the retried operation."""
    handed = _scope.take(config, task_id)
    led = ledger_of_writes(config, writes, task_id, handed, summaries=not encrypts(serde))
    if led is None or led.step is None or led.ns or led.run_at:
        return None  # no step, or one whose run is the run log's (not kept on Redis)
    row = dict(zip(STEPS.names, led.step, strict=True))
    field = SEP.join((str(row["checkpoint_ns"]), str(row["checkpoint_id"]), str(row["task_id"])))
    return field, json.dumps(row)


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


class StepTally:
    """The sync saver's ``history``: only the run's tally (`checkpoint._protocol.StepLog`)."""

    def __init__(self, place: Place, drive: Callable[[Callable[[], Ops[Any]]], Any]) -> None:
        self._place, self._drive = place, drive

    def tally(self, thread_id: str, run: int) -> tuple[dict[str, int], dict[str, float]]:
        found: tuple[dict[str, int], dict[str, float]]
        found = self._drive(lambda: tally(self._place, str(thread_id), run))
        return found


class AsyncStepTally:
    """The async saver's ``history``: the run's tally, both twins."""

    def __init__(
        self,
        place: Place,
        drive: Callable[[Callable[[], Ops[Any]]], Coroutine[Any, Any, Any]],
        bridge: Callable[[Coroutine[Any, Any, Any]], Any],
    ) -> None:
        self._place, self._drive, self._bridge = place, drive, bridge

    async def atally(self, thread_id: str, run: int) -> tuple[dict[str, int], dict[str, float]]:
        found: tuple[dict[str, int], dict[str, float]]
        found = await self._drive(lambda: tally(self._place, str(thread_id), run))
        return found

    def tally(self, thread_id: str, run: int) -> tuple[dict[str, int], dict[str, float]]:
        found: tuple[dict[str, int], dict[str, float]] = self._bridge(self.atally(thread_id, run))
        return found
