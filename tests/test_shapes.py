"""One run per top-level invoke on the shapes users compose with LangGraph's own
libraries, whose parent no driver of ours runs: ``create_supervisor`` and
``create_swarm`` (a plain ``StateGraph`` of ``create_agent`` agents with
`ResilienceMiddleware`) and the functional API (``@entrypoint`` / ``@task``).

The saver, which every shape goes through, keeps the run: its input checkpoint
starts it, its first checkpoint that leaves nothing to run ends it (``success``,
or ``partial_complete`` naming the failed step of an agent nested in it that
ended short), an interrupt pauses it. The chat models are fakes whose tool-call
ids are random (uuid), as real providers' are. Every backend, sync and async.
"""

from __future__ import annotations

import asyncio
import operator
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph_supervisor")
pytest.importorskip("langgraph_swarm")

from agent_worker import PLAN, ScriptedModel, research_agent
from conftest import Harness
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.errors import GraphRecursionError
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt
from langgraph_supervisor import create_supervisor
from langgraph_swarm import create_handoff_tool, create_swarm
from test_durable_waits import make_due
from test_worker import h, run_worker, submit  # noqa: F401  (h: a fixture)
from wait_worker import pipeline

from langgraph_resilience import (
    Backoff,
    Budget,
    ResilientState,
    ResilientStateGraph,
    Worker,
    aretry_failed,
    arun_report,
    retry_failed,
    run_report,
)
from langgraph_resilience.agents import CallPolicy, ResilienceMiddleware
from langgraph_resilience.errors import ConfigError, RunStateError
from langgraph_resilience.history import alist_runs, list_runs


class Chat(ResilientState, total=False):
    messages: Annotated[list[BaseMessage], add_messages]


class Fake(BaseChatModel):
    """Calls the tools of ``steps`` in turn, one a turn, each call under a fresh
    uuid id, then answers ``done``: the step is the number of this agent's tool
    results in the conversation (``steps`` names tools the agent alone has)."""

    steps: list[tuple[str, dict[str, Any]]]

    @property
    def _llm_type(self) -> str:
        return "fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Fake:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        mine = {name for name, _ in self.steps}
        done = sum(1 for m in messages if isinstance(m, ToolMessage) and m.name in mine)
        if done >= len(self.steps):
            message = AIMessage(content="done")
        else:
            name, args = self.steps[done]
            call = {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex}"}
            message = AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])
        return ChatResult(generations=[ChatGeneration(message=message)])


async def thread_runs(harness: Harness, thread: str) -> list[tuple[int, str]]:
    found = await alist_runs(harness.saver) if harness.is_async else list_runs(harness.saver)
    return sorted((r.run, r.status) for r in found if r.thread_id == thread)


async def report(harness: Harness, thread: str) -> Any:
    if harness.is_async:
        return await arun_report(harness.saver, thread)
    return await asyncio.to_thread(run_report, harness.saver, thread)


def ending_policy() -> ResilienceMiddleware:
    once = CallPolicy(on_failure="end", retry=Backoff(max_attempts=1))
    return ResilienceMiddleware(tools={"send_email": once})


def supervisor(harness: Harness, failures: list[int], sent: list[str] | None = None) -> Any:
    """A supervisor that hands off to ``researcher`` (``search``), then to
    ``mailer`` (``send_email``, failing while ``failures`` holds a count; each
    email sent is appended to ``sent``)."""

    @tool
    def search(q: str) -> str:
        """Search the web."""
        return f"found {q}"

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        if failures and failures[0] > 0:
            failures[0] -= 1
            raise ValueError("the mail server rejected the message")
        if sent is not None:
            sent.append(to)
        return f"sent to {to}"

    researcher = create_agent(
        Fake(steps=[("search", {"q": "x"})]),
        tools=[search],
        middleware=[ending_policy()],
        name="researcher",
    )
    mailer = create_agent(
        Fake(steps=[("send_email", {"to": "boss"})]),
        tools=[send_email],
        middleware=[ending_policy()],
        name="mailer",
    )
    boss = Fake(steps=[("transfer_to_researcher", {}), ("transfer_to_mailer", {})])
    return create_supervisor([researcher, mailer], model=boss).compile(checkpointer=harness.saver)


