"""Time travel and forks: what a run from an older checkpoint does to side effects.

``invoke(None, config)`` with ``config`` naming a checkpoint ``C`` that is not the
thread's latest (time travel) makes LangGraph copy ``C`` to a new checkpoint
(``source: "fork"``) and run ``C``'s next steps again, under new task ids. The
state is ``C``'s: a replay is not a new intent. Each step so replayed keeps the
effect scope its task had at ``C`` (`REPLAYED_SCOPES_KEY`), so an effect that
step already made returns its recorded outcome under the same idempotency key,
never called again.

A fork, ``update_state(C, values)`` then ``invoke(None, the config it
returned)``, runs from the update's own checkpoint: a changed state, new task
ids, new keys, a new call.

Neither is a crash recovery: `travel` marks both, and `_lifecycle` stores no
resume for them. `travel_of` is the decision (pure); `travel` / `atravel` read
the two checkpoints it needs, only when the config names one.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, StateSnapshot

from langgraph_resilience._keys import REPLAYED_SCOPES_KEY
from langgraph_resilience._langgraph import NS_END

__all__ = ["addressed", "atravel", "path_key", "travel", "travel_of"]

#: The checkpoints LangGraph runs from without copying them first (it copies any
#: other one it is sent back to, and one of these once the thread moved past it).
_OWN_BRANCH = ("update", "fork")


def addressed(input: Any, config: RunnableConfig | None) -> bool:
    """Whether the call runs a thread from a checkpoint it names (``invoke(None,
    config_with_checkpoint_id)``): only then can it be a time travel or a fork."""
    if input is not None or isinstance(input, Command) or not config:
        return False
    configurable = config.get("configurable") or {}
    if configurable.get("checkpoint_ns"):
        return False  # a graph invoked inside a node: its parent's run decides
    return bool(configurable.get("checkpoint_id")) and configurable.get("thread_id") is not None


def path_key(path: Any) -> str:
    """A task's path (``langgraph_path`` / ``PregelTask.path``) as a dict key."""
    return repr(tuple(path)) if isinstance(path, (list, tuple)) else repr(path)


def travel_of(snapshot: StateSnapshot, head_id: str | None) -> dict[str, Any] | None:
    """What a run from the checkpoint ``snapshot`` is, given the thread's latest
    checkpoint id: ``{"travel", "step", "scopes"}``, or None (nothing to mark).

    ``travel``: a time travel or a fork, not a crash recovery (the checkpoint is
    not the latest, or is the latest ``update_state`` wrote). ``scopes``: the
    effect scope of each task path LangGraph replays from its copy of the
    checkpoint at ``step`` (it copies every checkpoint named by id but the
    latest of its own branch, the head too: a resume of the head by id replays
    it, as an unchanged state).
    """
    configurable = snapshot.config.get("configurable") or {}
    if configurable.get("checkpoint_ns"):
        return None  # a subgraph's checkpoint: LangGraph's own business
    source = (snapshot.metadata or {}).get("source")
    latest = configurable.get("checkpoint_id") == head_id
    if source in _OWN_BRANCH and latest:
        return {"travel": True, "step": None, "scopes": {}}  # a fork: new keys
    step = int((snapshot.metadata or {}).get("step", -1))
    scopes = {path_key(t.path): f"{t.name}{NS_END}{t.id}|{t.id}" for t in snapshot.tasks}
    # LangGraph's copy is written at step + 1, its steps run at step + 2.
    return {"travel": not latest, "step": step + 2, "scopes": scopes}


def _with(config: RunnableConfig, found: dict[str, Any] | None) -> RunnableConfig:
    if found is None:
        return config
    return {
        **config,
        "configurable": {**config.get("configurable", {}), REPLAYED_SCOPES_KEY: found},
    }


def _head(config: RunnableConfig) -> RunnableConfig:
    configurable = config.get("configurable") or {}
    return {"configurable": {"thread_id": configurable["thread_id"], "checkpoint_ns": ""}}


def travel(graph: Any, input: Any, config: RunnableConfig | None) -> RunnableConfig | None:
    """``config``, marked as a time travel or a fork when it is one (`travel_of`)."""
    saver = getattr(graph, "checkpointer", None)
    if config is None or saver is None or not addressed(input, config):
        return config
    head = saver.get_tuple(_head(config))
    head_id = head.config["configurable"].get("checkpoint_id") if head else None
    return _with(config, travel_of(graph.get_state(config), head_id))


async def atravel(graph: Any, input: Any, config: RunnableConfig | None) -> RunnableConfig | None:
    """Async twin of `travel`."""
    saver = getattr(graph, "checkpointer", None)
    if config is None or saver is None or not addressed(input, config):
        return config
    head = await saver.aget_tuple(_head(config))
    head_id = head.config["configurable"].get("checkpoint_id") if head else None
    return _with(config, travel_of(await graph.aget_state(config), head_id))
