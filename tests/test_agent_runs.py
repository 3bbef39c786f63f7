"""An agent nested in a graph is part of the run that ran it, and an agent's
``retry_failed`` leaves a history a provider accepts.

A ``create_agent`` + `ResilienceMiddleware` agent (tests/scripts/agent_worker.py: a
scripted tool-calling model, ``search`` and ``send_email``) added as a node of
a `ResilientStateGraph` or a plain ``StateGraph``, or invoked inside a node
function, on every backend: one invoke is one run in `list_runs`, `run_report`,
``langgraph-resilience runs`` / ``show`` and `recovery_metrics`, ended with its
true status, the agent's steps under its node's path. Then a tool that failed
with ``on_failure="end"`` and `retry_failed`: one `ToolMessage` per tool call.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langchain.agents")

from agent_worker import PLAN, ScriptedModel, research_agent, tool_calls
from conftest import Harness
from helpers import db_arg
from langchain_core.messages import BaseMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from pydantic import Field
from spawn import spawn

from langgraph_resilience import (
    ResilientState,
    ResilientStateGraph,
    aretry_failed,
    arun_report,
    cli,
    recovery_metrics,
    retry_failed,
    run_report,
)
from langgraph_resilience.agents import CallPolicy
from langgraph_resilience.history import alist_runs, arecovery_metrics, list_runs

CLI = str(Path(cli.__file__))


class Chat(ResilientState, total=False):
    messages: Annotated[list[BaseMessage], add_messages]


def parent_graph(h: Harness, agent: Any, name: str, shape: str, resilient: bool) -> Any:
    """``agent`` as node ``name`` (``shape="node"``) or invoked inside its node
    function (``"call"``), in a `ResilientStateGraph` or a plain ``StateGraph``."""
    g: Any = ResilientStateGraph(Chat) if resilient else StateGraph(Chat)
    if shape == "node":
        g.add_node(name, agent)
    elif h.is_async:

        async def acall(state: Chat) -> dict[str, Any]:
            out = await agent.ainvoke({"messages": state["messages"]})
            return {"messages": out["messages"][len(state["messages"]) :]}

        g.add_node(name, acall)
    else:

        def call(state: Chat) -> dict[str, Any]:
            out = agent.invoke({"messages": state["messages"]})
            return {"messages": out["messages"][len(state["messages"]) :]}

        g.add_node(name, call)
    g.add_edge(START, name)
    g.add_edge(name, END)
    return g.compile(checkpointer=h.saver)


async def thread_runs(h: Harness, thread: str) -> list[Any]:
    found = await alist_runs(h.saver) if h.is_async else list_runs(h.saver)
    return sorted((r for r in found if r.thread_id == thread), key=lambda r: r.run)


async def report(h: Harness, thread: str, run: int | None = None) -> Any:
    if h.is_async:
        return await arun_report(h.saver, thread, run=run)
    return await asyncio.to_thread(run_report, h.saver, thread, run=run)


async def metrics(h: Harness, name: str) -> Any:
    # Only this test's runs: the Postgres database is shared by the module's tests.
    if h.is_async:
        return await arecovery_metrics(h.saver, graph=[name])
    return await asyncio.to_thread(recovery_metrics, h.saver, graph=[name])


AGENT_STEPS = ["model", "tools/search[0]", "model#2", "tools/send_email[0]", "model#3"]
SHAPES = [("resilient", "node"), ("resilient", "call"), ("plain", "node"), ("plain", "call")]


@pytest.mark.parametrize(("parent", "shape"), SHAPES)
async def test_a_nested_agent_is_part_of_the_run_that_ran_it(
    checkpointer: Harness, tmp_path: Path, parent: str, shape: str
) -> None:
    name = f"agent_{uuid.uuid4().hex[:8]}"  # its runs alone in the metrics
    resilient = parent == "resilient"
    graph = parent_graph(checkpointer, research_agent(None, tmp_path), name, shape, resilient)
    thread = uuid.uuid4().hex
    out = await checkpointer.invoke(
        graph,
        {"messages": [("user", "Research resilience.")]},
        {"configurable": {"thread_id": thread}},
    )
    assert out["messages"][-1].content == "Report sent."
    runs = await thread_runs(checkpointer, thread)
    assert [(r.run, r.status) for r in runs] == [(1, "success")]
    shown = await report(checkpointer, thread)
    assert (shown.run, shown.status, shown.runs_on_thread) == (1, "success", 1)
    paths = [s.path for s in shown.steps]
    assert [p for p in paths if p.startswith(f"{name}/")] == [f"{name}/{p}" for p in AGENT_STEPS]
    if resilient:  # the parent's own step too, and the run log reads the run's outcome
        assert name in paths
        assert (out["resilience"]["run"], out["resilience"]["status"]) == (1, "success")
    m = await metrics(checkpointer, name)
    assert (m.runs, m.runs_ended, m.runs_succeeded) == (1, 1, 1)
    if resilient:  # the agent's usage counts in the parent's run
        assert out["resilience"]["usage"]["tokens"] == 150


@pytest.mark.parametrize("shape", ["node", "call"])
async def test_each_turn_on_a_supervisor_thread_is_one_run_with_its_agent_steps(
    checkpointer: Harness, tmp_path: Path, shape: str
) -> None:
    name = f"agent_{uuid.uuid4().hex[:8]}"
    graph = parent_graph(checkpointer, research_agent(None, tmp_path), name, shape, True)
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    thread = config["configurable"]["thread_id"]
    for question in ("Research resilience.", "And again."):
        await checkpointer.invoke(graph, {"messages": [("user", question)]}, config)
    runs = await thread_runs(checkpointer, thread)
    assert [(r.run, r.status) for r in runs] == [(1, "success"), (2, "success")]
    first, second = await report(checkpointer, thread, 1), await report(checkpointer, thread, 2)
    assert [s.path for s in first.steps if "/" in s.path] == [f"{name}/{p}" for p in AGENT_STEPS]
    # The second turn's agent answers at once: its one model call is run 2's.
    assert [s.path for s in second.steps if "/" in s.path] == [f"{name}/model"]
    m = await metrics(checkpointer, name)
    assert (m.runs, m.runs_succeeded) == (2, 2)
    if shape == "node":  # it shares the run log: its step records name the parent's run
        steps = await checkpointer.call("step_history", thread, run=2)
        # oldest first by start: the parent's step began before the agent's model call
        assert [s["path"] for s in steps] == [name, f"{name}/model"]


async def test_the_cli_lists_one_run_and_shows_it(checkpointer: Harness, tmp_path: Path) -> None:
    name = f"agent_{uuid.uuid4().hex[:8]}"
    graph = parent_graph(checkpointer, research_agent(None, tmp_path), name, "node", True)
    thread = uuid.uuid4().hex
    await checkpointer.invoke(
        graph,
        {"messages": [("user", "Research resilience.")]},
        {"configurable": {"thread_id": thread}},
    )

    def cli_json(*args: str) -> Any:
        db = db_arg(checkpointer.backend, checkpointer.target)
        proc = spawn(CLI, *args, "--db", db, "--json")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        return json.loads(out)

    listed = await asyncio.to_thread(cli_json, "runs")
    listed = [r for r in listed if r["thread_id"] == thread]
    assert [(r["run"], r["status"]) for r in listed] == [(1, "success")]
    shown = await asyncio.to_thread(cli_json, "show", thread)
    assert (shown["run"], shown["status"]) == (1, "success")
    assert len(shown["steps"]) == 1 + len(AGENT_STEPS)


# -- retry_failed after a tool ended the run ------------------------------------------


class SeeingModel(ScriptedModel):
    """The scripted model, keeping every history it is given."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def results_per_call(messages: Sequence[BaseMessage]) -> Counter[str]:
    return Counter(m.tool_call_id for m in messages if isinstance(m, ToolMessage))