async def retry(harness: Harness, graph: Any, config: Any, **kwargs: Any) -> Any:
    if harness.is_async:
        return await aretry_failed(graph, config, **kwargs)
    return await asyncio.to_thread(retry_failed, graph, config, **kwargs)


def tool_results(out: Any, name: str) -> list[str]:
    return [
        str(m.content) for m in out["messages"] if isinstance(m, ToolMessage) and m.name == name
    ]


async def test_a_supervisor_turn_is_one_run_ended_with_its_true_status(
    checkpointer: Harness,
) -> None:
    # Before: two runs per invoke (the agents' own, read back from their run
    # logs), run 2 partial_complete and run 1 success; retry_failed said
    # "status: 'unknown'". Now the parent's run, one per turn.
    failures = [1]
    graph = supervisor(checkpointer, failures)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    await checkpointer.invoke(graph, {"messages": [("user", "research, then mail")]}, config)
    assert await thread_runs(checkpointer, thread) == [(1, "partial_complete")]
    shown = await report(checkpointer, thread)
    assert (shown.run, shown.status, shown.runs_on_thread) == (1, "partial_complete", 1)
    assert "researcher/tools/search[0]" in [s.path for s in shown.steps]
    # The next turn (the mail server is back) is run 2, and succeeds.
    await checkpointer.invoke(graph, {"messages": [("user", "again")]}, config)
    assert await thread_runs(checkpointer, thread) == [(1, "partial_complete"), (2, "success")]


async def test_retry_failed_on_a_supervisor_re_runs_the_failed_agent_call(
    checkpointer: Harness,
) -> None:
    # Before: retry_failed(graph, config) refused ("keeps no run log") though
    # the report named the failed step; the only way on was a new turn.
    failures, sent = [1], []
    graph = supervisor(checkpointer, failures, sent)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    out = await checkpointer.invoke(graph, {"messages": [("user", "research, then mail")]}, config)
    assert sent == [] and "resilience" not in out
    row = await checkpointer.call("history.run_row", thread, 1)
    assert (row.status, row.failed_step) == ("partial_complete", "mailer/tools/send_email")
    shown = await report(checkpointer, thread)
    assert any("retry_failed(graph, config)" in s for s in shown.suggestions)
    # The mail server is back: following the advice re-runs the mailer's call.
    out = await retry(checkpointer, graph, config)
    assert sent == ["boss"]
    assert out["messages"][-1].content == "done"  # the supervisor answered after the mail
    assert await thread_runs(checkpointer, thread) == [(1, "success")]
    row = await checkpointer.call("history.run_row", thread, 1)
    assert (row.status, row.failed_step) == ("success", None)
    assert row.ended_at is not None and row.ended_at >= row.started_at
    shown = await report(checkpointer, thread)
    assert (shown.run, shown.status, shown.runs_on_thread) == (1, "success", 1)
    assert [r["kind"] for r in shown.recoveries] == ["retry_failed"]
    assert "mailer/tools/send_email[0]" in [s.path for s in shown.steps]
    # the run ended: there is nothing left to retry
    with pytest.raises(RunStateError, match="no failed step to retry"):
        await retry(checkpointer, graph, config)
    # the head is the retried branch's: the next turn is run 2
    await checkpointer.invoke(graph, {"messages": [("user", "thanks")]}, config)
    assert await thread_runs(checkpointer, thread) == [(1, "success"), (2, "success")]


