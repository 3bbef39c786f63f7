"""What a user of the four resilient savers relies on, on every backend.

Each test runs on SQLite and Postgres, sync and async (the ``checkpointer``
fixture); the conformance suite covers the async savers' basic contract, these
tests cover the sync ones too and everything the suite does not.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from conftest import SAVERS, Harness, harness
from graphs import linear_graph
from helpers import add_resilience_rows, assert_no_fork, resilience_counts, sql
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from langgraph_resilience.errors import CheckpointConflict, CheckpointCorrupt, ConfigError

STEPS = ["a", "b", "c", "d"]


@pytest.fixture(params=list(SAVERS))
async def checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """The savers' own tests run on every backend, and on Postgres in pipeline mode
    and on a connection pool too (sync and async)."""
    async with AsyncExitStack() as stack:
        yield await harness(request.param, request, tmp_path, stack)


def cfg(thread_id: str, **extra: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, **extra}}


def new_checkpoint() -> Any:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=-1))
    return cp


async def put_chain(h: Any, thread_id: str, n: int, ns: str = "") -> list[dict[str, Any]]:
    """n checkpoints, each the child of the previous one."""
    stored: list[dict[str, Any]] = []
    parent: str | None = None
    for step in range(n):
        config = cfg(thread_id, checkpoint_ns=ns)
        if parent:
            config["configurable"]["checkpoint_id"] = parent
        source = "input" if step == 0 else "loop"
        saved = await h.call(
            "put", config, new_checkpoint(), {"source": source, "step": step - 1}, {}
        )
        parent = saved["configurable"]["checkpoint_id"]
        stored.append(saved)
    return stored


async def test_failed_step_resumes_without_redoing_completed_steps(checkpointer: Any) -> None:
    calls: Counter[str] = Counter()
    fail_once = {"c"}

    def behaviour(name: str) -> None:
        calls[name] += 1
        if name in fail_once:
            fail_once.discard(name)
            raise ConnectionError("model endpoint dropped the connection")

    graph = linear_graph(STEPS, behaviour).compile(checkpointer=checkpointer.saver)
    config = cfg("resume-" + checkpointer.id)
    with pytest.raises(ConnectionError):
        await checkpointer.invoke(graph, {"done": []}, config, durability="sync")
    out = await checkpointer.invoke(graph, None, config, durability="sync")
    assert out["done"] == STEPS
    assert calls == {"a": 1, "b": 1, "c": 2, "d": 1}
    counters = await checkpointer.call("read_counters")
    assert counters["checkpoint_put_ok"] >= 5
    assert counters["checkpoint_put_failed"] == 0


async def in_this_context(h: Any, method: str, *args: Any) -> Any:
    """A saver call in the test's own context (what it read stays its view)."""
    if h.is_async:
        return await getattr(h.saver, "a" + method)(*args)
    return getattr(h.saver, method)(*args)


async def test_a_stale_continuation_is_refused(checkpointer: Any) -> None:
    """Two resumers read the same head; the second to continue it is refused, no fork."""
    thread_id = "fork-" + checkpointer.id
    [first] = await put_chain(checkpointer, thread_id, 1)
    first_id = first["configurable"]["checkpoint_id"]
    read = await in_this_context(checkpointer, "get_tuple", cfg(thread_id))
    assert read.config["configurable"]["checkpoint_id"] == first_id  # this resumer's view
    # Another resumer (a context of its own, as another process) continues it first.
    resumer_view = cfg(thread_id, checkpoint_ns="", checkpoint_id=first_id)
    put_args = (resumer_view, new_checkpoint(), {"source": "loop", "step": 0}, {})
    if checkpointer.is_async:
        other = asyncio.get_running_loop().create_task(
            checkpointer.saver.aput(*put_args), context=contextvars.Context()
        )
        second = await other
    else:
        second = await asyncio.to_thread(
            contextvars.Context().run, checkpointer.saver.put, *put_args
        )
    refused = new_checkpoint()
    with pytest.raises(CheckpointConflict) as info:
        await in_this_context(
            checkpointer, "put", resumer_view, refused, {"source": "loop", "step": 0}, {}
        )
    err = info.value
    assert (err.thread_id, err.parent_id) == (thread_id, first_id)
    assert err.head_id == second["configurable"]["checkpoint_id"]
    assert err.checkpoint_id == refused["id"]
    assert await checkpointer.call("get_tuple", cfg(thread_id, checkpoint_id=refused["id"])) is None
    latest = await checkpointer.call("get_tuple", cfg(thread_id))
    assert latest.config["configurable"]["checkpoint_id"] == second["configurable"]["checkpoint_id"]
    assert_no_fork(checkpointer.backend, checkpointer.target, thread_id)
    # A refused save is a conflict, not a store failure.
    assert (await checkpointer.call("read_counters"))["checkpoint_put_failed"] == 0


