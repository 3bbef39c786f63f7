"""`Worker`: claims runs under a lease, heartbeats, resumes crashed runs.

`_worker` holds its thread and asyncio drivers, `_steps` its decisions (pure),
`_controls` submit, resume and cancel, `_setup` its id and its graph bound to
the runs' saver, `_leases` the leases this process holds (what a side effect
asks before it calls).
"""

from __future__ import annotations

from langgraph_resilience.worker._worker import Worker

__all__ = ["Worker"]
