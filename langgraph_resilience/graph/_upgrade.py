"""A thread stored by an older graph version, upgraded once before its run goes on.

A versioned graph's ``stream`` / ``astream`` (and so ``invoke``, a `Worker`'s
run, ``retry_failed``) first reads the thread's latest checkpoint. When an
older version stored it, `_versions.plan` decides: blocked (a pending task or a
failed step names a node this graph does not have and no rename maps) raises
`DeployBlocked` and stores nothing; otherwise the renames and the due migrations
are applied to the checkpoint, which is stored again under its own id (its
pending writes stay its own) with the new version and what ran
(`_versions.MIGRATED_KEY`) in its metadata: one write, so a migration runs once.
That write replaces the stored checkpoint: `ReplacingSaver.replace_checkpoint`
where the saver has it (every saver of this package: the Redis savers' ``put``
keeps the first of an id, and would drop the upgrade), else ``put`` (a stock
saver's, which replaces a row of the same id).

A renamed node's task gets a new task id from LangGraph, and side-effect keys
carry the task id; the old task's id (computed as LangGraph computes it, checked
against the checkpoint's pending writes) is handed to the run
(`RENAMED_SCOPES_KEY`), so the renamed task's effects keep their keys and a
recorded effect is not called again.

An unversioned graph reads nothing here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from langgraph_resilience._keys import RENAMED_SCOPES_KEY
from langgraph_resilience._langgraph import (
    BRANCH_PREFIX,
    NS_END,
    SCRATCHPAD_KEY,
    TASK_ID_KEY,
    pull_task_id,
)
from langgraph_resilience.checkpoint._protocol import AsyncReplacingSaver, ReplacingSaver
from langgraph_resilience.errors import DeployBlocked
from langgraph_resilience.graph._versions import (
    MIGRATED_KEY,
    VERSION_KEY,
    Plan,
    Versioning,
    missing_fields,
    pending_nodes,
    plan,
    required_fields,
    rewrite,
)

__all__ = [
    "aupgrade",
    "critical_nodes",
    "plan_for",
    "plan_of",
    "required_of",
    "upgrade",
    "versioning_of",
]

_NONE = Versioning()


def versioning_of(graph: Any) -> Versioning:
    """The `Versioning` of a compiled graph (an unversioned one for a plain graph)."""
    found = getattr(getattr(graph, "builder", None), "_versioning", None)
    return found if isinstance(found, Versioning) else _NONE


def critical_nodes(graph: Any) -> frozenset[str]:
    """The nodes of a compiled graph whose policy is critical (`NodePolicy.critical`)."""
    policies = getattr(getattr(graph, "builder", None), "_policies", None) or {}
    return frozenset(name for name, p in policies.items() if p is not None and p.critical)


def required_of(graph: Any) -> frozenset[str]:
    """The fields a compiled graph's state schema requires (`_versions.required_fields`)."""
    return required_fields(getattr(getattr(graph, "builder", None), "state_schema", None))


def _thread_config(config: RunnableConfig | None) -> RunnableConfig | None:
    """The thread's top-level config, or None when there is nothing to upgrade here
    (no thread, a nested run inside a parent's task, a subgraph's namespace)."""
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    if thread is None or configurable.get("checkpoint_ns"):
        return None
    if TASK_ID_KEY in configurable or SCRATCHPAD_KEY in configurable:
        return None  # a graph invoked inside a parent's task: the parent's run decides
    out: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if configurable.get("checkpoint_id"):
        out["checkpoint_id"] = configurable["checkpoint_id"]
    return {"configurable": out}


