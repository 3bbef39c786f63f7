"""The documented middleware order for "retry, then fall back" (docs/agents.md):
`ModelFallbackMiddleware` before `ResilienceMiddleware`. The primary model's
503s are retried and recorded, then the fallback model answers."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

pytest.importorskip("langchain.agents")

from agent_worker import ScriptedModel
from conftest import Harness
from langchain.agents import create_agent
from langchain.agents.middleware import ModelFallbackMiddleware
from langchain_core.messages import AIMessage

from langgraph_resilience import Backoff, arun_report, run_report
from langgraph_resilience.agents import CallPolicy, ResilienceMiddleware


class Unavailable(Exception):
    status_code = 503


def _docs_order() -> str:
    return (Path(__file__).parent.parent / "docs" / "agents.md").read_text()


async def test_fallback_listed_first_retries_the_primary_then_falls_back(
    checkpointer: Harness,
) -> None:
    assert (
        "middleware=[ModelFallbackMiddleware(backup), ResilienceMiddleware()]" in _docs_order()
    )  # the order documented
    primary = ScriptedModel(
        plan=[AIMessage(content="from the primary")],
        errors=[Unavailable("503 Service Unavailable") for _ in range(10)],
    )
    backup = ScriptedModel(plan=[AIMessage(content="from the backup")])
    resilience = ResilienceMiddleware(
        model=CallPolicy(retry=Backoff(max_attempts=3, initial_interval=0.001, max_interval=0.01)),
        sleep=lambda s: None,
        asleep=lambda s: asyncio.sleep(0),
    )
    agent = create_agent(
        primary,
        tools=[],
        middleware=[ModelFallbackMiddleware(backup), resilience],  # as docs/agents.md says
        checkpointer=checkpointer.saver,
    )
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    out = await checkpointer.invoke(agent, {"messages": [("user", "Hi.")]}, config)
    assert out["messages"][-1].content == "from the backup"
    assert len(primary.calls) == 3  # retried, then fell back
    assert len(backup.calls) == 1
    if checkpointer.is_async:
        report = await arun_report(checkpointer.saver, thread)
    else:
        report = await asyncio.to_thread(run_report, checkpointer.saver, thread)
    failed = [t for t in report.timeline if t.event == "failed"]
    assert len(failed) >= 3 and all("503" in (t.error or "") for t in failed)  # the outage shows
