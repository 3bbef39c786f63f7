"""The cold tier: archive idle threads, restore them on access, size budgets, retention.

Every backend (SQLite and Postgres, sync and async) against a local-filesystem
archive; the S3 round trip and the crash cases are in test_archive_s3.py and
test_archive_crash.py.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from graphs import DoneState
from helpers import sql
from langgraph.graph import END, START
from langgraph.types import Command, interrupt

from langgraph_resilience import (
    Archive,
    ConfigError,
    NodePolicy,
    PermanentError,
    ResilientStateGraph,
    Worker,
    aretry_failed,
    retry_failed,
    side_effect,
)
from langgraph_resilience.checkpoint.archive._codec import thread_prefix
from langgraph_resilience.checkpoint.saver import _base
from langgraph_resilience.errors import (
    ArchiveError,
)


class State(DoneState, total=False):
    answer: str


class Calls:
    def __init__(self) -> None:
        self.nodes: list[str] = []
        self.charges = 0
        self.fail_once = True


def build(h: Any, calls: Calls, *, ask: bool = False) -> Any:
    """pay (a side effect) -> then (asks a human, or fails once) -> end."""

    @side_effect(name="charge")
    def charge(amount: int, *, idempotency_key: str) -> str:
        calls.charges += 1
        return f"receipt-{amount}"

    def pay(state: State) -> dict[str, Any]:
        calls.nodes.append("pay")
        charge(42)
        return {"done": ["pay"]}

    def then(state: State) -> dict[str, Any]:
        calls.nodes.append("then")
        if ask:
            return {"done": ["then"], "answer": interrupt("approve?")}
        if calls.fail_once:
            calls.fail_once = False
            raise PermanentError("the service said no")
        return {"done": ["then"]}

    g = ResilientStateGraph(State)
    g.add_node("pay", pay, policy=NodePolicy(retry=None))
    g.add_node("then", then, policy=NodePolicy(retry=None, critical=True))
    g.add_edge(START, "pay")
    g.add_edge("pay", "then")
    g.add_edge("then", END)
    return g.compile(checkpointer=h.saver)


_ROWS = "counts hot checkpoint rows in SQL"
_PER = "expects one archive object per checkpoint (Redis demotes a thread as one object)"
#: The cases a Redis saver skips, and why: the SQL savers' cold tier keeps an object per
#: checkpoint and its options live in ``saver._state``; the Redis savers demote a whole
#: thread as one object, past its TTL (their cases: test_redis.py, "demoted").
SQL_TIER_ONLY = {
    "test_archive_and_restore_round_trip": f"{_ROWS}; {_PER}",
    "test_a_paused_thread_resumes_from_the_archive_without_redoing": _ROWS,
    "test_a_thread_with_an_open_run_or_recent_activity_stays_hot": (
        f"{_ROWS}; Redis demotes by idle time only, a queued run's thread too (reported)"
    ),
    "test_a_corrupt_object_raises_naming_the_thread_and_object": f"{_ROWS}; {_PER}",
    "test_a_saver_without_the_archive_refuses_an_archived_thread": (
        "unsets the SQL saver's saver._state.archive (Redis: saver.archive, test_redis.py)"
    ),
    "test_an_unreachable_bucket_loses_nothing": f"{_ROWS}; sets saver._state.archive",
    "test_a_large_checkpoint_warns_naming_its_largest_channels": (
        "sets the SQL saver's size budget in saver._state (Redis: warn_checkpoint_bytes=)"
    ),
    "test_max_checkpoint_bytes_refuses_with_a_clear_error": (
        "sets the SQL saver's size budget in saver._state "
        "(Redis: test_a_checkpoint_over_the_size_budget_is_refused)"
    ),
    "test_prune_history_keeps_the_latest_and_the_ledger": "prune_history is SQL only",
    "test_prune_history_drops_only_ended_runs": "prune_history is SQL only",
    "test_reading_a_hot_thread_adds_no_archive_check": "counts the SQL saver's _query calls",
    "test_a_worker_archives_idle_threads_as_it_runs": _ROWS,
    "test_delete_and_copy_reach_an_archived_thread": (
        f"{_PER} (Redis: test_a_demoted_thread_is_copied_and_deleted_whole)"
    ),
    "test_leftovers_of_a_restore_are_replaced_by_the_next_archival": _PER,
    "test_a_run_working_while_its_thread_is_archived_is_refused_not_split": (
        "drives the SQL demotion under a working run; Redis's own (test_redis.py "
        "test_a_thread_written_while_being_demoted_stays_hot) differs (reported)"
    ),
    "test_the_run_report_of_an_archived_thread_restores_it": _ROWS,
}


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    return Archive(f"file://{tmp_path}/archive")


@pytest.fixture
def h(checkpointer: Any, archive: Archive, request: pytest.FixtureRequest) -> Any:
    """The saver with ``archive`` as its cold tier; on Redis, only the cases whose
    checks read the same there (`SQL_TIER_ONLY` names why the others skip)."""
    if checkpointer.backend == "redis":
        reason = SQL_TIER_ONLY.get(request.function.__name__)
        if reason is not None:
            pytest.skip(f"SQL cold tier only: {reason}")
        checkpointer.saver.archive = archive  # what archive=... on its constructor sets
        return checkpointer
    _base.set_lifecycle(checkpointer.saver._state, archive, _base.WARN_BYTES, None)
    return checkpointer


def thread(h: Any, label: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}/{h.id}-{uuid.uuid4().hex[:6]}"}}


def hot_rows(h: Any, thread_id: str) -> int:
    return int(sql(h.backend, h.target, _count(h), (thread_id,))[0][0])


def _count(h: Any) -> str:
    q = "SELECT count(*) FROM checkpoints WHERE thread_id = ?"
    return q if h.backend == "sqlite" else q.replace("?", "%s")


async def finished(h: Any, label: str) -> tuple[Calls, Any, dict[str, Any], str]:
    """A thread whose run ended (pay, then), for the cases that only need one."""
    calls = Calls()
    calls.fail_once = False
    graph = build(h, calls)
    config = thread(h, label)
    await h.invoke(graph, {"done": []}, config)
    return calls, graph, config, config["configurable"]["thread_id"]


def objects(archive: Archive, thread_id: str) -> list[str]:
    return archive.keys(thread_prefix(thread_id))


async def test_archive_and_restore_round_trip(h: Any, archive: Archive) -> None:
    calls = Calls()
    graph = build(h, calls)
    config = thread(h, "round")
    thread_id = config["configurable"]["thread_id"]
    calls.fail_once = False
    out = await h.invoke(graph, {"done": []}, config)
    before = [(t.checkpoint["id"], t.metadata["step"]) for t in await h.listed(config)]
    steps_before = await h.call("step_history", thread_id)

    report = await h.call("archive_idle", 0)

    assert thread_id in report.archived and not report.failed
    assert hot_rows(h, thread_id) == 0
    assert len(await h.call("list_effects", thread_id)) == 1  # the ledger stays hot
    keys = objects(archive, thread_id)
    assert len(keys) == len(before)  # one object per checkpoint, keyed by step and id
    assert keys[-1].endswith(f"{max(s for _, s in before):010d}-{before[0][0]}")
    # the run ledger stays hot: its step records read without a restore
    assert await h.call("step_history", thread_id) == steps_before
    # a read restores it, whole: history, step records, the state
    assert await h.call("archive_idle", 0)
    state = await h.call("get_tuple", config)
    assert state.checkpoint["channel_values"]["done"] == out["done"]
    assert [(t.checkpoint["id"], t.metadata["step"]) for t in await h.listed(config)] == before
    assert await h.call("step_history", thread_id) == steps_before
    assert objects(archive, thread_id) == []  # the hot tier is the truth again
    # archiving again works (nothing left over refuses it)
    assert thread_id in (await h.call("archive_idle", 0)).archived
    assert [(t.checkpoint["id"], t.metadata["step"]) for t in await h.listed(config)] == before


async def test_a_paused_thread_resumes_from_the_archive_without_redoing(h: Any) -> None:
    calls = Calls()
    graph = build(h, calls, ask=True)
    config = thread(h, "paused")
    await h.invoke(graph, {"done": []}, config)
    assert calls.nodes == ["pay", "then"] and calls.charges == 1
    assert config["configurable"]["thread_id"] in (await h.call("archive_idle", 0)).archived
    assert hot_rows(h, config["configurable"]["thread_id"]) == 0

    out = await h.invoke(graph, Command(resume="yes"), config)

    assert out["answer"] == "yes" and out["done"] == ["pay", "then"]
    assert calls.nodes == ["pay", "then", "then"]  # pay is not run again
    assert calls.charges == 1  # nor the effect called again


async def test_retry_failed_on_an_archived_partial_thread(h: Any) -> None:
    calls = Calls()
    graph = build(h, calls)
    config = thread(h, "partial")
    out = await h.invoke(graph, {"done": []}, config)
    assert out["resilience"]["status"] == "partial_complete"
    assert config["configurable"]["thread_id"] in (await h.call("archive_idle", 0)).archived

    if h.is_async:
        out = await aretry_failed(graph, config)
    else:
        out = await asyncio.to_thread(retry_failed, graph, config)

    assert out["resilience"]["status"] == "success"
    assert calls.nodes == ["pay", "then", "then"] and calls.charges == 1


async def test_a_thread_with_an_open_run_or_recent_activity_stays_hot(h: Any) -> None:
    _calls, _graph, config, thread_id = await finished(h, "recent")
    report = await h.call("archive_idle", 3600)
    assert config["configurable"]["thread_id"] not in report.archived
    thread_id = config["configurable"]["thread_id"]
    await h.call("runs.submit", uuid.uuid4().hex, thread_id, None, None)
    assert thread_id not in (await h.call("archive_idle", 0)).archived
    assert hot_rows(h, thread_id) > 0


async def test_a_corrupt_object_raises_naming_the_thread_and_object(
    h: Any, archive: Archive
) -> None:
    _calls, _graph, config, thread_id = await finished(h, "corrupt")
    await h.call("archive_idle", 0)
    key = objects(archive, thread_id)[1]
    archive.overwrite(key, b"not gzip")

    with pytest.raises(ArchiveError) as raised:
        await h.call("get_tuple", config)

    assert thread_id in str(raised.value) and key in str(raised.value)
    assert raised.value.thread_id == thread_id and raised.value.key == key
    assert hot_rows(h, thread_id) == 0 and len(objects(archive, thread_id)) == 4  # unchanged


async def test_a_saver_without_the_archive_refuses_an_archived_thread(h: Any) -> None:
    _calls, _graph, config, _thread_id = await finished(h, "no-archive")
    await h.call("archive_idle", 0)
    h.saver._state.archive = None
    with pytest.raises(ConfigError, match="is archived, but this saver has no archive"):
        await h.call("get_tuple", config)


async def test_an_unreachable_bucket_loses_nothing(h: Any) -> None:
    _calls, _graph, config, thread_id = await finished(h, "unreachable")
    rows = hot_rows(h, thread_id)
    dead = Archive(
        "s3://nowhere/prefix",
        options={
            "endpoint": "http://127.0.0.1:9",
            "region": "us-east-1",
            "access_key_id": "x",
            "secret_access_key": "x",
            "client_options": {"allow_http": True},
        },
        max_retries=0,
    )
    h.saver._state.archive = dead

    report = await h.call("archive_idle", 0)

    assert thread_id in report.failed and "127.0.0.1:9" in str(report.failed[thread_id])
    assert hot_rows(h, thread_id) == rows
    assert (await h.call("get_tuple", config)) is not None


async def test_two_savers_racing_restore_it_once(store: tuple[str, str], tmp_path: Path) -> None:
    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    backend, target = store
    cls: Any = ResilientSqliteSaver if backend == "sqlite" else ResilientPostgresSaver
    archive = Archive(f"file://{tmp_path}/race")
    thread_id = f"race-{uuid.uuid4().hex[:6]}"
    config = {"configurable": {"thread_id": thread_id}}
    with cls.from_conn_string(target, archive=archive) as one:
        one.setup()
        calls = Calls()
        calls.fail_once = False
        graph = build(type("H", (), {"saver": one})(), calls)
        graph.invoke({"done": []}, config)
        history = [t.checkpoint["id"] for t in one.list(config)]
        assert thread_id in one.archive_idle(0).archived
    results: list[Any] = []
    gate = threading.Barrier(2)

    def restore() -> None:
        with cls.from_conn_string(target, archive=archive) as saver:
            gate.wait()
            results.append(saver.restore_thread(thread_id))

    workers = [threading.Thread(target=restore) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()

    assert sorted(results) == [False, True]
    with cls.from_conn_string(target, archive=archive) as saver:
        assert [t.checkpoint["id"] for t in saver.list(config)] == history


@pytest.mark.parametrize("late", ["keys", "read"])
async def test_a_restore_that_lost_the_race_while_reading_says_so(
    store: tuple[str, str], tmp_path: Path, late: str
) -> None:
    """The race the test above can lose under load, made certain: one reader has
    found the thread archived and lists (``keys``) or reads its objects just after
    another reader restored it and dropped them. It lost the race: False, not an
    `ArchiveError` saying the archive holds nothing (before the fix)."""
    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    backend, target = store
    cls: Any = ResilientSqliteSaver if backend == "sqlite" else ResilientPostgresSaver
    url = f"file://{tmp_path}/late"
    thread_id = f"late-{uuid.uuid4().hex[:6]}"
    config = {"configurable": {"thread_id": thread_id}}
    with cls.from_conn_string(target, archive=Archive(url)) as one:
        one.setup()
        calls = Calls()
        calls.fail_once = False
        build(type("H", (), {"saver": one})(), calls).invoke({"done": []}, config)
        history = [t.checkpoint["id"] for t in one.list(config)]
        assert thread_id in one.archive_idle(0).archived
    slow = Archive(url)
    step = getattr(slow, late)

    def after_the_other_restored(*args: Any) -> Any:
        with cls.from_conn_string(target, archive=Archive(url)) as other:
            assert other.restore_thread(thread_id)
        return step(*args)

    setattr(slow, late, after_the_other_restored)
    with cls.from_conn_string(target, archive=slow) as saver:
        assert saver.restore_thread(thread_id) is False
        assert [t.checkpoint["id"] for t in saver.list(config)] == history


async def test_worker_submit_on_an_archived_thread(h: Any) -> None:
    calls, graph, config, thread_id = await finished(h, "worker")
    await h.call("archive_idle", 0)
    worker = Worker(graph, checkpointer=h.saver, lease_ttl=5)

    if h.is_async:
        run_id = await worker.asubmit({"done": []}, thread_id=thread_id)
        await worker.arun(until_idle=True)
    else:
        run_id = worker.submit({"done": []}, thread_id=thread_id)
        await asyncio.to_thread(worker.run, True)

    assert (await h.call("read_run", run_id)).status == "success"
    history = await h.listed(config)
    assert len(history) == 8  # the archived turn came back, and the new one followed
    assert calls.charges == 2  # one charge per turn


# -- size budget ----------------------------------------------------------------------


async def test_a_large_checkpoint_warns_naming_its_largest_channels(
    h: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _base.set_lifecycle(h.saver._state, None, 2_000, None)
    calls = Calls()
    calls.fail_once = False
    graph = build(h, calls)
    config = thread(h, "large")
    with caplog.at_level(logging.WARNING, logger="langgraph_resilience"):
        await h.invoke(graph, {"done": ["x" * 5_000]}, config)
    warned = [r.getMessage() for r in caplog.records if "warn_checkpoint_bytes" in r.getMessage()]
    assert warned and "'done'" in warned[-1] and "KB" in warned[-1]
    h.saver.flush_counters() if not h.is_async else await h.saver.aflush_counters()
    counts = await h.call("read_counters")
    assert counts.get("checkpoint_oversize", 0) >= 1


async def test_max_checkpoint_bytes_refuses_with_a_clear_error(h: Any) -> None:
    _base.set_lifecycle(h.saver._state, None, None, 2_000)
    calls = Calls()
    graph = build(h, calls)
    config = thread(h, "refused")
    with pytest.raises(
        ConfigError, match="over max_checkpoint_bytes=2000; largest channels: '__start__'"
    ):
        await h.invoke(graph, {"done": ["x" * 5_000]}, config)


def test_size_options_are_validated() -> None:
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    with pytest.raises(ConfigError, match="max_checkpoint_bytes must be a positive"):
        ResilientSqliteSaver.from_conn_string(":memory:", max_checkpoint_bytes=0).__enter__()
    with pytest.raises(ConfigError, match="unknown archive URL"):
        Archive("ftp://x")


# -- retention ------------------------------------------------------------------------


async def test_prune_history_keeps_the_latest_and_the_ledger(h: Any) -> None:
    _calls, graph, config, thread_id = await finished(h, "retention")
    await h.invoke(graph, {"done": []}, config)  # a second turn: 8 checkpoints
    latest = (await h.call("get_tuple", config)).checkpoint["id"]

    pruned = await h.call("prune_history", keep_last=3, thread_ids=[thread_id])

    assert pruned.checkpoints == 5
    assert len(await h.listed(config)) == 3
    assert (await h.call("get_tuple", config)).checkpoint["id"] == latest
    assert len(await h.call("list_effects", thread_id)) == 2  # the ledger stays
    pruned = await h.call("prune_history", older_than=0, thread_ids=[thread_id])
    assert pruned.checkpoints == 2 and len(await h.listed(config)) == 1
    out = await h.invoke(graph, {"done": []}, config)  # the thread goes on
    assert out["resilience"]["status"] == "success"


async def test_prune_history_drops_only_ended_runs(h: Any) -> None:
    thread_id = f"runs-{uuid.uuid4().hex[:6]}"
    await h.call("runs.submit", "open-" + thread_id, thread_id, None, None)
    pruned = await h.call("prune_history", runs_older_than=0, thread_ids=[thread_id])
    assert pruned.runs == 0
    assert await h.call("read_run", "open-" + thread_id) is not None
    with pytest.raises(ConfigError, match="keep_last must be"):
        await h.call("prune_history", keep_last=0)


async def test_reading_a_hot_thread_adds_no_archive_check(h: Any) -> None:
    _, _, config, _ = await finished(h, "hot-read")
    checks: list[Any] = []
    query = h.saver._query

    def counting(statements: Any) -> Any:
        checks.append(statements)
        return query(statements)

    h.saver._query = counting
    try:
        assert await h.call("get_tuple", config) is not None
        assert len(await h.listed(config)) == 4
        assert await h.call("get_tuple", thread(h, "new")) is None  # a new thread: one read
    finally:
        del h.saver._query
    assert len(checks) == 1


async def test_a_worker_archives_idle_threads_as_it_runs(h: Any) -> None:
    _, graph, config, thread_id = await finished(h, "idle-under-worker")
    worker = Worker(graph, checkpointer=h.saver, lease_ttl=5, archive_idle=0, archive_every=60)
    if h.is_async:
        run_id = await worker.asubmit({"done": []}, thread_id=f"busy-{uuid.uuid4().hex[:6]}")
        await worker.arun(until_idle=True)
    else:
        run_id = worker.submit({"done": []}, thread_id=f"busy-{uuid.uuid4().hex[:6]}")
        await asyncio.to_thread(worker.run, True)

    assert (await h.call("read_run", run_id)).status == "success"
    assert hot_rows(h, thread_id) == 0  # the idle thread went to the archive
    assert (await h.call("get_tuple", config)) is not None  # and comes back on a read
    with pytest.raises(ConfigError, match="archive_idle must be a finite number of seconds >= 0"):
        Worker(graph, checkpointer=h.saver, archive_idle=-1)


async def test_delete_and_copy_reach_an_archived_thread(h: Any, archive: Archive) -> None:
    _, _, config, thread_id = await finished(h, "delete")
    history = [t.checkpoint["id"] for t in await h.listed(config)]
    await h.call("archive_idle", 0)
    copy = f"{thread_id}-copy"

    await h.call("copy_thread", thread_id, copy)  # restores the source first

    copied = [t.checkpoint["id"] for t in await h.listed({"configurable": {"thread_id": copy}})]
    assert copied == history
    await h.call("archive_idle", 0)
    assert objects(archive, thread_id)
    await h.call("delete_thread", thread_id)
    assert objects(archive, thread_id) == []  # its objects go with it
    assert await h.call("get_tuple", config) is None


async def test_leftovers_of_a_restore_are_replaced_by_the_next_archival(
    h: Any, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls, graph, config, thread_id = await finished(h, "leftovers")
    await h.call("archive_idle", 0)
    stale = set(objects(archive, thread_id))

    def failing(keys: Any) -> None:
        raise ArchiveError("bucket says no")

    async def afailing(keys: Any) -> None:
        raise ArchiveError("bucket says no")

    with monkeypatch.context() as m:  # the restore commits, its cleanup fails
        m.setattr(archive, "drop", failing)
        m.setattr(archive, "adrop", afailing)
        assert await h.call("get_tuple", config) is not None
    assert set(objects(archive, thread_id)) == stale  # left over
    await h.invoke(graph, {"done": []}, config)  # the thread moves on: a second turn
    history = [t.checkpoint["id"] for t in await h.listed(config)]

    assert thread_id in (await h.call("archive_idle", 0)).archived

    assert len(objects(archive, thread_id)) == len(history) == 8
    assert [t.checkpoint["id"] for t in await h.listed(config)] == history
    assert calls.charges == 2


async def test_a_run_working_while_its_thread_is_archived_is_refused_not_split(h: Any) -> None:
    """A run that read its thread, then the thread was archived, then it writes:
    the write would store a checkpoint whose history (and, on Postgres, the values
    of its unchanged channels) is only in the archive. It is refused; a read
    restores the thread whole, and running it again goes on from there."""
    from langgraph_resilience import CheckpointConflict

    started, go = threading.Event(), threading.Event()
    ran: list[str] = []

    def first(state: State) -> dict[str, Any]:
        ran.append("first")
        return {"done": ["first"]}

    def slow(state: State) -> dict[str, Any]:
        ran.append("slow")
        if len(ran) == 4:  # the second turn's, the first time
            started.set()
            assert go.wait(20)
        return {"done": ["slow"]}

    g = ResilientStateGraph(State)
    g.add_node("first", first)
    g.add_node("slow", slow)
    g.add_edge(START, "first")
    g.add_edge("first", "slow")
    g.add_edge("slow", END)
    graph = g.compile(checkpointer=h.saver)
    config = thread(h, "race")
    thread_id = config["configurable"]["thread_id"]

    await h.invoke(graph, {"done": []}, config)  # a first turn: the thread exists
    running = asyncio.ensure_future(h.invoke(graph, {"done": []}, config))
    assert await asyncio.to_thread(started.wait, 20)
    assert thread_id in (await h.call("archive_idle", 0)).archived  # idle, no open run
    go.set()
    with pytest.raises(CheckpointConflict, match="moved to the archive") as refused:
        await running
    assert refused.value.archived

    out = await h.invoke(graph, None, config)  # restores the thread, then goes on
    assert out["done"] == ["first", "slow"] * 2
    # The step in flight is not even run again: its writes, stored before its
    # checkpoint was refused, wait beside the restored checkpoint they belong to.
    assert ran == ["first", "slow", "first", "slow"]


async def test_the_run_report_of_an_archived_thread_restores_it(h: Any) -> None:
    _, _, _, thread_id = await finished(h, "report")
    before = (await _report(h, thread_id)).to_dict()
    assert thread_id in (await h.call("archive_idle", 0)).archived
    after = (await _report(h, thread_id)).to_dict()
    assert after["status"] == before["status"] == "success"
    assert after["steps"] == before["steps"]
    assert hot_rows(h, thread_id) > 0  # read back into the hot tier


async def _report(h: Any, thread_id: str) -> Any:
    from langgraph_resilience import arun_report, run_report

    if h.is_async:
        return await arun_report(h.saver, thread_id)
    return await asyncio.to_thread(run_report, h.saver, thread_id)
