"""Step rows leave out what they say already (schema version 30, `_step_rows`),
and every reader gives back the records it gave before: a step record stored
and read back on every backend, with and without the fields a row leaves
out; a store written by the release before (schema version 29) upgraded and
read the same; and the run log a checkpoint carries mid-run."""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Annotated, Any

import pytest
from conftest import open_saver
from helpers import chain, empty_store, package_at, sql
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START

from langgraph_resilience import ResilientState, ResilientStateGraph, recovery_metrics, run_report
from langgraph_resilience.checkpoint.runlog._step_rows import node_of_path, node_sql
from langgraph_resilience.checkpoint.store._store import POSTGRES, SQLITE
from langgraph_resilience.history._report import arun_report

ROOT = Path(__file__).resolve().parent.parent
WRITER = str(Path(__file__).parent / "old_store_writer.py")
BEFORE = "bb0aee5"  # the release before lean step rows (schema version 29)

# What a row leaves out (a completed step of one try: most rows) ...
LEAN = {
    "run": 1,
    "path": "loop#3",
    "node": "loop",
    "status": "completed",
    "attempts": 1,
    "kinds": [],
    "started_at": 1796150984.7284667,
    "ended_at": 1796150984.7285278,
    "summary": "n=3",
    "usage": {"steps": 1, "seconds": 1.1547000099199067e-05},
}
# ... and what it keeps: usage beyond one step's, the kinds of failed tries, a
# node its path does not name, a status other than completed.
RECORDS = {
    "lean": LEAN,
    "tokens": {
        **LEAN,
        "path": "research/fetch[2]",
        "node": "fetch",
        "status": "degraded",
        "attempts": 3,
        "kinds": ["transient", "rate_limit"],
        "summary": "",
        "usage": {"steps": 1, "seconds": 0.25, "tokens": 120, "cost": 0.0125},
        "run_id": "run-7",
        "worker": "w-1",
    },
    "inner": {  # a subgraph's failed inner step, stored under its parent's node
        **LEAN,
        "path": "research/fetch",
        "node": "research",
        "status": "failed",
        "kinds": ["permanent"],
        "usage": {"steps": 2, "seconds": 0.5},
    },
    "odd": {**LEAN, "path": "a#b", "node": "a#b", "status": "fallback", "usage": None},
    "whole": {**LEAN, "path": "w[1]#2", "node": "w", "usage": {"steps": 1, "seconds": 0}},
}


def stored_record(record: dict[str, Any]) -> dict[str, Any]:
    """A record as `step_history` lists it (absent fields read None)."""
    return {"run_id": None, "worker": None, **record}


