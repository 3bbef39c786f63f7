"""Resilient drop-in subclasses of LangGraph's SQLite and Postgres savers.

- `langgraph_resilience.checkpoint.sqlite.ResilientSqliteSaver`
- `langgraph_resilience.checkpoint.sqlite.aio.AsyncResilientSqliteSaver`
- `langgraph_resilience.checkpoint.postgres.ResilientPostgresSaver`
- `langgraph_resilience.checkpoint.postgres.aio.AsyncResilientPostgresSaver`
- `langgraph_resilience.checkpoint.redis.ResilientRedisSaver` and ``redis.aio``'s
  `AsyncResilientRedisSaver` (plain Redis >= 7: checkpoints only, see ``redis/``)

They are imported from their own modules so that using one dialect never imports
the other's driver. This package exports what they have in common: the
`ResilientSaver` / `AsyncResilientSaver` protocols and the records they read
back (`RunRecord`, `RunLogRecord`, `EffectRecord`, `AttemptRecord`) and take (`Fence`).

The rooms inside, one concern each (each folder's docstring names its files):
``store/`` (how every operation is written and run: statements, schema and
migrations, retries, checksums, counters), ``saver/`` (the methods both
dialects share, the state a saver's copies share, the typed parts reached from
a saver), ``ledger/`` (what a step leaves: attempts, effects, the run queue
with its leases and fencing, limits), ``runlog/`` (the run ledger: rows
written, rows read, SQL aggregates), ``archive/`` (the cold tier), and the
dialects ``sqlite/`` and ``postgres/`` (``postgres/_network``: timeouts,
bounded connections, reconnects). ``_protocol`` is what the rest of the
package needs of a saver.
"""

from __future__ import annotations

from langgraph_resilience.checkpoint._protocol import (
    AsyncEffectLedger,
    AsyncReplacingSaver,
    AsyncResilientSaver,
    AsyncRunLedger,
    AsyncRunQueueSaver,
    EffectLedger,
    ReplacingSaver,
    ResilientSaver,
    RunLedger,
    RunQueueSaver,
)
from langgraph_resilience.checkpoint.ledger._ledger import (
    AttemptKey,
    AttemptRecord,
    EffectRecord,
    IntentVerdict,
    OutcomeFields,
)
from langgraph_resilience.checkpoint.ledger._runs import Fence, RunRecord
from langgraph_resilience.checkpoint.runlog._run_log_reads import RunLogRecord

__all__ = [
    "AsyncEffectLedger",
    "AsyncReplacingSaver",
    "AsyncResilientSaver",
    "AsyncRunLedger",
    "AsyncRunQueueSaver",
    "AttemptKey",
    "AttemptRecord",
    "EffectLedger",
    "EffectRecord",
    "Fence",
    "IntentVerdict",
    "OutcomeFields",
    "ReplacingSaver",
    "ResilientSaver",
    "RunLedger",
    "RunLogRecord",
    "RunQueueSaver",
    "RunRecord",
]
