"""`TaskContext`: what a running node's task knows of itself, read from its config.

LangGraph hands a task its facts in the task's config, partly under private keys
(`_langgraph`'s ``*_KEY`` names). This module reads them into one typed context; the node
wrapper, side effects and budgets ask it, never the config. The keys' names come
from the door to LangGraph's internals (`langgraph_resilience._langgraph`),
whose test pins them against the installed LangGraph, so an upgrade that renames
one fails loudly instead of silently changing idempotency keys.

The task's identity (thread, namespace, checkpoint, task id, LangGraph's own
node attempt) has one source, the runtime's ``execution_info``: the attempt
ledger and side effects key their records on it, and must never disagree.
(Inside a node the config's ``checkpoint_id`` is None; execution_info's is set.)

The context is cheap to build: it keeps the config, its ``configurable`` and
``metadata`` and the runtime's execution info (three lookups, made once), and
derives each fact from them when asked, so a node's happy path never looks up
the saver, the fence or the worker.

It also holds the try in progress (`current_attempt`), which the node wrapper
sets around each call and side effects read.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.runtime import ExecutionInfo, Runtime

from langgraph_resilience._keys import (
    BUDGET_KEY,
    EFFECT_SCOPE_KEY,
    FENCE_KEY,
    RENAMED_SCOPES_KEY,
    REPLAYED_SCOPES_KEY,
    RETRIED_SENDS_KEY,
    SCOPE_KEY,
    WORKER_KEY,
)
from langgraph_resilience._langgraph import (
    CHECKPOINTER_KEY,
    NODE_KEY,
    NS_END,
    NS_SEP,
    PATH_KEY,
    RESUMING_KEY,
    RUNTIME_KEY,
    SCRATCHPAD_KEY,
    SEND_PATH,
    STEP_KEY,
    TASK_ID_KEY,
)
from langgraph_resilience.budget import Budget
from langgraph_resilience.checkpoint import (
    AsyncEffectLedger,
    AsyncResilientSaver,
    AttemptKey,
    EffectLedger,
    Fence,
    ResilientSaver,
)
from langgraph_resilience.checkpoint._protocol import AsyncStepLog, StepLog
from langgraph_resilience.checkpoint.ledger._runs import fence_of
from langgraph_resilience.checkpoint.runlog._scope import RunScope, Tally
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.graph._travel import path_key
from langgraph_resilience.policy import Attempt

__all__ = [
    "CURRENT_ATTEMPT",
    "TaskContext",
    "conforms",
    "current_attempt",
    "in_parent_task",
    "nested_task",
    "retried_index",
]


CURRENT_ATTEMPT: ContextVar[Attempt | None] = ContextVar(
    "langgraph_resilience_attempt", default=None
)


def in_parent_task(config: Mapping[str, Any]) -> bool:
    """Whether a graph called with ``config`` runs as a subgraph, in a parent's task."""
    configurable = config.get("configurable") or {}
    return (
        bool(configurable.get("checkpoint_ns"))
        or TASK_ID_KEY in configurable
        or SCRATCHPAD_KEY in configurable
    )


def nested_task(namespace: str, task_id: str) -> dict[str, str]:
    """The configurable keys under which a graph runs as the subgraph of a
    parent's task (``namespace``, ``task_id``): in that namespace's checkpoints."""
    return {"checkpoint_ns": namespace, TASK_ID_KEY: task_id}


def retried_index(
    retried: Mapping[str, Any], step: int | None, ns: str, node: str | None, index: int
) -> int:
    """The branch a `Send` task is (its index as first sent): a `retry_failed`
    re-run of a failed branch (`RETRIED_SENDS_KEY`: its Sends, in the order the
    re-run sends them, at its step in its graph's namespace) is that branch's
    next try, not the re-run's ``index``-th Send; any other task keeps ``index``."""
    sends = retried.get("sends") or ()
    if step != retried.get("step") or ns != retried.get("ns") or index >= len(sends):
        return index
    sent_node, original = sends[index]
    return int(original) if sent_node == node else index


def current_attempt() -> Attempt:
    """Inside a node of a `ResilientStateGraph`: this try's number, the last
    failure and the `NodePolicy.adapt` overrides in force.

    Raises:
        ConfigError: called outside such a node.

    Example:
        >>> def draft(state):  # doctest: +SKIP
        ...     temperature = current_attempt().overrides.get("temperature", 0.7)
    """
    attempt = CURRENT_ATTEMPT.get()
    if attempt is None:
        raise ConfigError(
            "current_attempt() works only inside a node of a ResilientStateGraph "
            "(it reports that node's retries)"
        )
    return attempt


_EMPTY: Mapping[str, Any] = {}

# A runtime protocol check costs ~15 µs (it probes every method), more than a
# side effect's own bookkeeping; a class either has the methods or not, so the
# answer is kept per class.
_CONFORMS: dict[tuple[type[Any], type[Any]], bool] = {}