async def test_retry_failed_on_a_supervisor_whose_agent_fails_again_ends_short_again(
    checkpointer: Harness,
) -> None:
    failures, sent = [2], []
    graph = supervisor(checkpointer, failures, sent)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    await checkpointer.invoke(graph, {"messages": [("user", "research, then mail")]}, config)
    await retry(checkpointer, graph, config)  # the cause not fixed: it fails again
    assert sent == []
    assert await thread_runs(checkpointer, thread) == [(1, "partial_complete")]
    row = await checkpointer.call("history.run_row", thread, 1)
    assert row.failed_step == "mailer/tools/send_email"
    out = await retry(checkpointer, graph, config)
    assert sent == ["boss"]
    assert tool_results(out, "transfer_back_to_supervisor")
    assert await thread_runs(checkpointer, thread) == [(1, "success")]
    shown = await report(checkpointer, thread)
    assert [r["kind"] for r in shown.recoveries] == ["retry_failed", "retry_failed"]
    # update= and payload= correct a ResilientStateGraph's state: refused here
    with pytest.raises(ConfigError, match="keeps no run log"):
        await retry(checkpointer, graph, config, update={"messages": []})


def swarm(harness: Harness) -> Any:
    """``alice`` hands off to ``bob`` (a ``Command(graph=PARENT)`` from her tool
    node); bob answers."""
    alice = create_agent(
        Fake(steps=[("transfer_to_bob", {})]),
        tools=[create_handoff_tool(agent_name="bob")],
        middleware=[ResilienceMiddleware()],
        name="alice",
    )
    bob = create_agent(Fake(steps=[]), tools=[], middleware=[ResilienceMiddleware()], name="bob")
    return create_swarm([alice, bob], default_active_agent="alice").compile(
        checkpointer=harness.saver
    )


async def test_a_swarm_handoff_ends_the_turns_run(checkpointer: Harness) -> None:
    # Before: alice's run (ended by her handoff, not by her END) stayed
    # `running` for ever, one more every turn.
    graph = swarm(checkpointer)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    out = await checkpointer.invoke(graph, {"messages": [("user", "hi")]}, config)
    assert out["active_agent"] == "bob"
    assert await thread_runs(checkpointer, thread) == [(1, "success")]
    await checkpointer.invoke(graph, {"messages": [("user", "and again")]}, config)
    assert await thread_runs(checkpointer, thread) == [(1, "success"), (2, "success")]
    shown = await report(checkpointer, thread)
    assert (shown.run, shown.status, shown.runs_on_thread) == (2, "success", 2)


async def test_retry_failed_on_a_supervisor_that_raises_ends_its_run_error(
    checkpointer: Harness,
) -> None:
    # The reopened run is this call's to end: a retry that raises (here past
    # its recursion limit) ends it `error`, not `running` for ever.
    failures, sent = [1], []
    graph = supervisor(checkpointer, failures, sent)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    await checkpointer.invoke(graph, {"messages": [("user", "research, then mail")]}, config)
    with pytest.raises(GraphRecursionError):
        await retry(checkpointer, graph, {**config, "recursion_limit": 1})
    assert await thread_runs(checkpointer, thread) == [(1, "error")]
    row = await checkpointer.call("history.run_row", thread, 1)
    assert row.error is not None and "GraphRecursionError" in row.error


def mailing_swarm(harness: Harness, failures: list[int], sent: list[str]) -> Any:
    """``alice`` hands off to ``bob``, whose ``send_email`` fails while
    ``failures`` holds a count (`ending_policy`: his call ends short)."""

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        if failures[0] > 0:
            failures[0] -= 1
            raise ValueError("the mail server rejected the message")
        sent.append(to)
        return f"sent to {to}"

    alice = create_agent(
        Fake(steps=[("transfer_to_bob", {})]),
        tools=[create_handoff_tool(agent_name="bob")],
        middleware=[ResilienceMiddleware()],
        name="alice",
    )
    bob = create_agent(
        Fake(steps=[("send_email", {"to": "boss"})]),
        tools=[send_email],
        middleware=[ending_policy()],
        name="bob",
    )
    return create_swarm([alice, bob], default_active_agent="alice").compile(
        checkpointer=harness.saver
    )


