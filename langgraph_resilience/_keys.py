"""Our own config and metadata keys, in one module (as LangGraph keeps its own
in ``langgraph/_internal/_constants.py``; those are read through `_langgraph`).

A key of ``config["configurable"]`` whose name starts with ``__`` is never
copied by LangChain into a run's metadata, and so into every checkpoint's; the
others are meant to be seen there or are set by users. Imports nothing.
"""

from __future__ import annotations

__all__ = [
    "BUDGET_KEY",
    "EFFECT_SCOPE_KEY",
    "FENCE_KEY",
    "GRAPH_VERSION_META",
    "GRAPH_KEY",
    "MIGRATED_META",
    "RENAMED_SCOPES_KEY",
    "REPLAYED_SCOPES_KEY",
    "RETRIED_SENDS_KEY",
    "RETRY_FAILED_KEY",
    "RUN_META",
    "SCOPE_KEY",
    "SLOTS_KEY",
    "TRY_ATTEMPT_META",
    "TRY_NODE_META",
    "TRY_STARTED_META",
    "WORKER_KEY",
]

# -- config["configurable"] --------------------------------------------------------------
#: The run's `Budget`, or a dict of its fields (set by users, or ``compile(budget=...)``).
BUDGET_KEY = "budget"
#: `retry_failed`'s ``{"node", "task"}`` of the failed step it re-runs (its effect keys).
EFFECT_SCOPE_KEY = "lgr_effect_scope"
#: ``{new node: (checkpoint id, its old name's task scope)}``: the renamed tasks of
#: a thread an older graph version stored keep their effect keys (`graph._upgrade`).
RENAMED_SCOPES_KEY = "__lgr_renamed_scopes"
#: A run from an older checkpoint (`graph._travel`): ``{"step", "scopes": {task
#: path: effect scope}}``, the scopes the steps it replays had (their effect keys).
REPLAYED_SCOPES_KEY = "__lgr_replayed_scopes"
#: The failed `Send` branches a `retry_failed` re-runs, each its own next try:
#: ``{"step", "ns", "sends": [[node, index], ...]}``; the i-th `Send` task of
#: step ``step`` in the graph at namespace ``ns`` is the branch ``node[index]``
#: (LangGraph numbers the re-run's Sends anew, from 0: `graph._task`).
RETRIED_SENDS_KEY = "__lgr_retried_sends"
#: The parent graph goes on after a subgraph's `retry_failed`.
RETRY_FAILED_KEY = "lgr_retry_failed"
#: A run level's node slots (`graph._slots.Level`).
SLOTS_KEY = "__lgr_slots"
#: The name a compiled `ResilientStateGraph` gives itself to its nodes (the
#: ``graph`` attribute of events and spans).
GRAPH_KEY = "__lgr_graph"
#: An invoke's `RunScope` (`checkpoint.runlog._scope`).
SCOPE_KEY = "__lgr_run_scope"
#: A `Worker` run's fence: every checkpoint, write, attempt and effect record of
#: the run is checked against it (`checkpoint.ledger._runs.fence_of`).
FENCE_KEY = "__lgr_fence"
#: The id of the `Worker` running the run (its steps name it in their records).
WORKER_KEY = "__lgr_worker"

# -- metadata -----------------------------------------------------------------------------
#: The run that wrote a checkpoint (LangGraph copies a run's ``config["metadata"]``
#: into every checkpoint it writes): a `Worker` run's id.
RUN_META = "lgr_run_id"
# The run id LangGraph Agent Server gives a run (in its configurable and metadata):
# a plain run's row records it as its run_id, linking the server's runs and ours.
SERVER_RUN_KEY = "run_id"
#: A try's callback run: its node, its number and when it started.
TRY_NODE_META = "lgr_node"
TRY_ATTEMPT_META = "lgr_attempt"
TRY_STARTED_META = "lgr_started_at"
#: The graph version that wrote a checkpoint (`graph._versions`).
GRAPH_VERSION_META = "lgr_graph_version"
#: An upgraded checkpoint's from, to, the migrations that ran and the nodes renamed.
MIGRATED_META = "lgr_migrated"
