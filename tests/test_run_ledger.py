"""The run ledger's rows (issue 25), on all four backends: a row per run and a
row per step, written when they happen, in the transaction of what they belong
to; what they hold after plain runs, nested runs, pauses, Workers, thread
copies, deletes and prunes; and threads stored before the ledger, read as before.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from graphs import DoneState, chain
from helpers import sql, tasks_written
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START
from langgraph.types import Command, interrupt
from spawn import spawn

from langgraph_resilience import (
    NodePolicy,
    PermanentError,
    ResilientStateGraph,
    Worker,
)
from langgraph_resilience.checkpoint.runlog import _run_log
from langgraph_resilience.history import alist_runs, list_runs


class State(DoneState, total=False):
    topic: str
    spec: dict[str, Any]
    n: int


def cfg(h: Any, label: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}-{h.id}-{uuid.uuid4().hex[:6]}"}}


def thread_of(config: dict[str, Any]) -> str:
    return str(config["configurable"]["thread_id"])


def node(h: Any, name: str, fail: bool = False) -> Any:
    def run(state: Any) -> dict[str, Any]:
        if fail:
            raise PermanentError(f"{name} is broken")
        return {"done": [name]}

    if not h.is_async:
        return run

    async def arun(state: Any) -> dict[str, Any]:
        return run(state)

    return arun


def chain_graph(h: Any, names: list[str], failing: str | None = None) -> Any:
    g = chain(
        ResilientStateGraph(State),
        names,
        lambda name: node(h, name, name == failing),
        lambda name: {"policy": NodePolicy(retry=None)} if name == failing else {},
    )
    return g.compile(checkpointer=h.saver)


def run_rows(h: Any, thread: str) -> list[tuple[Any, ...]]:
    return sql(
        h.backend,
        h.target,
        "SELECT run, status, checkpoint_id, started_at, ended_at, failed_step, usage, run_id, "
        "worker FROM resilience_run_log WHERE thread_id = ? ORDER BY run",
        (thread,),
    )


def step_rows(h: Any, thread: str) -> list[tuple[Any, ...]]:
    """(namespace, run, path, status, attempts) of a thread's step rows."""
    rows = sql(
        h.backend,
        h.target,
        "SELECT checkpoint_ns, run, path, status, attempts FROM resilience_steps "
        "WHERE thread_id = ? ORDER BY started_at",
        (thread,),
    )
    return [tuple(r) for r in rows]


async def run_row(h: Any, thread: str, run: int) -> Any:
    return await h.call("history.run_row", thread, run)


