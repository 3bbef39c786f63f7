"""A step that gave up, then a crash before its error handler ran: the route
survives in the store, in the attempt row of the try that chose it (its kind,
tries and effect scope), the run reads as
going on (not failed) until the handler runs on resume, and then as the
partial result it is. On all four savers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Harness
from graphs import FAST, DoneState, appending, chain
from helpers import sql

from langgraph_resilience import NodePolicy, ResilientStateGraph, TransientError
from langgraph_resilience.history._report import alist_runs, arun_report, list_runs, run_report


class Killed(BaseException):
    """The process died: nothing more reaches the store, and no code of it runs
    after (a BaseException, as `SimulatedCrash`: no handler of an ``Exception``,
    the driver's telling the ledger that the run raised included, sees it)."""


def crash_after_error_write(saver: Any) -> None:
    """Once a task's error write is stored, refuse every later write (instance
    attributes, as a killed process stores nothing more)."""
    put_writes, aput_writes, put, aput = (
        saver.put_writes,
        saver.aput_writes,
        saver.put,
        saver.aput,
    )
    dead: list[bool] = []

    def refuse() -> None:
        if dead:
            raise Killed("the process was killed")

    def tapped_put_writes(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        refuse()
        put_writes(config, writes, task_id, task_path)
        if any(c == "__error__" for c, _ in writes):
            dead.append(True)

    async def tapped_aput_writes(
        config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        refuse()
        await aput_writes(config, writes, task_id, task_path)
        if any(c == "__error__" for c, _ in writes):
            dead.append(True)

    def tapped_put(*args: Any) -> Any:
        refuse()
        return put(*args)

    async def tapped_aput(*args: Any) -> Any:
        refuse()
        return await aput(*args)

    saver.__dict__.update(
        put_writes=tapped_put_writes,
        aput_writes=tapped_aput_writes,
        put=tapped_put,
        aput=tapped_aput,
    )


def untap(saver: Any) -> None:
    for name in ("put_writes", "aput_writes", "put", "aput"):
        saver.__dict__.pop(name, None)


def _graph(calls: list[str]) -> ResilientStateGraph:
    def flaky(name: str) -> None:
        calls.append(name)
        if name == "publish":
            raise TransientError("the service is down")

    return chain(
        ResilientStateGraph(DoneState),
        ["draft", "publish", "notify"],
        appending(flaky),
        lambda name: {"policy": NodePolicy(retry=FAST)} if name == "publish" else {},
    )


@pytest.mark.parametrize(
    "checkpointer", ["sqlite", "sqlite-async", "postgres", "postgres-async"], indirect=True
)
async def test_route_survives_a_crash_before_its_handler(checkpointer: Harness) -> None:
    calls: list[str] = []
    app = _graph(calls).compile(checkpointer=checkpointer.saver)
    thread = f"crash-before-handler-{checkpointer.id}"  # Postgres: one database for all
    config = {"configurable": {"thread_id": thread}}
    crash_after_error_write(checkpointer.saver)
    with pytest.raises(Killed):
        await checkpointer.invoke(app, {"done": []}, config)
    untap(checkpointer.saver)
    assert calls.count("publish") == 3

    state = await checkpointer.call("get_tuple", config)
    errors = [(t, v) for t, c, v in state.pending_writes if c == "__error__"]
    assert len(errors) == 1
    failed_task = errors[0][0]
    # The route is the attempt row's that chose it, not text in the stored error.
    assert "ResilienceRoute" not in str(errors[0][1]) and "route" not in str(errors[0][1])
    rows = sql(
        checkpointer.backend,
        checkpointer.target,
        "SELECT task_id, attempt, route FROM resilience_node_attempts "
        "WHERE thread_id = ? AND route IS NOT NULL",
        (thread,),
    )
    assert [(r[0], r[1]) for r in rows] == [(failed_task, 3)]
    assert json.loads(rows[0][2])["kind"] == "transient"
    # The run is not over: its handler has yet to run (it is no error run).
    assert await _status(checkpointer, thread) == "running"

    out = await checkpointer.invoke(app, None, config)
    assert calls.count("publish") == 3  # the handler routed it; no try again
    failed = out["resilience"]["failed_step"]
    assert failed["kind"] == "transient"
    assert failed["attempts"] == 3
    assert failed["task"] == f"publish:{failed_task}|{failed_task}"  # its effect scope
    assert failed["error_type"] == "TransientError"
    assert out["resilience"]["status"] == "partial_complete"
    assert await _status(checkpointer, thread) == "partial_complete"


async def _status(h: Harness, thread: str) -> str:
    """The run's status as `list_runs` and `run_report` read it (they agree)."""
    if h.is_async:
        listed, report = await alist_runs(h.saver), await arun_report(h.saver, thread)
    else:
        listed, report = list_runs(h.saver), run_report(h.saver, thread)
    (summary,) = [r for r in listed if r.thread_id == thread]
    assert summary.status == report.status
    return report.status
