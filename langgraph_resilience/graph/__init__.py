"""What users build with: `ResilientStateGraph`, its compiled graph, `retry_failed`.

The builder (`_builder`) wraps each node in its try loop (`_node`: the pure loop;
`_drivers`: its sync and async drivers and the node wrapper), routes a node that
gave up (`_routes`), records each step (`_step_log`), tells where a run begins
and when it reads success (`_lifecycle`), compresses a context that overflowed
(`_compress`) and re-runs a failed step (`_retry_failed`; of a plain parent, such
as a supervisor's, from a copy of the checkpoint its agent call began at:
`_retry_parent`). `_task` is what a
node's task knows of itself. `_tries` is the one try loop (a node's tries and an
agent's calls), `_tally` a run's loop counts and usage per invoke, `_closing`
how a top-level run returned (told by its driver), `_slots` the node limit of a
run, `_cache` the node cache, `_nested_stream` a resilient graph streamed inside
another's step, `_by_hand` a fix by hand (``update_state`` as the failed node).
`_versions` decides what a thread an older graph version stored needs (pure)
and `_upgrade` applies it once before the run goes on. `_travel`: what a time
travel or a fork does to effect keys and recoveries. `_functional`: `task`,
LangGraph's ``@task`` under a `NodePolicy` (an ``@entrypoint``'s steps).
"""

from __future__ import annotations

from langgraph_resilience.graph._builder import ResilientCompiledStateGraph, ResilientStateGraph
from langgraph_resilience.graph._functional import task
from langgraph_resilience.graph._retry_failed import aretry_failed, retry_failed
from langgraph_resilience.graph._routes import PARTIAL_RESULT
from langgraph_resilience.graph._task import current_attempt

__all__ = [
    "PARTIAL_RESULT",
    "ResilientCompiledStateGraph",
    "ResilientStateGraph",
    "aretry_failed",
    "current_attempt",
    "retry_failed",
    "task",
]