async def test_a_run_and_its_steps_are_rows(checkpointer: Any) -> None:
    h = checkpointer
    graph = chain_graph(h, ["a", "b", "c"])
    config = cfg(h, "rows")
    thread = thread_of(config)
    spec = {"topic": "tides", "spec": {"depth": 2, "tags": ["x", "ü"], "ratio": 0.5, "none": None}}
    await h.invoke(graph, {**spec, "done": []}, config)
    await h.invoke(graph, {"topic": "waves", "done": []}, config)
    rows = run_rows(h, thread)
    assert [(r[0], r[1]) for r in rows] == [(1, "success"), (2, "success")]
    first = await run_row(h, thread, 1)
    # The input, verbatim, stored once: in the run's row.
    assert first.task_spec_of(h.saver.serde.loads_typed) == {**spec, "done": []}
    inputs = [
        t.config["configurable"]["checkpoint_id"]
        for t in await h.listed({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        if t.metadata.get("source") == "input"
    ]
    assert sorted(r[2] for r in rows) == sorted(inputs)
    assert first.started_at <= first.ended_at and first.failed_step is None
    assert first.used()["steps"] == 3 and first.run_id is None and first.worker is None
    assert [(s[1], s[2], s[3], s[4]) for s in step_rows(h, thread)] == [
        (run, path, "completed", 1) for run in (1, 2) for path in "abc"
    ]
    steps = await h.call("step_history", thread, run=2)
    assert [s["path"] for s in steps] == ["a", "b", "c"] and {s["run"] for s in steps} == {2}
    assert steps[0]["usage"]["steps"] == 1 and steps[0]["kinds"] == []
    newest = await h.call("history.run_rows", thread)
    assert [r.run for r in newest] == [2, 1]
    page = await h.call("history.run_rows", thread, limit=1)
    after = await h.call(
        "history.run_rows", thread, before=(page[0].started_at, thread, page[0].run)
    )
    assert [r.run for r in page + after] == [2, 1]
    assert [r.run for r in await h.call("history.run_rows", thread, statuses=["running"])] == []


async def test_a_partial_result_ends_its_run_row(checkpointer: Any) -> None:
    h = checkpointer
    graph = chain_graph(h, ["a", "b", "c"], failing="b")
    config = cfg(h, "partial")
    out = await h.invoke(graph, {"done": []}, config)
    assert out["resilience"]["status"] == "partial_complete"
    row = await run_row(h, thread_of(config), 1)
    assert (row.status, row.failed_step) == ("partial_complete", "b")
    assert row.ended_at is not None
    statuses = [(s[2], s[3]) for s in step_rows(h, thread_of(config))]
    assert statuses == [("a", "completed"), ("b", "failed")]


def looping(h: Any) -> Any:
    """a loops on itself until n reaches 3, leaving through a conditional edge:
    no node knows it is the last."""

    def count(state: Any) -> dict[str, Any]:
        return {"n": int(state.get("n") or 0) + 1}

    g = ResilientStateGraph(State)
    g.add_node("a", count)
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: END if s["n"] >= 3 else "a")
    return g.compile(checkpointer=h.saver)


async def test_a_run_with_nothing_left_to_do_ends_success_invoked_or_streamed(
    checkpointer: Any,
) -> None:
    h = checkpointer
    graph = looping(h)
    config = cfg(h, "loop")
    await h.invoke(graph, {"n": 0}, config)
    if h.is_async:
        [c async for c in graph.astream({"n": 0}, config)]
    else:
        await asyncio.to_thread(lambda: list(graph.stream({"n": 0}, config)))
    rows = run_rows(h, thread_of(config))
    assert [(r[0], r[1]) for r in rows] == [(1, "success"), (2, "success")]
    assert all(r[4] is not None and json.loads(r[6])["steps"] == 3 for r in rows)
    paths = [s["path"] for s in await h.call("step_history", thread_of(config), run=2)]
    assert paths == ["a", "a#2", "a#3"]


async def test_the_saver_writes_the_end_of_a_run_a_conditional_edge_stopped(
    checkpointer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One writer of a run's end (issue 37): the checkpoint that leaves a run
    nothing to do ends its row, in that checkpoint's transaction, with its usage;
    the driver tells nothing when ``invoke`` / ``stream`` returns (before: its
    ``close_run`` wrote ``success``, and a process killed before it left the row
    ``running``)."""
    h = checkpointer
    told: list[tuple[Any, ...]] = []
    name = "aclose_run" if h.is_async else "close_run"
    history = h.saver.history

    def tell(self: Any, *args: Any) -> Any:
        told.append(args)
        raise AssertionError("the driver wrote the run's end")

    monkeypatch.setattr(type(history), name, tell)
    graph, config = looping(h), cfg(h, "saver-end")
    for durability in ("sync", "exit"):
        out = await h.invoke(graph, {"n": 0}, config, durability=durability)
        assert (out["n"], out["resilience"]["status"]) == (3, "success")
    rows = run_rows(h, thread_of(config))
    assert [(r[0], r[1]) for r in rows] == [(1, "success"), (2, "success")]
    assert all(r[4] is not None and json.loads(r[6])["steps"] == 3 for r in rows)
    assert told == []


async def test_get_state_reads_the_status_the_row_stores_and_lists_no_checkpoints(
    checkpointer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The status a run's row stores is the one ``get_state`` returns (issue 37):
    a loop a conditional edge stopped reads its row's ``success``, and the row's
    word, not a listing of the run's checkpoints, decides it (before: every
    ``get_state`` of such a run listed them)."""
    h = checkpointer
    graph, config = looping(h), cfg(h, "stored")
    await h.invoke(graph, {"n": 0}, config)

    def listed(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("get_state listed the run's checkpoints")

    monkeypatch.setattr(type(h.saver), "alist" if h.is_async else "list", listed)

    async def status() -> Any:
        if h.is_async:
            return (await graph.aget_state(config)).values["resilience"]["status"]
        return await asyncio.to_thread(
            lambda: graph.get_state(config).values["resilience"]["status"]
        )

    assert await status() == "success"
    if h.backend == "redis":  # the same edit of the row, on the saver's keys
        from redis_servers import set_run_log_status

        set_run_log_status(h.target, thread_of(config), "cancelled")
    else:
        sql(
            h.backend,
            h.target,
            "UPDATE resilience_run_log SET status = 'cancelled' WHERE thread_id = ?",
            (thread_of(config),),
        )
    assert await status() == "cancelled"


def asking(h: Any) -> Any:
    """One node that asks a human (an interrupt) for the topic."""

    def ask(state: Any) -> dict[str, Any]:
        return {"topic": interrupt("which topic?")}

    g = ResilientStateGraph(State)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g.compile(checkpointer=h.saver)


async def test_an_interrupt_pauses_the_run_row_and_a_resume_ends_it(checkpointer: Any) -> None:
    h = checkpointer
    graph = asking(h)
    config = cfg(h, "pause")
    await h.invoke(graph, {"done": []}, config)
    assert (await run_row(h, thread_of(config), 1)).status == "paused"
    out = await h.invoke(graph, Command(resume="tides"), config)
    assert out["topic"] == "tides"
    row = await run_row(h, thread_of(config), 1)
    assert row.status == "success" and row.ended_at is not None


def nested_graphs(h: Any) -> tuple[Any, Any]:
    """(a parent with a resilient subgraph node, a parent whose node invokes a
    resilient graph: the supervisor pattern), each inner graph two steps."""
    inner = ResilientStateGraph(State)
    inner.add_node("plan", node(h, "plan"))
    inner.add_node("fetch", node(h, "fetch"))
    inner.add_edge(START, "plan")
    inner.add_edge("plan", "fetch")
    inner.add_edge("fetch", END)
    sub = inner.compile()
    as_node = ResilientStateGraph(State)
    as_node.add_node("research", sub)
    as_node.add_node("report", node(h, "report"))
    as_node.add_edge(START, "research")
    as_node.add_edge("research", "report")
    as_node.add_edge("report", END)

    def supervise(state: Any) -> dict[str, Any]:
        out = sub.invoke({"done": []})
        return {"done": out["done"]}

    async def asupervise(state: Any) -> dict[str, Any]:
        out = await sub.ainvoke({"done": []})
        return {"done": out["done"]}

    inside = ResilientStateGraph(State)
    inside.add_node("supervise", asupervise if h.is_async else supervise)
    inside.add_edge(START, "supervise")
    inside.add_edge("supervise", END)
    return as_node.compile(checkpointer=h.saver), inside.compile(checkpointer=h.saver)


@pytest.mark.parametrize("shape", ["subgraph_node", "invoked_in_node"])
async def test_a_nested_run_is_steps_of_its_parents_run_and_no_run_row(
    checkpointer: Any, shape: str
) -> None:
    h = checkpointer
    as_node, inside = nested_graphs(h)
    graph = as_node if shape == "subgraph_node" else inside
    config = cfg(h, shape)
    thread = thread_of(config)
    for _ in range(2):
        out = await h.invoke(graph, {"done": []}, config)
        assert out["resilience"]["status"] == "success"
    assert [(r[0], r[1]) for r in run_rows(h, thread)] == [(1, "success"), (2, "success")]
    nested = [(s[1], s[2]) for s in step_rows(h, thread) if s[0]]
    where = "research" if shape == "subgraph_node" else "supervise"
    inner = [f"{where}/plan", f"{where}/fetch"]
    assert sorted(nested) == sorted((run, p) for run in (1, 2) for p in inner)
    total = sql(
        h.backend,
        h.target,
        "SELECT count(*) FROM resilience_run_log WHERE thread_id = ?",
        (thread,),
    )[0][0]
    assert total == 2


async def test_a_worker_run_row_names_its_run_and_worker(checkpointer: Any) -> None:
    h = checkpointer
    if h.backend == "postgres":  # a worker waits for every open run of the database
        sql(h.backend, h.target, "DELETE FROM resilience_runs")
    worker = Worker(chain_graph(h, ["a", "b"]), checkpointer=h.saver, worker_id="w-1")
    submit = worker.asubmit if h.is_async else worker.submit
    ok = await submit({"done": []}) if h.is_async else await asyncio.to_thread(submit, {"done": []})
    if h.is_async:
        await worker.arun()
    else:
        await asyncio.to_thread(worker.run)
    thread = (await h.call("read_run", ok)).thread_id
    row = await run_row(h, thread, 1)
    assert (row.status, row.run_id, row.worker) == ("success", ok, "w-1")
    assert {s["run_id"] for s in await h.call("step_history", thread)} == {ok}


async def test_a_worker_run_ends_as_its_checkpoints_tell_before_the_worker_finishes(
    checkpointer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The saver writes a Worker run's end, in the transaction of the checkpoint
    that ends it (issue 37): a loop a conditional edge stopped ends ``success``
    and a critical failure ``partial_complete`` even when what the Worker tells
    the ledger when it finishes, and what its invoke's driver tells on return,
    are lost (as when its process dies right then; before: the loop's row
    stayed ``running``); the Worker's record agrees."""
    h = checkpointer
    if h.backend == "postgres":  # a worker waits for every open run of the database
        sql(h.backend, h.target, "DELETE FROM resilience_runs")

    def lost(*args: Any, **kwargs: Any) -> Any:
        yield from ()

    monkeypatch.setattr(_run_log, "finish_worker_run", lost)

    async def alost(*args: Any, **kwargs: Any) -> None:
        return None

    history = type(h.saver.history)  # nor what the driver would tell on return
    if h.is_async:
        monkeypatch.setattr(history, "aclose_run", alost)
    else:
        monkeypatch.setattr(history, "close_run", lambda *args, **kwargs: None)
    for graph, ended in (
        (looping(h), "success"),
        (chain_graph(h, ["a", "b"], "b"), "partial_complete"),
    ):
        worker = Worker(graph, checkpointer=h.saver)
        value = {"n": 0} if ended == "success" else {"done": []}
        if h.is_async:
            run_id = await worker.asubmit(value)
            assert await worker.arun() == {run_id: ended}
        else:
            run_id = await asyncio.to_thread(worker.submit, value)
            assert await asyncio.to_thread(worker.run) == {run_id: ended}
        thread = (await h.call("read_run", run_id)).thread_id
        row = await run_row(h, thread, 1)
        assert (row.status, row.run_id, row.ended_at is not None) == (ended, run_id, True)


async def test_copy_delete_and_prune_keep_the_rows_with_their_thread(checkpointer: Any) -> None:
    h = checkpointer
    graph = chain_graph(h, ["a", "b", "c"])
    config = cfg(h, "maint")
    thread = thread_of(config)
    await h.invoke(graph, {"done": []}, config)
    copy = thread + "-copy"
    await h.call("copy_thread", thread, copy)
    assert run_rows(h, copy) == run_rows(h, thread) and len(step_rows(h, copy)) == 3
    assert await h.call("step_history", copy) == [
        {**s} for s in await h.call("step_history", thread)
    ]
    await h.call("prune", [copy])  # keep_latest: the steps of older checkpoints go
    assert await orphan_steps(h, copy) == 0 and len(step_rows(h, copy)) < 3
    assert len(run_rows(h, copy)) == 1  # the run itself happened
    await h.call("delete_thread", copy)
    assert run_rows(h, copy) == [] and step_rows(h, copy) == []
    assert len(step_rows(h, thread)) == 3


async def test_retention_takes_the_steps_of_the_checkpoints_it_drops(checkpointer: Any) -> None:
    h = checkpointer
    if h.backend == "redis":
        pytest.skip(
            "the Redis savers have no prune_history: their retention is ttl= and "
            "archive_idle (docs/redis.md); their prune is tested above"
        )
    graph = chain_graph(h, ["a", "b", "c"])
    config = cfg(h, "retain")
    thread = thread_of(config)
    await h.invoke(graph, {"done": []}, config)
    assert len(step_rows(h, thread)) == 3
    await h.call("prune_history", keep_last=1, thread_ids=[thread])
    assert await orphan_steps(h, thread) == 0 and len(step_rows(h, thread)) < 3


async def orphan_steps(h: Any, thread: str) -> int:
    """Step rows of a thread whose checkpoint is gone (the checkpoints: the saver's
    listing, on every backend)."""
    steps = sql(
        h.backend,
        h.target,
        "SELECT checkpoint_ns, checkpoint_id FROM resilience_steps WHERE thread_id = ?",
        (thread,),
    )
    listed = await h.listed({"configurable": {"thread_id": thread}})
    kept = {
        (t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"])
        for t in listed
    }
    return sum(1 for ns, cid in steps if (ns, cid) not in kept)


# -- a crash inside a step's transaction ------------------------------------------------

LEDGER_WORKER = str(Path(__file__).parent / "scripts" / "ledger_worker.py")


def steps_in_writes(backend: str, target: str, thread: str) -> set[tuple[str, ...]]:
    """The steps whose writes are stored (each step of `chain_graph` writes ``done``)."""
    return tasks_written(backend, target, thread, "done")


def steps_in_rows(backend: str, target: str, thread: str) -> set[tuple[str, str, str]]:
    rows = sql(
        backend,
        target,
        "SELECT checkpoint_ns, checkpoint_id, task_id FROM resilience_steps WHERE thread_id = ?",
        (thread,),
    )
    return {tuple(r) for r in rows}  # type: ignore[misc]


@pytest.mark.parametrize("where", ["before", "after"])
async def test_a_process_killed_in_a_steps_transaction_leaves_no_row_without_writes(
    store: tuple[str, str], where: str
) -> None:
    backend, target = store
    from conftest import open_saver

    thread = f"kill-{where}-{uuid.uuid4().hex[:6]}"
    async with AsyncExitStack() as stack:
        saver = await open_saver(backend, False, target, stack)
        proc = spawn(LEDGER_WORKER, backend, target, thread, "3", where)
        proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        held = await asyncio.to_thread(steps_in_writes, backend, target, thread)
        assert len(held) == 2  # steps a and b; c's writes and row died together
        assert steps_in_rows(backend, target, thread) == held

        class Sync:
            is_async = False

        h = Sync()
        h.saver = saver  # type: ignore[attr-defined]
        graph = chain_graph(h, ["a", "b", "c", "d"])
        config = {"configurable": {"thread_id": thread}}
        out = await asyncio.to_thread(graph.invoke, None, config)
        assert out["done"] == ["a", "b", "c", "d"]
        held = await asyncio.to_thread(steps_in_writes, backend, target, thread)
        # 4, or 3 when LangGraph had stored the checkpoint after c before c's
        # writes (it does not wait for them): the resume then runs d only.
        assert len(held) in (3, 4) and steps_in_rows(backend, target, thread) == held
        row = await asyncio.to_thread(saver.history.run_row, thread, 1)
        assert row.status == "success"


async def test_a_paused_worker_run_row_then_cancelled(checkpointer: Any) -> None:
    h = checkpointer
    if h.backend == "postgres":
        sql(h.backend, h.target, "DELETE FROM resilience_runs")
    worker = Worker(asking(h), checkpointer=h.saver, worker_id="w-2")
    if h.is_async:
        run_id = await worker.asubmit({"done": []})
        await worker.arun()
    else:
        run_id = await asyncio.to_thread(worker.submit, {"done": []})
        await asyncio.to_thread(worker.run)
    thread = (await h.call("read_run", run_id)).thread_id
    row = await run_row(h, thread, 1)
    assert (row.status, row.run_id, row.worker, row.ended_at) == ("paused", run_id, "w-2", None)
    if h.is_async:
        await worker.acancel(run_id, "no answer")
    else:
        await asyncio.to_thread(worker.cancel, run_id, "no answer")
    row = await run_row(h, thread, 1)
    assert row.status == "cancelled" and row.ended_at is not None


async def test_a_run_stored_only_at_its_exit_gets_its_row_when_it_ends(
    checkpointer: Any,
) -> None:
    h = checkpointer
    graph = chain_graph(h, ["a", "b"])
    config = cfg(h, "exit")
    out = await h.invoke(graph, {"done": []}, config, durability="exit")
    assert out["resilience"]["status"] == "success"
    row = await run_row(h, thread_of(config), 1)
    assert (row.status, row.task_spec, row.used()["steps"]) == ("success", None, 2)
    assert row.started_at <= row.ended_at


async def test_a_run_stored_only_at_its_exit_that_a_conditional_edge_ends_gets_its_row(
    checkpointer: Any,
) -> None:
    h = checkpointer
    graph, config = looping(h), cfg(h, "exit-edge")
    called = time.time()
    out = await h.invoke(graph, {"n": 0}, config, durability="exit")
    assert (out["n"], out["resilience"]["status"]) == (3, "success")
    if h.is_async:  # run 2, streamed
        [c async for c in graph.astream({"n": 0}, config, durability="exit")]
    else:
        await asyncio.to_thread(lambda: list(graph.stream({"n": 0}, config, durability="exit")))
    for run in (1, 2):
        row = await run_row(h, thread_of(config), run)
        assert row is not None, f"run {run} has no row in the ledger"
        assert (row.status, row.used()["steps"]) == ("success", 3)
        assert called <= row.started_at <= row.ended_at <= time.time()
    listed = await (alist_runs(h.saver) if h.is_async else asyncio.to_thread(list_runs, h.saver))
    assert [(r.run, r.status) for r in listed if r.thread_id == thread_of(config)] == [
        (2, "success"),
        (1, "success"),
    ]


async def test_a_run_stored_only_at_its_exit_that_pauses_gets_its_row_and_its_resume_ends_it(
    checkpointer: Any,
) -> None:
    h = checkpointer
    graph = asking(h)
    config = cfg(h, "exit-pause")
    await h.invoke(graph, {"done": []}, config, durability="exit")
    row = await run_row(h, thread_of(config), 1)
    assert (row.status, row.ended_at) == ("paused", None)
    out = await h.invoke(graph, Command(resume="tides"), config, durability="exit")
    assert out["topic"] == "tides"
    row = await run_row(h, thread_of(config), 1)
    assert row.status == "success" and row.started_at <= row.ended_at


async def test_a_marker_written_by_a_node_that_numbers_its_run_starts_its_row(
    checkpointer: Any,
) -> None:
    """What an agent's middleware writes when its run starts (no input checkpoint
    of a `ResilientStateGraph` to start it): the row starts with that write."""
    h = checkpointer
    thread = f"marker-{h.id}-{uuid.uuid4().hex[:6]}"
    base = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    stored = await h.call("put", base, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    marker = {"resilience": {"new_run": 1234.5, "run": 4}}
    await h.call("put_writes", stored, list(marker.items()), "task-1")
    row = await run_row(h, thread, 4)
    assert (row.status, row.started_at, row.checkpoint_id) == (
        "running",
        1234.5,
        stored["configurable"]["checkpoint_id"],
    )
