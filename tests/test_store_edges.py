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
from helpers import sql
from langgraph.graph import END, START

from langgraph_resilience import ResilientState, ResilientStateGraph, side_effect
from langgraph_resilience.errors import ConfigError


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


# -- thread ids: refused alike, deleted whole ------------------------------------------

HOSTILE_IDS = {
    "nul": ("job\x0042", "holds a NUL character at index 3"),
    "surrogate": ("job-\ud800", "is not valid Unicode"),
}


def effect_graph() -> ResilientStateGraph:
    @side_effect(name="send")
    def send(text: str) -> str:
        return f"sent {text}"

    def step(name: str) -> Any:
        def node(state: Channels) -> dict[str, Any]:
            return {"done": [*state.get("done", []), send(name)]}

        return node

    g = ResilientStateGraph(Channels)
    g.add_node("a", step("a"))
    g.add_node("b", step("b"))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g


@pytest.mark.parametrize("hostile", list(HOSTILE_IDS))
async def test_a_thread_id_one_dialect_cannot_store_is_refused_on_both(
    checkpointer: Any, hostile: str
) -> None:
    h = checkpointer
    thread_id, problem = HOSTILE_IDS[hostile]
    graph = effect_graph().compile(checkpointer=h.saver)
    with pytest.raises(ConfigError, match=problem):
        await h.invoke(graph, {}, {"configurable": {"thread_id": thread_id}})
    with pytest.raises(ConfigError, match=problem):
        await h.call("runs.submit", "run-hostile", thread_id, None, None)
    # Deleting such a thread is no error: there is nothing of it to delete.
    await h.call("delete_thread", thread_id)
    await h.call("prune", [thread_id], strategy="delete")


def thread_rows(target: str, thread_id: str) -> dict[str, int]:
    tables = [
        t
        for (t,) in sql("sqlite", target, "SELECT name FROM sqlite_master WHERE type = 'table'")
        if any(c[1] == "thread_id" for c in sql("sqlite", target, f"PRAGMA table_info({t})"))
    ]
    counts = {
        t: sql("sqlite", target, f"SELECT count(*) FROM {t} WHERE thread_id = ?", (thread_id,))[0][
            0
        ]
        for t in tables
    }
    return {t: n for t, n in counts.items() if n}


async def legacy_thread(h: Any, thread_id: str) -> dict[str, int]:
    """A thread stored under ``thread_id`` by a version that did not refuse it (the
    rows of a clean run, renamed in place): what delete must still remove."""
    clean = f"clean-{uuid.uuid4().hex[:8]}"
    graph = effect_graph().compile(checkpointer=h.saver)
    await h.invoke(graph, {}, {"configurable": {"thread_id": clean}})
    for table in thread_rows(h.target, clean):
        sql(
            "sqlite",
            h.target,
            f"UPDATE {table} SET thread_id = ? WHERE thread_id = ?",
            (thread_id, clean),
        )
    rows = thread_rows(h.target, thread_id)
    assert rows["checkpoints"] >= 3 and rows["writes"] >= 3 and rows["resilience_effects"] == 2
    return rows


@pytest.mark.parametrize("how", ["delete_thread", "prune", "prune_history"])
@pytest.mark.parametrize("name", ["sqlite", "sqlite-async"])
async def test_sqlite_deletes_a_thread_stored_under_a_nul_id_whole(
    name: str, how: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async with AsyncExitStack() as stack:
        h = await harness(name, request, tmp_path, stack)
        thread_id = "legacy\x00" + uuid.uuid4().hex[:6]
        bystander = "legacy"  # the id's text before its NUL: a thread of its own, kept
        kept = await legacy_thread(h, bystander)
        await legacy_thread(h, thread_id)
        if how == "delete_thread":
            await h.call("delete_thread", thread_id)
            assert thread_rows(h.target, thread_id) == {}
        elif how == "prune":
            await h.call("prune", [thread_id], strategy="delete")
            assert thread_rows(h.target, thread_id) == {}
        else:
            await h.call("prune_history", keep_last=1, thread_ids=[thread_id])
            left = thread_rows(h.target, thread_id)
            # The latest checkpoint stays with its own rows; the older ones go whole
            # (their writes and node attempts), the effects stay (the ledger).
            assert left["checkpoints"] == 1
            assert left.get("resilience_node_attempts", 0) <= 1
            assert sql(
                "sqlite",
                h.target,
                "SELECT count(*) FROM writes w WHERE thread_id = ? AND NOT EXISTS (SELECT 1 "
                "FROM checkpoints c WHERE c.thread_id = w.thread_id AND c.checkpoint_id = "
                "w.checkpoint_id)",
                (thread_id,),
            ) == [(0,)]
        assert thread_rows(h.target, bystander) == kept
