"""A fix by hand, LangGraph's way, of a run that ended with a partial result.

``update_state(config, values, as_node=failed_node)`` writes a checkpoint as if
the failed node had run; ``invoke(None, config)`` then goes on from it. The
run log still read ``partial_complete``, so every step due read the run as
stopped and ran nothing (`_drivers.NOT_RUN`): the invoke returned at once,
``next`` became ``()``, nothing said why. Here such an update goes on with the
run, as `retry_failed` does: the failed steps of that node are cleared and the
run is ``running`` again, so the steps after the node run and the run ends as
they do. Other updates are as given (one that sets ``resilience`` itself,
as `retry_failed`'s own, is the caller's word).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

__all__ = ["FixByHand", "fixed_by_hand"]


def fixed_by_hand(current: Any, values: Any, as_node: str | None) -> Any:
    """``update_state``'s values, given the state ``current`` they update."""
    log = current.get("resilience") if isinstance(current, Mapping) else None
    if as_node is None or not isinstance(log, Mapping) or log.get("status") != "partial_complete":
        return values
    if values is not None and not isinstance(values, Mapping):
        return values
    if isinstance(values, Mapping) and "resilience" in values:
        return values
    failed = list(log.get("failed_steps") or [log.get("failed_step")])
    paths = [str(f["path"]) for f in failed if isinstance(f, Mapping) and f.get("node") == as_node]
    if not paths:
        return values
    reset: dict[str, Any] = {
        "status": "running",
        "partial_output": None,
        "recovery_suggestions": [],
    }
    return {**(values or {}), "resilience": {**reset, "clear": paths}}


class FixByHand(CompiledStateGraph[Any, Any, Any, Any]):
    """``update_state`` / ``aupdate_state`` with `fixed_by_hand`'s values."""

    def update_state(
        self,
        config: RunnableConfig,
        values: dict[str, Any] | Any | None,
        as_node: str | None = None,
        task_id: str | None = None,
    ) -> RunnableConfig:
        if as_node is not None:
            values = fixed_by_hand(super().get_state(config).values, values, as_node)
        return super().update_state(config, values, as_node=as_node, task_id=task_id)

    async def aupdate_state(
        self,
        config: RunnableConfig,
        values: dict[str, Any] | Any,
        as_node: str | None = None,
        task_id: str | None = None,
    ) -> RunnableConfig:
        if as_node is not None:
            values = fixed_by_hand((await super().aget_state(config)).values, values, as_node)
        return await super().aupdate_state(config, values, as_node=as_node, task_id=task_id)
