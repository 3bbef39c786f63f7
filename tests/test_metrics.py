"""`recovery_metrics`: each figure checked against a scenario whose right value
is worked out by hand, on SQLite and Postgres.

- 10 runs, 3 of them ending with a partial result: partial_completion_rate 0.3,
  the runs spread over two worker processes, one SIGKILLed inside a step and
  taken over: the takeover redid exactly that step (steps_redone_per_recovery
  1.0) and its run ended well (recovery_success_rate 1.0);
- one checkpoint write that failed twice (a real lock held by another
  connection) and then succeeded: 3 tries, 1 succeeded (rate 1/3);
- `retry_failed`, human and budget resumes, a resume after the process stopped
  mid-run, and an effect replayed from the ledger: each counted in its kind.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from contextlib import AsyncExitStack, ExitStack
from dataclasses import fields
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import open_saver
from graphs import DoneState, chain
from helpers import emptied, read_ledger, saver_for
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.types import Command, interrupt
from spawn import Process, spawn

from langgraph_resilience import (
    Backoff,
    Budget,
    NodePolicy,
    PermanentError,
    RecoveryMetrics,
    ResilientStateGraph,
    arecovery_metrics,
    recovery_metrics,
    report_usage,
    retry_failed,
    run_report,
    side_effect,
)
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.cli._reports import metric_rows
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.history._metrics import COUNTS, METRICS
from langgraph_resilience.history._report import list_runs

SCRIPT = str(Path(__file__).parent / "scripts" / "metrics_worker.py")
_TABLES = (
    "checkpoints",
    "checkpoint_writes",
    "checkpoint_blobs",
    "resilience_runs",
    "resilience_node_attempts",
    "resilience_effects",
    "resilience_counters",
    "resilience_recoveries",
    "resilience_recovery_paths",
    "resilience_run_log",
    "resilience_steps",
)


@pytest.fixture
def fresh(store: tuple[str, str]) -> tuple[str, str]:
    """The store, empty: the metrics read all of it (the Postgres database is the
    module's, shared by its tests)."""
    return emptied(store, *_TABLES)


ONE_TRY = NodePolicy(retry=None)


def pipeline(behaviour: Any, saver: Any, policy: NodePolicy | None = ONE_TRY) -> Any:
    """a -> b -> c; each node runs ``behaviour(step)`` first (``policy=None``:
    LangGraph's own handling, an error stops the invoke)."""

    def make(step: str) -> Any:
        def node(state: DoneState) -> dict[str, Any]:
            behaviour(step)
            return {"done": [step]}

        return node

    options = lambda _: {"policy": policy}  # noqa: E731
    return chain(ResilientStateGraph(DoneState), ["a", "b", "c"], make, options).compile(
        checkpointer=saver
    )


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


# -- 10 runs over two worker processes, 3 partial, one taken over ---------------------


def wait_for(check: Any, timeout: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def worker(store: tuple[str, str], service: Path, *args: str) -> Process:
    return spawn(SCRIPT, *store, str(service), *args)


@pytest.mark.crash
@pytest.mark.timeout(180)
def test_ten_worker_runs_three_partial_one_takeover(fresh: tuple[str, str], tmp_path: Path) -> None:
    threads = [f"m-{i}-partial" if i < 3 else f"m-{i}" for i in range(10)]
    submit = worker(fresh, tmp_path, "submit", *threads)
    _, err = submit.communicate(timeout=60)
    assert submit.returncode == 0, err
    first = worker(fresh, tmp_path, "work", "--slow", "m-5")
    log = tmp_path / "steps.log"
    wait_for(lambda: log.exists() and any(p[0] == "slow" for p in read_ledger(log)), what="slow b")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    second = worker(fresh, tmp_path, "work")
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    ran_by = {(t, s): p for t, s, p in (x for x in read_ledger(log) if len(x) == 3)}
    assert ran_by[("m-0-partial", "a")] == str(first.pid)  # the runs were spread
    assert ran_by[("m-9", "c")] == str(second.pid)

    with saver_for(fresh) as saver:
        m = recovery_metrics(saver)
        report = run_report(saver, "m-5")
        listed = {r.thread_id: r for r in list_runs(saver)}
    # The report of the run taken over: the second worker went on and redid b.
    (takeover,) = report.recoveries
    assert takeover["kind"] == "takeover" and takeover["redone_paths"] == ["b"]
    assert f":{second.pid}:" in str(takeover["owner"])
    assert (listed["m-5"].attempts, listed["m-5"].recoveries) == (2, 1)
    assert listed["m-0-partial"].status == "partial_complete"
    # By hand: 10 runs ended, 3 with a partial result.
    assert (m.runs_ended, m.runs_partial, m.runs_succeeded) == (10, 3, 7)
    assert m.partial_completion_rate == pytest.approx(0.3)
    # One takeover (m-5, killed inside b), which redid b and nothing else.
    assert m.recoveries_by_kind["takeover"] == 1 and m.recoveries == 1
    assert m.steps_redone == 1 and m.steps_redone_per_recovery == pytest.approx(1.0)
    assert (m.runs_resumed, m.runs_resumed_succeeded) == (1, 1)
    assert m.recovery_success_rate == pytest.approx(1.0)
    json.dumps(m.to_dict())


# -- a checkpoint write that failed twice, then succeeded --------------------------------


def _hold_sqlite_lock(path: str, release: threading.Event, held: threading.Event) -> None:
    conn = sqlite3.connect(path)
    conn.execute("BEGIN IMMEDIATE")
    held.set()
    release.wait(30)
    conn.rollback()
    conn.close()


def _hold_pg_lock(dsn: str, release: threading.Event, held: threading.Event) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("LOCK TABLE checkpoints IN EXCLUSIVE MODE")
        held.set()
        release.wait(30)
        conn.rollback()


def test_a_write_that_failed_twice_then_succeeded_is_one_in_three(
    fresh: tuple[str, str],
) -> None:
    backend, target = fresh
    stack = ExitStack()
    retry = Backoff(max_attempts=5, initial_interval=0.3, backoff_factor=1.0, jitter="none")
    if backend == "sqlite":
        with ResilientSqliteSaver.from_conn_string(target) as s:
            s.setup()
        saver: Any = ResilientSqliteSaver(
            sqlite3.connect(target, timeout=0.01, check_same_thread=False), store_retry=retry
        )
        hold = _hold_sqlite_lock
    else:  # a lock not granted within lock_timeout: 55P03, a transient error
        dsn = f"{target} options='-c lock_timeout=50'"
        saver = stack.enter_context(ResilientPostgresSaver.from_conn_string(dsn, store_retry=retry))
        hold = _hold_pg_lock
    release, held = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold, args=(target, release, held))
    holder.start()
    held.wait(10)

    def release_after_two_failures() -> None:
        wait_for(
            lambda: saver._state.counters.snapshot().get("checkpoint_put_failed", 0) >= 2,
            what="two failed tries",
        )
        release.set()

    releaser = threading.Thread(target=release_after_two_failures)
    releaser.start()
    try:
        saver.put(
            {"configurable": {"thread_id": "w", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
        )
    finally:
        release.set()
        releaser.join()
        holder.join()
    saver.flush_counters()
    m = recovery_metrics(saver)
    stack.close()
    # By hand: three tries of one checkpoint write, the first two refused.
    assert (m.checkpoint_writes_tried, m.checkpoint_writes_failed) == (3, 2)
    assert m.checkpoint_save_success_rate == pytest.approx(1 / 3)


# -- each kind of recovery, in one process --------------------------------------------


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_retry_failed_counts_one_recovery_that_redid_the_failed_step(
    fresh: tuple[str, str], is_async: bool
) -> None:
    broken = {"on": True}

    def behaviour(step: str) -> None:
        if step == "b" and broken["on"]:
            raise PermanentError("b cannot be done yet")

    with saver_for(fresh) as saver:
        graph = pipeline(behaviour, saver)
        for thread in ("r-0", "r-1", "r-2", "r-3"):
            out = graph.invoke({"done": []}, config(thread))
            assert out["resilience"]["status"] == "partial_complete"
        broken["on"] = False
        retry_failed(graph, config("r-0"))
        m = recovery_metrics(saver, graph=graph)
    if is_async:
        async with AsyncExitStack() as stack:
            asaver = await open_saver(fresh[0], True, fresh[1], stack)
            m2 = await arecovery_metrics(asaver, graph=graph)
        assert m2 == m
    # By hand: 4 runs, 1 retried to success (b redone once), 3 still partial.
    assert (m.runs_ended, m.runs_partial) == (4, 3)
    assert m.partial_completion_rate == pytest.approx(0.75)
    assert m.recoveries_by_kind == {
        "crash": 0,
        "takeover": 0,
        "retry_failed": 1,
        "budget": 0,
        "human": 0,
    }
    assert m.steps_redone_per_recovery == pytest.approx(1.0)
    assert m.recovery_success_rate == pytest.approx(1.0)
    assert m.seconds_redone >= 0.0


def test_human_budget_and_crash_resumes_each_count_in_their_kind(
    fresh: tuple[str, str],
) -> None:
    now = {"ask": False, "spend": False, "die": False}

    def behaviour(step: str) -> None:
        if step == "a" and now["spend"]:
            report_usage(tokens=40)
        if step == "b" and now["ask"]:
            interrupt("approve?")
        if step == "c" and now["die"]:
            raise RuntimeError("the process died here")  # the invoke stops mid-run

    with saver_for(fresh) as saver:
        graph = pipeline(behaviour, saver, policy=None)
        now.update(ask=True)
        graph.invoke({"done": []}, config("h"))  # pauses in b
        out = graph.invoke(Command(resume="yes"), config("h"))
        assert out["done"] == ["a", "b", "c"]
        now.update(ask=False, spend=True)
        budgeted = config("g")
        budgeted["configurable"]["budget"] = Budget(max_tokens=10)
        graph.invoke({"done": []}, budgeted)  # a spends 40 tokens: b pauses first
        out = graph.invoke(Command(resume=Budget(max_tokens=1000)), budgeted)
        assert out["done"] == ["a", "b", "c"]
        now.update(spend=False, die=True)
        with pytest.raises(RuntimeError):
            graph.invoke({"done": []}, config("k"))
        now.update(die=False)
        graph.invoke(None, config("k"))  # the resume after the "crash"
        m = recovery_metrics(saver)
    kinds = m.recoveries_by_kind
    assert (kinds["human"], kinds["budget"], kinds["crash"]) == (1, 1, 1), kinds
    # The paused b runs again from its start (human), b after the budget pause,
    # and c, in flight when the run stopped.
    assert m.steps_redone_by_kind == {
        "crash": 1,
        "takeover": 0,
        "retry_failed": 0,
        "budget": 1,
        "human": 1,
    }
    assert m.steps_redone_per_recovery == pytest.approx(1.0)


def test_an_effect_done_before_the_failure_is_replayed_not_called_again(
    fresh: tuple[str, str],
) -> None:
    calls: list[str] = []
    broken = {"on": True}

    @side_effect(name="send")
    def send(*, idempotency_key: str) -> str:
        calls.append(idempotency_key)
        return "sent"

    def behaviour(step: str) -> None:
        if step == "b":
            send()
            if broken["on"]:
                raise PermanentError("b failed after sending")

    with saver_for(fresh) as saver:
        graph = pipeline(behaviour, saver)
        graph.invoke({"done": []}, config("e"))
        broken["on"] = False
        retry_failed(graph, config("e"))
        m = recovery_metrics(saver)
    assert len(calls) == 1
    assert m.effects_replayed == 1 and m.recoveries_by_kind["retry_failed"] == 1


def test_since_and_graph_narrow_the_runs(fresh: tuple[str, str]) -> None:
    with saver_for(fresh) as saver:
        graph = pipeline(lambda step: None, saver)
        graph.invoke({"done": []}, config("old"))
        m = recovery_metrics(saver, since=timedelta(seconds=60), graph=["a", "b", "c"])
        assert m.runs_ended == 1 and m.graph == ["a", "b", "c"]
        assert recovery_metrics(saver, graph=["x"]).runs == 0
        assert recovery_metrics(saver, since=0).runs == 0  # from now on: nothing yet
        with pytest.raises(ConfigError, match="since"):
            recovery_metrics(saver, since="yesterday")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="resilient saver"):
        recovery_metrics(object())


async def test_an_async_resume_after_a_stop_is_a_crash_recovery(fresh: tuple[str, str]) -> None:
    now = {"die": True}

    def behaviour(step: str) -> None:
        if step == "b" and now["die"]:
            raise RuntimeError("the process died here")

    async with AsyncExitStack() as stack:
        saver = await open_saver(fresh[0], True, fresh[1], stack)
        graph = pipeline(behaviour, saver, policy=None)
        with pytest.raises(RuntimeError):
            await graph.ainvoke({"done": []}, config("ak"))
        now["die"] = False
        out = await graph.ainvoke(None, config("ak"))
        assert out["done"] == ["a", "b", "c"]
        await graph.ainvoke(None, config("ak"))  # nothing left to do: not a recovery
        m = await arecovery_metrics(saver)
    assert m.recoveries_by_kind["crash"] == 1 and m.steps_redone == 1
    assert (m.runs_resumed, m.recovery_success_rate) == (1, 1.0)


def test_one_list_of_metrics_serves_the_api_the_cli_and_the_console() -> None:
    """A metric is added once (`METRICS`): the API computes its rate from its two
    counts, the ``metrics`` command prints it with them, the console plots it."""
    rates = [f.name for f in fields(RecoveryMetrics) if f.name.endswith(("_rate", "_per_recovery"))]
    assert [m.name for m in METRICS] == rates
    assert sorted(COUNTS) == sorted(
        f.name for f in fields(RecoveryMetrics) if f.type in ("int", int)
    )
    counts = {"runs_partial": 1, "runs_ended": 4, "steps_redone": 3, "recoveries": 2}
    m = RecoveryMetrics.of_counts(counts)
    assert (m.partial_completion_rate, m.steps_redone_per_recovery) == (0.25, 1.5)
    assert (m.recovery_success_rate, m.checkpoint_save_success_rate) == (None, None)
    rows = metric_rows(m)
    assert [r[0] for r in rows] == [x.name for x in METRICS]
    assert rows[0][1:] == ("0.25", "1 partial / 4 ended")
    pages = pytest.importorskip("langgraph_resilience.server._pages")
    page = pages.metrics_page([("b", m)], base="", per="hour")
    assert all(f'id="plot-{x.name}"' in page for x in METRICS)
