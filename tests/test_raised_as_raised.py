"""The user's exception is shown as raised (type and message) on every driver:
an async node's own ``TimeoutError`` is not mistaken for its policy's timeout."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from graphs import one_node, quick

from langgraph_resilience import (
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    arun_report,
)
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver

MESSAGE = "read timed out after 10s from search.example"
RAISED = f"TimeoutError: {MESSAGE}"
FAST = quick(2)


class State(ResilientState, total=False):
    found: str


def _graph(saver: Any, timeout: float | None, slow: float = 0.0) -> Any:
    async def search(state: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(slow)
        raise TimeoutError(MESSAGE)

    g = one_node(
        ResilientStateGraph(State), "search", search, policy=NodePolicy(retry=FAST, timeout=timeout)
    )
    return g.compile(checkpointer=saver)


async def _drive(graph: Any, config: Any, driver: str) -> tuple[Any, list[Any]]:
    custom: list[Any] = []
    if driver == "ainvoke":
        return await graph.ainvoke({}, config), custom
    out = None
    async for mode, chunk in graph.astream({}, config, stream_mode=["custom", "values"]):
        if mode == "custom":
            custom.append(chunk)
        else:
            out = chunk
    return out, custom


@pytest.mark.parametrize("driver", ["ainvoke", "astream"])
@pytest.mark.parametrize("timeout", [None, 30.0])
async def test_an_async_nodes_own_timeout_error_keeps_its_message(
    tmp_path: Path, driver: str, timeout: float | None
) -> None:
    async with AsyncResilientSqliteSaver.from_conn_string(str(tmp_path / "t.db")) as saver:
        graph = _graph(saver, timeout)
        thread = f"own-{uuid.uuid4().hex[:6]}"
        config = {"configurable": {"thread_id": thread}}
        out, custom = await _drive(graph, config, driver)
        log = out["resilience"]
        assert log["status"] == "partial_complete"
        [failed] = log["failed_steps"]
        assert failed["message"] == MESSAGE or RAISED in str(failed)
        assert "took longer than" not in str(log)
        events = [e["resilience"] for e in custom if isinstance(e, dict) and "resilience" in e]
        errors = [str(e["error"]) for e in events if e.get("error")]
        if driver == "astream":
            assert errors and all(MESSAGE in e and "took longer" not in e for e in errors)
        report = await arun_report(saver, thread)
        text = report.to_text()
        assert MESSAGE in text and "took longer than" not in text
        assert "Nones" not in text and "Nones" not in " ".join(report.suggestions)


async def test_a_policy_timeout_still_names_the_timeout(tmp_path: Path) -> None:
    async with AsyncResilientSqliteSaver.from_conn_string(str(tmp_path / "t.db")) as saver:
        graph = _graph(saver, timeout=0.05, slow=5.0)
        config = {"configurable": {"thread_id": "slow"}}
        out = await graph.ainvoke({}, config)
        assert "search took longer than 0.05s" in str(out["resilience"]["failed_steps"])


async def test_no_internal_node_in_streamed_updates(tmp_path: Path) -> None:
    """Every chunk of ``stream_mode="updates"`` is from a node the user added (or
    the documented ``partial_result``), never our error handler."""
    async with AsyncResilientSqliteSaver.from_conn_string(str(tmp_path / "t.db")) as saver:
        graph = _graph(saver, None)
        config = {"configurable": {"thread_id": "updates"}}
        nodes = [
            n async for chunk in graph.astream({}, config, stream_mode="updates") for n in chunk
        ]
        assert nodes == ["partial_result"]
        assert not any(n.startswith("__") for n in nodes)
        report = await arun_report(saver, "updates")
        assert [s.path for s in report.steps] == ["search"]  # still recorded
