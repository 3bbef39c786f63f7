"""A partial result lists every step of its run that completed, on every backend,
even a step whose writes (its step row rides in them) had not landed in the
store when the partial result read the run's steps: LangGraph stores a task's
writes in the background and goes on to the next step without waiting. Seen
first as a Worker test's empty ``completed_steps`` now and then; here made
certain by writes that take 0.4 s to start.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from graphs import failing
from graphs import pipeline as one_try_pipeline
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_resilience import PermanentError
from langgraph_resilience.checkpoint.runlog._scope import RunScope

LATE = 0.4


def pipeline(h: Any) -> Any:
    """a -> b -> c; b fails for good (critical): the run ends with a partial result."""

    return one_try_pipeline(failing("b", lambda: PermanentError("b is broken"))).compile(
        checkpointer=h.saver
    )


def delay_step_writes(h: Any) -> None:
    """The saver stores a node's writes (those with ``done``) only after LATE seconds."""
    saver = h.saver
    if h.is_async:
        stored = saver.aput_writes

        async def aput_writes(config: Any, writes: Any, *args: Any) -> Any:
            if any(channel == "done" for channel, _ in writes):
                await asyncio.sleep(LATE)
            return await stored(config, writes, *args)

        saver.aput_writes = aput_writes
    else:
        put = saver.put_writes

        def put_writes(config: Any, writes: Any, *args: Any) -> Any:
            if any(channel == "done" for channel, _ in writes):
                time.sleep(LATE)
            return put(config, writes, *args)

        saver.put_writes = put_writes


async def test_a_partial_result_lists_a_step_whose_writes_had_not_landed(
    checkpointer: Any,
) -> None:
    h = checkpointer
    delay_step_writes(h)
    graph = pipeline(h)
    config = {"configurable": {"thread_id": f"late-{uuid.uuid4().hex[:8]}"}}
    out = await h.invoke(graph, {"done": []}, config)
    log = out["resilience"]
    assert (log["status"], log["failed_step"]["node"]) == ("partial_complete", "b")
    assert [s["path"] for s in log["completed_steps"]] == ["a"]
    # What the store holds once the run returned: the same step, listed once.
    stored = await h.call("step_history", config["configurable"]["thread_id"], run=1)
    assert [s["path"] for s in stored if s["status"] == "completed"] == ["a"]


async def test_a_partial_result_of_a_run_stored_only_at_its_exit_lists_its_steps(
    checkpointer: Any,
) -> None:
    h = checkpointer
    graph = pipeline(h)
    config = {"configurable": {"thread_id": f"exit-{uuid.uuid4().hex[:8]}"}}
    out = await h.invoke(graph, {"done": []}, config, durability="exit")
    log = out["resilience"]
    assert log["status"] == "partial_complete"
    assert [s["path"] for s in log["completed_steps"]] == ["a"]


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> list[RunScope]:
    """The scopes that held a completed step (`RunScope.finished`), one per step."""
    scopes: list[RunScope] = []
    finished = RunScope.finished

    def spy(self: RunScope, task_id: str, step: dict[str, Any]) -> None:
        scopes.append(self)
        finished(self, task_id, step)

    monkeypatch.setattr(RunScope, "finished", spy)
    return scopes


async def test_a_step_is_let_go_once_its_writes_landed(
    checkpointer: Any, held: list[RunScope]
) -> None:
    """The steps held for the partial result are let go as their writes land (a
    run of many steps does not keep them all): by the time ``invoke`` returns,
    LangGraph has stored every write, and the invoke's scope holds none."""
    h = checkpointer
    config = {"configurable": {"thread_id": f"held-{uuid.uuid4().hex[:8]}"}}
    await h.invoke(pipeline(h), {"done": []}, config)
    assert held, "no completed step was held"
    assert all(scope.unstored(1) == [] for scope in held)


def test_a_graph_without_a_resilient_saver_holds_no_step(held: list[RunScope]) -> None:
    """Without a saver that keeps step rows there is nothing to read back and
    nothing to hold: a long run on LangGraph's in-memory saver, or on none,
    keeps no record of its steps in memory."""
    for saver in (InMemorySaver(), None):
        harness = type("Plain", (), {"saver": saver})()
        config = {"configurable": {"thread_id": f"plain-{uuid.uuid4().hex[:8]}"}}
        out = pipeline(harness).invoke({"done": []}, config)
        assert out["resilience"]["status"] == "partial_complete"
    assert held == []
