"""Resilient drop-in subclasses of LangGraph's SQLite and Postgres savers.

- `langgraph_resilience.checkpoint.sqlite.ResilientSqliteSaver`
- `langgraph_resilience.checkpoint.sqlite.aio.AsyncResilientSqliteSaver`
- `langgraph_resilience.checkpoint.postgres.ResilientPostgresSaver`
- `langgraph_resilience.checkpoint.postgres.aio.AsyncResilientPostgresSaver`

They are imported from their own modules so that using one dialect never imports
the other's driver. This package exports what they have in common: the
`ResilientSaver` / `AsyncResilientSaver` protocols and the records they read
back (`RunRecord`, `RunLogRecord`, `EffectRecord`, `AttemptRecord`) and take (`Fence`).

The rooms inside, one concern each: ``_store`` (statements, dialects, the
executor), ``_schema`` (tables and migrations), ``_counters`` (save counters),
``_threads`` (checkpoints, writes, forks, thread maintenance), ``_ledger``
(node attempts, side-effect claims and outcomes), ``_run_log`` (the run
ledger's rows, a run's and its steps', written with what they belong to) and
``_run_log_reads`` (their reads), ``_steps`` (the step history of threads
stored before the ledger, read from the steps' writes), ``_runs`` (runs,
leases, fencing),
``_store_retry`` (the retry loops of store operations), ``_base`` (state the
copies of a saver share), ``_savers`` and ``_asavers`` (the methods both
dialects share, sync and async), ``_interfaces`` (the ledgers reached from a
saver: ``saver.effects``, ``saver.attempts``, ``saver.runs``, ``saver.history``),
``_reads`` (the typed reads of the history and their drivers),
``postgres/_network`` (timeouts, bounded connections, reconnects).
"""

from __future__ import annotations

from langgraph_resilience.checkpoint._ledger import (
    AttemptKey,
    AttemptRecord,
    EffectRecord,
    IntentClaim,
    OutcomeFields,
)
from langgraph_resilience.checkpoint._protocol import AsyncResilientSaver, ResilientSaver
from langgraph_resilience.checkpoint._run_log_reads import RunLogRecord
from langgraph_resilience.checkpoint._runs import Fence, RunRecord

__all__ = [
    "AsyncResilientSaver",
    "AttemptKey",
    "AttemptRecord",
    "EffectRecord",
    "Fence",
    "IntentClaim",
    "OutcomeFields",
    "ResilientSaver",
    "RunLogRecord",
    "RunRecord",
]
