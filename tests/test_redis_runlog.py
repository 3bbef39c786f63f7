"""The run ledger on Redis (`checkpoint.redis.runlog._runlog`): run rows, recoveries and
their readers, compared side by side with the same graph on SQLite.

- a run whose step c fails (partial_complete), then `retry_failed`: the same
  `run_report`, `list_runs` and `recovery_metrics` on Redis as on SQLite (sync
  and async);
- a retry_failed's recovery is timed when it was told, before the step it
  re-runs ends, however late the saver stores its write;
- a run row is stored in the script of its checkpoint: a put refused (a fork)
  stores no run row, and a ledger version moved under a writer makes it decide
  again, losing neither writer's rows;
- a process SIGKILLed mid-run, resumed: a crash recovery on Redis as on SQLite.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from graphs import DoneState, chain
from langgraph.checkpoint.base import empty_checkpoint
from redis_servers import REDIS_DOWN, REDIS_URL, flush_prefix
from test_worker_crash import result, steps, submit, wait_for, work

import langgraph_resilience.checkpoint.redis.runlog._runlog as _runlog
import langgraph_resilience.checkpoint.redis.store._ops as _ops
from langgraph_resilience import (
    NodePolicy,
    PermanentError,
    ResilientStateGraph,
    arecovery_metrics,
    aretry_failed,
    arun_report,
    recovery_metrics,
    retry_failed,
    run_report,
)
from langgraph_resilience.checkpoint import Fence
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.aio import AsyncResilientRedisSaver
from langgraph_resilience.checkpoint.redis.store._keys import ledger_keys
from langgraph_resilience.checkpoint.runlog._events import note_recovery
from langgraph_resilience.checkpoint.runlog._run_log import PutLedger
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.checkpoint.store._schema import RUN_LOG
from langgraph_resilience.checkpoint.store._store import SQLITE
from langgraph_resilience.errors import LeaseLost
from langgraph_resilience.history._runs import alist_runs, list_runs

pytestmark = pytest.mark.skipif(REDIS_DOWN is not None, reason=REDIS_DOWN or "")

ONE_TRY = NodePolicy(retry=None)

#: Figures that are times: compared for presence, not value.
_TIMES = {"started_at", "ended_at", "duration", "updated", "at", "seconds", "finished_at"}


def _prefix() -> str:
    return f"rl{uuid.uuid4().hex[:10]}"


@contextmanager
def two_savers(tmp_path: Path) -> Iterator[tuple[ResilientSqliteSaver, ResilientRedisSaver]]:
    prefix = _prefix()
    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "s.db")) as sql:
        sql.setup()
        with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as red:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                red.setup()
            try:
                yield sql, red
            finally:
                flush_prefix(prefix)


@asynccontextmanager
async def two_async_savers(
    tmp_path: Path,
) -> AsyncIterator[tuple[AsyncResilientSqliteSaver, AsyncResilientRedisSaver]]:
    prefix = _prefix()
    async with AsyncResilientSqliteSaver.from_conn_string(str(tmp_path / "a.db")) as sql:
        await sql.setup()
        async with AsyncResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as red:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                await red.setup()
            try:
                yield sql, red
            finally:
                flush_prefix(prefix)


def pipeline(broken: dict[str, bool], saver: Any) -> Any:
    """a -> b -> c -> d; c fails for good while ``broken["on"]`` (one try)."""

    def make(step: str) -> Any:
        def node(state: DoneState) -> dict[str, Any]:
            if step == "c" and broken["on"]:
                raise PermanentError("c cannot be done yet")
            return {"done": [step]}

        return node

    options = lambda _: {"policy": ONE_TRY}  # noqa: E731
    builder = chain(ResilientStateGraph(DoneState), ["a", "b", "c", "d"], make, options)
    return builder.compile(checkpointer=saver)


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def plain(value: Any) -> Any:
    """A report, summary or metrics as JSON values, times and checkpoint ids
    replaced by whether they are set (two stores never agree on a clock)."""
    if isinstance(value, dict):
        return {
            k: (v is not None)
            if k in _TIMES
            or k.endswith("_at")
            or k.startswith("seconds")
            or k in ("checkpoint_id", "task_id", "task")
            else plain(v)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float):
        return round(value, 6)
    return value


def _metrics(m: Any) -> dict[str, Any]:
    d = {f: getattr(m, f) for f in m.__dataclass_fields__}
    d.pop("serde_events")  # this process's serde events, not the store's
    return plain(d)


def _fail_then_retry(graph: Any, broken: dict[str, bool], thread: str) -> Any:
    out = graph.invoke({"done": []}, config(thread))
    assert out["resilience"]["status"] == "partial_complete"
    broken["on"] = False
    return retry_failed(graph, config(thread))


def _sync_reads(graph: Any, thread: str) -> tuple[Any, Any, Any]:
    report = plain(run_report(graph, thread).to_dict())
    runs = [plain(r.to_dict()) for r in list_runs(graph)]
    return report, runs, _metrics(recovery_metrics(graph, graph=graph))


def _checked(report: Any, runs: Any, metrics: Any) -> None:
    """What the scenario must show (on either store): not only that they agree."""
    assert report["status"] == "success" and report["run"] == 1
    assert [r["kind"] for r in report["recoveries"]] == ["retry_failed"]
    assert report["recoveries"][0]["redone_paths"] == ["c"]
    assert [(r["status"], r["recoveries"]) for r in runs] == [("success", 1)]
    assert metrics["recoveries_by_kind"]["retry_failed"] == 1
    assert (metrics["steps_redone"], metrics["runs_resumed_succeeded"]) == (1, 1)


def test_a_failed_run_retried_reads_the_same_on_redis_as_on_sqlite(tmp_path: Path) -> None:
    with two_savers(tmp_path) as (sql, red):
        seen = []
        for saver in (sql, red):
            broken = {"on": True}
            graph = pipeline(broken, saver)
            out = _fail_then_retry(graph, broken, "t1")
            assert out["done"] == ["a", "b", "c", "d"]
            steps = [plain(dict(s)) for s in saver.step_history("t1")]
            seen.append((*_sync_reads(graph, "t1"), steps))
        counted = recovery_metrics(red)  # the save counters, counted as on SQLite
    assert counted.checkpoint_writes_tried > 0 and counted.checkpoint_save_success_rate == 1.0
    on_sqlite, on_redis = seen
    _checked(*on_redis[:3])
    assert [s["status"] for s in on_redis[3]].count("failed") == 1
    assert on_redis == on_sqlite


def test_a_retry_failed_recovery_is_timed_when_told_not_when_its_write_lands(
    tmp_path: Path,
) -> None:
    """LangGraph hands the retry's writes to the saver on a thread of its own,
    beside the re-run step: a saver slow to store them (a Redis round trip,
    made long here) still times the recovery before the step it re-runs."""
    with two_savers(tmp_path) as (sql, red):
        for saver in (sql, red):
            handed = saver.put_writes

            def slow(
                config: Any, writes: Any, task_id: str, task_path: str = "", handed: Any = handed
            ) -> None:
                if any(isinstance(v, dict) and v.get("clear") for _, v in writes):
                    time.sleep(0.05)  # the re-run step c ends meanwhile
                handed(config, writes, task_id, task_path)

            saver.put_writes = slow  # type: ignore[method-assign]
            broken = {"on": True}
            graph = pipeline(broken, saver)
            assert _fail_then_retry(graph, broken, "t1")["done"] == ["a", "b", "c", "d"]
            timeline = run_report(graph, "t1").to_dict()["timeline"]
            told = [e["event"] for e in timeline if e["event"] == "recovery" or e["path"] == "c"]
            assert told == ["failed", "gave_up", "recovery", "completed"], type(saver).__name__


async def test_a_failed_run_retried_reads_the_same_on_async_redis(tmp_path: Path) -> None:
    async with two_async_savers(tmp_path) as (sql, red):
        seen = []
        for saver in (sql, red):
            broken = {"on": True}
            graph = pipeline(broken, saver)
            out = await graph.ainvoke({"done": []}, config("t1"))
            assert out["resilience"]["status"] == "partial_complete"
            partial = plain((await arun_report(graph, "t1")).to_dict())
            assert partial["status"] == "partial_complete"
            broken["on"] = False
            await aretry_failed(graph, config("t1"))
            report = plain((await arun_report(graph, "t1")).to_dict())
            runs = [plain(r.to_dict()) for r in await alist_runs(graph)]
            metrics = _metrics(await arecovery_metrics(graph, graph=graph))
            seen.append((partial, report, runs, metrics))
    on_sqlite, on_redis = seen
    _checked(*on_redis[1:])
    assert on_redis == on_sqlite


# -- a run row lands with its checkpoint, or not at all ------------------------------


@pytest.fixture
def red() -> Iterator[ResilientRedisSaver]:
    prefix = _prefix()
    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as saver:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            saver.setup()
        try:
            yield saver
        finally:
            flush_prefix(prefix)


def _started(thread: str, checkpoint_id: str, run_id: str | None = None) -> PutLedger:
    """What a run's input checkpoint tells the ledger: its row, started."""
    row = dict.fromkeys(RUN_LOG.names)
    now = time.time()
    row.update(
        thread_id=thread, run=1, status="running", checkpoint_id=checkpoint_id,
        started_at=now, updated_at=now, run_id=run_id,
    )  # fmt: skip
    return PutLedger(start=tuple(row.values()))


