"""What `run_length.py` would measure if each step's record were stored once:
the floor of the issue-25 design ("the state carries the outcome, the store
carries the log"), measured, not a mode of the package.

Today a completed step's record rides in the node's own run-log write
(``{"resilience": {"step": ..., "usage": ...}}``): LangGraph stores that write
in its writes table and the saver stores the same record as the step's row
(``resilience_steps``), in one transaction. The history readers (`run_report`,
`recovery_metrics`) still decode the record from the write, so it cannot be
dropped from it yet. This script patches the package in its own process only:
a plain completed step (a log of only ``step`` and ``usage``, a non-empty
output) writes nothing to the ``resilience`` channel; its log is handed to the
saver by task id and stored as the step's row in the transaction of the task's
other writes, as it is today. The state's run log then changes only with the
run's outcome. What breaks, so the figures are a floor and nothing else: loop
paths (``loop#2``...) and usage are no longer counted (the ``history`` column
reads MISSING by construction), and `run_report` loses those steps.

``LEAN=1`` also stores a leaner step row (``kinds`` NULL when empty, ``usage``
without the implied ``steps: 1``). Arguments: those of `run_length.py`::

    .venv/bin/python benchmarks/run_length_floor.py --repeats 2 --lengths 10,100 --loop 300
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import run_length  # the benchmark patched below

import langgraph_resilience.checkpoint._run_log as run_log
import langgraph_resilience.graph._node as node
from langgraph_resilience.graph._task import TaskContext

LEAN = bool(os.environ.get("LEAN"))
_handed: dict[str, dict[str, Any]] = {}  # task id -> its step's log, until its writes
_with_log = node.with_log
_ledger_of_writes = run_log.ledger_of_writes


def with_log(output: Any, log: dict[str, Any]) -> Any:
    if set(log) <= {"step", "usage"} and isinstance(output, dict) and output:
        task = TaskContext.current()
        if task is not None:
            _handed[task.task_id] = log
            return output
    return _with_log(output, log)


def ledger_of_writes(
    config: Any, writes: Sequence[tuple[str, Any]], task_id: str
) -> run_log.WriteLedger | None:
    log = _handed.pop(task_id, None)
    if log is not None:
        writes = [*writes, (run_log.CHANNEL, log)]
    led = _ledger_of_writes(config, writes, task_id)
    if LEAN and led is not None and led.step is not None:
        row = list(led.step)
        row[9] = None if row[9] == "[]" else row[9]  # kinds
        usage = {k: v for k, v in json.loads(row[15] or "{}").items() if k != "steps"}
        row[15] = json.dumps(usage) if usage else None
        led = led._replace(step=tuple(row))
    return led


node.with_log = with_log  # type: ignore[assignment]
run_log.ledger_of_writes = ledger_of_writes  # type: ignore[assignment]

if __name__ == "__main__":
    sys.exit(run_length.main())