#: Both tools called in one model message, then the answer.
PARALLEL = [
    tool_calls(
        ("search", {"query": "resilience"}, "call-search"),
        ("send_email", {"to": "boss@example.com"}, "call-email"),
    ),
    PLAN[-1],
]


@pytest.mark.parametrize("plan", ["one call at a time", "both calls at once"])
async def test_retry_failed_after_a_tool_ended_the_run_keeps_one_result_per_call(
    checkpointer: Harness, tmp_path: Path, plan: str
) -> None:
    down = [True]

    def bounce() -> None:
        if down[0]:
            raise ValueError("mailbox boss@example.com does not exist")

    model = SeeingModel(plan=PLAN if plan == "one call at a time" else PARALLEL, calls=[], seen=[])
    agent = research_agent(
        checkpointer.saver,
        tmp_path,
        chat_model=model,
        on_email=bounce,
        effects_named=False,  # a plain tool: called again on retry
        tools={"send_email": CallPolicy(on_failure="end"), "*": CallPolicy()},
    )
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    out = await checkpointer.invoke(agent, {"messages": [("user", "Research.")]}, config)
    assert out["resilience"]["status"] == "partial_complete"
    assert results_per_call(out["messages"]) == {"call-search": 1, "call-email": 1}
    failed_at = kinds(out["messages"])
    [advice] = out["resilience"]["recovery_suggestions"]
    assert "retry_failed(agent, config)" in advice  # followed below
    down[0] = False  # the cause fixed
    if checkpointer.is_async:
        out = await aretry_failed(agent, config)
    else:
        out = await asyncio.to_thread(retry_failed, agent, config)
    assert out["resilience"]["status"] == "success"
    assert out["messages"][-1].content == "Report sent."
    assert results_per_call(out["messages"]) == {"call-search": 1, "call-email": 1}
    # the error result replaced in its place: the history is the failed one, then the answer
    assert kinds(out["messages"]) == [*failed_at, "AIMessage"]
    email = next(m for m in out["messages"] if getattr(m, "tool_call_id", None) == "call-email")
    assert (email.status, email.content) == ("success", "sent to boss@example.com")
    # every history the model was given is one a provider accepts
    assert model.seen and all(n == 1 for h in model.seen for n in results_per_call(h).values())
    assert len((tmp_path / "search.log").read_text().splitlines()) == 1  # search not redone
    assert len((tmp_path / "email.log").read_text().splitlines()) == 2  # the email retried


def kinds(messages: Sequence[BaseMessage]) -> list[str]:
    return [type(m).__name__ for m in messages]


async def test_usage_steps_counts_every_step_of_an_agent_run(
    checkpointer: Harness, tmp_path: Path
) -> None:
    # Before: 3 (the model's calls only) for this 5-step map.
    agent = research_agent(checkpointer.saver, tmp_path)
    thread = uuid.uuid4().hex
    await checkpointer.invoke(
        agent,
        {"messages": [("user", "Research resilience.")]},
        {"configurable": {"thread_id": thread}},
    )
    shown = await report(checkpointer, thread)
    assert [s.path for s in shown.steps] == AGENT_STEPS
    assert shown.usage["steps"] == len(AGENT_STEPS) == 5
