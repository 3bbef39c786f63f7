"""A `Send` branch that failed on a stale value copied into its payload: the
suggestion says the payload is kept and names ``payload=``; following it (on
every backend) re-runs the branch with the corrected payload."""

from __future__ import annotations

import asyncio
import operator
import uuid
from typing import Annotated, Any

import pytest
from langgraph.types import Send

from langgraph_resilience import (
    ConfigError,
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    aretry_failed,
    retry_failed,
)


class State(ResilientState, total=False):
    urls: list[str]
    pages: Annotated[list[str], operator.add]


def _graph(h: Any) -> Any:
    def fetch(item: dict[str, Any]) -> dict[str, Any]:
        if item["url"].startswith("http://old."):
            raise ValueError(f"{item['url']} moved for good")
        return {"pages": [f"page of {item['url']}"]}

    g = ResilientStateGraph(State)
    g.add_node("fetch", fetch, policy=NodePolicy())
    g.add_conditional_edges(
        "__start__", lambda s: [Send("fetch", {"url": u}) for u in s["urls"]], ["fetch"]
    )
    g.set_finish_point("fetch")
    return g.compile(checkpointer=h.saver)


async def _retry(h: Any, graph: Any, config: Any, **kw: Any) -> Any:
    if h.is_async:
        return await aretry_failed(graph, config, **kw)
    return await asyncio.to_thread(lambda: retry_failed(graph, config, **kw))


async def test_a_send_branch_retried_with_a_corrected_payload(checkpointer: Any) -> None:
    h = checkpointer
    graph = _graph(h)
    config = {"configurable": {"thread_id": f"send-{h.id}-{uuid.uuid4().hex[:6]}"}}
    urls = ["http://a.example", "http://b.example", "http://old.example"]
    out = await h.invoke(graph, {"urls": urls, "pages": []}, config)
    log = out["resilience"]
    assert log["status"] == "partial_complete"
    [failed] = log["failed_steps"]
    path = failed["path"]
    assert path == "fetch[2]"
    [advice] = log["recovery_suggestions"]
    assert f"step={path!r}, payload={{...}}" in advice and "kept" in advice
    # update= alone would not do: the branch keeps its payload (so the advice says payload=)
    out = await _retry(h, graph, config, step=path, payload={"url": "http://new.example"})
    assert out["resilience"]["status"] == "success"
    assert sorted(out["pages"]) == [
        "page of http://a.example",
        "page of http://b.example",
        "page of http://new.example",
    ]


async def test_payload_for_a_step_that_is_not_a_send_branch_is_refused(checkpointer: Any) -> None:
    h = checkpointer

    def fail(state: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("no")

    g = ResilientStateGraph(State)
    g.add_node("only", fail, policy=NodePolicy())
    g.set_entry_point("only")
    g.set_finish_point("only")
    graph = g.compile(checkpointer=h.saver)
    config = {"configurable": {"thread_id": f"nosend-{h.id}-{uuid.uuid4().hex[:6]}"}}
    await h.invoke(graph, {"urls": []}, config)
    with pytest.raises(ConfigError, match="none of them a Send branch"):
        await _retry(h, graph, config, payload={"url": "x"})