def plan_of(
    graph: Any,
    found: CheckpointTuple,
    versioning: Versioning | None = None,
    *,
    fresh: bool = False,
) -> Plan:
    """The plan of a stored checkpoint under a compiled graph's version (``fresh``:
    for a new run on the thread, whose input may give the fields its state lacks)."""
    values = found.checkpoint.get("channel_values") or {}
    outcome = values.get("resilience")
    failed = outcome.get("failed_step") if isinstance(outcome, Mapping) else None
    status = outcome.get("status") if isinstance(outcome, Mapping) else None
    failed_node = (
        str(failed["node"])
        if isinstance(failed, Mapping) and failed.get("node") and status == "partial_complete"
        else None
    )
    return plan_for(
        graph,
        found.checkpoint,
        found.metadata,
        failed_node,
        versioning,
        required=None if fresh else required_of(graph),
    )


def plan_for(
    graph: Any,
    checkpoint: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
    failed_node: str | None,
    versioning: Versioning | None = None,
    *,
    required: Iterable[str] | None = None,
) -> Plan:
    """The plan of a stored checkpoint (its metadata, its failed step's node, the
    fields checked present: None, none).

    A degraded step of a node made critical and a renamed side effect are found
    by ``check_deploy`` only, from the ledger (the step rows say degraded apart
    from replaced by a fallback, which the run log's ``degraded_steps`` does not;
    the effect rows name the effects): a run goes on past them."""
    stored = (metadata or {}).get(VERSION_KEY)
    return plan(
        versioning or versioning_of(graph),
        stored=stored if isinstance(stored, int | str) else None,
        pending=pending_nodes(checkpoint),
        failed_node=failed_node,
        nodes=graph.nodes,
        missing=missing_fields(checkpoint, required) if required is not None else (),
    )


