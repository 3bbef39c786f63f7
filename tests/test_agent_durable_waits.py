"""Durable waits for agents: under a `Worker`, a tool (or model) call whose
service asks for a wait longer than its ``Backoff.max_wait`` releases the run
until then, as a graph node does, and the next worker run goes on at the next
try. The clock moves through the store (`make_due`), never by sleeping."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from agent_worker import ScriptedModel, tool_calls
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from test_durable_waits import make_due
from test_worker import h, outcome, run_worker, submit  # noqa: F401  (h: a fixture)

from langgraph_resilience import Backoff, TransientError, Worker
from langgraph_resilience.agents import CallPolicy, ResilienceMiddleware
from langgraph_resilience.checkpoint import RunRecord


def _agent(saver: Any, calls: list[str], model_waits: bool) -> Any:
    """The search agent; the first search (or, ``model_waits``, the first model
    call) is answered with a 429 asking for an hour."""

    @tool
    def search(query: str) -> str:
        """Search the web."""
        calls.append(query)
        if len(calls) == 1 and not model_waits:
            raise TransientError("429 Too Many Requests", retry_after=3600)
        return f"3 papers on {query}"

    plan = [
        tool_calls(("search", {"query": "resilience"}, "call-search")),
        AIMessage(content="Found 3 papers."),
    ]
    fast = CallPolicy(retry=Backoff(max_attempts=3, initial_interval=0.01))
    for_model = CallPolicy(retry=fast.retry, on_failure="raise")
    middleware = ResilienceMiddleware(tools={"search": fast}, model=for_model, sleep=lambda s: None)
    errors = [TransientError("429 Too Many Requests", retry_after=3600)] if model_waits else []
    model = ScriptedModel(plan=plan, errors=errors)
    return create_agent(model, tools=[search], middleware=[middleware], checkpointer=saver)


@pytest.mark.parametrize("waits", ["tool", "model"])
async def test_a_long_retry_after_releases_the_agent_run(
    h: Any,  # noqa: F811
    waits: str,
) -> None:
    calls: list[str] = []
    agent = _agent(h.saver, calls, model_waits=waits == "model")
    worker = Worker(agent, lease_ttl=5, poll_interval=0.05)
    question = {"messages": [("user", "Find papers on resilience.")]}
    run_id = await submit(h, worker, question, thread_id=f"agent-wait-{uuid.uuid4()}")
    began = time.monotonic()
    assert await run_worker(h, worker) == {run_id: "queued"}  # released, not waited in place
    assert time.monotonic() - began < 10
    record: RunRecord = await h.call("read_run", run_id)
    assert record.status == "queued" and record.owner is None
    assert record.not_before is not None and record.not_before > time.time() + 3500
    paused = outcome(h, record)
    assert paused["paused"] == "retry_after"
    assert (
        paused["interrupts"][0]["value"]["node"] == {"tool": "tool:search", "model": "model"}[waits]
    )
    assert paused["interrupts"][0]["value"]["wait"] == 3600
    # Not due yet: the next worker run leaves it alone.
    assert await run_worker(h, worker) == {}
    assert calls == ([] if waits == "model" else ["resilience"])
    # The hour passes in the store: the next worker run goes on at the second try.
    make_due(h.backend, h.target, run_id)
    assert await run_worker(h, worker) == {run_id: "success"}
    assert calls == (["resilience"] if waits == "model" else ["resilience", "resilience"])
    final = await h.call("read_run", run_id)
    values = outcome(h, final)["values"]
    assert values["messages"][-1].content == "Found 3 papers."
    (result,) = [m for m in values["messages"] if isinstance(m, ToolMessage)]
    assert result.content == "3 papers on resilience"