def _put(
    saver: ResilientRedisSaver, config: dict[str, Any], led: PutLedger, run_id: str = ""
) -> Any:
    checkpoint = empty_checkpoint()
    metadata = {"source": "input", "step": -1, "run_id": run_id}
    return saver._drive(
        lambda: _ops.put(saver.place, saver.serde, config, checkpoint, metadata, {}, led)
    )


def test_a_run_row_is_stored_only_with_its_checkpoint(red: ResilientRedisSaver) -> None:
    red.runs.submit("r1", "job-7", None, None)
    [held] = red.runs.claim("w", 1, 30.0)
    assert red.runs.cancel("r1", ("json", b'"stop"')) == "running"  # the token moves on
    stale = {
        "configurable": {
            "thread_id": "job-7",
            "checkpoint_ns": "",
            "__lgr_fence": Fence(run_id="r1", token=held.fencing_token),
        }
    }
    with pytest.raises(LeaseLost):
        _put(red, stale, _started("job-7", "c-1"))  # the fence refuses the script
    assert red.get_tuple(config("job-7")) is None
    assert red.history.run_rows("job-7") == []  # and its run row with it
    _put(red, config("job-7"), _started("job-7", "c-1"))  # unfenced: both land
    [row] = red.history.run_rows("job-7")
    assert (row.run, row.status) == (1, "running") and red.get_tuple(config("job-7"))


