"""The functional API, first-class: `task` under a `NodePolicy`, an entrypoint
run with its tasks as steps, `retry_failed` on an entrypoint, a task-level
crash resumed without redoing finished tasks. Every backend, sync and async;
the crash with a real SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import Harness
from helpers import read_ledger
from langgraph.func import entrypoint
from spawn import spawn

from langgraph_resilience import (
    Backoff,
    NodePolicy,
    PermanentError,
    TransientError,
    ValidationFailed,
    arecovery_metrics,
    aretry_failed,
    recovery_metrics,
    retry_failed,
)
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.graph import task
from langgraph_resilience.history import alist_runs, arun_report, list_runs, run_report

FAST = Backoff(max_attempts=4, initial_interval=0.001, max_interval=0.002)
SCRIPT = str(Path(__file__).parent / "scripts" / "task_worker.py")


def cfg(label: str, h: Harness) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}-{h.id}-{uuid.uuid4().hex[:6]}"}}


def tasks(h: Harness, fn: Any, **kwargs: Any) -> Any:
    """``fn`` as a `task` (async for an async saver, whose sync methods are not)."""
    if not h.is_async:
        return task(fn, **kwargs)

    async def afn(*args: Any) -> Any:
        return fn(*args)

    afn.__name__ = fn.__name__
    return task(afn, **kwargs)


def pipeline(h: Harness, body: Any) -> Any:
    """An entrypoint running ``body(n)`` (its tasks' futures resolved by it)."""
    if not h.is_async:
        return entrypoint(checkpointer=h.saver)(body)

    async def run(n: Any) -> Any:
        return await body(n)

    return entrypoint(checkpointer=h.saver)(run)


async def runs(h: Harness, thread: str) -> list[tuple[int, str]]:
    found = await alist_runs(h.saver) if h.is_async else await asyncio.to_thread(list_runs, h.saver)
    return [(r.run, r.status) for r in found if r.thread_id == thread]


async def report(h: Harness, thread: str) -> Any:
    if h.is_async:
        return await arun_report(h.saver, thread)
    return await asyncio.to_thread(run_report, h.saver, thread)


def steps_of(got: Any) -> list[tuple[str, str, int]]:
    return [(s.path, s.status, s.attempts) for s in got.steps]


async def test_a_task_under_a_policy_retries_falls_back_and_degrades(checkpointer: Harness) -> None:
    h, calls = checkpointer, {"flaky": 0, "draft": 0}

    def flaky(n: int) -> int:
        calls["flaky"] += 1
        if calls["flaky"] < 3:
            raise TransientError("blip")
        return n * 10

    def draft(n: int) -> str:
        calls["draft"] += 1
        if calls["draft"] < 2:
            raise ValidationFailed("not json")
        return "draft"

    def broken(n: int) -> int:
        raise PermanentError("gone")

    def lookup(n: int) -> int:
        raise PermanentError("the service is down")

    t_flaky = tasks(h, flaky, policy=NodePolicy(retry=FAST))
    t_draft = tasks(h, draft, policy=NodePolicy(retry=FAST))
    t_broken = tasks(h, broken, policy=NodePolicy(retry=FAST, critical=False), degraded=-1)
    t_lookup = tasks(h, lookup, policy=NodePolicy(retry=FAST), fallback=lambda n: 99)

    if h.is_async:

        async def body(n: int) -> list[Any]:
            return [await t(n) for t in (t_flaky, t_draft, t_broken, t_lookup)]

    else:

        def body(n: int) -> list[Any]:
            return [t(n).result() for t in (t_flaky, t_draft, t_broken, t_lookup)]

    graph, config = pipeline(h, body), cfg("policy", h)
    thread = config["configurable"]["thread_id"]
    assert await h.invoke(graph, 2, config, durability="sync") == [20, "draft", -1, 99]
    assert calls == {"flaky": 3, "draft": 2}  # transient and validation retried
    assert await runs(h, thread) == [(1, "success")]
    got = await report(h, thread)
    assert steps_of(got) == [
        ("flaky", "completed", 3),
        ("draft", "completed", 2),
        ("broken", "degraded", 1),
        ("lookup", "degraded", 1),
    ]
    assert got.status == "success"


async def test_a_critical_task_ends_the_run_short_and_retry_failed_redoes_only_it(
    checkpointer: Harness,
) -> None:
    h, ran = checkpointer, {"fetch": 0, "publish": 0}

    def fetch(n: int) -> int:
        ran["fetch"] += 1
        return n * 10

    def publish(n: int) -> str:
        ran["publish"] += 1
        if ran["publish"] == 1:
            raise PermanentError("the publisher refused")
        return f"published {n}"

    t_fetch = tasks(h, fetch, policy=NodePolicy(retry=FAST))
    t_publish = tasks(h, publish, policy=NodePolicy(retry=FAST))
    if h.is_async:

        async def body(n: int) -> str:
            return await t_publish(await t_fetch(n))

    else:

        def body(n: int) -> str:
            return t_publish(t_fetch(n).result()).result()

    graph, config = pipeline(h, body), cfg("critical", h)
    thread = config["configurable"]["thread_id"]
    with pytest.raises(PermanentError):
        await h.invoke(graph, 3, config, durability="sync")
    assert await runs(h, thread) == [(1, "partial_complete")]
    got = await report(h, thread)
    assert [f["path"] for f in got.failed_steps] == ["publish"]
    assert steps_of(got) == [("fetch", "completed", 1), ("publish", "failed", 1)]

    if h.is_async:
        out = await aretry_failed(graph, config)
    else:
        out = await asyncio.to_thread(retry_failed, graph, config)

    assert out == "published 30"
    assert ran == {"fetch": 1, "publish": 2}  # the finished task is not called again
    assert await runs(h, thread) == [(1, "success")]
    got = await report(h, thread)
    assert steps_of(got) == [("fetch", "completed", 1), ("publish", "completed", 2)]
    assert [r["kind"] for r in got.recoveries] == ["retry_failed"]
    if h.is_async:
        m = await arecovery_metrics(h.saver)
    else:
        m = await asyncio.to_thread(recovery_metrics, h.saver)
    assert m.recoveries_by_kind.get("retry_failed", 0) >= 1 and m.runs_ended >= 1


async def test_retry_failed_refuses_an_entrypoint_with_nothing_failed(
    checkpointer: Harness,
) -> None:
    from langgraph_resilience.errors import RunStateError

    h = checkpointer
    t_fetch = tasks(h, lambda n: n, policy=NodePolicy(retry=FAST))
    if h.is_async:

        async def body(n: int) -> int:
            return await t_fetch(n)

    else:

        def body(n: int) -> int:
            return t_fetch(n).result()

    graph, config = pipeline(h, body), cfg("nothing", h)
    await h.invoke(graph, 1, config, durability="sync")
    with pytest.raises(RunStateError, match="nothing to retry"):
        if h.is_async:
            await aretry_failed(graph, config)
        else:
            await asyncio.to_thread(retry_failed, graph, config)


@pytest.mark.crash
def test_killed_between_tasks_resumes_without_redoing_finished_ones(
    store: tuple[str, str], tmp_path: Path
) -> None:
    backend, target = store
    thread, ledger = f"tasks-{uuid.uuid4().hex[:6]}", str(tmp_path / "ledger.txt")
    first = spawn(SCRIPT, backend, target, thread, ledger, "--kill")
    first.communicate(timeout=60)
    assert first.returncode == -signal.SIGKILL
    assert [name for name, _ in read_ledger(ledger)] == ["fetch"]

    second = spawn(SCRIPT, backend, target, thread, ledger, "--resume")
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert '"published 41"' in out
    ran = read_ledger(ledger)
    assert [name for name, _ in ran] == ["fetch", "enrich", "publish"]
    assert ran[0][1] == str(first.pid) and {p for _, p in ran[1:]} == {str(second.pid)}
    saver_cls = ResilientSqliteSaver if backend == "sqlite" else ResilientPostgresSaver
    with saver_cls.from_conn_string(target) as saver:
        got = run_report(saver, thread)
    assert got.status == "success"
    assert [(s.path, s.status) for s in got.steps] == [
        ("fetch", "completed"),
        ("enrich", "completed"),
        ("publish", "completed"),
    ]
    assert os.path.exists(ledger)


async def test_degradable_context_overflow_and_budget_exhausted_in_a_task(
    checkpointer: Harness,
) -> None:
    """The other three kinds: a degradable failure takes the fallback at once, a
    context overflow is retried, a spent budget pauses the run until resumed."""
    from langgraph.types import Command

    from langgraph_resilience import Budget, BudgetExhausted, ContextOverflow, DegradableError

    h, c = checkpointer, {"deg": 0, "ctx": 0, "bud": 0}

    def deg(n: int) -> str:
        c["deg"] += 1
        raise DegradableError("the fast path is slow today")

    def ctx(n: int) -> str:
        c["ctx"] += 1
        if c["ctx"] == 1:
            raise ContextOverflow("prompt too long")
        return "short"

    def bud(n: int) -> str:
        c["bud"] += 1
        if c["bud"] == 1:
            raise BudgetExhausted("tokens spent")
        return "paid"

    t_deg = tasks(h, deg, policy=NodePolicy(retry=FAST), fallback=lambda n: "cached")
    t_ctx = tasks(h, ctx, policy=NodePolicy(retry=FAST))
    t_bud = tasks(h, bud, policy=NodePolicy(retry=FAST))
    if h.is_async:

        async def body(n: int) -> list[str]:
            return [await t(n) for t in (t_deg, t_ctx, t_bud)]

    else:

        def body(n: int) -> list[str]:
            return [t(n).result() for t in (t_deg, t_ctx, t_bud)]

    graph, config = pipeline(h, body), cfg("kinds", h)
    thread = config["configurable"]["thread_id"]
    paused = await h.invoke(graph, 1, config, durability="sync")
    assert paused["__interrupt__"][0].value["reason"] == "budget_exhausted"
    assert await runs(h, thread) == [(1, "paused")]

    out = await h.invoke(graph, Command(resume=Budget(max_tokens=1000)), config, durability="sync")

    assert out == ["cached", "short", "paid"]
    assert c == {"deg": 1, "ctx": 2, "bud": 2}  # degradable: no retry; the finished not redone
    assert await runs(h, thread) == [(1, "success")]
    assert steps_of(await report(h, thread)) == [
        ("deg", "degraded", 1),
        ("ctx", "completed", 2),
        ("bud", "completed", 2),
    ]