async def test_retry_failed_on_a_swarm_re_runs_the_agent_handed_off_to(
    checkpointer: Harness,
) -> None:
    # Before: retry_failed refused ("keeps no run log"): bob's failed email
    # could not be sent but by a new turn, which alice would take.
    failures, sent = [1], []
    graph = mailing_swarm(checkpointer, failures, sent)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    out = await checkpointer.invoke(graph, {"messages": [("user", "mail the boss")]}, config)
    assert out["active_agent"] == "bob" and sent == []
    assert await thread_runs(checkpointer, thread) == [(1, "partial_complete")]
    row = await checkpointer.call("history.run_row", thread, 1)
    assert row.failed_step == "bob/tools/send_email"
    out = await retry(checkpointer, graph, config)
    assert sent == ["boss"]
    assert tool_results(out, "send_email") == ["sent to boss"]
    assert out["messages"][-1].content == "done"
    assert await thread_runs(checkpointer, thread) == [(1, "success")]
    shown = await report(checkpointer, thread)
    assert (shown.status, shown.runs_on_thread) == ("success", 1)
    assert [r["kind"] for r in shown.recoveries] == ["retry_failed"]


class Done(ResilientState, total=False):
    done: Annotated[list[str], operator.add]


class PlainDone(TypedDict, total=False):
    done: Annotated[list[str], operator.add]


def plain_parent(harness: Harness, schema: Any, failures: list[int], calls: list[str]) -> Any:
    """A plain ``StateGraph`` (of ``schema``: a `ResilientState`, or a
    ``TypedDict`` of its own) whose ``research`` node is a `ResilientStateGraph`
    (``plan`` then ``fetch``, failing for good while ``failures`` holds a
    count), then ``report``."""

    def plan(state: Done) -> Done:
        calls.append("plan")
        return {"done": []}

    def fetch(state: Done) -> Done:
        calls.append("fetch")
        if failures[0] > 0:
            failures[0] -= 1
            raise ValueError("the source rejected the query")
        return {"done": ["fetched"]}

    def report(state: Any) -> Any:
        calls.append("report")
        return {"done": []}

    inner = ResilientStateGraph(Done)
    inner.add_node("plan", plan)
    inner.add_node("fetch", fetch)
    inner.add_edge(START, "plan")
    inner.add_edge("plan", "fetch")
    inner.add_edge("fetch", END)
    parent = StateGraph(schema)
    parent.add_node("research", inner.compile())
    parent.add_node("report", report)
    parent.add_edge(START, "research")
    parent.add_edge("research", "report")
    parent.add_edge("report", END)
    return parent.compile(checkpointer=harness.saver)


@pytest.mark.parametrize("schema", [Done, PlainDone], ids=["resilient_state", "own_state"])
async def test_a_plain_parent_of_a_resilient_graph_is_one_run_per_invoke(
    checkpointer: Harness, schema: Any
) -> None:
    # Before (a ResilientState parent): the second invoke took run 1's number
    # again, so one row said partial_complete for two invokes, the first's
    # success gone; retry_failed tried to route the parent to the inner node.
    failures, calls = [0], []
    graph = plain_parent(checkpointer, schema, failures, calls)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert await thread_runs(checkpointer, thread) == [(1, "success")]
    failures[0] = 1
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert await thread_runs(checkpointer, thread) == [(1, "success"), (2, "partial_complete")]
    shown = await report(checkpointer, thread)
    assert (shown.run, shown.status, shown.runs_on_thread) == (2, "partial_complete", 2)
    row = await checkpointer.call("history.run_row", thread, 2)
    assert row.failed_step is not None and row.failed_step.startswith("research/fetch")
    if schema is Done:  # the state and the output say what the run row says
        assert out["resilience"]["status"] == "partial_complete"
        if checkpointer.is_async:
            state = await graph.aget_state(config)
        else:
            state = await asyncio.to_thread(graph.get_state, config)
        assert state.values["resilience"]["status"] == "partial_complete"
    # retry_failed re-runs the nested graph's call, then report runs again
    calls.clear()
    out = await retry(checkpointer, graph, config)
    assert calls == ["plan", "fetch", "report"]
    assert "fetched" in out["done"]
    assert await thread_runs(checkpointer, thread) == [(1, "success"), (2, "success")]
    if schema is Done:
        assert out["resilience"]["status"] == "success"
    shown = await report(checkpointer, thread)
    assert (shown.run, shown.status) == (2, "success")
    assert [r["kind"] for r in shown.recoveries] == ["retry_failed"]


