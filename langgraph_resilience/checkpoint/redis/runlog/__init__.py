"""The run ledger on Redis: ``_steps`` (a task's step rows, stored with its
writes; ``step_history`` and ``history.tally``), ``_runlog_rows`` (a thread's run
rows as the snapshot the SQL savers' statements run on), ``_runlog`` (its
scripts: a thread's rows read, decided, stored with a compare-and-set in the
script of their checkpoint or writes) and ``_runlog_parts`` (``saver.history``:
what `run_report`, `recovery_metrics`, `list_runs` and `check_deploy` read).
"""