async def test_an_explicitly_addressed_older_checkpoint_is_a_branch(checkpointer: Any) -> None:
    """A put continuing a checkpoint this context did not read as the latest (time
    travel, a replay, update_state on it) is stored as stock LangGraph stores it."""
    thread_id = "branch-" + checkpointer.id
    first, _ = await put_chain(checkpointer, thread_id, 2)
    await in_this_context(checkpointer, "get_tuple", cfg(thread_id))  # reads the head
    older = cfg(thread_id, checkpoint_ns="", checkpoint_id=first["configurable"]["checkpoint_id"])
    for source in ("input", "loop", "update", "fork"):
        await in_this_context(
            checkpointer, "put", older, new_checkpoint(), {"source": source, "step": 1}, {}
        )
    assert len(await checkpointer.listed(cfg(thread_id))) == 6


async def test_continuing_the_latest_and_saving_again_are_allowed(checkpointer: Any) -> None:
    thread_id = "ok-" + checkpointer.id
    first, second = await put_chain(checkpointer, thread_id, 2)
    # LangGraph re-puts a checkpoint with the same id (durability="exit"): allowed.
    again = cfg(thread_id, checkpoint_ns="", checkpoint_id=first["configurable"]["checkpoint_id"])
    cp = new_checkpoint()
    cp["id"] = second["configurable"]["checkpoint_id"]
    await checkpointer.call("put", again, cp, {"source": "loop", "step": 0}, {})
    # update and fork checkpoints branch on purpose.
    await checkpointer.call("put", again, new_checkpoint(), {"source": "update", "step": 1}, {})
    assert len(await checkpointer.listed(cfg(thread_id))) == 3


async def test_time_travel_and_update_state_still_work(checkpointer: Any) -> None:
    graph = linear_graph(STEPS).compile(checkpointer=checkpointer.saver)
    config = cfg("travel-" + checkpointer.id)
    await checkpointer.invoke(graph, {"done": []}, config, durability="sync")
    if checkpointer.is_async:
        history = [s async for s in graph.aget_state_history(config)]
    else:
        history = list(graph.get_state_history(config))
    after_b = next(s for s in history if s.values.get("done") == ["a", "b"])
    replayed = await checkpointer.invoke(graph, None, after_b.config, durability="sync")
    assert replayed["done"] == STEPS
    if checkpointer.is_async:
        updated = await graph.aupdate_state(after_b.config, {"done": ["edited"]})
    else:
        updated = graph.update_state(after_b.config, {"done": ["edited"]})
    out = await checkpointer.invoke(graph, None, updated, durability="sync")
    assert out["done"] == ["a", "b", "edited", "c", "d"]


async def test_maintenance_covers_the_resilience_rows(checkpointer: Any) -> None:
    backend, target = checkpointer.backend, checkpointer.target
    tid = "maint-" + checkpointer.id + "-" + uuid.uuid4().hex[:6]
    chain = await put_chain(checkpointer, tid, 3)
    old, latest = (
        chain[0]["configurable"]["checkpoint_id"],
        chain[-1]["configurable"]["checkpoint_id"],
    )
    add_resilience_rows(backend, target, tid, old)
    add_resilience_rows(backend, target, tid, latest)
    assert resilience_counts(backend, target, tid) == {
        "resilience_node_attempts": 2,
        "resilience_effects": 2,
        "resilience_runs": 2,
    }

    await checkpointer.call("copy_thread", tid, tid + "-copy")
    assert len(await checkpointer.listed(cfg(tid + "-copy"))) == 3
    copied = resilience_counts(backend, target, tid + "-copy")
    assert copied == {"resilience_node_attempts": 2, "resilience_effects": 2, "resilience_runs": 0}
    with pytest.raises(ConfigError, match="already has"):
        await checkpointer.call("copy_thread", tid, tid + "-copy")

    await checkpointer.call("prune", [tid], strategy="keep_latest")
    assert [
        t.config["configurable"]["checkpoint_id"] for t in await checkpointer.listed(cfg(tid))
    ] == [latest]
    kept = resilience_counts(backend, target, tid)
    assert kept == {"resilience_node_attempts": 1, "resilience_effects": 1, "resilience_runs": 2}

    await checkpointer.call("delete_thread", tid)
    assert resilience_counts(backend, target, tid) == dict.fromkeys(kept, 0)
    # the copy is untouched by what happened to its source
    assert len(await checkpointer.listed(cfg(tid + "-copy"))) == 3


