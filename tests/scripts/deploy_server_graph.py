"""Three versions of one approval graph, served side by side by ``langgraph dev``
(`tests/test_deploy_server.py`): ``v1`` pauses at ``review`` after notifying
the reviewer (a `side_effect`, written to the ``OUTBOX`` file); ``v2_bare``
renames ``review`` to ``approve`` without saying so; ``v2`` says so and migrates
the state (``priority``, which ``publish`` needs). Compiled without a
checkpointer: the server gives them ours (``LGR_DB``)."""

from __future__ import annotations

import asyncio
import json
import operator
import os
from typing import Annotated, Any

from langgraph.graph import END, START
from langgraph.types import interrupt

from langgraph_resilience import ResilientState, ResilientStateGraph, side_effect


class State(ResilientState, total=False):
    doc: str
    done: Annotated[list[str], operator.add]
    priority: str


def _append(line: str) -> None:
    with open(os.environ.get("OUTBOX", "outbox.jsonl"), "a", encoding="utf-8") as out:
        out.write(line + "\n")


@side_effect
async def notify_reviewer(doc: str, *, idempotency_key: str) -> str:
    await asyncio.to_thread(_append, json.dumps({"doc": doc, "key": idempotency_key}))
    return "notified"


async def review(state: State) -> dict[str, Any]:
    await notify_reviewer(state["doc"])
    return {"done": [f"review:{interrupt('approve?')}"]}


async def publish(state: State) -> dict[str, Any]:
    return {"done": [f"publish:{state['priority']}"]}


def build(name: str, **versions: Any) -> Any:
    g = ResilientStateGraph(State, **versions)
    g.add_node(name, review)
    g.add_node("publish", publish)
    g.add_edge(START, name)
    g.add_edge(name, "publish")
    g.add_edge("publish", END)
    return g.compile()


v1 = build("review", version=1)
v2_bare = build("approve", version=2)
v2 = build(
    "approve",
    version=2,
    renames={"review": "approve"},
    migrations={2: lambda state: {**state, "priority": "high"}},
)
