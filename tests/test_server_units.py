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
    if h.backend == "redis":
        pytest.skip(
            "the Redis savers' history has no storage() (a thread's bytes per channel, "
            "read from the SQL tables): not built on Redis yet"
        )
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


def test_a_retry_takes_its_failed_runs_durability_else_sync() -> None:
    from langgraph_resilience.server._app import retry_durability

    assert retry_durability({"kwargs": {"durability": "exit"}}) == "exit"
    assert retry_durability({"kwargs": {"durability": "async"}}) == "async"
    assert retry_durability({"kwargs": {}}) == "sync"  # an older server's run
    assert retry_durability({"kwargs": {"durability": "fast"}}) == "sync"
    assert retry_durability(None) == "sync"  # no run id, or a run the server forgot


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


# -- the retry route on a plain parent (a supervisor) --------------------------------


class Api:
    """The Agent Server API the retry route calls (threads, state, history,
    runs), each as the server answers it, over one in-process compiled graph:
    a run is the graph invoked to its end (the server queues it)."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.runs: list[dict[str, Any]] = []
        #: The server's runs by id, as ``GET /threads/{id}/runs/{run_id}`` answers.
        self.known: dict[str, dict[str, Any]] = {}

    def routes(self) -> list[Any]:
        from starlette.routing import Route

        return [
            Route("/threads/{thread_id}", self.thread, methods=["GET"]),
            Route("/threads/{thread_id}/state", self.state, methods=["GET"]),
            Route("/threads/{thread_id}/state", self.update, methods=["POST"]),
            Route("/threads/{thread_id}/history", self.history, methods=["POST"]),
            Route("/threads/{thread_id}/runs", self.run, methods=["POST"]),
            Route("/threads/{thread_id}/runs/{run_id}", self.read_run, methods=["GET"]),
        ]

    async def read_run(self, request: Any) -> Any:
        found = self.known.get(request.path_params["run_id"])
        return self._json(found or {"detail": "not found"}, 200 if found else 404)

    @staticmethod
    def _json(value: Any, status: int = 200) -> Any:
        import json

        from starlette.responses import Response

        body = json.dumps(value, default=lambda v: getattr(v, "content", str(v)))
        return Response(body, status_code=status, media_type="application/json")

    @staticmethod
    def _snapshot(s: Any) -> dict[str, Any]:
        return {
            "values": s.values,
            "next": list(s.next),
            "checkpoint": s.config["configurable"],
            "metadata": s.metadata,
        }

    @staticmethod
    def _config(request: Any, **configurable: Any) -> dict[str, Any]:
        thread = request.path_params["thread_id"]
        return {"configurable": {"checkpoint_ns": "", **configurable, "thread_id": thread}}

    async def thread(self, request: Any) -> Any:
        metadata = {"graph_id": "team"}
        return self._json({"thread_id": request.path_params["thread_id"], "metadata": metadata})

    async def state(self, request: Any) -> Any:
        return self._json(self._snapshot(await self.graph.aget_state(self._config(request))))

    async def history(self, request: Any) -> Any:
        body = await request.json()
        before = body.get("before")
        found = [
            self._snapshot(s)
            async for s in self.graph.aget_state_history(
                self._config(request),
                limit=int(body.get("limit") or 1),
                before={"configurable": {"checkpoint_id": before}} if before else None,
            )
        ]
        return self._json(found)

    async def update(self, request: Any) -> Any:
        body = await request.json()
        config = self._config(request, **(body.get("checkpoint") or {}))
        done = await self.graph.aupdate_state(config, body.get("values"), as_node=body["as_node"])
        return self._json({"checkpoint": done["configurable"]})

    async def run(self, request: Any) -> Any:
        from langgraph.types import Command

        body = await request.json()
        self.runs.append(body)
        given = (body.get("config") or {}).get("configurable") or {}
        config = self._config(request, **given, **(body.get("checkpoint") or {}))
        command = body.get("command")
        value = Command(**command) if command else body.get("input")
        await self.graph.ainvoke(value, config, durability=body.get("durability"))
        return self._json({"run_id": f"run-{len(self.runs)}", "status": "success"})


def _server(api: Api, saver: Any) -> Any:
    from starlette.applications import Starlette

    from langgraph_resilience.server._app import app as ours

    served = Starlette(routes=[*ours.routes, *api.routes()])
    served.state.resilience_saver = saver
    return served


@pytest.mark.parametrize("first", [None, "async"], ids=["unknown", "known"])
async def test_the_retry_route_re_runs_a_supervisors_failed_agent_call(
    checkpointer: Any, first: str | None
) -> None:
    # Before: 409 nothing_to_retry (the supervisor keeps no run log), while
    # retry_failed(graph, config) in Python re-ran the failed agent call; the
    # retry's run took the server's default durability, "async". Now: the
    # failed run's own (``first``: the server's run of it, known by its run
    # id), else "sync".
    import uuid

    import httpx
    from test_shapes import supervisor, thread_runs

    if not checkpointer.is_async:
        pytest.skip("the server's saver is async")
    failures, sent = [1], []
    graph = supervisor(checkpointer, failures, sent)
    thread = str(uuid.uuid4())
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    api = Api(graph)
    if first is not None:  # the server's run id, in its config as the server puts it
        config["configurable"]["run_id"] = "server-run-1"
        api.known["server-run-1"] = {"run_id": "server-run-1", "kwargs": {"durability": first}}
    await graph.ainvoke({"messages": [("user", "research, then mail")]}, config, durability=first)
    assert await thread_runs(checkpointer, thread) == [(1, "partial_complete")]
    transport = httpx.ASGITransport(app=_server(api, checkpointer.saver))
    async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
        wrong = await client.post(f"/resilience/threads/{thread}/retry", json={"update": {}})
        assert wrong.status_code == 400 and wrong.json()["error"] == "bad_request", wrong.text
        reply = await client.post(f"/resilience/threads/{thread}/retry", json={})
        assert reply.status_code == 202, reply.text
        assert sent == ["boss"]
        assert api.runs[-1]["assistant_id"] == "team" and api.runs[-1]["input"] is None
        assert api.runs[-1]["durability"] == (first or "sync")
        assert await thread_runs(checkpointer, thread) == [(1, "success")]
        shown = await arun_report(checkpointer.saver, thread)
        assert (shown.status, [r["kind"] for r in shown.recoveries]) == (
            "success",
            ["retry_failed"],
        )
        again = await client.post(f"/resilience/threads/{thread}/retry", json={})
        assert again.status_code == 409 and again.json()["error"] == "nothing_to_retry"
