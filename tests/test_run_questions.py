"""A waiting agent's question: a ``create_agent`` agent with
`ResilienceMiddleware` paused on an ``interrupt()`` in a tool is listed
``paused`` with what it asks (``questions``) in `run_report`, `list_runs` and
the ``runs`` / ``show`` commands; once answered it asks nothing. A graph node's
interrupt is asked the same way. Fake chat models with random tool-call ids;
every backend, sync and async."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from conftest import Harness
from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.types import Command, interrupt
from spawn import spawn
from test_shapes import Fake, report, thread_runs

import langgraph_resilience.cli.__main__ as cli
from langgraph_resilience import ResilientState, ResilientStateGraph
from langgraph_resilience.agents import ResilienceMiddleware
from langgraph_resilience.history import alist_runs, list_runs

CLI = str(Path(cli.__file__))
QUESTION = {"question": "send the memo to the board?"}


def asking_agent(harness: Harness) -> Any:
    @tool
    def ask(question: str) -> str:
        """Ask a human."""
        return str(interrupt({"question": question}))

    return create_agent(
        Fake(steps=[("ask", {"question": QUESTION["question"]})]),
        tools=[ask],
        middleware=[ResilienceMiddleware()],
        checkpointer=harness.saver,
    )


async def listed(harness: Harness, thread: str) -> list[Any]:
    found = await alist_runs(harness.saver) if harness.is_async else list_runs(harness.saver)
    return [r for r in found if r.thread_id == thread]


def cli_out(target: str, *args: str) -> str:
    proc = spawn(CLI, *args, "--db", target)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out


async def test_a_paused_agent_says_what_it_asks(checkpointer: Harness) -> None:
    # Before: listed `paused`, but its question was in no report nor row.
    agent = asking_agent(checkpointer)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    await checkpointer.invoke(agent, {"messages": [("user", "go")]}, config, durability="sync")
    assert await thread_runs(checkpointer, thread) == [(1, "paused")]
    shown = await report(checkpointer, thread)
    assert (shown.status, shown.questions) == ("paused", (QUESTION,))
    assert shown.to_dict()["questions"] == [QUESTION]
    assert f"asks: {QUESTION!r}" in shown.to_text()
    (row,) = await listed(checkpointer, thread)
    assert (row.status, row.questions) == ("paused", (QUESTION,))
    assert row.to_dict()["questions"] == [QUESTION]
    if checkpointer.backend in ("sqlite", "postgres"):
        rows = json.loads(await asyncio.to_thread(cli_out, checkpointer.target, "runs", "--json"))
        assert [r["questions"] for r in rows if r["thread_id"] == thread] == [[QUESTION]]
        table = await asyncio.to_thread(cli_out, checkpointer.target, "runs", "--status", "paused")
        assert "send the memo" in table
        text = await asyncio.to_thread(cli_out, checkpointer.target, "show", thread)
        assert f"asks: {QUESTION!r}" in text
    # answered: it asks nothing more
    await checkpointer.invoke(agent, Command(resume="yes"), config, durability="sync")
    shown = await report(checkpointer, thread)
    assert (shown.status, shown.questions) == ("success", ())
    (row,) = await listed(checkpointer, thread)
    assert (row.status, row.questions) == ("success", ())


class Memo(ResilientState, total=False):
    answer: str


async def test_a_paused_node_says_what_it_asks(checkpointer: Harness) -> None:
    builder = ResilientStateGraph(Memo)
    builder.add_node("approve", lambda s: {"answer": str(interrupt(QUESTION))})
    builder.set_entry_point("approve")
    builder.set_finish_point("approve")
    graph = builder.compile(checkpointer=checkpointer.saver)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    await checkpointer.invoke(graph, {}, config)
    shown = await report(checkpointer, thread)
    assert (shown.status, shown.questions) == ("paused", (QUESTION,))
    (row,) = await listed(checkpointer, thread)
    assert row.questions == (QUESTION,)
