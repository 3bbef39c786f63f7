"""A small graph for the command-line tests: ``--graph cli_graph:builder``.

``a -> b -> c``: ``b`` fails for good (PERMANENT, critical: a partial result)
unless the state says ``fix == "ok"``; ``a`` sleeps ``slow`` seconds when the
state asks (to catch a worker mid-step); ``c`` asks for an answer
(``interrupt``) when the state has ``ask``. Every step appends ``<node> <pid>`` to
the file named by ``LGR_CLI_LEDGER``, when set.
"""

from __future__ import annotations

import operator
import os
import time
from typing import Annotated, Any

from langgraph.graph import END, START
from langgraph.types import interrupt

from langgraph_resilience import NodePolicy, PermanentError, ResilientState, ResilientStateGraph


class State(ResilientState, total=False):
    done: Annotated[list[str], operator.add]
    fix: str
    slow: float
    ask: bool


def _mark(node: str) -> None:
    ledger = os.environ.get("LGR_CLI_LEDGER")
    if ledger:
        with open(ledger, "a", encoding="utf-8") as f:
            f.write(f"{node} {os.getpid()}\n")


def a(state: State) -> dict[str, Any]:
    _mark("a")
    time.sleep(float(state.get("slow") or 0))
    return {"done": ["a"]}


def b(state: State) -> dict[str, Any]:
    _mark("b")
    if state.get("fix") != "ok":
        raise PermanentError("b needs fix='ok' in the state")
    return {"done": ["b"]}


def c(state: State) -> dict[str, Any]:
    _mark("c")
    if state.get("ask"):
        return {"done": [f"c:{interrupt('approve?')}"]}
    return {"done": ["c"]}


builder: ResilientStateGraph[Any, Any, Any, Any] = ResilientStateGraph(State)
builder.add_node("a", a)
builder.add_node("b", b, policy=NodePolicy(retry=None))
builder.add_node("c", c)
builder.add_edge(START, "a")
builder.add_edge("a", "b")
builder.add_edge("b", "c")
builder.add_edge("c", END)
not_a_graph = 42
