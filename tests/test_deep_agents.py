"""deepagents (``create_deep_agent``): a subagent reached through the ``task``
tool is an agent invoked inside a tool call of the main agent. When it ends
short (its ``send_email`` has ``CallPolicy(on_failure="end")``), the ``task``
call failed: the run ends ``partial_complete`` at ``tools/task`` naming the
subagent's step, and `retry_failed` makes the ``task`` call again, so the
email is sent. Fake chat models with random (uuid) tool-call ids, every backend.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

pytest.importorskip("deepagents")

from conftest import Harness
from deepagents import create_deep_agent
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from test_shapes import Fake, ending_policy, report, thread_runs

from langgraph_resilience import aretry_failed, retry_failed
from langgraph_resilience.agents import ResilienceMiddleware


def deep_agent(harness: Harness, failures: list[int], sent: list[str]) -> Any:
    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        if failures[0] > 0:
            failures[0] -= 1
            raise ValueError("the mail server rejected the message")
        sent.append(to)
        return f"sent to {to}"

    mailer = {
        "name": "mailer",
        "description": "Sends email.",
        "system_prompt": "Send the email you are asked to.",
        "tools": [send_email],
        "model": Fake(steps=[("send_email", {"to": "boss"})]),
        "middleware": [ending_policy()],
    }
    boss = Fake(steps=[("task", {"description": "mail the boss", "subagent_type": "mailer"})])
    return create_deep_agent(
        model=boss,
        subagents=[mailer],
        middleware=[ResilienceMiddleware()],
        checkpointer=harness.saver,
    )


async def test_retry_failed_makes_a_failed_subagent_task_call_again(
    checkpointer: Harness,
) -> None:
    # Before: retry_failed returned `success` and never called send_email (the
    # `task` ToolMessage was '' and counted as answered).
    failures, sent = [1], []
    agent = deep_agent(checkpointer, failures, sent)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    given = {"messages": [("user", "mail the boss")]}
    out = await checkpointer.invoke(agent, given, config, durability="sync")
    log = out["resilience"]
    assert log["status"] == "partial_complete"
    assert (log["failed_step"]["path"], log["failed_step"]["nested"]) == (
        "tools/task",
        "tools/send_email",
    )
    assert sent == []
    # the mail server is back
    if checkpointer.is_async:
        out = await aretry_failed(agent, config)
    else:
        out = await asyncio.to_thread(retry_failed, agent, config)
    assert sent == ["boss"]
    assert out["resilience"]["status"] == "success"
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(answers) == 1 and answers[0].status != "error"  # one result per call id
    assert await thread_runs(checkpointer, thread) == [(1, "success")]
    shown = await report(checkpointer, thread)
    assert shown.status == "success"
    assert "tools/tools/send_email[0]" in [s.path for s in shown.steps]


async def test_retry_failed_keeps_a_task_call_failed_while_its_subagent_fails(
    checkpointer: Harness,
) -> None:
    # never `success` with the failed work not done
    failures, sent = [2], []
    agent = deep_agent(checkpointer, failures, sent)
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    await checkpointer.invoke(agent, {"messages": [("user", "mail")]}, config, durability="sync")
    if checkpointer.is_async:
        out = await aretry_failed(agent, config)
    else:
        out = await asyncio.to_thread(retry_failed, agent, config)
    assert out["resilience"]["status"] == "partial_complete"
    assert out["resilience"]["failed_step"]["path"] == "tools/task"
    assert sent == []
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(answers) == 1 and answers[0].status == "error"
