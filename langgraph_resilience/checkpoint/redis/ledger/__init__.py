"""What a step leaves on Redis outside its checkpoint.

The ledgers: ``_effects`` (the effect ledger), ``_attempts`` (a task's failed
tries), ``_effects_lua`` (their scripts), ``_effects_parts`` (``saver.effects``,
``saver.attempts``). Shared `Limit`s: ``_limits`` (their operations, and the
releases riding every write), ``_limits_lua`` (their scripts), ``_limits_parts``
(``saver.limits``). The run queue under leases, for the `Worker`: ``_runs`` (its
operations and keys), ``_runs_scripts`` (its Lua), ``_runs_fence`` (fenced
writes), ``_runs_parts`` (``saver.runs``) and ``_runs_saver`` (what the twins
add: ``runs``, ``read_run``, ``list_runs``).
"""