def raising(harness: Harness, shape: str, failures: list[int]) -> Any:
    """A graph no driver of ours runs whose second step raises while
    ``failures`` holds a count: a plain ``StateGraph``, or an ``@entrypoint``
    of LangGraph's own ``@task``s."""

    def second(n: int) -> int:
        if failures[0] > 0:
            failures[0] -= 1
            raise ValueError("the service is down")
        return n * 2

    if shape == "entrypoint":

        @task
        def one(n: int) -> int:
            return n

        @task
        def two(n: int) -> int:
            return second(n)

        @entrypoint(checkpointer=harness.saver)
        def flow(n: int) -> int:
            return two(one(n).result()).result()

        return flow
    builder = StateGraph(PlainDone)
    builder.add_node("a", lambda state: {"done": ["a"]})
    builder.add_node("b", lambda state: {"done": [str(second(1))]})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder.compile(checkpointer=harness.saver)


@pytest.mark.parametrize("shape", ["state_graph", "entrypoint"])
async def test_a_run_no_driver_of_ours_runs_that_raises_ends_error(
    checkpointer: Harness, shape: str
) -> None:
    # Before: the row stayed `running`, and the report advised resuming a run
    # whose process died, though the invoke had raised to its caller.
    failures = [1]
    graph = raising(checkpointer, shape, failures)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    given = 3 if shape == "entrypoint" else {"done": []}
    with pytest.raises(ValueError, match="the service is down"):
        await checkpointer.invoke(graph, given, config)
    assert await thread_runs(checkpointer, thread) == [(1, "error")]
    row = await checkpointer.call("history.run_row", thread, 1)
    assert row.error == "ValueError: the service is down" and row.ended_at is not None
    shown = await report(checkpointer, thread)
    assert shown.status == "error"
    assert not any("process died" in s for s in shown.suggestions)
    # its advice, followed once the service is back, ends the same run
    out = await checkpointer.invoke(graph, None, config)
    assert out == 6 if shape == "entrypoint" else out["done"] == ["a", "2"]
    assert await thread_runs(checkpointer, thread) == [(1, "success")]
    row = await checkpointer.call("history.run_row", thread, 1)
    assert row.error is None


def workflow(harness: Harness, calls: list[str]) -> Any:
    @task
    def fetch(n: int) -> int:
        calls.append(f"fetch {n}")
        return n * 10

    @task
    def publish(total: int) -> str:
        calls.append(f"publish {total}")
        return f"published {total}"

    @entrypoint(checkpointer=harness.saver)
    def pipeline(n: int) -> str:
        total = sum(f.result() for f in [fetch(i) for i in range(n)])
        return publish(total).result()

    return pipeline


async def test_an_entrypoint_run_is_a_run_that_ends(checkpointer: Harness) -> None:
    # Before: list_runs showed nothing and the report read `running · 0 steps`
    # with the advice to resume it.
    calls: list[str] = []
    pipeline = workflow(checkpointer, calls)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    assert await checkpointer.invoke(pipeline, 3, config) == "published 30"
    assert await thread_runs(checkpointer, thread) == [(1, "success")]
    shown = await report(checkpointer, thread)
    assert (shown.run, shown.status) == (1, "success")
    assert not any("resume" in n for n in shown.suggestions)
    assert await checkpointer.invoke(pipeline, 2, config) == "published 10"
    assert await thread_runs(checkpointer, thread) == [(1, "success"), (2, "success")]


