"""The run ledger on Redis (`checkpoint.redis._runlog`): run rows, recoveries and
their readers, compared side by side with the same graph on SQLite.

- a run whose step c fails (partial_complete), then `retry_failed`: the same
  `run_report`, `list_runs` and `recovery_metrics` on Redis as on SQLite (sync
  and async);
- a run row is stored in the script of its checkpoint: a put refused (a fork)
  stores no run row, and a ledger version moved under a writer makes it decide
  again, losing neither writer's rows;
- a process SIGKILLed mid-run, resumed: a crash recovery on Redis as on SQLite.
"""

from __future__ import annotations

import os
import signal
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from graphs import DoneState, chain
from redis_servers import REDIS_DOWN, REDIS_URL, flush_prefix
from test_worker_crash import result, steps, submit, wait_for, work

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
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.redis.aio import AsyncResilientRedisSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.history._runs import alist_runs, list_runs

pytestmark = pytest.mark.skipif(REDIS_DOWN is not None, reason=REDIS_DOWN or "")

ONE_TRY = NodePolicy(retry=None)

#: Figures that are times (or, for the save counters the Redis savers do not
#: keep, counts of store writes): compared for presence, not value.
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
    # the save counters' figures: not kept on Redis (docs/redis.md)
    for name in ("checkpoint_save_success_rate", "serde_events"):
        d.pop(name)
    return plain({k: v for k, v in d.items() if not k.startswith("checkpoint_writes")})


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
    on_sqlite, on_redis = seen
    _checked(*on_redis[:3])
    assert [s["status"] for s in on_redis[3]].count("failed") == 1
    assert on_redis == on_sqlite
    assert recovery_metrics(red).checkpoint_save_success_rate is None  # no save counters


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
