"""What a step leaves besides its checkpoint: attempts, effects, leases and limits.

- ``_ledger``: failed tries of node tasks, side-effect intents, claims and outcomes.
- ``_runs``: the run queue, leases and fencing (the store side of `Worker`).
- ``_lease_judge``: whether a lease is over, by its time or by its holder.
- ``_limits``: shared limits: acquire, pause, renew and read.
- ``_releases``: concurrency slots freed by the saver's next write.
"""
