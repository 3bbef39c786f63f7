"""Errors a user can act on (issue 13, the parts in the graph and the policies):
each names what is wrong and what would be right, with the right type."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from graphs import OutState as State
from graphs import one_node as graph_of_one
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START
from langgraph.types import RetryPolicy

from langgraph_resilience import (
    Backoff,
    ConfigError,
    NodePolicy,
    ResilientStateGraph,
    TransientError,
    retry_failed,
    side_effect,
)


def one_node(node: Any, policy: NodePolicy | None, **kwargs: Any) -> ResilientStateGraph:
    return graph_of_one(ResilientStateGraph(State), "work", node, policy=policy, **kwargs)


def config() -> dict[str, Any]:
    return {"configurable": {"thread_id": uuid.uuid4().hex}}


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"initial_interval": 5, "max_interval": 0.1}, "max_interval"),
        ({"max_wait": -1}, "max_wait"),
    ],
)
def test_backoff_ranges_that_contradict_are_refused(kwargs: dict[str, Any], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        Backoff(**kwargs)


def test_a_retry_after_longer_than_max_wait_does_not_sleep_in_the_node() -> None:
    calls: list[int] = []

    def limited(state: State) -> dict[str, Any]:
        calls.append(1)
        raise TransientError("daily quota used up", retry_after=86400)

    policy = NodePolicy(retry=Backoff(max_attempts=5, initial_interval=0.001, max_wait=1))
    graph = one_node(limited, policy).compile(checkpointer=InMemorySaver())
    out = graph.invoke({"out": []}, config())
    log = out["resilience"]
    assert calls == [1]  # no retry: the wait is longer than max_wait
    assert log["status"] == "partial_complete"
    [hint] = log["recovery_suggestions"]
    assert "86400 s" in hint and "retry_failed(graph, config) after" in hint


def test_a_retry_after_within_max_wait_is_honoured() -> None:
    calls: list[int] = []

    def limited(state: State) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise TransientError("slow down", retry_after=0.01)
        return {"out": ["ok"]}

    policy = NodePolicy(retry=Backoff(initial_interval=0.001, max_wait=1))
    out = one_node(limited, policy).compile().invoke({"out": []})
    assert out["out"] == ["ok"] and calls == [1, 1]


def test_retry_failed_on_the_builder_says_to_pass_the_compiled_graph() -> None:
    builder = one_node(lambda s: {"out": ["x"]}, NodePolicy())
    with pytest.raises(ConfigError, match="compiled graph"):
        retry_failed(builder, config())  # type: ignore[arg-type]


def test_retry_failed_without_a_thread_id_says_what_config_it_needs() -> None:
    graph = one_node(lambda s: {"out": ["x"]}, NodePolicy()).compile(checkpointer=InMemorySaver())
    with pytest.raises(ConfigError, match="thread_id"):
        retry_failed(graph, {})


def test_a_node_policy_and_langgraphs_retry_policy_together_are_refused() -> None:
    with pytest.raises(ConfigError, match="retry_policy"):
        one_node(lambda s: {}, NodePolicy(), retry_policy=RetryPolicy(max_attempts=2))
    one_node(lambda s: {}, None, retry_policy=RetryPolicy(max_attempts=2))  # LangGraph's own


def test_wrong_wiring_inside_a_node_is_raised_not_turned_into_a_partial_result() -> None:
    @side_effect
    def send(to: str) -> str:
        return f"sent to {to}"

    def node(state: State) -> dict[str, Any]:
        return {"out": [send("a@x")]}

    graph = one_node(node, NodePolicy()).compile(checkpointer=InMemorySaver())
    with pytest.raises(ConfigError, match="resilient saver"):
        graph.invoke({"out": []}, config())


def test_a_failing_fallback_without_its_own_policy_ends_in_a_partial_result() -> None:
    def primary(state: State) -> dict[str, Any]:
        raise TransientError("primary is down")

    def backup(state: State) -> dict[str, Any]:
        raise RuntimeError("backup is down too")

    g = ResilientStateGraph(State)
    g.add_node("primary", primary, policy=NodePolicy(retry=None, fallback="backup"))
    g.add_node("backup", backup)  # no policy of its own
    g.add_node("report", lambda s: {"out": ["report"]})
    g.add_edge(START, "primary")
    g.add_edge("primary", "report")
    g.add_edge("backup", "report")
    g.add_edge("report", END)
    out = g.compile(checkpointer=InMemorySaver()).invoke({"out": []}, config())
    log = out["resilience"]
    assert log["status"] == "partial_complete"
    assert log["failed_step"]["node"] == "backup"
    assert log["failed_step"]["error_type"] == "RuntimeError"
    assert log["degraded_steps"] == ["primary"]


@pytest.mark.parametrize("url", ["sqlite:///runs/app.db", "sqlite+aiosqlite:///app.db"])
def test_a_sqlite_url_says_to_pass_a_path(url: str) -> None:
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    path = url.split(":///", 1)[1]
    with (
        pytest.raises(ConfigError, match=f"not a URL. Pass '{path}'"),
        ResilientSqliteSaver.from_conn_string(url),
    ):
        pass


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_postgres_saver_without_setup_says_to_call_setup(
    pg_dsn: str, is_async: bool
) -> None:
    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
    from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver

    graph = one_node(lambda s: {"out": ["x"]}, NodePolicy())
    with pytest.raises(ConfigError, match=r"saver\.setup\(\)"):
        if is_async:
            async with AsyncResilientPostgresSaver.from_conn_string(pg_dsn) as saver:
                await graph.compile(checkpointer=saver).ainvoke({"out": []}, config())
        else:
            with ResilientPostgresSaver.from_conn_string(pg_dsn) as saver:
                graph.compile(checkpointer=saver).invoke({"out": []}, config())


async def open_and_run(path: str, is_async: bool) -> None:
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
    from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver

    graph = one_node(lambda s: {"out": ["x"]}, NodePolicy())
    if is_async:
        async with AsyncResilientSqliteSaver.from_conn_string(path) as saver:
            await graph.compile(checkpointer=saver).ainvoke({"out": []}, config())
    else:
        with ResilientSqliteSaver.from_conn_string(path) as saver:
            graph.compile(checkpointer=saver).invoke({"out": []}, config())


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_damaged_sqlite_file_names_the_file_and_the_fix(
    tmp_path: Any, is_async: bool
) -> None:
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ConfigError, match=r"damaged\.db.*not a SQLite database"):
        await open_and_run(str(damaged), is_async)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_read_only_sqlite_file_names_the_file_and_the_fix(
    tmp_path: Any, is_async: bool
) -> None:
    import sqlite3

    path = tmp_path / "readonly.db"
    sqlite3.connect(path).close()
    # Opened read-only (as a file the process may not write would be; root
    # writes through file permissions, so the test says read-only by URI).
    uri = f"file:{path}?mode=ro"
    with pytest.raises(ConfigError, match=r"readonly\.db.*read-only.*write permission"):
        await open_and_run(uri, is_async)
