"""The one door to LangGraph's private internals.

Every name the package needs from LangGraph that LangGraph does not publish (the
``__pregel_*`` config keys, the reserved write channels, the ``branch:to:``
prefix, private classes and functions) is read here, and nowhere else. Each is
taken from LangGraph's own module where it has one, so an upgrade that renames
or moves it fails at import, naming this module, instead of silently changing
what a node reads or what the store counts; the few LangGraph spells inline
(the task metadata keys) are spelled here once. ``tests/test_langgraph_door.py``
pins every name against the installed LangGraph and fails if any other module
names one.

What each is for:

- config keys of a task's ``configurable`` (read by `graph._task.TaskContext`,
  set by the graph builder): the graph's saver (`CHECKPOINTER_KEY`), whether the
  run goes on from a checkpoint (`RESUMING_KEY`), the `Runtime` with its
  ``execution_info`` (`RUNTIME_KEY`), the durability mode (`DURABILITY_KEY`),
  and the two keys that say a graph runs inside a parent's task
  (`TASK_ID_KEY`, `SCRATCHPAD_KEY`);
- a task's metadata keys (`NODE_KEY`, `STEP_KEY`, `PATH_KEY`) and the head of
  a `Send` task's path (`SEND_PATH`);
- the write channels a run's history is read from: `INTERRUPT_CHANNEL`,
  `RESUME_CHANNEL`, `ERROR_CHANNEL`, `ERROR_SOURCE_CHANNEL` (an error that goes
  to the node's error handler), `TASKS_CHANNEL` (a `Send`), `BRANCH_PREFIX`
  (the channels of the edges a step routes on), and `NULL_TASK_ID` (the task
  id of writes no task made: the input's);
- private callables: `coerce_to_runnable` and `RunnableCallable` (how LangGraph
  wraps a node, so a wrapped node behaves as LangGraph's own), `StateNodeSpec`
  (a node's entry in ``StateGraph.nodes``), and `DeltaSnapshot` (a channel
  value that `PostgresSaver.put` stores as a blob).
"""

from __future__ import annotations

from langgraph._internal import _constants
from langgraph._internal._runnable import RunnableCallable, coerce_to_runnable
from langgraph.checkpoint.serde.types import _DeltaSnapshot as DeltaSnapshot
from langgraph.graph._node import StateNodeSpec
from langgraph.graph.state import _CHANNEL_BRANCH_TO

__all__ = [
    "BRANCH_PREFIX",
    "CHECKPOINTER_KEY",
    "DURABILITY_KEY",
    "DeltaSnapshot",
    "ERROR_CHANNEL",
    "ERROR_SOURCE_CHANNEL",
    "INTERRUPT_CHANNEL",
    "NODE_KEY",
    "NULL_TASK_ID",
    "PATH_KEY",
    "RESUME_CHANNEL",
    "RESUMING_KEY",
    "RUNTIME_KEY",
    "RunnableCallable",
    "SCRATCHPAD_KEY",
    "SEND_PATH",
    "STEP_KEY",
    "StateNodeSpec",
    "TASKS_CHANNEL",
    "TASK_ID_KEY",
    "coerce_to_runnable",
]

# -- config keys (config["configurable"]) ----------------------------------------------
CHECKPOINTER_KEY = _constants.CONFIG_KEY_CHECKPOINTER  # the saver (a subgraph gets its parent's)
RESUMING_KEY = _constants.CONFIG_KEY_RESUMING  # the run goes on from a checkpoint
RUNTIME_KEY = _constants.CONFIG_KEY_RUNTIME  # a langgraph.runtime.Runtime, with execution_info
DURABILITY_KEY = _constants.CONFIG_KEY_DURABILITY  # "sync" | "async" | "exit"
# Set in the config of a task: a graph called with either runs inside a parent's task.
TASK_ID_KEY = _constants.CONFIG_KEY_TASK_ID
SCRATCHPAD_KEY = _constants.CONFIG_KEY_SCRATCHPAD

# -- a task's metadata (config["metadata"]) ----------------------------------------------
# LangGraph spells these inline (pregel's task preparation); its savers list them
# among the metadata keys they do not store, which the door's test pins.
NODE_KEY = "langgraph_node"
STEP_KEY = "langgraph_step"
PATH_KEY = "langgraph_path"  # (SEND_PATH, index, ...) for a Send branch
SEND_PATH = _constants.PUSH

# -- write channels ------------------------------------------------------------------------
INTERRUPT_CHANNEL = _constants.INTERRUPT
RESUME_CHANNEL = _constants.RESUME
ERROR_CHANNEL = _constants.ERROR
ERROR_SOURCE_CHANNEL = _constants.ERROR_SOURCE_NODE
TASKS_CHANNEL = _constants.TASKS
BRANCH_PREFIX = _CHANNEL_BRANCH_TO.format("")
NULL_TASK_ID = _constants.NULL_TASK_ID
