"""The run ledger: a row per run, per step and per recovery, written and read
(the only source of a run's history: LangGraph's writes are never decoded back).

- ``_run_log``: the rows written, in the transaction of what they belong to.
- ``_run_end``: a top-level run's end, decided at the checkpoint that leaves it
  nothing to do (whether a step of it failed unrecovered).
- ``_run_sql``: the run rows' start, open, pause and settle statements, and the Worker's end.
- ``_step_rows``: a step record as its row stores it, and read back.
- ``_scope``: one top-level run's scope in memory (the step records its nodes hand the saver).
- ``_run_log_reads``: the records of runs and steps, read back.
- ``_run_summaries``: what ``list_runs`` and ``run_report`` read.
- ``_liveness``: whether a ``running`` run's process is gone (stale).
- ``_run_metrics``: the SQL aggregates behind ``recovery_metrics``.
- ``_events``: recoveries and attempts as the reports read them.
- ``_history``: the saver's ``history`` part.
- ``_heads``: the head of every thread in flight, in one read (``check_deploy``).
- ``_reads``: the reads, written once, driven sync or async.
"""
