"""The test kit on a ``create_agent`` agent with `ResilienceMiddleware`
(``durability="sync"``): each visit of a middleware hook node
(``ResilienceMiddleware.before_model``) is a step of its own, so the next visit
after a resume is not "a completed step run again"; a safe agent passes
`assert_ok()`. SQLite and Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.tools import tool
from test_shapes import Fake

from langgraph_resilience.agents import ResilienceMiddleware
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.testing import recovery_suite


def agent(saver: Any) -> Any:
    @tool
    def search(q: str) -> str:
        """Search the web."""
        return f"found {q}"

    @tool
    def lookup(q: str) -> str:
        """Look a word up."""
        return f"looked up {q}"

    steps = [("search", {"q": "x"}), ("lookup", {"q": "y"})]
    return create_agent(
        Fake(steps=steps),
        tools=[search, lookup],
        middleware=[ResilienceMiddleware()],
        checkpointer=saver,
    )


@contextmanager
def _opened(cm: Any) -> Iterator[Any]:
    with cm as saver:
        saver.setup()
        yield saver


async def test_a_safe_agent_passes_the_suite(store: tuple[str, str]) -> None:
    # Before: 7 of 12 cases failed with "completed before the failure and run
    # again: ResilienceMiddleware.before_model".
    backend, target = store
    if backend == "postgres":
        factory: Any = lambda: _opened(ResilientPostgresSaver.from_conn_string(target))  # noqa: E731
    else:
        factory = lambda: ResilientSqliteSaver.from_conn_string(target)  # noqa: E731
    report = await asyncio.to_thread(
        recovery_suite,
        agent,
        {"messages": [("user", "go")]},
        checkpointer_factory=factory,
        durability="sync",
        compare=lambda v: [(m.type, m.content) for m in v["messages"]],
        max_cases=0,
    )
    assert not [c for c in report.cases if c.completed_redone], report
    report.assert_ok()
    crashed = [c.name for c in report.cases]
    assert any("before_model#2" in n for n in crashed), crashed  # each visit its own step