def _prepared(
    graph: Any,
    found: CheckpointTuple | None,
    versioning: Versioning,
    thread: str,
    addressed: bool,
    fresh: bool,
) -> tuple[RunnableConfig, dict[str, Any], dict[str, Any], Any, dict[str, tuple[str, str]]] | None:
    """What to store for an upgrade (config, checkpoint, metadata, new versions,
    renamed scopes), or None when the thread needs none."""
    if found is None:
        return None
    the_plan = plan_of(graph, found, versioning, fresh=fresh)
    if the_plan.blocked:
        raise DeployBlocked(
            thread_id=thread,
            stored_version=the_plan.stored,
            version=the_plan.version,
            reasons=the_plan.blocked,
        )
    if not (the_plan.migrations or the_plan.renamed) or addressed:
        return None  # an addressed older checkpoint (a replay) is checked, never rewritten
    saver = graph.checkpointer
    checkpoint, changed = rewrite(
        found.checkpoint,
        the_plan,
        versioning,
        state_keys=graph.builder.channels,
        next_version=lambda v: saver.get_next_version(v, None),
    )
    lacks = () if fresh else sorted(missing_fields(checkpoint, required_of(graph)))
    if lacks:  # the migrations ran and still left a required field out
        raise DeployBlocked(
            thread_id=thread,
            stored_version=the_plan.stored,
            version=the_plan.version,
            reasons=(
                f"its state lacks {', '.join(repr(f) for f in lacks)} after the migrations "
                f"{list(the_plan.migrations)}, and this version's state requires it",
            ),
        )
    metadata = {
        **(found.metadata or {}),
        VERSION_KEY: versioning.version,
        MIGRATED_KEY: {
            "from": the_plan.stored,
            "to": the_plan.version,
            "ran": list(the_plan.migrations),
            "renamed": dict(the_plan.renamed),
        },
    }
    parent = found.parent_config or {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return parent, checkpoint, metadata, changed, _renamed_scopes(graph, found, the_plan)


def _renamed_scopes(
    graph: Any, found: CheckpointTuple, the_plan: Plan
) -> dict[str, tuple[str, str]]:
    """New node -> the effect scope of its old name's task (see module docstring)."""
    step = int((found.metadata or {}).get("step", -1)) + 1
    written = {w[0] for w in found.pending_writes or ()}
    scopes: dict[str, tuple[str, str]] = {}
    for old, new in the_plan.renamed.items():
        node = graph.nodes.get(new)
        if node is None:
            continue
        triggers = [
            f"{BRANCH_PREFIX}{old}" if t == f"{BRANCH_PREFIX}{new}" else t for t in node.triggers
        ]
        task = pull_task_id(found.checkpoint, ns="", step=step, name=old, triggers=triggers)
        if task in written:
            scopes[new] = (str(found.checkpoint["id"]), f"{old}{NS_END}{task}|{task}")
    return scopes


def _with_scopes(
    config: RunnableConfig | None, scopes: dict[str, tuple[str, str]]
) -> RunnableConfig | None:
    if not scopes:
        return config
    configurable = {**((config or {}).get("configurable") or {}), RENAMED_SCOPES_KEY: scopes}
    return {**(config or {}), "configurable": configurable}


class _Target(NamedTuple):
    saver: BaseCheckpointSaver[Any]
    where: RunnableConfig
    versioning: Versioning
    thread: str
    addressed: bool  # an older checkpoint named by id (a replay): checked, never rewritten


def _fresh(input: Any) -> bool:
    """Whether ``input`` starts a new run (as `_lifecycle.with_marker` marks one)."""
    return isinstance(input, Mapping) and "resilience" not in input


def _target(graph: Any, config: RunnableConfig | None) -> _Target | None:
    """What an upgrade reads, or None when there is nothing to upgrade (no version,
    no thread of its own, no saver): the twins below share it, and differ in I/O."""
    versioning = versioning_of(graph)
    where = _thread_config(config)
    saver = graph.checkpointer
    if versioning.version is None or where is None or not isinstance(saver, BaseCheckpointSaver):
        return None
    configurable = where["configurable"]
    return _Target(
        saver, where, versioning, str(configurable["thread_id"]), "checkpoint_id" in configurable
    )


#: What stores the upgraded checkpoint: (config, checkpoint, metadata, new versions).
_Store = Callable[[RunnableConfig, Any, Any, Any], RunnableConfig]
_AStore = Callable[[RunnableConfig, Any, Any, Any], Awaitable[RunnableConfig]]


def _store_again(saver: BaseCheckpointSaver[Any]) -> _Store:
    """The saver's write that replaces a checkpoint under its own id (see module docstring)."""
    return saver.replace_checkpoint if isinstance(saver, ReplacingSaver) else saver.put


def _astore_again(saver: BaseCheckpointSaver[Any]) -> _AStore:
    """The async twin of `_store_again`."""
    return saver.areplace_checkpoint if isinstance(saver, AsyncReplacingSaver) else saver.aput


def upgrade(graph: Any, config: RunnableConfig | None, input: Any = None) -> RunnableConfig | None:
    """Upgrade the thread of ``config`` to the graph's version, once; the run's config
    (``input``: the run's, as given to ``stream``).

    Raises:
        DeployBlocked: the thread cannot go on under this version (nothing stored).
    """
    target = _target(graph, config)
    if target is None:
        return config
    found = target.saver.get_tuple(target.where)
    prepared = _prepared(
        graph, found, target.versioning, target.thread, target.addressed, _fresh(input)
    )
    if prepared is None:
        return config
    parent, checkpoint, metadata, changed, scopes = prepared
    _store_again(target.saver)(parent, checkpoint, metadata, changed)
    return _with_scopes(config, scopes)


async def aupgrade(
    graph: Any, config: RunnableConfig | None, input: Any = None
) -> RunnableConfig | None:
    """Async twin of `upgrade`."""
    target = _target(graph, config)
    if target is None:
        return config
    found = await target.saver.aget_tuple(target.where)
    prepared = _prepared(
        graph, found, target.versioning, target.thread, target.addressed, _fresh(input)
    )
    if prepared is None:
        return config
    parent, checkpoint, metadata, changed, scopes = prepared
    await _astore_again(target.saver)(parent, checkpoint, metadata, changed)
    return _with_scopes(config, scopes)
