"""A UI built on ``astream_events(version="v2")`` alone: it draws a run's
timeline from the ``resilience.*`` custom events (retries, a fallback, a
partial result) and prints it, one line per event, then ``OK``.

Run: ``python tests/scripts/ui_timeline.py DB_PATH``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from langgraph.graph import END, START

from langgraph_resilience import Backoff, NodePolicy, ResilientState, ResilientStateGraph
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver

FAST = Backoff(max_attempts=2, initial_interval=0.001, max_interval=0.01)


class State(ResilientState, total=False):
    found: str
    draft: str


def build(saver: Any) -> Any:
    tries = {"search": 0}

    async def search(state: dict[str, Any]) -> dict[str, Any]:
        tries["search"] += 1
        if tries["search"] == 1:
            raise ConnectionError("search.example reset the connection")
        return {"found": "3 flights"}

    async def draft(state: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("the model refused")

    async def draft_template(state: dict[str, Any]) -> dict[str, Any]:
        return {"draft": "template"}

    async def publish(state: dict[str, Any]) -> dict[str, Any]:
        raise PermissionError("403 from cms.example")

    g = ResilientStateGraph(State)
    g.add_node("search", search, policy=NodePolicy(retry=FAST))
    g.add_node("draft", draft, policy=NodePolicy(retry=FAST, fallback="draft_template"))
    g.add_node("draft_template", draft_template)
    g.add_node("publish", publish, policy=NodePolicy(retry=FAST))
    g.add_edge(START, "search")
    g.add_edge("search", "draft")
    g.add_edge("draft", "publish")
    g.add_edge("draft_template", "publish")
    g.add_edge("publish", END)
    return g.compile(checkpointer=saver)


def line(data: dict[str, Any]) -> str | None:
    """What a UI shows for one resilience event."""
    event, node = data.get("event"), data.get("node") or data.get("path")
    if event == "try_started":
        return f"{node}: try {data['attempt']} started"
    if event == "try_ended":
        return f"{node}: try {data['attempt']} succeeded"
    if event == "try_failed":
        wait = data.get("wait")
        then = f"retrying in {wait:.3f}s" if data.get("action") == "retry" else "giving up"
        return f"{node}: try {data['attempt']} failed ({data['kind']}: {data['error']}); {then}"
    if event == "fallback":
        return f"{node}: falling back to {data.get('fallback')}"
    if event == "degraded":
        return f"{node}: degraded"
    if event == "partial_result":
        return f"partial result: failed {', '.join(data.get('failed_paths') or [])}"
    return None


async def main(path: str) -> None:
    async with AsyncResilientSqliteSaver.from_conn_string(path) as saver:
        graph = build(saver)
        config = {"configurable": {"thread_id": "ui"}}
        async for ev in graph.astream_events({}, config, version="v2"):
            if ev["event"] == "on_custom_event" and str(ev["name"]).startswith("resilience."):
                shown = line(ev["data"])
                if shown:
                    print(shown, flush=True)
    print("OK", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