async def test_a_step_record_reads_back_as_it_was_written_with_and_without_what_its_row_leaves_out(
    checkpointer: Any,
) -> None:
    h = checkpointer
    thread = f"lean-{h.id}-{uuid.uuid4().hex[:6]}"
    base = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    stored = await h.call("put", base, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    marker = {"resilience": {"new_run": 1796150984.7, "run": 1}}  # the run's row
    await h.call("put_writes", stored, list(marker.items()), "start")
    for task, record in RECORDS.items():
        await h.call("put_writes", stored, [("resilience", {"step": record})], task)
    checkpoint_id = stored["configurable"]["checkpoint_id"]
    listed = await h.call("step_history", thread)
    assert {s["task_id"]: s for s in listed} == {
        task: {
            **stored_record(record),
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint_id,
            "task_id": task,
        }
        for task, record in RECORDS.items()
    }
    # What the rows hold: the lean one leaves out its node, status, kinds and
    # usage (one step's seconds in their column); the others keep what they say.
    rows = sql(
        h.backend,
        h.target,
        "SELECT task_id, node, status, kinds, usage, seconds FROM resilience_steps "
        "WHERE thread_id = ?",
        (thread,),
    )
    got = {r[0]: tuple(r[1:]) for r in rows}
    assert got["lean"] == ("", "", None, None, LEAN["usage"]["seconds"])
    assert got["tokens"][:3] == ("", "degraded", '["transient", "rate_limit"]')
    assert json.loads(got["tokens"][3]) == {"tokens": 120, "cost": 0.0125}
    assert got["tokens"][4] == 0.25
    assert got["inner"][:3] == ("research", "failed", '["permanent"]')
    assert (json.loads(got["inner"][3]), got["inner"][4]) == ({"steps": 2, "seconds": 0.5}, None)
    assert got["odd"][:2] == ("a#b", "fallback") and got["odd"][3:] == (None, None)
    assert (json.loads(got["whole"][3]), got["whole"][4]) == ({"steps": 1, "seconds": 0}, None)
    # The run's tally, from the same rows: executions of what ran, usage summed.
    counts, usage = await h.call("history.tally", thread, 1)
    assert counts == {"loop": 1, "research/fetch[2]": 1, "w[1]": 1}
    assert usage == {
        "steps": 5,
        "seconds": pytest.approx(LEAN["usage"]["seconds"] + 0.75),
        "tokens": 120,
        "cost": 0.0125,
    }


def test_the_node_a_path_names() -> None:
    assert [
        node_of_path(p)
        for p in ("fetch", "fetch#3", "research/fetch", "work[2]", "a/work[2]#4", "a[1]/b/c#2")
    ] == ["fetch", "fetch", "fetch", "work", "work", "c"]


PATHS = ("fetch", "fetch#3", "research/fetch", "work[2]", "a/work[2]#4", "a[1]/b/c#2", "x/", "")


def test_sql_reads_the_node_a_path_names_as_python_does(store: tuple[str, str]) -> None:
    """What `recovery_metrics` joins a failed step's tries by (`node_sql`)."""
    backend, target = store
    d = SQLITE if backend == "sqlite" else POSTGRES
    rows = " UNION ALL ".join("SELECT ? AS path, ? AS node" for _ in PATHS)
    stored = [v for p in PATHS for v in (p, "")] + ["research/fetch", "research"]
    query = f"SELECT f.path, {node_sql(d, 'f')} FROM ({rows} UNION ALL SELECT ?, ?) f"
    got = sql(backend, target, query, tuple(stored))
    assert got == [(p, node_of_path(p)) for p in PATHS] + [("research/fetch", "research")]


# -- a store written by the release before ---------------------------------------------


@pytest.fixture(scope="module")
def before_package(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The package as it was at `BEFORE`, in a folder for PYTHONPATH."""
    return package_at(ROOT, BEFORE, tmp_path_factory.mktemp("before"))


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """An empty store: a SQLite file, or a Postgres database of its own."""
    yield from empty_store(request.param, tmp_path, "lean")


def plain(value: Any) -> Any:
    """As JSON gives it back (what the writer printed)."""
    return json.loads(json.dumps(value, default=str))


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_store_written_before_lean_rows_reads_the_same_after_the_upgrade(
    before_package: str, fresh_store: tuple[str, str], is_async: bool
) -> None:
    backend, target = fresh_store
    env = {**os.environ, "PYTHONPATH": before_package}
    done = subprocess.run(
        [sys.executable, WRITER, backend, target, "--all"],
        capture_output=True,
        text=True,
        env=env,
        cwd=before_package,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    old = json.loads(done.stdout.strip().splitlines()[-1])
    assert sql(backend, target, "SELECT max(v) FROM resilience_migrations") == [(29,)]
    async with AsyncExitStack() as stack:
        saver = await open_saver(backend, is_async, target, stack)
        steps, reports = {}, {}
        for thread in old["steps"]:
            if is_async:
                steps[thread] = list(await saver.astep_history(thread))
                reports[thread] = (await arun_report(saver, thread)).to_dict()
            else:
                steps[thread] = list(saver.step_history(thread))
                reports[thread] = run_report(saver, thread).to_dict()
        if not is_async:
            assert plain(recovery_metrics(saver).to_dict()) == old["metrics"]
    assert sql(backend, target, "SELECT max(v) FROM resilience_migrations") == [(30,)]
    assert plain(steps) == old["steps"]
    assert plain(reports) == old["reports"]
    # The rows stored before keep every field as written.
    rows = sql(backend, target, "SELECT count(*) FROM resilience_steps WHERE status = ''")
    assert rows == [(0,)]


# -- the run log a checkpoint carries mid-run --------------------------------------------


class LoopState(ResilientState, total=False):
    n: int
    seen: Annotated[list[Any], operator.add]


def loop_graph(h: Any, times: int) -> Any:
    def step(state: LoopState) -> dict[str, Any]:
        return {"n": state["n"] + 1, "seen": [dict(state["resilience"])]}

    g = ResilientStateGraph(LoopState)
    g.add_node("loop", step)
    g.add_edge(START, "loop")
    g.add_conditional_edges("loop", lambda s: END if s["n"] >= times else "loop", ["loop", END])
    return g.compile(checkpointer=h.saver)


async def test_the_run_log_mid_run_says_its_status_and_run_and_its_end_names_no_failed_step(
    checkpointer: Any,
) -> None:
    h = checkpointer
    graph = loop_graph(h, 3)
    config = {"configurable": {"thread_id": f"mid-{h.id}-{uuid.uuid4().hex[:6]}"}}
    before = time.time()
    out = await h.invoke(graph, {"n": 0}, config)
    # What each step saw: the run's status and number, nothing the run's row holds.
    assert out["seen"] == [{"status": "running", "run": 1}] * 3
    assert {k: out["resilience"][k] for k in ("status", "run", "failed_step")} == {
        "status": "success",
        "run": 1,
        "failed_step": None,
    }
    row = await h.call("history.run_row", config["configurable"]["thread_id"], 1)
    assert before <= row.started_at <= row.ended_at
    assert [
        s["path"] for s in await h.call("step_history", config["configurable"]["thread_id"])
    ] == [
        "loop",
        "loop#2",
        "loop#3",
    ]
    again = await h.invoke(graph, {"n": 0}, config)  # run 2 starts fresh
    assert again["seen"][3:] == [{"status": "running", "run": 2}] * 3


async def test_a_run_stored_only_at_its_exit_keeps_when_it_began(checkpointer: Any) -> None:
    """Its checkpoints mid-run are never stored, nor its steps: its row is
    written at its end, and its start is its invoke's."""
    h = checkpointer

    def slow(name: str) -> Any:
        def step(state: LoopState) -> dict[str, Any]:
            time.sleep(0.05)
            return {"seen": [name]}

        return step

    graph = chain(ResilientStateGraph(LoopState), ["a", "b"], slow).compile(checkpointer=h.saver)
    thread = f"exit-{h.id}-{uuid.uuid4().hex[:6]}"
    before = time.time()
    await h.invoke(graph, {"seen": []}, {"configurable": {"thread_id": thread}}, durability="exit")
    row = await h.call("history.run_row", thread, 1)
    assert row.status == "success"
    assert before <= row.started_at and row.ended_at - row.started_at >= 0.1