def conforms(found: object, protocol: type[Any]) -> bool:
    """``isinstance(found, protocol)`` for a runtime-checkable protocol of the
    package (`ResilientSaver` ...), the answer kept per class: a run's driver and
    a node's task ask it of the same saver on every invoke and step."""
    key = (type(found), protocol)
    known = _CONFORMS.get(key)
    if known is None:
        known = _CONFORMS[key] = isinstance(found, protocol)
    return known


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class TaskContext:
    """What a node's task knows of itself, read from the config LangGraph gave it.

    Every fact is a property, derived when asked from what the context read of
    its config once, when built (its ``configurable``, ``metadata`` and the
    runtime's execution info): a step asks several of them, none looks them up
    again.

    Attributes:
        config: the task's config, as LangGraph passed it to the node.

    Example:
        >>> task = TaskContext(config=get_config())  # inside a node  # doctest: +SKIP
        >>> task.attempt_key  # (thread, namespace, checkpoint id, task id)  # doctest: +SKIP
    """

    config: RunnableConfig
    #: A top-level step's invoke scope and run tally (`_tally.ensure`), once found.
    lean: tuple[RunScope, Tally] | None = None
    _configurable: Mapping[str, Any] = field(init=False, repr=False)
    _metadata: Mapping[str, Any] = field(init=False, repr=False)
    _info: ExecutionInfo | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        config = self.config
        configurable = config.get("configurable") or _EMPTY
        runtime = configurable.get(RUNTIME_KEY)
        info = runtime.execution_info if isinstance(runtime, Runtime) else None
        object.__setattr__(self, "_configurable", configurable)
        object.__setattr__(self, "_metadata", config.get("metadata") or _EMPTY)
        object.__setattr__(self, "_info", info)

    def knowing(self, scope: RunScope, tally: Tally) -> TaskContext:
        """This context, knowing its invoke's scope and run tally (`lean`): set
        once, by `_tally.ensure` before the node's first try, on the context it
        has just built (no copy: a step builds one context)."""
        object.__setattr__(self, "lean", (scope, tally))
        return self

    @classmethod
    def current(cls) -> TaskContext | None:
        """The context of the task running here, or None outside a runnable."""
        try:
            return cls(config=get_config())
        except RuntimeError:  # get_config() outside a runnable context
            return None

    @property
    def node(self) -> str | None:
        """The node's name (None outside a graph)."""
        return self._metadata.get(NODE_KEY)

    @property
    def step(self) -> int | None:
        """The superstep the task runs in."""
        return self._metadata.get(STEP_KEY)

    @property
    def resuming(self) -> bool:
        """Whether the run goes on from a checkpoint (a resume, a crash recovery, a
        worker's takeover), so the task may have records already."""
        return bool(self._configurable.get(RESUMING_KEY))

    @property
    def thread_id(self) -> str | None:
        """The run's thread (None without a checkpointer)."""
        info = self._info
        return str(info.thread_id) if info is not None and info.thread_id else None

    @property
    def checkpoint_ns(self) -> str:
        """The task's namespace (``"node:<task id>"``, after its parent graphs')."""
        info = self._info
        return (info.checkpoint_ns or "") if info is not None else ""

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint the task's step started from."""
        info = self._info
        return info.checkpoint_id if info is not None else ""

    @property
    def task_id(self) -> str:
        """LangGraph's task id: the same across retries and resumes of the step."""
        info = self._info
        return info.task_id if info is not None else ""

    @property
    def node_attempt(self) -> int:
        """LangGraph's own attempt number of the task (its `RetryPolicy` retries)."""
        info = self._info
        return info.node_attempt if info is not None else 1

    @property
    def attempt_key(self) -> AttemptKey | None:
        """Where the task's failed tries are kept; None without a thread."""
        info = self._info
        thread = self.thread_id
        if info is None or thread is None:
            return None
        return (thread, info.checkpoint_ns or "", info.checkpoint_id, info.task_id)

    @property
    def scope(self) -> RunScope | None:
        """The `RunScope` of the top-level invoke the task runs in (None: none)."""
        found = self._configurable.get(SCOPE_KEY)
        return found if isinstance(found, RunScope) else None

    @property
    def fence(self) -> Fence | None:
        """The fence of the run, when a `Worker` runs it."""
        return None if self._configurable.get(FENCE_KEY) is None else fence_of(self.config)

    @property
    def worker(self) -> str | None:
        """The id of the `Worker` running the task's run (None without one)."""
        found = self._configurable.get(WORKER_KEY)
        return str(found) if found else None

    @property
    def saver(self) -> ResilientSaver | None:
        """The graph's saver, if it keeps the resilience ledger (sync methods)."""
        found = self._configurable.get(CHECKPOINTER_KEY)
        return cast(ResilientSaver, found) if conforms(found, ResilientSaver) else None

    @property
    def async_saver(self) -> AsyncResilientSaver | None:
        """The graph's saver, if it keeps the resilience ledger (async methods)."""
        found = self._configurable.get(CHECKPOINTER_KEY)
        if conforms(found, AsyncResilientSaver):
            return cast(AsyncResilientSaver, found)
        return None

    @property
    def limit_saver(self) -> Any:
        """The graph's saver, if it keeps shared limits: a resilient saver, or one
        with a ``limits`` interface of its own (the Redis savers); else None."""
        found = self._configurable.get(CHECKPOINTER_KEY)
        if conforms(found, ResilientSaver) or conforms(found, AsyncResilientSaver):
            return found
        return found if getattr(found, "limits", None) is not None else None

    @property
    def step_log(self) -> StepLog | None:
        """The graph's saver, if it keeps the run log's step rows (every resilient
        saver, the Redis savers too), sync methods."""
        found = self._configurable.get(CHECKPOINTER_KEY)
        return cast(StepLog, found) if conforms(found, StepLog) else None

    @property
    def async_step_log(self) -> AsyncStepLog | None:
        """The graph's saver, if it keeps the run log's step rows, async methods."""
        found = self._configurable.get(CHECKPOINTER_KEY)
        return cast(AsyncStepLog, found) if conforms(found, AsyncStepLog) else None

    @property
    def ledger(self) -> EffectLedger | None:
        """The graph's saver, if it keeps the step ledger (side effects, attempts;
        every resilient saver, the Redis savers too), sync methods."""
        found = self._configurable.get(CHECKPOINTER_KEY)
        return cast(EffectLedger, found) if conforms(found, EffectLedger) else None

    @property
    def async_ledger(self) -> AsyncEffectLedger | None:
        """`ledger`, async methods."""
        found = self._configurable.get(CHECKPOINTER_KEY)
        if conforms(found, AsyncEffectLedger):
            return cast(AsyncEffectLedger, found)
        return None

    @property
    def saver_type(self) -> str:
        """The class name of the graph's saver, for error messages."""
        return type(self._configurable.get(CHECKPOINTER_KEY)).__name__

    @property
    def send_index(self) -> int | None:
        """The index of the `Send` that started this task, if one did."""
        path = self._metadata.get(PATH_KEY)
        if path and path[0] == SEND_PATH and len(path) >= 2 and isinstance(path[1], int):
            retried = self._configurable.get(RETRIED_SENDS_KEY)
            if retried is None:
                return int(path[1])
            # the namespace of the graph the task runs in ("" at the root)
            ns = str(self._configurable.get("checkpoint_ns") or "").rpartition(NS_SEP)[0]
            return retried_index(retried, self.step, ns, self.node, int(path[1]))
        return None

    @property
    def graph_path(self) -> str:
        """The subgraph nodes this task runs inside, outermost first
        (``"research/"``; empty at the root)."""
        # LangGraph puts the task's namespace in its config (as in execution_info).
        ns = self._configurable.get("checkpoint_ns") or ""
        if NS_SEP not in ns:  # a root task (``node:<task id>``), every step of a flat graph
            return ""
        # A numeric segment (``research:<id>|1|fetch:<id>``: the subgraph's second
        # call in its task, a retry of its node) is no level of the path.
        parts = [seg.split(NS_END, 1)[0] for seg in ns.split(NS_SEP) if seg and not seg.isdigit()]
        return "".join(f"{p}/" for p in parts[:-1])

    @property
    def top_level(self) -> bool:
        """Whether the task runs at the top of its run (not in a subgraph, nor in a
        graph invoked inside a node)."""
        return NS_SEP not in (self._configurable.get("checkpoint_ns") or "")

    @property
    def task_scope(self) -> str:
        """This task's part of side-effect keys: its namespace and task id."""
        return f"{self.checkpoint_ns}|{self.task_id}"

    @property
    def _retried_step(self) -> Mapping[str, Any]:
        return self._configurable.get(EFFECT_SCOPE_KEY) or {}

    @property
    def retrying(self) -> bool:
        """Whether the run re-runs a failed step (`retry_failed`)."""
        return bool(self._retried_step)

    @property
    def effect_scope(self) -> str:
        """The task part of the side-effect keys of calls made in this task.

        A step re-run by `retry_failed` is a new task; it keeps the failed task's
        scope, so effects that completed before the failure are not repeated.
        """
        retried = self._retried_step
        if retried.get("node") == self.node:
            return str(retried.get("task") or self.task_scope)
        renamed = (self._configurable.get(RENAMED_SCOPES_KEY) or {}).get(self.node)
        if renamed and renamed[0] == self.checkpoint_id:
            return str(renamed[1])  # the upgraded step's renamed task keeps its old keys
        replayed = self._configurable.get(REPLAYED_SCOPES_KEY) or {}
        if replayed.get("step") is not None and replayed["step"] == self.step and self.top_level:
            # a step replayed from an older checkpoint keeps the keys it had there
            found = (replayed.get("scopes") or {}).get(path_key(self._metadata.get(PATH_KEY)))
            if found:
                return str(found)
        return self.task_scope

    @property
    def budget(self) -> Budget | None:
        """The run's configured budget (``compile(budget=...)`` or the run's config)."""
        found = self._configurable.get(BUDGET_KEY)
        return Budget.coerce(found, where='config["configurable"]["budget"]')