async def test_delete_for_runs_removes_their_rows_only(checkpointer: Any) -> None:
    tid = "runs-" + checkpointer.id
    keep, drop = "run-keep-" + checkpointer.id, "run-drop-" + checkpointer.id
    first = await checkpointer.call(
        "put",
        cfg(tid, checkpoint_ns=""),
        new_checkpoint(),
        {"source": "input", "step": -1, "run_id": drop},
        {},
    )
    second_cfg = cfg(tid, checkpoint_ns="", checkpoint_id=first["configurable"]["checkpoint_id"])
    second = await checkpointer.call(
        "put", second_cfg, new_checkpoint(), {"source": "loop", "step": 0, "run_id": keep}, {}
    )
    add_resilience_rows(
        checkpointer.backend, checkpointer.target, tid, first["configurable"]["checkpoint_id"]
    )
    await checkpointer.call("delete_for_runs", [drop])
    remaining = await checkpointer.listed(cfg(tid))
    assert [t.metadata["run_id"] for t in remaining] == [keep]
    assert remaining[0].parent_config is None  # its parent is gone
    assert (
        remaining[0].config["configurable"]["checkpoint_id"]
        == second["configurable"]["checkpoint_id"]
    )
    counts = resilience_counts(checkpointer.backend, checkpointer.target, tid)
    assert counts["resilience_node_attempts"] == 0 and counts["resilience_effects"] == 0


async def test_thread_ids_with_quotes_and_semicolons_are_data(checkpointer: Any) -> None:
    nasty = "o'brien\"; DROP TABLE checkpoints; --" + checkpointer.id
    graph = linear_graph(STEPS).compile(checkpointer=checkpointer.saver)
    out = await checkpointer.invoke(graph, {"done": []}, cfg(nasty), durability="sync")
    assert out["done"] == STEPS
    await checkpointer.call("copy_thread", nasty, nasty + "'copy")
    await checkpointer.call("prune", [nasty + "'copy"])
    await checkpointer.call("delete_thread", nasty)
    assert await checkpointer.listed(cfg(nasty)) == []
    assert len(await checkpointer.listed(cfg(nasty + "'copy"))) == 1
    tables = sql(checkpointer.backend, checkpointer.target, "SELECT count(*) FROM checkpoints")
    assert tables[0][0] >= 1


async def test_corrupt_blob_names_thread_and_checkpoint(checkpointer: Any) -> None:
    backend, target = checkpointer.backend, checkpointer.target
    graph = linear_graph(STEPS).compile(checkpointer=checkpointer.saver)
    bad, good = "corrupt-" + checkpointer.id, "healthy-" + checkpointer.id
    await checkpointer.invoke(graph, {"done": []}, cfg(bad), durability="sync")
    await checkpointer.invoke(graph, {"done": []}, cfg(good), durability="sync")
    latest = (await checkpointer.call("get_tuple", cfg(bad))).config["configurable"][
        "checkpoint_id"
    ]
    if backend == "sqlite":
        sql(
            backend,
            target,
            "UPDATE checkpoints SET checkpoint = ? WHERE thread_id = ? AND checkpoint_id = ?",
            (b"\xc1\xff not msgpack", bad, latest),
        )
    else:
        sql(
            backend,
            target,
            "UPDATE checkpoint_blobs SET blob = ? WHERE thread_id = ?",
            (b"\xc1\xff not msgpack", bad),
        )
    with pytest.raises(CheckpointCorrupt) as info:
        await checkpointer.call("get_tuple", cfg(bad))
    assert info.value.thread_id == bad
    assert info.value.checkpoint_id == latest
    assert latest in str(info.value) and bad in str(info.value)
    with pytest.raises(CheckpointCorrupt):
        await checkpointer.listed(cfg(bad))
    # Nothing else is harmed: the other thread loads and runs.
    healthy = await checkpointer.call("get_tuple", cfg(good))
    assert healthy.checkpoint["channel_values"]["done"] == STEPS
    assert (await checkpointer.invoke(graph, {"done": []}, cfg(good), durability="sync"))[
        "done"
    ] == STEPS * 2


async def test_prune_and_copy_reject_bad_arguments(checkpointer: Any) -> None:
    with pytest.raises(ConfigError, match="not a single str"):
        await checkpointer.call("prune", "thread-as-str")
    with pytest.raises(ConfigError, match="unknown prune strategy"):
        await checkpointer.call("prune", ["t"], strategy="keep_oldest")
    with pytest.raises(ConfigError, match="two different threads"):
        await checkpointer.call("copy_thread", "same", "same")
    await checkpointer.call("prune", [])
    await checkpointer.call("delete_for_runs", [])


#: What used to be flat methods of every saver, now behind its interfaces.
MOVED = ("claim_intent", "record_outcome", "claim_runs", "finish_run", "read_history")


async def test_the_ledgers_are_reached_from_the_saver_and_act_on_it(checkpointer: Harness) -> None:
    """``compile()`` may ``copy.copy`` a saver: the copy's interfaces act on the copy."""
    saver = checkpointer.saver
    copied = copy.copy(saver)
    for name in ("effects", "attempts", "runs", "history"):
        assert getattr(copied, name)._saver is copied
        assert getattr(saver, name)._saver is saver
    assert not any(hasattr(saver, m) or hasattr(saver, "a" + m) for m in MOVED)