async def test_an_entrypoint_waiting_on_a_human_is_listed_paused(checkpointer: Harness) -> None:
    @entrypoint(checkpointer=checkpointer.saver)
    def approve(draft: str) -> str:
        answer = interrupt({"question": f"send {draft!r}?"})
        return f"{draft}: {answer}"

    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    await checkpointer.invoke(approve, "memo", config)
    assert await thread_runs(checkpointer, thread) == [(1, "paused")]
    out = await checkpointer.invoke(approve, Command(resume="yes"), config)
    assert out == "memo: yes"
    assert await thread_runs(checkpointer, thread) == [(1, "success")]


async def test_an_agent_waiting_on_a_human_is_listed_paused(checkpointer: Harness) -> None:
    # Before: a create_agent agent waiting on an interrupt() in a tool was
    # missing from list_runs, its report `running · 0 steps` with the advice to
    # resume it after a crash.
    @tool
    def ask(question: str) -> str:
        """Ask a human."""
        return str(interrupt({"question": question}))

    agent = create_agent(
        Fake(steps=[("ask", {"question": "send it?"})]),
        tools=[ask],
        middleware=[ResilienceMiddleware()],
        checkpointer=checkpointer.saver,
    )
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    given = {"messages": [("user", "go")]}
    await checkpointer.invoke(agent, given, config, durability="sync")
    assert await thread_runs(checkpointer, thread) == [(1, "paused")]
    shown = await report(checkpointer, thread)
    assert (shown.run, shown.status) == (1, "paused")
    assert not any("process died" in s for s in shown.suggestions)
    await checkpointer.invoke(agent, Command(resume="yes"), config, durability="sync")
    assert await thread_runs(checkpointer, thread) == [(1, "success")]
    shown = await report(checkpointer, thread)
    assert [s.path for s in shown.steps] == ["model", "tools/ask[0]", "model#2"]
    # the run began before its first step did
    row = await checkpointer.call("history.run_row", thread, 1)
    assert row.started_at <= min(s.started_at for s in shown.steps if s.started_at)


async def test_an_agent_invoked_in_a_node_that_ends_short_fails_the_node(
    checkpointer: Harness,
) -> None:
    # Before: the parent read `success`, `failed_step: None`, and its next
    # node ran on an email that was never sent.
    failures = [1]

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        if failures[0] > 0:
            failures[0] -= 1
            raise ValueError("the mail server rejected the message")
        return f"sent to {to}"

    mailer = create_agent(
        Fake(steps=[("send_email", {"to": "boss"})]),
        tools=[send_email],
        middleware=[ending_policy()],
    )
    notified: list[int] = []
    graph = mail_then_notify(mailer, checkpointer, notified)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    out = await checkpointer.invoke(graph, {"messages": [("user", "mail the boss")]}, config)
    assert out["resilience"]["status"] == "partial_complete"
    assert out["resilience"]["failed_step"]["node"] == "mail"
    assert out["resilience"]["failed_step"]["path"] == "mail/tools/send_email"
    assert notified == []
    assert await thread_runs(checkpointer, thread) == [(1, "partial_complete")]
    # The mail server is back: retry_failed re-runs the node, then notify runs.
    if checkpointer.is_async:
        out = await aretry_failed(graph, config)
    else:
        out = await asyncio.to_thread(retry_failed, graph, config)
    assert out["resilience"]["status"] == "success"
    assert len(notified) == 1
    assert await thread_runs(checkpointer, thread) == [(1, "success")]


