"""How each effect's outcome came about (`EffectRecord.how`), on every backend:
called once, replayed from the ledger, reconciled, or re-executed under its key.

A side effect without ``reconcile`` whose process died in its window is called
again with the same key on resume: the outside system saw it twice, and the
records, the report and the metrics say ``reexecuted``, never ``replayed``.
"""

from __future__ import annotations

import asyncio
import operator
import uuid
from typing import Annotated, Any

from graphs import FAST, one_node

from langgraph_resilience import (
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    arecovery_metrics,
    arun_report,
    recovery_metrics,
    run_report,
    side_effect,
)


class State(ResilientState, total=False):
    results: Annotated[list[Any], operator.add]


class Crash(BaseException):
    """Stands in for the process dying between the call and its outcome record."""


def _graph(h: Any, reconcile: Any = None, fail_after: list[bool] | None = None) -> Any:
    calls: list[str] = []
    crash = {"once": True}

    def send(to: str, key: str) -> str:
        calls.append(key)
        if crash.pop("once", False) and fail_after is None:
            raise Crash()
        return f"sent {to}"

    def after(results: list[Any]) -> dict[str, Any]:
        if fail_after:
            fail_after.pop()
            raise TimeoutError("the node failed after its effect")
        return {"results": results}

    options = {} if reconcile is None else {"reconcile": reconcile}
    if h.is_async:

        @side_effect(**options)
        async def email(to: str, *, idempotency_key: str) -> str:
            await asyncio.sleep(0)
            return send(to, idempotency_key)

        async def notify(state: dict[str, Any]) -> dict[str, Any]:
            return after([await email("a@x")])
    else:

        @side_effect(**options)
        def email(to: str, *, idempotency_key: str) -> str:  # type: ignore[misc]
            return send(to, idempotency_key)

        def notify(state: dict[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
            return after([email("a@x")])

    g = one_node(ResilientStateGraph(State), "notify", notify, policy=NodePolicy(retry=FAST))
    graph = g.compile(checkpointer=h.saver)
    graph.calls = calls  # type: ignore[attr-defined]
    return graph


def _cfg(h: Any, label: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"how-{label}-{h.id}-{uuid.uuid4().hex[:6]}"}}


async def _crashed_then_resumed(h: Any, graph: Any, config: dict[str, Any]) -> Any:
    try:
        await h.invoke(graph, {"results": []}, config)
    except Crash:
        pass
    else:
        raise AssertionError("the run should have crashed")
    return await h.invoke(graph, None, config)


async def _report(h: Any, thread: str) -> Any:
    if h.is_async:
        return await arun_report(h.saver, thread)
    return await asyncio.to_thread(run_report, h.saver, thread)


async def _metrics(h: Any) -> Any:
    if h.is_async:
        return await arecovery_metrics(h.saver)
    return await asyncio.to_thread(recovery_metrics, h.saver)


async def test_an_effect_called_again_after_a_crash_reads_reexecuted(checkpointer: Any) -> None:
    h = checkpointer
    graph, config = _graph(h), _cfg(h, "again")
    before = await _metrics(h)
    out = await _crashed_then_resumed(h, graph, config)
    assert out["results"] == ["sent a@x"]
    assert len(graph.calls) == 2 and len(set(graph.calls)) == 1  # twice, one key
    thread = config["configurable"]["thread_id"]
    [record] = await h.call("list_effects", thread)
    assert (record.status, record.how) == ("done", "reexecuted")
    report = await _report(h, thread)
    [entry] = report.effects
    assert entry.how == "reexecuted" and not entry.replayed
    assert "(reexecuted)" in entry.describe() and "replayed" not in entry.describe()
    after = await _metrics(h)
    assert after.effects_reexecuted - before.effects_reexecuted == 1
    assert after.effects_replayed == before.effects_replayed
    assert report.to_dict()["effects"][0]["how"] == "reexecuted"


async def test_a_reconciled_effect_reads_reconciled(checkpointer: Any) -> None:
    h = checkpointer
    done: dict[str, str] = {}

    def lookup(key: str) -> Any:
        return done.get(key, "sent a@x")  # the outside system says it happened

    graph, config = _graph(h, reconcile=lookup), _cfg(h, "rec")
    await _crashed_then_resumed(h, graph, config)
    assert len(graph.calls) == 1
    thread = config["configurable"]["thread_id"]
    [record] = await h.call("list_effects", thread)
    assert record.how == "reconciled"
    [entry] = (await _report(h, thread)).effects
    assert entry.how == "reconciled"


async def test_called_once_then_replayed_by_a_retry(checkpointer: Any) -> None:
    h = checkpointer
    graph, config = _graph(h, fail_after=[True]), _cfg(h, "replay")
    out = await h.invoke(graph, {"results": []}, config)
    assert out["results"] == ["sent a@x"] and len(graph.calls) == 1
    thread = config["configurable"]["thread_id"]
    [record] = await h.call("list_effects", thread)
    assert record.how == "called"  # the stored outcome came from the one call
