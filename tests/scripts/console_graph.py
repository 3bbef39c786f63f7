"""Graphs for the console's tests (beside `cli_graph`).

``renamed``: `cli_graph`'s graph as version 2, with ``c`` renamed ``approve`` and
no ``renames``: a thread paused in ``c`` is blocked under it. ``degrading``:
``a -> optional``, ``optional`` failing for good but not critical: the run
succeeds with it degraded.
"""

from __future__ import annotations

from typing import Any

from cli_graph import State, a, b, c
from langgraph.graph import END, START

from langgraph_resilience import NodePolicy, PermanentError, ResilientStateGraph

renamed: ResilientStateGraph[Any, Any, Any, Any] = ResilientStateGraph(State, version=2)
renamed.add_node("a", a)
renamed.add_node("b", b, policy=NodePolicy(retry=None))
renamed.add_node("approve", c)
renamed.add_edge(START, "a")
renamed.add_edge("a", "b")
renamed.add_edge("b", "approve")
renamed.add_edge("approve", END)


def optional(state: State) -> dict[str, Any]:
    raise PermanentError("the optional step is down")


degrading: ResilientStateGraph[Any, Any, Any, Any] = ResilientStateGraph(State)
degrading.add_node("a", a)
degrading.add_node("optional", optional, policy=NodePolicy(retry=None, critical=False))
degrading.add_edge(START, "a")
degrading.add_edge("a", "optional")
degrading.add_edge("optional", END)
