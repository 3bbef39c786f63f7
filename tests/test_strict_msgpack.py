"""Under ``LANGGRAPH_STRICT_MSGPACK=true``, the copies ``compile()`` makes of a saver
share everything with the user's object.

With the flag, ``compile()`` keeps ``checkpointer.with_allowlist(...)``: a
``copy.copy`` of the saver with a new ``serde``. The graph writes through its
copy; the Worker, the console and the command hold the user's object. A value
either one rebinds on itself (a flag set in ``setup()``, a setting read from
the connection, a replaced connection) would diverge. Here each saver is
compiled twice before its first use (so its copies set it up), runs on both
copies and through a Worker, and then no attribute of a copy differs from the
user's object but ``serde``; the console and the command read the runs.

LangGraph reads the flag at import: the fixture sets LangGraph's two module
flags (``compile()``'s and the serializer's) for the test and gives each saver
a serializer made under them (the default one was made at import), and the test
checks that ``compile()`` did copy the saver. Postgres savers are set up first
(they never set themselves up); SQLite ones are set up by their first copy.
``make test-strict`` (a leg of ``.ci/run``) runs the core test files with the
environment variable set.
"""

from __future__ import annotations

import asyncio
import json
import operator
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import langgraph._internal._serde as compile_flag
import langgraph.checkpoint.serde._msgpack as serde_flag
import pytest
from helpers import SAVER_KINDS, saver_of_kind
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START
from starlette.testclient import TestClient

from langgraph_resilience import ResilientState, ResilientStateGraph, Worker, side_effect
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.cli import main
from langgraph_resilience.server import console_app


@pytest.fixture(autouse=True)
def strict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_flag, "STRICT_MSGPACK_ENABLED", True)
    monkeypatch.setattr(serde_flag, "STRICT_MSGPACK_ENABLED", True)


class State(ResilientState, total=False):
    done: Annotated[list[str], operator.add]
    n: int


@side_effect
def notify(n: int) -> str:
    return f"sent {n}"


def builder() -> ResilientStateGraph:
    def first(state: State) -> dict[str, Any]:
        return {"done": [notify(state.get("n", 0))]}

    def second(state: State) -> dict[str, Any]:
        return {"done": ["second"]}

    g = ResilientStateGraph(State)
    g.add_node("first", first)
    g.add_node("second", second)
    g.add_edge(START, "first")
    g.add_edge("first", "second")
    return g


def diverged(saver: Any, copies: list[Any]) -> list[str]:
    """The attributes on which a copy and the user's object differ (``serde`` aside)."""
    mine = vars(saver)
    found = []
    for i, copy in enumerate(copies):
        assert copy is not saver, "compile() did not copy the saver: is strict mode on?"
        for name in sorted(set(vars(copy)) | set(mine)):
            if name != "serde" and vars(copy).get(name) is not mine.get(name):
                found.append(f"copy {i}: {name} = {vars(copy).get(name)!r} vs {mine.get(name)!r}")
    return found


@pytest.fixture(params=SAVER_KINDS)
async def made(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Any, str]]:
    """A saver with a strict serializer (SQLite: not set up), and its store's target."""
    async for saver, target in _opened(request, tmp_path):
        saver.serde = JsonPlusSerializer()  # made under the strict flag
        if isinstance(saver, ResilientPostgresSaver):
            saver.setup()
        elif isinstance(saver, AsyncResilientPostgresSaver):
            await saver.setup()
        yield saver, target


async def _opened(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Any, str]]:
    target, opened = saver_of_kind(request, tmp_path, "strict.db")
    if request.param.endswith("async"):
        async with opened as asaver:
            yield asaver, target
    else:
        with opened as saver:
            yield saver, target


async def test_copies_compile_makes_share_the_savers_state(made: tuple[Any, str]) -> None:
    saver, _ = made
    is_async = isinstance(saver, AsyncResilientSqliteSaver | AsyncResilientPostgresSaver)
    graphs = [builder().compile(checkpointer=saver) for _ in range(2)]
    copies = [g.checkpointer for g in graphs]
    for i, graph in enumerate(graphs):
        config = {"configurable": {"thread_id": f"copy-{i}-{id(saver)}"}}
        if is_async:
            out = await graph.ainvoke({"done": [], "n": i}, config)
        else:
            out = await asyncio.to_thread(graph.invoke, {"done": [], "n": i}, config)
        assert out["done"] == [f"sent {i}", "second"]
    worker = Worker(builder(), checkpointer=saver, lease_ttl=5)
    copies.append(worker.saver)
    if is_async:
        run_id = await worker.asubmit({"done": [], "n": 7})
        left = await worker.arun()
    else:
        run_id = await asyncio.to_thread(worker.submit, {"done": [], "n": 7})
        left = await asyncio.to_thread(worker.run)
    assert left[run_id] == "success"
    assert diverged(saver, copies) == []
    record = await (
        saver.aread_run(run_id) if is_async else asyncio.to_thread(saver.read_run, run_id)
    )
    assert record is not None and record.status == "success"


@pytest.mark.parametrize("made", ["sqlite", "postgres"], indirect=True)
def test_the_console_and_the_command_read_what_the_copies_wrote(
    made: tuple[Any, str], capsys: pytest.CaptureFixture[str]
) -> None:
    saver, target = made
    thread = f"console-{id(saver)}"
    graph = builder().compile(checkpointer=saver)
    assert graph.checkpointer is not saver
    graph.invoke({"done": [], "n": 3}, {"configurable": {"thread_id": thread}})
    with TestClient(console_app(saver)) as client:
        page = client.get("/run", params={"thread": thread})
        assert page.status_code == 200 and "second" in page.text
        assert thread in client.get("/").text
    assert main(["runs", "--db", target, "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert any(r["thread_id"] == thread and r["status"] == "success" for r in runs)
    assert diverged(saver, [graph.checkpointer]) == []
