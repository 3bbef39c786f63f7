"""An agent's recorded tool calls go through `side_effect`'s own drivers: they
log the same ``effect_reconciled`` and ``effect_replayed`` events, keyed by the
tool call id."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from agent_worker import lines, research_agent
from conftest import Harness

from langgraph_resilience import Backoff
from langgraph_resilience.agents import CallPolicy

QUESTION = {"messages": [("user", "Research resilience and email the boss.")]}


async def test_a_recorded_tool_logs_reconcile_and_replay(
    checkpointer: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    failed: list[bool] = []

    def drop_the_line() -> None:  # the email went out, then the connection dropped
        if not failed:
            failed.append(True)
            raise ConnectionError("the mail server hung up after sending")

    fast = CallPolicy(retry=Backoff(max_attempts=3, initial_interval=0.01))
    agent = research_agent(
        checkpointer.saver, tmp_path, on_email=drop_the_line, tools={"send_email": fast}
    )
    config: dict[str, Any] = {"configurable": {"thread_id": uuid.uuid4().hex}}
    thread = config["configurable"]["thread_id"]
    with caplog.at_level(logging.INFO, logger="langgraph_resilience"):
        out = await checkpointer.invoke(agent, QUESTION, config)
    assert out["messages"][-1].content == "Report sent."
    assert len(lines(tmp_path / "email.log")) == 1  # reconcile found it: not sent again
    reconciled = [r for r in caplog.records if getattr(r, "event", None) == "effect_reconciled"]
    assert len(reconciled) == 1
    assert reconciled[0].thread_id == thread
    assert reconciled[0].effect == "tool:send_email"

    # Run the tools step again from the checkpoint before it: the same tool call
    # (same id) replays its recorded message instead of sending again.
    history = [s async for s in _history(checkpointer, agent, config)]
    before_email = next(
        s for s in history if s.next == ("tools",) and "call-email" in _calls(s.values)
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="langgraph_resilience"):
        again = await checkpointer.invoke(agent, None, before_email.config)
    assert again["messages"][-1].content == "Report sent."
    assert len(lines(tmp_path / "email.log")) == 1
    replayed = [r for r in caplog.records if getattr(r, "event", None) == "effect_replayed"]
    assert [(r.effect, r.thread_id) for r in replayed] == [("tool:send_email", thread)]


def _calls(values: Any) -> set[str]:
    last = (values.get("messages") or [None])[-1]
    return {c["id"] for c in getattr(last, "tool_calls", None) or []}


async def _history(h: Harness, agent: Any, config: dict[str, Any]) -> Any:
    if h.is_async:
        async for s in agent.aget_state_history(config):
            yield s
    else:
        for s in agent.get_state_history(config):
            yield s
