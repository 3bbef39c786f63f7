"""langgraph_resilience.server without a server: the factory, the storage read,
and a run's re-entry (the Agent Server's re-run of a run) stored as a recovery.

The whole story under a real ``langgraph dev`` is tests/test_agent_server.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import require_postgres
from langgraph.graph import END, START

from langgraph_resilience import ResilientState, ResilientStateGraph, arun_report, server
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.errors import ConfigError, RunStateError, StoreUnavailable
from langgraph_resilience.graph._retry_failed import retry_plan
from langgraph_resilience.server import _checkpointer as factory
from langgraph_resilience.server._app import command_json


class State(ResilientState, total=False):
    n: int
    note: str


def _builder(stop: dict[str, bool]) -> ResilientStateGraph[Any]:
    def one(state: State) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    def two(state: State) -> dict[str, Any]:
        if stop["now"]:
            raise RuntimeError("the worker died")  # no policy: LangGraph stops the run
        return {"note": "x" * 300}

    g = ResilientStateGraph(State)
    g.add_node("one", one)
    g.add_node("two", two, policy=None)
    g.add_edge(START, "one")
    g.add_edge("one", "two")
    g.add_edge("two", END)
    return g


async def test_the_factory_reads_lgr_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LGR_DB", raising=False)
    with pytest.raises(ConfigError, match="LGR_DB"):
        async with server.checkpointer():
            pass
    monkeypatch.setenv("LGR_DB", str(tmp_path / "a.db"))
    async with server.checkpointer() as first, server.checkpointer() as second:
        assert isinstance(first, AsyncResilientSqliteSaver)
        assert first is not second and first.conn is not second.conn  # one per entry


async def test_the_factory_pools_postgres(monkeypatch: pytest.MonkeyPatch, pg_dsn: str) -> None:
    require_postgres()
    monkeypatch.setenv("LGR_DB", pg_dsn)
    monkeypatch.setenv("LGR_POOL_SIZE", "2")
    async with server.checkpointer() as saver:
        assert type(saver).__name__ == "AsyncResilientPostgresSaver"
        assert saver.conn.max_size == 2
        assert (await saver.history.astorage("none")).empty
    monkeypatch.setenv("LGR_POOL_SIZE", "zero")
    with pytest.raises(ConfigError, match="LGR_POOL_SIZE"):
        async with server.checkpointer():
            pass


async def test_storage_counts_a_threads_rows(checkpointer: Any) -> None:
    h = checkpointer
    graph = _builder({"now": False}).compile(checkpointer=h.saver)
    config = {"configurable": {"thread_id": "stored"}}
    await h.invoke(graph, {"n": 1}, config)
    found = await h.call("history.storage", "stored")
    assert found.checkpoints >= 3 and found.checkpoint_bytes > 0
    assert found.channels["note"]["checkpoint_bytes"] > 300  # the value, in each checkpoint after
    assert found.channels["n"]["writes"] >= 1
    assert found.to_dict()["total_bytes"] == found.checkpoint_bytes + found.write_bytes
    assert not found.empty and (await h.call("history.storage", "other")).empty


async def test_a_reentry_into_a_run_is_a_crash_recovery(tmp_path: Path) -> None:
    """The same input under the same run id, after the run died mid-step: LangGraph
    resumes it (its re-entry rule), and our report counts a crash recovery."""
    stop = {"now": True}
    async with AsyncResilientSqliteSaver.from_conn_string(str(tmp_path / "r.db")) as saver:
        graph = _builder(stop).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "t", "run_id": "run-1"}}
        with pytest.raises(RuntimeError, match="died"):
            await graph.ainvoke({"n": 1}, config)
        stop["now"] = False
        out = await graph.ainvoke({"n": 1}, config)  # the server's re-run: input again
        assert out["n"] == 2  # one ran once: the input was not applied again
        report = await arun_report(saver, "t")
        assert report.run == 1
        assert [(r["kind"], r["redone_paths"]) for r in report.recoveries] == [("crash", ["two"])]
        # A new run id is a new input: a new run, no recovery.
        again = {"configurable": {"thread_id": "t", "run_id": "run-2"}}
        await graph.ainvoke({"n": 5}, again)
        latest = await arun_report(saver, "t")
        assert (latest.run, latest.recoveries) == (2, ())


def test_retry_plan_is_retry_faileds_command() -> None:
    values = {
        "resilience": {
            "status": "partial_complete",
            "failed_step": {"path": "publish", "node": "publish", "task": "publish:abc|abc"},
        }
    }
    plan = retry_plan(values, "t", update={"channel": "blog"})
    body = command_json(plan.command)
    assert body["goto"] == ["publish"]
    assert body["update"]["channel"] == "blog"
    assert body["update"]["resilience"]["clear"] == ["publish"]
    assert plan.configurable["lgr_effect_scope"]["node"] == "publish"
    with pytest.raises(RunStateError, match="no failed step"):
        retry_plan({"resilience": {"status": "success"}}, "t")
    nested = {"resilience": {**values["resilience"], "failed_step": {"path": "r/fetch"}}}
    with pytest.raises(RunStateError, match="inside a subgraph"):
        retry_plan(nested, "t")


async def test_an_unreachable_postgres_names_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factory, "_CONNECT_WAIT", 1.0)
    monkeypatch.setenv("LGR_DB", "postgresql://app:secret@127.0.0.1:1/runs?connect_timeout=1")
    with pytest.raises(StoreUnavailable, match="cannot connect to Postgres") as caught:
        async with server.checkpointer():
            pass
    assert "secret" not in str(caught.value)
