"""The Redis savers on plain Redis 7 (no modules): what a user relies on.

The machine's Redis holds the fast cases, each under its own key prefix; a
private ``redis-server`` with an AOF (`redis_servers`), SIGKILLed, holds the
durability ones.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from graphs import DoneState, appending, chain
from langgraph.checkpoint.base import empty_checkpoint
from redis.crc import key_slot
from redis_servers import REDIS_DOWN, REDIS_URL, PrivateRedis, flush_prefix, private_redis_server

from langgraph_resilience import ResilientStateGraph, TransientError
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.aio import AsyncResilientRedisSaver
from langgraph_resilience.checkpoint.redis.store import _common
from langgraph_resilience.checkpoint.redis.store._durability import durability
from langgraph_resilience.checkpoint.redis.store._keys import thread_keys
from langgraph_resilience.checkpoint.saver import _threads
from langgraph_resilience.errors import CheckpointConflict, CheckpointCorrupt, ConfigError
from langgraph_resilience.policy import Backoff

needs_redis = pytest.mark.skipif(REDIS_DOWN is not None, reason=REDIS_DOWN or "")


@pytest.fixture
def prefix() -> Iterator[str]:
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    flush_prefix(name)


@pytest.fixture
def saver(prefix: str) -> Iterator[ResilientRedisSaver]:
    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as s:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            s.setup()
        yield s


@pytest.fixture
async def asaver(prefix: str) -> AsyncIterator[AsyncResilientRedisSaver]:
    async with AsyncResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as s:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            await s.setup()
        yield s


def _config(thread: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _checkpoint(**values: Any) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = dict(values)
    return cp


# -- the checkpointer's promises ------------------------------------------------------


@needs_redis
def test_second_put_of_a_checkpoint_id_keeps_the_first(saver: ResilientRedisSaver) -> None:
    cp = _checkpoint(x=1)
    saver.put(_config("t"), cp, {"step": 1}, {})
    again = dict(cp, channel_values={"x": 2})
    saver.put(_config("t"), again, {"step": 9}, {})  # type: ignore[arg-type]
    found = saver.get_tuple(_config("t"))
    assert found is not None
    assert found.checkpoint["channel_values"] == {"x": 1}
    assert found.metadata["step"] == 1
    assert len(list(saver.list(_config("t")))) == 1


@needs_redis
def test_replace_checkpoint_replaces_a_stored_one_and_keeps_its_writes(
    prefix: str, tmp_path: Path
) -> None:
    """What a versioned graph's upgrade stores (`ReplacingSaver`): the checkpoint
    again under its own id, replaced (a plain second put keeps the first), its
    writes kept; from the cold tier too, and refused under a lost lease."""
    from langgraph_resilience import Archive
    from langgraph_resilience.checkpoint import Fence, ReplacingSaver
    from langgraph_resilience.errors import LeaseLost

    with ResilientRedisSaver.from_conn_string(
        REDIS_URL, prefix=prefix, archive=Archive(f"file://{tmp_path}/cold")
    ) as saver:
        assert isinstance(saver, ReplacingSaver)
        saver.runs.submit("r1", "t", None, None)
        [held] = saver.runs.claim("w", 1, 30.0)
        fenced = {
            "configurable": {
                "thread_id": "t",
                "checkpoint_ns": "",
                "__lgr_fence": Fence(run_id="r1", token=held.fencing_token),
            }
        }
        cp = _checkpoint(x=1)
        stored = saver.put(fenced, cp, {"step": 1}, {})
        saver.put_writes(
            {**stored, "configurable": {**fenced["configurable"], **stored["configurable"]}},
            [("x", "w")],
            "task-1",
        )
        assert saver.archive_idle(thread_ids=["t"]).archived == ["t"]  # demoted
        again = dict(cp, channel_values={"x": 2})
        assert saver.replace_checkpoint(fenced, again, {"step": 1, "v": 2}, {}) == stored  # type: ignore[arg-type]
        found = saver.get_tuple(_config("t"))
        assert found is not None and found.checkpoint["channel_values"] == {"x": 2}
        assert found.metadata["v"] == 2 and found.pending_writes == [("task-1", "x", "w")]
        assert len(list(saver.list(_config("t")))) == 1
        saver.put(fenced, cp, {"step": 1}, {})  # an ordinary second put: a no-op
        assert saver.get_tuple(_config("t")) == found
        assert saver.runs.cancel("r1", ("json", b'"stop"')) == "running"  # the token moves on
        with pytest.raises(LeaseLost):
            saver.replace_checkpoint(fenced, cp, {"step": 1}, {})
        assert saver.get_tuple(_config("t")) == found


@needs_redis
def test_a_stale_writer_is_refused_instead_of_forking(saver: ResilientRedisSaver) -> None:
    head = saver.put(_config("t"), _checkpoint(), {}, {})
    assert saver.get_tuple(_config("t")) is not None  # this context now continues `head`
    other = _checkpoint()  # another writer advances the head meanwhile
    _threads._VIEWS.set(None)
    saver.put(head, other, {}, {})
    _threads.saw_head("t", "", head["configurable"]["checkpoint_id"])
    with pytest.raises(CheckpointConflict) as caught:
        saver.put(head, _checkpoint(), {}, {})
    assert caught.value.head_id == other["id"]
    # an explicitly addressed older checkpoint is a branch, stored as LangGraph stores it
    _threads._VIEWS.set(None)
    saver.put(head, _checkpoint(), {}, {})


@needs_redis
def test_a_changed_record_is_reported_corrupt(saver: ResilientRedisSaver, prefix: str) -> None:
    stored = saver.put(_config("t"), _checkpoint(x="ok"), {}, {})
    saver.put_writes(stored, [("x", "w")], "task-1")
    keys = thread_keys(prefix, "t")
    client = redis.Redis.from_url(REDIS_URL)
    field = f"\0{stored['configurable']['checkpoint_id']}\0task-1\0" + "0"
    record = client.hget(keys.w, field)
    assert record is not None
    client.hset(keys.w, field, record[:-1] + b"X")
    with pytest.raises(CheckpointCorrupt, match="checksum"):
        saver.get_tuple(_config("t"))
    client.close()


@needs_redis
def test_a_thread_expires_after_its_ttl_and_each_write_renews_it(prefix: str) -> None:
    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix, ttl=3.0) as saver:
        stored = saver.put(_config("t"), _checkpoint(), {}, {})
        client = redis.Redis.from_url(REDIS_URL)
        keys = thread_keys(prefix, "t")
        assert 0 < client.pttl(keys.cp) <= 3000
        client.pexpire(keys.cp, 500)
        saver.put_writes(stored, [("x", 1)], "task")
        assert client.pttl(keys.cp) > 2000  # renewed by the write
        client.pexpire(keys.cp, 1)
        time.sleep(0.05)
        assert saver.get_tuple(_config("t")) is None
        client.close()


def test_a_threads_keys_share_one_hash_slot() -> None:
    for thread in ("t", "job-42", "a}b", "ünï"):
        slots = {key_slot(k.encode()) for k in thread_keys("lgr", thread)}
        assert len(slots) == 1


def test_a_prefix_with_braces_is_refused() -> None:
    with pytest.raises(ConfigError, match="prefix"):
        ResilientRedisSaver(redis.Redis(), prefix="a{b}")


@needs_redis
async def test_the_async_twin_stores_what_the_sync_one_reads(
    asaver: AsyncResilientRedisSaver, prefix: str
) -> None:
    stored = await asaver.aput(_config("t"), _checkpoint(x=3), {"source": "loop"}, {})
    await asaver.aput_writes(stored, [("x", 4)], "task-a")
    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as sync:
        found = sync.get_tuple(_config("t"))
    assert found is not None
    assert found.checkpoint["channel_values"] == {"x": 3}
    assert found.pending_writes == [("task-a", "x", 4)]


@needs_redis
def test_scripts_forgotten_by_the_server_are_loaded_again(saver: ResilientRedisSaver) -> None:
    saver.conn.script_flush()
    saver.put(_config("t"), _checkpoint(), {}, {})
    assert saver.get_tuple(_config("t")) is not None


# -- durability said ------------------------------------------------------------------


def test_durability_is_judged_from_the_servers_config() -> None:
    def level(**c: str) -> tuple[str, bool]:
        d = durability(c, "h")
        return d.level, d.warn

    assert level(appendonly="yes", appendfsync="always") == ("always", False)
    assert level(appendonly="yes", appendfsync="everysec") == ("everysec", False)
    assert level(appendonly="yes", appendfsync="no") == ("os", True)
    assert level(appendonly="no", save="3600 1") == ("snapshot", True)
    assert level(appendonly="no", save="") == ("none", True)
    assert durability(None, "h").level == "unknown"
    assert "1 s" in durability({"appendonly": "yes", "appendfsync": "everysec"}, "h").message


@needs_redis
def test_a_server_that_keeps_nothing_on_disk_is_warned_about_once(prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    config = client.config_get("append*") | client.config_get("save")
    client.close()
    if config.get("appendonly") == "yes" or config.get("save"):
        pytest.skip("the machine's Redis keeps something on disk")
    _common._WARNED.clear()
    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as saver:
        with pytest.warns(RuntimeWarning, match="keeps nothing on disk"):
            assert saver.setup().level == "none"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            saver.setup()  # once per server


# -- graphs on Redis, and what Redis refuses --------------------------------------------


def _flaky_pipeline(fails: dict[str, int]) -> Any:
    def behaviour(name: str) -> None:
        if fails.get(name, 0) > 0:
            fails[name] -= 1
            raise TransientError(f"{name} down")

    g = ResilientStateGraph(DoneState)
    chain(g, ["a", "b", "c"], appending(behaviour))
    return g


@needs_redis
def test_a_graph_stopped_by_an_error_resumes_where_it_stopped_on_redis(
    saver: ResilientRedisSaver,
) -> None:
    g = ResilientStateGraph(DoneState)
    fails = {"b": 1}

    def behaviour(name: str) -> None:
        if fails.get(name, 0) > 0:
            fails[name] -= 1
            raise RuntimeError("crash")  # permanent: the run stops at b

    chain(g, ["a", "b", "c"], appending(behaviour), lambda n: {"policy": None})
    graph = g.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "job"}}
    with pytest.raises(RuntimeError):
        graph.invoke({"done": []}, config)
    out = graph.invoke(None, config)  # resumes at b; a is not run again
    assert out["done"] == ["a", "b", "c"]


@needs_redis
async def test_an_async_resilient_graph_retries_on_redis(asaver: AsyncResilientRedisSaver) -> None:
    graph = _flaky_pipeline({"b": 2}).compile(checkpointer=asaver)
    out = await graph.ainvoke({"done": []}, {"configurable": {"thread_id": "job"}})
    assert out["done"] == ["a", "b", "c"]
    assert out["resilience"]["status"] == "success"


@needs_redis
def test_what_redis_does_not_keep_is_refused_clearly(saver: ResilientRedisSaver) -> None:
    from langgraph_resilience import check_deploy, run_report
    from langgraph_resilience.errors import UnknownThread

    with pytest.raises(UnknownThread):  # read (no such thread), no longer refused
        run_report(saver, "t")
    assert check_deploy(saver, _seven({})).threads == ()  # kept (test_redis_deploy.py)
    from starlette.testclient import TestClient

    from langgraph_resilience.server import console_app
    from langgraph_resilience.server._console import ConsoleActions

    done = ("success", "")
    buttons = ConsoleActions(retry=lambda t, u: done, resume=lambda *a: done, cancel=lambda r: done)
    console_app(saver, actions=buttons)  # kept: the buttons (test_console.py, on Redis too)
    _seven({}).compile(checkpointer=saver).invoke({"done": []}, _config("seen"))
    page = TestClient(console_app(saver)).get("/run?thread=seen")  # read-only: kept
    assert page.status_code == 200 and "seen" in page.text and "success" in page.text
    # kept: the effect ledger (test_redis_effects.py), the run queue (test_redis_runs.py),
    # the run log's step rows (test_step_history_on_redis_lists_what_sqlite_lists), the
    # run ledger's rows and their readers (test_redis_runlog.py)


SEVEN = ["a", "b", "c", "d", "e", "f", "g"]


def _seven(fails: dict[str, int]) -> Any:
    def behaviour(name: str) -> None:
        if fails.get(name, 0) > 0:
            fails[name] -= 1
            raise TransientError(f"{name} down")

    g = ResilientStateGraph(DoneState)
    chain(g, SEVEN, appending(behaviour))
    return g


def _steps_seen(records: Any) -> list[tuple[Any, ...]]:
    """What a step record says, less its times and ids (which differ run to run)."""
    return [
        (r["run"], r["path"], r["node"], r["status"], r["attempts"], r["kinds"], r["summary"])
        for r in records
    ]


def _two_runs(checkpointer: Any, thread: str) -> None:
    config = {"configurable": {"thread_id": thread}}
    _seven({"b": 2}).compile(checkpointer=checkpointer).invoke({"done": []}, config)
    _seven({}).compile(checkpointer=checkpointer).invoke({"done": []}, config)  # run 2


async def _two_aruns(checkpointer: Any, thread: str) -> None:
    config = {"configurable": {"thread_id": thread}}
    await _seven({"b": 2}).compile(checkpointer=checkpointer).ainvoke({"done": []}, config)
    await _seven({}).compile(checkpointer=checkpointer).ainvoke({"done": []}, config)


@needs_redis
def test_step_history_on_redis_lists_what_sqlite_lists(
    saver: ResilientRedisSaver, tmp_path: Path
) -> None:
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "s.db")) as sqlite:
        _two_runs(sqlite, "job")
        expected = sqlite.step_history("job")
        second = sqlite.step_history("job", run=2)
    _two_runs(saver, "job")
    found = saver.step_history("job")
    assert len(expected) == 14  # seven steps a run
    assert _steps_seen(found) == _steps_seen(expected)
    assert [r["path"] for r in found if r["run"] == 1] == SEVEN
    assert [r["attempts"] for r in found if r["run"] == 1] == [1, 3, 1, 1, 1, 1, 1]
    assert _steps_seen(saver.step_history("job", run=2)) == _steps_seen(second)
    assert set(found[0]) == set(expected[0])  # the same fields
    tasks = {(r["checkpoint_ns"], r["checkpoint_id"], r["task_id"]) for r in found}
    assert len(tasks) == len(found)  # a row per task, stored once
    assert all(r["started_at"] <= r["ended_at"] for r in found)
    assert saver.step_history("nothing") == []


@needs_redis
async def test_step_history_on_async_redis_lists_what_sqlite_lists(
    asaver: AsyncResilientRedisSaver, tmp_path: Path
) -> None:
    from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver

    async with AsyncResilientSqliteSaver.from_conn_string(str(tmp_path / "s.db")) as sqlite:
        await _two_aruns(sqlite, "job")
        expected = await sqlite.astep_history("job")
    assert len(expected) == 14
    await _two_aruns(asaver, "job")
    assert _steps_seen(await asaver.astep_history("job")) == _steps_seen(expected)
    assert _steps_seen(await asaver.astep_history("job", run=1)) == _steps_seen(expected[:7])


# -- a private Redis with an AOF, SIGKILLed -----------------------------------------------


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    yield from private_redis_server(tmp_path)


def test_nothing_acknowledged_is_lost_when_the_server_is_sigkilled(
    private_redis: PrivateRedis,
) -> None:
    with ResilientRedisSaver.from_conn_string(private_redis.url) as saver:
        assert saver.setup().level == "always"
        config = _config("job")
        ids = []
        for step in range(20):
            config = saver.put(config, _checkpoint(step=step), {"step": step}, {})
            saver.put_writes(config, [("x", step)], f"task-{step}")
            ids.append(config["configurable"]["checkpoint_id"])
        private_redis.kill()
        private_redis.start()  # replays its AOF
        found = [t.checkpoint["id"] for t in saver.list(_config("job"))]
        assert found == ids[::-1]
        latest = saver.get_tuple(_config("job"))
        assert latest is not None and latest.pending_writes == [("task-19", "x", 19)]


def test_a_write_during_a_restart_waits_for_the_server(private_redis: PrivateRedis) -> None:
    retry = Backoff(max_attempts=40, initial_interval=0.1, max_interval=0.2, jitter="none")
    with ResilientRedisSaver.from_conn_string(private_redis.url, store_retry=retry) as saver:
        saver.setup()
        private_redis.kill()
        restart = threading.Timer(0.5, private_redis.start)
        restart.start()
        t0 = time.monotonic()
        saver.put(_config("job"), _checkpoint(), {}, {})  # retried until the server is back
        assert time.monotonic() - t0 >= 0.4
        restart.join()
        assert saver.get_tuple(_config("job")) is not None


def test_the_command_reads_a_redis_saver_s_run_ledger_and_refuses_check_and_prune(
    saver: ResilientRedisSaver,
) -> None:
    from test_cli import run

    config = _config("cli-1")
    _seven({"b": 1}).compile(checkpointer=saver).invoke({"done": []}, config)
    db = f"{REDIS_URL}#{saver.place.prefix}"
    listed = run("runs", "--db", db, "--json")
    assert listed.code == 0, listed.err
    [row] = json.loads(listed.out)
    assert (row["thread_id"], row["status"]) == ("cli-1", "success")
    shown = run("show", "cli-1", "--db", db, "--json")
    assert shown.code == 0 and json.loads(shown.out)["status"] == "success"
    measured = run("metrics", "--db", db, "--json")
    assert measured.code == 0 and json.loads(measured.out)["runs"] == 1
    set_up = run("setup", "--db", db)
    assert set_up.code == 0 and "keeps" in set_up.err  # what the server keeps on disk
    for command in (["check"], ["prune", "--keep-last", "1"]):
        refused = run(*command, "--db", "redis://:secret@127.0.0.1:6379/0#p")
        refused.one_error_line(f"`langgraph-resilience {command[0]}`", "Redis", "runs, show")
        assert "secret" not in refused.err


FAULT_RUNS = int(os.environ.get("LGR_FAULT_RUNS", "3"))


@pytest.mark.faults
@pytest.mark.parametrize("trial", range(FAULT_RUNS))
def test_a_pipeline_survives_its_process_and_its_redis_sigkilled(
    private_redis: PrivateRedis, tmp_path: Path, trial: int
) -> None:
    """A seven-step pipeline; its process SIGKILLed mid-run and the Redis server
    SIGKILLed and restarted from its AOF; the resume runs only what was not done."""
    import json
    import random

    from helpers import read_ledger
    from spawn import spawn

    script = str(Path(__file__).parent / "scripts" / "redis_pipeline.py")
    ledger = tmp_path / "ledger"
    kill_after = random.Random(trial).randint(1, 6)
    proc = spawn(script, private_redis.url, "job", str(ledger))
    deadline = time.monotonic() + 30
    while len(read_ledger(ledger)) < kill_after and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=10)
    started = [line[0] for line in read_ledger(ledger)]
    assert 1 <= len(started) < 7, started  # killed mid-run
    private_redis.kill()
    private_redis.start()  # from its AOF
    resumed = spawn(script, private_redis.url, "job", str(ledger), "--resume")
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err[-2000:]
    result = json.loads(out.strip().splitlines()[-1])
    steps = [f"s{i}" for i in range(1, 8)]
    assert result == {"status": "success", "done": steps}
    ran = [line[0] for line in read_ledger(ledger)]
    # every step ran once, but the one in flight at the kill, which may run again
    in_flight = started[-1]
    assert sorted(ran) == sorted(steps + ([in_flight] if ran.count(in_flight) == 2 else []))
    assert all(ran.count(s) == 1 for s in steps if s != in_flight)


# -- the tier's life cycle: demotion to the cold tier, restore on access ---------------


@needs_redis
def test_an_idle_thread_is_demoted_and_resumes_from_the_cold_tier(
    prefix: str, tmp_path: Path
) -> None:
    from langgraph.types import interrupt

    from langgraph_resilience import Archive

    archive = Archive(f"file://{tmp_path}/cold")
    g = ResilientStateGraph(DoneState)
    g.add_node("ask", lambda s: {"done": [str(interrupt("approve?"))]})
    g.add_node("after", lambda s: {"done": ["after"]})
    g.set_entry_point("ask")
    g.add_edge("ask", "after")
    config = {"configurable": {"thread_id": "paused"}}
    with ResilientRedisSaver.from_conn_string(
        REDIS_URL, prefix=prefix, ttl=0.2, archive=archive
    ) as saver:
        graph = g.compile(checkpointer=saver)
        graph.invoke({"done": []}, config)  # paused at the interrupt
        keys = thread_keys(prefix, "paused")
        client = redis.Redis.from_url(REDIS_URL)
        assert client.pttl(keys.cp) == -1  # with a cold tier, no key expires
        time.sleep(0.3)
        assert saver.archive_idle().archived == ["paused"]  # idle past its ttl: demoted
        assert client.exists(*keys[:6]) == 0 and client.exists(keys.archived) == 1
        assert archive.keys("redis/")
        from langgraph.types import Command

        out = graph.invoke(Command(resume="yes"), config)  # restored, then resumed
        assert out["done"] == ["yes", "after"]
        assert client.exists(keys.archived) == 0
        assert len(list(saver.list(config))) >= 3
        client.close()


@needs_redis
def test_a_thread_written_while_being_demoted_stays_hot(prefix: str, tmp_path: Path) -> None:
    from langgraph_resilience import Archive
    from langgraph_resilience.checkpoint.redis.store import _ops

    with ResilientRedisSaver.from_conn_string(
        REDIS_URL, prefix=prefix, archive=Archive(f"file://{tmp_path}/cold")
    ) as saver:
        stored = saver.put(_config("t"), _checkpoint(), {}, {})
        dumps = saver._run(_ops.dump_thread(saver.place, "t"))
        assert dumps is not None
        saver.put_writes(stored, [("x", 1)], "late")  # a write after the dump
        assert not saver._run(_ops.demote(saver.place, "t", "k", dumps))
        found = saver.get_tuple(_config("t"))
        assert found is not None and found.pending_writes == [("late", "x", 1)]


@needs_redis
async def test_the_async_twin_demotes_and_restores(prefix: str, tmp_path: Path) -> None:
    from langgraph_resilience import Archive

    archive = Archive(f"file://{tmp_path}/cold")
    async with AsyncResilientRedisSaver.from_conn_string(
        REDIS_URL, prefix=prefix, archive=archive
    ) as saver:
        await saver.aput(_config("t"), _checkpoint(x=5), {}, {})
        assert (await saver.aarchive_idle(thread_ids=["t"])).archived == ["t"]
        found = await saver.aget_tuple(_config("t"))
        assert found is not None and found.checkpoint["channel_values"] == {"x": 5}


@needs_redis
def test_archive_idle_without_a_cold_tier_is_refused(saver: ResilientRedisSaver) -> None:
    with pytest.raises(ConfigError, match="cold tier"):
        saver.archive_idle()


@needs_redis
def test_a_checkpoint_over_the_size_budget_is_refused(prefix: str) -> None:
    with ResilientRedisSaver.from_conn_string(
        REDIS_URL, prefix=prefix, max_checkpoint_bytes=10_000
    ) as saver:
        saver.put(_config("t"), _checkpoint(small="x"), {}, {})
        with pytest.raises(ConfigError, match=r"max_checkpoint_bytes.*'big'"):
            saver.put(_config("t"), _checkpoint(big="x" * 20_000), {}, {})
        assert len(list(saver.list(_config("t")))) == 1  # nothing was stored


@needs_redis
def test_a_demoted_thread_is_copied_and_deleted_whole(prefix: str, tmp_path: Path) -> None:
    from langgraph_resilience import Archive

    archive = Archive(f"file://{tmp_path}/cold")
    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix, archive=archive) as saver:
        stored = saver.put(_config("src"), _checkpoint(x=1), {}, {})
        saver.put_writes(stored, [("x", 2)], "task")
        assert saver.archive_idle(thread_ids=["src"]).archived == ["src"]
        assert saver.restore_thread("src") and not saver.restore_thread("src")
        assert saver.archive_idle(thread_ids=["src"]).archived == ["src"]
        saver.copy_thread("src", "dst")  # restores the source first
        copied = saver.get_tuple(_config("dst"))
        assert copied is not None and copied.pending_writes == [("task", "x", 2)]
        assert saver.archive_idle(thread_ids=["src"]).archived == ["src"]
        saver.delete_thread("src")  # its cold object goes too
        assert archive.keys("redis/") == []
        assert saver.get_tuple(_config("src")) is None


def test_a_server_gone_for_longer_than_the_retries_is_store_unavailable(
    private_redis: PrivateRedis,
) -> None:
    from langgraph_resilience.errors import StoreUnavailable

    retry = Backoff(max_attempts=3, initial_interval=0.01, max_interval=0.02, jitter="none")
    with ResilientRedisSaver.from_conn_string(private_redis.url, store_retry=retry) as saver:
        saver.setup()
        private_redis.kill()
        with pytest.raises(StoreUnavailable, match="after 3 tries") as caught:
            saver.put(_config("job"), _checkpoint(), {}, {})
        assert caught.value.attempts == 3 and "secret" not in str(caught.value)


def test_setup_waits_for_a_server_that_comes_back_within_the_retries(
    private_redis: PrivateRedis,
) -> None:
    from langgraph_resilience.errors import StoreUnavailable

    retry = Backoff(max_attempts=40, initial_interval=0.1, max_interval=0.2, jitter="none")
    private_redis.kill()  # down when setup() starts: a restart of Redis, or a deploy
    with ResilientRedisSaver.from_conn_string(private_redis.url, store_retry=retry) as saver:
        restart = threading.Timer(0.5, private_redis.start)
        restart.start()
        t0 = time.monotonic()
        try:
            assert saver.setup().level == "always"  # retried until the server is back
            assert time.monotonic() - t0 >= 0.4
        finally:
            restart.join()  # a failed setup must not leave a server started behind
        saver.put(_config("job"), _checkpoint(), {}, {})  # its scripts are loaded
        assert saver.get_tuple(_config("job")) is not None
    private_redis.kill()  # and down for good: tried as often as a call is, then refused
    short = Backoff(max_attempts=3, initial_interval=0.01, max_interval=0.02, jitter="none")
    with (
        ResilientRedisSaver.from_conn_string(private_redis.url, store_retry=short) as saver,
        pytest.raises(StoreUnavailable, match="after 3 tries") as caught,
    ):
        saver.setup()
    assert caught.value.attempts == 3
    assert f"Redis at 127.0.0.1:{private_redis.port}/0 unreachable" in str(caught.value)


async def test_async_setup_waits_for_a_server_that_comes_back_within_the_retries(
    private_redis: PrivateRedis,
) -> None:
    import asyncio

    from langgraph_resilience.errors import StoreUnavailable

    retry = Backoff(max_attempts=40, initial_interval=0.1, max_interval=0.2, jitter="none")
    private_redis.kill()
    async with AsyncResilientRedisSaver.from_conn_string(
        private_redis.url, store_retry=retry
    ) as saver:
        restart = asyncio.get_running_loop().run_in_executor(None, _start_later, private_redis)
        t0 = time.monotonic()
        try:
            assert (await saver.setup()).level == "always"
            assert time.monotonic() - t0 >= 0.4
        finally:
            await restart
        await saver.aput(_config("job"), _checkpoint(), {}, {})
        assert await saver.aget_tuple(_config("job")) is not None
    private_redis.kill()
    short = Backoff(max_attempts=3, initial_interval=0.01, max_interval=0.02, jitter="none")
    async with AsyncResilientRedisSaver.from_conn_string(
        private_redis.url, store_retry=short
    ) as saver:
        with pytest.raises(StoreUnavailable, match="after 3 tries") as caught:
            await saver.setup()
    assert caught.value.attempts == 3
    assert f"Redis at 127.0.0.1:{private_redis.port}/0 unreachable" in str(caught.value)


def _start_later(server: PrivateRedis) -> None:
    time.sleep(0.5)
    server.start()
