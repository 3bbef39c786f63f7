"""The store's edge cases: values and ids one dialect cannot store, a full disk, a
caller's pool under a blackhole.

- Postgres cannot inline a NaN/±Infinity or a NUL in a top-level channel value
  (JSONB): the step fails once with a clear `ValueError`, and the thread resumes
  once the node is fixed (as on SQLite, which finishes the same graph).
- A thread id holding NUL: refused on both dialects with a `ConfigError`, so no
  thread is left that `delete_thread`/`prune` cannot delete.
- A full SQLite disk while an effect's outcome is written: a real tmpfs, not a mock.
- A pool the caller built, under a `TcpProxy` blackhole: every call ends with
  `StoreUnavailable` within a stated bound.
"""

from __future__ import annotations

import operator
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Annotated, Any

import pytest
from conftest import harness
from langgraph.graph import END, START

from langgraph_resilience import ResilientState, ResilientStateGraph


class Channels(ResilientState, total=False):
    value: Any
    total: Annotated[float, operator.add]
    done: list[str]


# -- Postgres: a value JSONB cannot hold -----------------------------------------------

UNSTORABLE = {
    "nan": ("value", float("nan"), r"'value' a float nan"),
    "infinity": ("total", float("-inf"), r"'total' a float -inf"),
    "nul": ("value", "ab\x00c", r"'value' a str holding a NUL character at index 2"),
}


def fixable_graph(channel: str, bad: Any, fixed: list[bool]) -> ResilientStateGraph:
    def start(state: Channels) -> dict[str, Any]:
        return {"done": ["start"]}

    def compute(state: Channels) -> dict[str, Any]:
        return {channel: (1.5 if channel == "total" else "ok") if fixed else bad}

    def finish(state: Channels) -> dict[str, Any]:
        return {"done": [*state["done"], "finish"]}

    g = ResilientStateGraph(Channels)
    g.add_node("start", start)
    g.add_node("compute", compute)
    g.add_node("finish", finish)
    g.add_edge(START, "start")
    g.add_edge("start", "compute")
    g.add_edge("compute", "finish")
    g.add_edge("finish", END)
    return g


@pytest.mark.parametrize("kind", list(UNSTORABLE))
@pytest.mark.parametrize("durability", ["sync", "async"])
@pytest.mark.parametrize("name", ["postgres", "postgres-async", "postgres-pool"])
async def test_a_value_postgres_cannot_store_fails_the_step_once_then_the_thread_resumes(
    name: str, durability: str, kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    channel, bad, named = UNSTORABLE[kind]
    fixed: list[bool] = []
    async with AsyncExitStack() as stack:
        h = await harness(name, request, tmp_path, stack)
        graph = fixable_graph(channel, bad, fixed).compile(checkpointer=h.saver)
        config = {"configurable": {"thread_id": f"jsonb-{uuid.uuid4().hex[:8]}"}}
        with pytest.raises(ValueError, match=named) as raised:
            await h.invoke(graph, {}, config, durability=durability)
        assert "cannot store" in str(raised.value)
        assert "resuming the thread runs the step again" in str(raised.value)
        fixed.append(True)  # the node is fixed: the same thread resumes and finishes
        final = await h.invoke(graph, None, config, durability=durability)
        assert final["done"] == ["start", "finish"]
        assert final[channel] in ("ok", 1.5)
        # What Postgres stores inline in other cases is LangGraph's own: nested
        # values (blobs) keep their NaN and NUL.
        nested = await h.invoke(
            fixable_graph("value", {"x": [float("nan"), "a\x00"]}, []).compile(
                checkpointer=h.saver
            ),
            {},
            {"configurable": {"thread_id": f"nested-{uuid.uuid4().hex[:8]}"}},
        )
        assert nested["value"]["x"][1] == "a\x00"


async def test_sqlite_stores_the_same_values(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async with AsyncExitStack() as stack:
        h = await harness("sqlite", request, tmp_path, stack)
        for channel, bad, _ in UNSTORABLE.values():
            graph = fixable_graph(channel, bad, []).compile(checkpointer=h.saver)
            config = {"configurable": {"thread_id": f"sqlite-{uuid.uuid4().hex[:8]}"}}
            final = await h.invoke(graph, {}, config)
            assert final["done"] == ["start", "finish"]
