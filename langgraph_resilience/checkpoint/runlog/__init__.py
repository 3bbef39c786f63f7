"""The run ledger: a row per run, per step and per recovery, written and read.

- ``_run_log``: the rows written, in the transaction of what they belong to.
- ``_step_rows``: a step record as its row stores it, and read back.
- ``_scope``: one top-level run's scope in memory (the step records its nodes hand the saver).
- ``_run_log_reads``: the records of runs and steps, read back.
- ``_run_summaries``: what ``list_runs`` and ``run_report`` read.
- ``_run_metrics``: the SQL aggregates behind ``recovery_metrics``.
- ``_events``: recoveries and attempts as the reports read them.
- ``_history``: the saver's ``history`` part.
- ``_reads``: the reads, written once, driven sync or async.
- ``_run_backfill`` / ``_steps``: threads stored before the ledger.
"""
