"""A report pipeline served by LangGraph Agent Server (``langgraph dev``).

research (flaky: its first try fails with a TransientError and is retried) ->
draft (a LangChain fake chat model writes it) -> notify (emails it through a
`side_effect`: sent once, whatever re-runs the step) -> polish (works on while
the file ``POLISH_HOLD`` names exists, to leave time to kill the server) ->
publish (a critical step: an unknown ``channel`` is a PermanentError, and
the run ends with a partial result that ``POST /resilience/threads/{id}/retry``
can finish).

The graph is compiled without a checkpointer: the server gives it ours
(``langgraph.json``: ``langgraph_resilience.server.checkpointer`` on ``LGR_DB``).
The "mail server" is a JSON-lines file (``OUTBOX``, default ``outbox.jsonl``):
one line per email really sent.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.graph import END, START

from langgraph_resilience import (
    Backoff,
    NodePolicy,
    PermanentError,
    ResilientState,
    ResilientStateGraph,
    TransientError,
    current_attempt,
    side_effect,
)

CHANNELS = ("blog", "newsletter")
writer = FakeListChatModel(responses=["A short report on {topic}: checkpoints make it durable."])


class State(ResilientState, total=False):
    topic: str
    to: str
    channel: str
    findings: list[str]
    draft: str
    receipt: str
    polished: bool
    published: str


def _outbox() -> str:
    return os.environ.get("OUTBOX", "outbox.jsonl")


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


@side_effect
async def send_email(to: str, body: str, *, idempotency_key: str) -> str:
    """The one call that must not repeat; the outbox keeps every real send."""
    line = json.dumps({"to": to, "body": body, "key": idempotency_key})
    await asyncio.to_thread(_append, _outbox(), line)  # no blocking call on the event loop
    return f"sent:{idempotency_key[:12]}"


async def research(state: State) -> dict[str, Any]:
    if current_attempt().number == 1:
        raise TransientError("search API timed out")
    return {"findings": [f"{state['topic']}: a checkpoint after every step"]}


async def draft(state: State) -> dict[str, Any]:
    reply = await writer.ainvoke(f"Write about {state['topic']}: {state['findings']}")
    return {"draft": str(reply.content).replace("{topic}", state["topic"])}


async def notify(state: State) -> dict[str, Any]:
    return {"receipt": await send_email(state.get("to", "team@example.com"), state["draft"])}


async def polish(state: State) -> dict[str, Any]:
    hold = os.environ.get("POLISH_HOLD")
    while hold and os.path.exists(hold):  # a long step, for the crash demo
        await asyncio.sleep(0.2)
    return {"polished": True}


async def publish(state: State) -> dict[str, Any]:
    channel = state.get("channel", "blog")
    if channel not in CHANNELS:
        raise PermanentError(f"unknown channel {channel!r}; one of {', '.join(CHANNELS)}")
    return {"published": f"{channel}:{state['topic']}"}


builder = ResilientStateGraph(State)
builder.set_node_defaults(policy=NodePolicy(retry=Backoff(max_attempts=3, initial_interval=0.1)))
builder.add_node("research", research)
builder.add_node("draft", draft)
builder.add_node("notify", notify)
builder.add_node("polish", polish)
builder.add_node("publish", publish, policy=NodePolicy(critical=True))
builder.add_edge(START, "research")
builder.add_edge("research", "draft")
builder.add_edge("draft", "notify")
builder.add_edge("notify", "polish")
builder.add_edge("polish", "publish")
builder.add_edge("publish", END)

# No checkpointer here: the server passes its own (ours, from langgraph.json).
graph = builder.compile()