def mail_then_notify(inner: Any, checkpointer: Harness, notified: list[int]) -> Any:
    """A parent on the harness's saver whose node ``mail`` invokes ``inner`` (an
    agent or a swarm) inside its function, then ``notify`` runs (noted in ``notified``)."""

    async def amail(state: Chat) -> dict[str, Any]:
        out = await inner.ainvoke({"messages": state["messages"]})
        return {"messages": out["messages"][len(state["messages"]) :]}

    def mail(state: Chat) -> dict[str, Any]:
        out = inner.invoke({"messages": state["messages"]})
        return {"messages": out["messages"][len(state["messages"]) :]}

    def notify(state: Chat) -> dict[str, Any]:
        notified.append(len(state["messages"]))
        return {}

    builder = ResilientStateGraph(Chat)
    builder.add_node("mail", amail if checkpointer.is_async else mail)
    builder.add_node("notify", notify)
    builder.add_edge(START, "mail")
    builder.add_edge("mail", "notify")
    builder.add_edge("notify", END)
    return builder.compile(checkpointer=checkpointer.saver)


def node_swarm(failures: list[int], sent: list[str]) -> Any:
    """`mailing_swarm`'s agents in a swarm compiled without a saver of its own,
    to be invoked inside a parent's node function."""
    alice = create_agent(
        Fake(steps=[("transfer_to_bob", {})]),
        tools=[create_handoff_tool(agent_name="bob")],
        middleware=[ResilienceMiddleware()],
        name="alice",
    )

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        if failures[0] > 0:
            failures[0] -= 1
            raise ValueError("the mail server rejected the message")
        sent.append(to)
        return f"sent to {to}"

    bob = create_agent(
        Fake(steps=[("send_email", {"to": "boss"})]),
        tools=[send_email],
        middleware=[ending_policy()],
        name="bob",
    )
    return create_swarm([alice, bob], default_active_agent="alice").compile()


async def test_a_swarm_invoked_in_a_node_whose_agent_ends_short_fails_the_node(
    checkpointer: Harness,
) -> None:
    # Before: bob's failed email left the parent reading `success`, and its
    # next node ran on an email that was never sent.
    failures, sent, notified = [1], [], []
    graph = mail_then_notify(node_swarm(failures, sent), checkpointer, notified)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    out = await checkpointer.invoke(graph, {"messages": [("user", "mail the boss")]}, config)
    assert out["resilience"]["status"] == "partial_complete"
    assert out["resilience"]["failed_step"]["node"] == "mail"
    assert out["resilience"]["failed_step"]["path"] == "mail/bob/tools/send_email"
    assert notified == [] and sent == []
    assert await thread_runs(checkpointer, thread) == [(1, "partial_complete")]
    # The mail server is back: retry_failed re-runs the node, then notify runs.
    out = await retry(checkpointer, graph, config)
    assert out["resilience"]["status"] == "success"
    assert sent == ["boss"] and len(notified) == 1
    assert await thread_runs(checkpointer, thread) == [(1, "success")]


async def test_an_agents_budget_top_up_is_a_budget_recovery(
    checkpointer: Harness, tmp_path: Path
) -> None:
    # Before: the paused agent was missing from list_runs and its top-up was
    # no recovery at all (budget=0 in the metrics).
    model = ScriptedModel(plan=PLAN, calls=[])
    agent = research_agent(
        checkpointer.saver, tmp_path, chat_model=model, budget=Budget(max_tokens=100)
    )
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    question = {"messages": [("user", "Research resilience.")]}
    await checkpointer.invoke(agent, question, config, durability="sync")
    assert await thread_runs(checkpointer, thread) == [(1, "paused")]
    more = Command(resume=Budget(max_tokens=1_000))
    out = await checkpointer.invoke(agent, more, config, durability="sync")
    assert out["messages"][-1].content == "Report sent."
    assert await thread_runs(checkpointer, thread) == [(1, "success")]
    shown = await report(checkpointer, thread)
    assert [r["kind"] for r in shown.recoveries] == ["budget"]


