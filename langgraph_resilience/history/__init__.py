"""What happened, read back from the store: `recovery_metrics`, `run_report`, `list_runs`.

All of it is read from the run ledger's rows, never from LangGraph's writes,
but a paused run's questions (`_questions`: the interrupts pending on its
thread's latest checkpoint).
`_ledger_runs` folds one thread's rows into its runs and what each recovery
redid, `_metrics` reads the recovery metrics (`METRICS`: the one list the API,
the command line and the console show), `_report` and `_entries` build one
run's report, `_runs` lists the runs of a store, `_render` draws a report as
text and Mermaid, `_deploy` checks every thread in flight against a new graph
version (`check_deploy`).
"""

from __future__ import annotations

from langgraph_resilience.errors import UnknownThread
from langgraph_resilience.history._metrics import (
    RecoveryMetrics,
    arecovery_metrics,
    recovery_metrics,
)
from langgraph_resilience.history._report import (
    EffectEntry,
    RunReport,
    RunSummary,
    StepEntry,
    TryEntry,
    alist_runs,
    arun_report,
    list_runs,
    run_report,
)

__all__ = [
    "EffectEntry",
    "RecoveryMetrics",
    "RunReport",
    "RunSummary",
    "StepEntry",
    "TryEntry",
    "UnknownThread",
    "alist_runs",
    "arecovery_metrics",
    "arun_report",
    "list_runs",
    "recovery_metrics",
    "run_report",
]
