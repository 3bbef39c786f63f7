"""A finished branch is kept: a `Send` fan-out SIGKILLed while some branches have
finished and others still run re-runs, on resume, only the branches that had not
finished (SQLite and Postgres, sync and async; real processes).

A sync run's LangGraph pool once held a finished branch's writes behind every
branch not yet started (`graph._slots`): each branch that had finished ran again.

``LGR_CRASH_CASES`` (default 3) sets the trials: one per case in three.
"""

from __future__ import annotations

import asyncio
import operator
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from conftest import CRASH_CASES
from fanout_worker import crash_and_resume
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.graph import END, START
from langgraph.types import Send
from spawn import spawn

from langgraph_resilience import ResilientState, ResilientStateGraph

WORKER = str(Path(__file__).parent / "scripts" / "fanout_worker.py")
BRANCHES, STEP = 20, 0.03  # branch i takes i * STEP seconds: 0 to 0.57 s
KILL_AFTER = 0.35  # seconds after the first branch started: about half have finished
MARGIN = 0.2  # a branch that finished this long before the kill is stored


@pytest.mark.crash
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_branch_that_finished_before_a_crash_is_not_run_again(
    store: tuple[str, str], mode: str, tmp_path: Path
) -> None:
    for trial in range(max(1, CRASH_CASES // 3)):
        ledger = str(tmp_path / f"ledger-{trial}")
        thread = f"fanout-{mode}-{uuid.uuid4().hex[:8]}"

        def start(args: list[str], ledger: str = ledger, thread: str = thread) -> Any:
            flags = ["--step", str(STEP), *(["--async"] if mode == "async" else []), *args]
            return spawn(WORKER, *store, thread, ledger, *flags)

        run = crash_and_resume(start, ledger, KILL_AFTER)
        early = run.finished_before(MARGIN)
        assert len(early) >= 3, f"too few branches finished before the kill: {run}"
        assert len(run.finished) < BRANCHES, f"the kill came after the fan-out: {run}"
        assert not early & run.ran_again, (
            f"branches {sorted(early & run.ran_again)} finished {MARGIN} s or more before "
            f"the kill and ran again on resume: {run}"
        )
        assert run.ran_again >= set(range(BRANCHES)) - set(run.finished)
        assert run.done == list(range(BRANCHES))


# -- in one process: the mechanism, and the limit a run was given -------------------------


class Branches(ResilientState, total=False):
    done: Annotated[list[int], operator.add]
    i: int
    seen: Annotated[list[Any], operator.add]


def fan_out(branch: Any, n: int) -> ResilientStateGraph:
    g = ResilientStateGraph(Branches)
    g.add_node("fan", lambda state: {"done": []})
    g.add_node("branch", branch)
    g.add_edge(START, "fan")
    g.add_conditional_edges("fan", lambda s: [Send("branch", {"i": i}) for i in range(n)])
    g.add_edge("branch", END)
    return g


async def test_a_finished_branch_is_stored_while_its_siblings_wait_for_the_limit(
    checkpointer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``max_concurrency=2``, six branches: each branch that finished before
    the last one started is stored by then (LangGraph's executor once queued the
    save behind the branches waiting to start), and at most two ran at once."""
    events: list[tuple[float, str, int]] = []
    running: list[int] = []
    most = [0]

    def record(what: str, i: int) -> None:
        events.append((time.monotonic(), what, i))

    def begin(i: int) -> None:
        record("start", i)
        running.append(i)
        most[0] = max(most[0], len(running))

    def end(i: int) -> dict[str, Any]:
        running.remove(i)
        record("end", i)
        return {"done": [i]}

    def branch(state: dict[str, Any]) -> dict[str, Any]:
        begin(state["i"])
        time.sleep(0.03 + 0.06 * (state["i"] % 2))
        return end(state["i"])

    async def abranch(state: dict[str, Any]) -> dict[str, Any]:
        begin(state["i"])
        await asyncio.sleep(0.03 + 0.06 * (state["i"] % 2))
        return end(state["i"])

    def stored(writes: Any) -> None:
        for channel, value in writes:
            if channel == "done" and value:
                record("stored", value[0])

    saver = checkpointer.saver
    name = "aput_writes" if checkpointer.is_async else "put_writes"
    original = getattr(saver, name)
    if checkpointer.is_async:

        async def tap(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            await original(config, writes, task_id, task_path)
            stored(writes)
    else:

        def tap(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:  # type: ignore[misc]
            original(config, writes, task_id, task_path)
            stored(writes)

    monkeypatch.setattr(saver, name, tap)
    graph = fan_out(abranch if checkpointer.is_async else branch, 6).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": f"limit-{uuid.uuid4().hex[:8]}"}, "max_concurrency": 2}
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert sorted(out["done"]) == list(range(6))
    assert most[0] == 2
    last_start = max(t for t, what, _ in events if what == "start")
    # Decided by the order of events, not by how long a sleep took on a loaded
    # machine: with two at once, at least four branches ended before the last
    # one started; the latest of them let it start and may be stored just after.
    ends = sorted((t, i) for t, what, i in events if what == "end" and t < last_start)
    assert len(ends) >= 4
    ended_early = {i for _, i in ends[:-1]}
    stored_early = {i for t, what, i in events if what == "stored" and t < last_start}
    assert ended_early <= stored_early, f"finished, not stored: {ended_early - stored_early}"


@pytest.mark.parametrize("limit", [None, 3])
async def test_a_node_sees_the_max_concurrency_its_run_was_given(
    checkpointer: Any, limit: int | None
) -> None:
    """The room a run hands LangGraph's executor for the saves is not what a
    node's own code sees (a ``Runnable.batch`` in a node runs as under LangGraph)."""

    def seen(config: RunnableConfig) -> dict[str, Any]:
        return {"seen": [(config.get("max_concurrency"), get_config().get("max_concurrency"))]}

    def branch(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return seen(config)

    async def abranch(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return seen(config)

    graph = fan_out(abranch if checkpointer.is_async else branch, 3)
    config: dict[str, Any] = {"configurable": {"thread_id": f"seen-{uuid.uuid4().hex[:8]}"}}
    if limit is not None:
        config["max_concurrency"] = limit
    out = await checkpointer.invoke(graph.compile(checkpointer=checkpointer.saver), {}, config)
    assert out["seen"] == [(limit, limit)] * 3


class Done(TypedDict):
    done: Annotated[list[int], operator.add]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["as the node", "called in the node"])
async def test_a_subgraph_fan_out_in_a_branch_has_slots_of_its_own(
    checkpointer: Any, how: str
) -> None:
    """``max_concurrency=1``: a branch holds its run's one slot while its subgraph
    fans out; the subgraph's branches take slots of the subgraph's own run level
    (as LangGraph gives each level an executor of its own), so nothing waits forever."""

    def leaf(state: dict[str, Any]) -> dict[str, Any]:
        return {"done": [state["i"]]}

    async def aleaf(state: dict[str, Any]) -> dict[str, Any]:
        return leaf(state)

    inner_builder = ResilientStateGraph(Branches, output_schema=Done)
    inner_builder.add_node("fan", lambda state: {"done": []})
    inner_builder.add_node("leaf", aleaf if checkpointer.is_async else leaf)
    inner_builder.add_edge(START, "fan")
    inner_builder.add_conditional_edges("fan", lambda s: [Send("leaf", {"i": i}) for i in range(2)])
    inner_builder.add_edge("leaf", END)
    inner = inner_builder.compile()

    def branch(state: dict[str, Any]) -> dict[str, Any]:
        return {"done": inner.invoke({"done": []})["done"]}

    async def abranch(state: dict[str, Any]) -> dict[str, Any]:
        return {"done": (await inner.ainvoke({"done": []}))["done"]}

    outer = ResilientStateGraph(Branches)
    outer.add_node("fan", lambda state: {"done": []})
    called = abranch if checkpointer.is_async else branch
    outer.add_node("branch", inner if how == "as the node" else called)
    outer.add_edge(START, "fan")
    outer.add_conditional_edges("fan", lambda s: [Send("branch", {"i": i}) for i in range(3)])
    outer.add_edge("branch", END)
    graph = outer.compile(checkpointer=checkpointer.saver)
    config = {"configurable": {"thread_id": f"nested-{uuid.uuid4().hex[:8]}"}, "max_concurrency": 1}
    out = await checkpointer.invoke(graph, {"done": []}, config)
    assert sorted(out["done"]) == [0, 0, 0, 1, 1, 1]