def test_delete_for_runs_drops_the_run_rows_naming_them(red: ResilientRedisSaver) -> None:
    _put(red, config("t"), _started("t", "c-1", run_id="R1"), run_id="R1")
    assert [r.run_id for r in red.history.run_rows("t")] == ["R1"]
    red.delete_for_runs(["R1"])
    assert red.get_tuple(config("t")) is None and red.history.run_rows("t") == []


def test_a_ledger_write_raced_by_another_decides_again_and_keeps_both(
    red: ResilientRedisSaver,
) -> None:
    place = red.place

    def note(key: str) -> Any:
        return _runlog.apply(
            place.prefix,
            place.ttl_ms,
            place.ledger,
            "t",
            lambda: note_recovery(SQLITE, "t", key, "human", None),
        )

    first = note("k1")
    batch = next(first)  # its read
    store = first.send(red._run(_send(batch)))  # decided on version '': its store is next
    red._run(note("k2"))  # another writer lands first
    reply = red._run(_send(store))
    assert reply[1] == 0  # the version moved: nothing stored
    with pytest.raises(StopIteration):  # read again, decided again, stored
        batch = first.send(reply)
        while True:
            batch = first.send(red._run(_send(batch)))
    rows = read_recoveries(red)
    assert sorted(rows) == ["k1", "k2"]


def _send(batch: list[Any]) -> Any:
    def op() -> Any:
        return (yield batch)

    return op()


def read_recoveries(saver: ResilientRedisSaver) -> list[str]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        rc = ledger_keys(saver.place.prefix, "t").rc
        return [k.decode() for k in client.hkeys(rc)]
    finally:
        client.close()


# -- a worker SIGKILLed mid-run: its run taken over, a recovery -----------------------


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_a_worker_sigkilled_mid_run_is_a_takeover_recovery_on_redis(tmp_path: Path) -> None:
    prefix = _prefix()
    store = ("redis", prefix)
    try:
        ids = submit(store, tmp_path, 2, "kill")
        workers = [work(store, tmp_path, "--step-sleep", "0.3") for _ in range(2)]
        victim_pid = wait_for(
            lambda: next(
                (p for _, s, what, p, _ in steps(tmp_path) if what == "start" and s == "s3"),
                None,
            ),
            what="a worker to reach s3",
        )
        victim = next(w for w in workers if w.pid == victim_pid)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        [survivor] = [w for w in workers if w is not victim]
        assert set(result(survivor).values()) == {"success"}
        with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as saver:
            runs = list_runs(saver)
            assert sorted(r.run_id or "" for r in runs) == sorted(ids)
            assert {r.status for r in runs} == {"success"}  # the Worker's end, in its row
            [taken] = [r for r in runs if r.recoveries]
            assert taken.attempts == 2  # two claims
            report = run_report(saver, taken.thread_id)
            assert report.status == "success" and report.run_id == taken.run_id
            assert [r["kind"] for r in report.recoveries] == ["takeover"]
            m = recovery_metrics(saver)
            assert m.recoveries_by_kind["takeover"] == 1 and m.recoveries == 1
            assert (m.runs, m.runs_succeeded, m.runs_resumed_succeeded) == (2, 2, 1)
    finally:
        flush_prefix(prefix)
