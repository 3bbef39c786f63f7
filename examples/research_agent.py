"""A research agent with tools, checked by the recovery suite.

    python -m examples.research_agent

The agent plans topics for a question, researches each in parallel (a `Send`
fan-out to a subgraph in which a chat model calls a search tool through
LangGraph's `ToolNode` until it can answer), writes a report and emails it.
The email goes through `side_effect` with ``reconcile``: however the run is
cut short and resumed, the report is sent once.

The chat models are LangChain's `GenericFakeChatModel` fed a script that
depends only on the conversation so far, so the example needs no API key and
a resumed run hears the same answers as the first.

Run as a script, it answers one question on a SQLite file in a temporary
directory, then runs `recovery_suite` on the same pipeline and prints its report.
"""

from __future__ import annotations

import operator
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Send

from langgraph_resilience import (
    Backoff,
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    side_effect,
)
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.testing import recovery_suite

QUESTION = "How do LangGraph pipelines survive crashes?"
RECIPIENT = "team@example.com"

#: What the search tool knows (a real agent would call a search API).
CORPUS = {
    "checkpoints": "LangGraph stores a checkpoint after every superstep.",
    "pending writes": "A finished task's writes are kept until the step's checkpoint.",
    "side effects": "An intent row before a call and an outcome row after it.",
}


# -- the outside world: an outbox that remembers what it sent ---------------------------


@dataclass
class Outbox:
    """A fake mail service: ``sent`` is every email it delivered; ``lookup``
    answers whether a message with an idempotency key went out (for reconcile)."""

    sent: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, to: str, body: str, idempotency_key: str) -> str:
        with self.lock:
            self.sent.append({"to": to, "body": body, "key": idempotency_key})
            return f"msg-{len(self.sent)}"

    def lookup(self, idempotency_key: str) -> str | None:
        with self.lock:
            for n, mail in enumerate(self.sent, 1):
                if mail["key"] == idempotency_key:
                    return f"msg-{n}"
        return None


OUTBOX = Outbox()


# -- the state ----------------------------------------------------------------------


class ResearchState(ResilientState, total=False):
    """The parent graph's state."""

    question: str
    topics: list[str]
    findings: Annotated[list[str], operator.add]
    report: str
    emailed: bool


class TopicState(ResilientState, total=False):
    """One research branch (the subgraph's state)."""

    topic: str
    messages: Annotated[list[AnyMessage], add_messages]
    findings: Annotated[list[str], operator.add]


# -- the tool and the scripted models -------------------------------------------------


@tool
def search(query: str) -> str:
    """Search the knowledge base."""
    return CORPUS.get(query, f"nothing found on {query}")


def scripted(reply: AIMessage) -> GenericFakeChatModel:
    """A fake chat model that answers ``reply`` (its script is written by the caller
    from the conversation so far, so a resumed run hears the same answer)."""
    return GenericFakeChatModel(messages=iter([reply]))


def plan(state: ResearchState) -> dict[str, Any]:
    model = scripted(AIMessage(content=", ".join(CORPUS)))
    answer = model.invoke([HumanMessage(f"Which topics answer: {state['question']}")])
    return {"topics": [t.strip() for t in str(answer.content).split(",")]}


def fan_out(state: ResearchState) -> list[Send]:
    return [Send("research", {"topic": topic}) for topic in state["topics"]]


def agent(state: TopicState) -> dict[str, Any]:
    """Call the search tool once, then answer from what it found."""
    messages = list(state.get("messages") or [])
    new: list[AnyMessage] = []
    if not messages:
        new.append(HumanMessage(f"Research: {state['topic']}"))
    results = [m for m in messages if isinstance(m, ToolMessage)]
    if not results:
        call = {"name": "search", "args": {"query": state["topic"]}, "id": "call-1"}
        reply = AIMessage(content="", tool_calls=[call])
    else:
        reply = AIMessage(content=f"{state['topic']}: {results[-1].content}")
    new.append(scripted(reply).invoke([*messages, *new]))
    return {"messages": new}


def summarize(state: TopicState) -> dict[str, Any]:
    return {"findings": [str(state["messages"][-1].content)]}


def write_report(state: ResearchState) -> dict[str, Any]:
    body = "\n".join(f"- {f}" for f in sorted(state["findings"]))
    model = scripted(AIMessage(content=f"Report: {state['question']}\n{body}"))
    return {"report": str(model.invoke([HumanMessage("Write the report")]).content)}


# -- the graph ----------------------------------------------------------------------


def build_research(policy: NodePolicy) -> Any:
    """The research subgraph: agent <-> tools until the agent answers, then summarize."""
    g = ResilientStateGraph(TopicState)
    g.set_node_defaults(policy=policy)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([search]))
    g.add_node("summarize", summarize)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "summarize"})
    g.add_edge("tools", "agent")
    g.add_edge("summarize", END)
    return g.compile()


def build_graph(checkpointer: BaseCheckpointSaver[Any], outbox: Outbox = OUTBOX) -> Any:
    """The research agent compiled on ``checkpointer``; emails go to ``outbox``.

    Example:
        >>> with ResilientSqliteSaver.from_conn_string(":memory:") as saver:
        ...     graph = build_graph(saver, Outbox())
        ...     out = graph.invoke({"question": QUESTION}, {"configurable": {"thread_id": "1"}})
        >>> out["emailed"], len(out["findings"])
        (True, 3)
    """

    @side_effect(reconcile=outbox.lookup)
    def email_report(to: str, body: str, *, idempotency_key: str) -> str:
        return outbox.send(to, body, idempotency_key)

    def send_report(state: ResearchState) -> dict[str, Any]:
        email_report(RECIPIENT, state["report"])
        return {"emailed": True}

    policy = NodePolicy(retry=Backoff(max_attempts=3, initial_interval=0.05))
    g = ResilientStateGraph(ResearchState)
    g.set_node_defaults(policy=policy)
    g.add_node("plan", plan)
    g.add_node("research", build_research(policy))
    g.add_node("write_report", write_report)
    g.add_node("send_report", send_report)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", fan_out, ["research"])
    g.add_edge("research", "write_report")
    g.add_edge("write_report", "send_report")
    g.add_edge("send_report", END)
    return g.compile(checkpointer=checkpointer)


def main() -> int:
    outbox = Outbox()
    with tempfile.TemporaryDirectory() as tmp:
        with ResilientSqliteSaver.from_conn_string(str(Path(tmp) / "research.db")) as saver:
            graph = build_graph(saver, outbox)
            out = graph.invoke({"question": QUESTION}, {"configurable": {"thread_id": "q-1"}})
        print(out["report"])
        print(f"\nemailed to {outbox.sent[0]['to']}: {len(outbox.sent)} email(s)\n")
    suite_outbox = Outbox()
    report = recovery_suite(
        lambda saver: build_graph(saver, suite_outbox),
        {"question": QUESTION},
        effects={"email": suite_outbox.sent},
    )
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