class Post(ResilientState, total=False):
    text: str
    url: str
    notified: bool


async def test_a_fix_by_hand_with_update_state_as_the_failed_node_lets_the_rest_run(
    checkpointer: Harness,
) -> None:
    # Before: invoke(None) after update_state(as_node="pub") returned at once:
    # notify never ran, the run stayed partial_complete and `next` became ().
    def pub(state: Post) -> Post:
        raise ValueError("the publishing target is misconfigured")

    def notify(state: Post) -> Post:
        return {"notified": True}

    builder = ResilientStateGraph(Post)
    builder.add_node("pub", pub)
    builder.add_node("notify", notify)
    builder.add_edge(START, "pub")
    builder.add_edge("pub", "notify")
    builder.add_edge("notify", END)
    graph = builder.compile(checkpointer=checkpointer.saver)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    out = await checkpointer.invoke(graph, {"text": "hello"}, config)
    assert out["resilience"]["status"] == "partial_complete"
    assert out["resilience"]["failed_step"]["node"] == "pub"
    # LangGraph's way: write what the failed node should have, as that node.
    fixed = {"url": "https://example.com/hello"}
    if checkpointer.is_async:
        await graph.aupdate_state(config, fixed, as_node="pub")
        assert (await graph.aget_state(config)).next == ("notify",)
    else:
        await asyncio.to_thread(graph.update_state, config, fixed, as_node="pub")
        assert (await asyncio.to_thread(graph.get_state, config)).next == ("notify",)
    out = await checkpointer.invoke(graph, None, config)
    assert out["notified"] is True and out["url"] == fixed["url"]
    assert out["resilience"]["status"] == "success"
    assert await thread_runs(checkpointer, thread) == [(1, "success")]


async def test_a_durable_waits_continuation_is_no_human_recovery(h: Any, tmp_path: Path) -> None:  # noqa: F811
    # Before: the run taken up after its Retry-After was recorded as
    # `recovery: human` (no human took part), and its run row read `paused`
    # while the run was queued.
    worker = Worker(pipeline(tmp_path), checkpointer=h.saver, lease_ttl=5, poll_interval=0.05)
    thread = f"wait-{uuid.uuid4()}"
    waiting = await submit(h, worker, {"kind": "wait"}, thread_id=thread)
    assert await run_worker(h, worker) == {waiting: "queued"}
    assert await thread_runs(h, thread) != [(1, "paused")]
    make_due(h.backend, h.target, waiting)
    assert await run_worker(h, worker) == {waiting: "success"}
    shown = await report(h, thread)
    assert shown.status == "success"
    assert [r["kind"] for r in shown.recoveries if r["kind"] == "human"] == []


async def test_a_supervisors_status_is_read_from_its_row_or_from_a_resilient_parent(
    checkpointer: Harness,
) -> None:
    # A plain parent's output and state hold no `resilience` key (its schema has
    # none, and LangGraph builds invoke's output from its own channels): its run's
    # status is its row's (run_report); a ResilientStateGraph around it returns it.
    failures = [1]
    graph = supervisor(checkpointer, failures)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    out = await checkpointer.invoke(graph, {"messages": [("user", "research, then mail")]}, config)
    assert "resilience" not in out
    assert (await report(checkpointer, thread)).status == "partial_complete"
    team = supervisor(checkpointer, [1]).copy(update={"checkpointer": None})
    builder = ResilientStateGraph(Chat)
    builder.add_node("team", team)
    builder.add_edge(START, "team")
    builder.add_edge("team", END)
    wrapped = builder.compile(checkpointer=checkpointer.saver)
    other = {"configurable": {"thread_id": uuid.uuid4().hex}}
    out = await checkpointer.invoke(wrapped, {"messages": [("user", "research, then mail")]}, other)
    assert out["resilience"]["status"] == "partial_complete"
    assert out["resilience"]["failed_step"]["path"] == "team/mailer/tools/send_email"
