"""Store faults: transient errors are retried and counted, the rest raise clearly.

The Postgres test terminates the backend that serves the saver's connection
(``pg_terminate_backend``) in the middle of a run; the SQLite one holds the
database's write lock from another connection.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import open_saver
from helpers import linear_graph, put_first_checkpoint, sql

from langgraph_resilience._store_errors import is_store_error, is_transient_store_error
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.checkpoint.store import _schema, _store
from langgraph_resilience.checkpoint.store._store_retry import call_with_retry
from langgraph_resilience.errors import ConfigError, StoreUnavailable
from langgraph_resilience.policy import Backoff

STEPS = ["a", "b", "c", "d", "e"]
FAST = Backoff(max_attempts=8, initial_interval=0.05, max_interval=0.5)


# -- the pure parts ------------------------------------------------------------


def test_transient_store_errors_are_recognised() -> None:
    assert is_transient_store_error(sqlite3.OperationalError("database is locked"))
    assert not is_transient_store_error(sqlite3.OperationalError("no such table: checkpoints"))
    assert not is_transient_store_error(sqlite3.IntegrityError("UNIQUE constraint failed"))
    assert is_transient_store_error(psycopg.OperationalError("server closed the connection"))
    # a programming error, not a lost connection
    assert not is_transient_store_error(psycopg.OperationalError("connection not in pipeline mode"))
    assert is_transient_store_error(psycopg.errors.AdminShutdown())
    assert is_transient_store_error(psycopg.errors.SerializationFailure())
    assert not is_transient_store_error(psycopg.errors.UndefinedTable())
    assert not is_transient_store_error(ConnectionError("not a store error"))
    assert not is_store_error(ValueError("bug"))


def test_retry_loop_retries_transient_errors_only_and_counts_each_try() -> None:
    failures: list[BaseException] = []
    sleeps: list[float] = []
    outcomes = iter([sqlite3.OperationalError("database is locked")] * 2 + ["saved"])

    def op() -> str:
        outcome = next(outcomes)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    result = call_with_retry(
        op,
        backoff=Backoff(max_attempts=3, initial_interval=1.0),
        on_failure=failures.append,
        sleep=sleeps.append,
        rand=lambda: 0.5,
    )
    assert result == "saved" and len(failures) == 2
    assert sleeps == [0.5, 1.0]  # full jitter: half of the caps 1 s and 2 s

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        call_with_retry(
            lambda: (_ for _ in ()).throw(sqlite3.OperationalError("no such table: x")),
            backoff=FAST,
            on_failure=failures.append,
            sleep=sleeps.append,
        )
    assert len(failures) == 3  # counted once, not retried


def test_backoff_is_validated() -> None:
    with pytest.raises(ConfigError, match="max_attempts"):
        Backoff(max_attempts=0)
    with pytest.raises(ConfigError, match="initial_interval"):
        Backoff(initial_interval=-1)
    with pytest.raises(ConfigError, match="backoff_factor"):
        Backoff(backoff_factor=0.5)
    with pytest.raises(ConfigError, match="store_retry"):
        ResilientSqliteSaver(sqlite3.connect(":memory:"), store_retry=3)  # type: ignore[arg-type]


# -- SQLite: a locked database --------------------------------------------------


def _hold_write_lock(path: str, seconds: float, started: threading.Event) -> None:
    conn = sqlite3.connect(path)
    conn.execute("BEGIN IMMEDIATE")
    started.set()
    time.sleep(seconds)
    conn.rollback()
    conn.close()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_sqlite_locked_database_is_retried(tmp_path: Path, is_async: bool) -> None:
    path = str(tmp_path / "locked.db")
    if is_async:
        import aiosqlite

        conn = await aiosqlite.connect(path, timeout=0.02)
        saver: Any = AsyncResilientSqliteSaver(conn, store_retry=FAST)
        await saver.setup()
    else:
        saver = ResilientSqliteSaver(
            sqlite3.connect(path, timeout=0.02, check_same_thread=False), store_retry=FAST
        )
        saver.setup()
    started = threading.Event()

    def behaviour(name: str) -> None:
        if name == "b":  # another process takes the write lock while b runs
            threading.Thread(target=_hold_write_lock, args=(path, 0.4, started)).start()
            started.wait()

    graph = linear_graph(STEPS, behaviour).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "locked"}}
    if is_async:
        out = await graph.ainvoke({"done": []}, config, durability="sync")
        counters = await saver.aread_counters()
        await conn.close()
    else:
        out = await asyncio.to_thread(graph.invoke, {"done": []}, config, durability="sync")
        counters = saver.read_counters()
    assert out["done"] == STEPS
    failed = counters["checkpoint_put_failed"] + counters["writes_put_failed"]
    assert failed >= 1, counters
    assert counters["checkpoint_put_ok"] == len(STEPS) + 2  # input, one per step, and the end


async def test_sqlite_put_that_finally_fails_raises_and_keeps_previous(tmp_path: Path) -> None:
    path = str(tmp_path / "held.db")
    saver = ResilientSqliteSaver(
        sqlite3.connect(path, timeout=0.01, check_same_thread=False),
        store_retry=Backoff(max_attempts=2, initial_interval=0.01),
    )
    started = threading.Event()

    def behaviour(name: str) -> None:
        if name == "c" and not started.is_set():
            threading.Thread(target=_hold_write_lock, args=(path, 1.0, started)).start()
            started.wait()

    graph = linear_graph(STEPS, behaviour).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "held"}}
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        await asyncio.to_thread(graph.invoke, {"done": []}, config, durability="sync")
    await asyncio.sleep(1.1)
    state = saver.get_tuple(config)
    assert state is not None and state.checkpoint["channel_values"]["done"] == ["a", "b"]
    out = await asyncio.to_thread(graph.invoke, None, config, durability="sync")
    assert out["done"] == STEPS
    counters = saver.read_counters()
    # every failed try was counted (stored with the next successful write): two tries
    # of the writes of c, and two of the checkpoint saved beside them if it ran
    assert counters["writes_put_failed"] + counters["checkpoint_put_failed"] in (2, 4)


# -- Postgres: the backend is terminated mid-run ---------------------------------


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_postgres_backend_terminated_mid_run(pg_dsn: str, is_async: bool) -> None:
    calls: Counter[str] = Counter()
    async with AsyncExitStack() as stack:
        saver = await open_saver("postgres", is_async, pg_dsn, stack)
        saver._state.backoff = FAST
        before = await saver.aread_counters() if is_async else saver.read_counters()

        def behaviour(name: str) -> None:
            calls[name] += 1
            if name == "c":
                pid = saver.conn.info.backend_pid
                with psycopg.connect(pg_dsn, autocommit=True) as admin:
                    killed = admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
                assert killed == (True,)

        graph = linear_graph(STEPS, behaviour).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": f"terminated-{is_async}"}}
        if is_async:
            out = await graph.ainvoke({"done": []}, config, durability="sync")
            after = await saver.aread_counters()
        else:
            out = await asyncio.to_thread(graph.invoke, {"done": []}, config, durability="sync")
            after = saver.read_counters()
    assert out["done"] == STEPS
    assert calls == dict.fromkeys(STEPS, 1)  # nothing ran twice
    failed = (after["checkpoint_put_failed"] + after["writes_put_failed"]) - (
        before["checkpoint_put_failed"] + before["writes_put_failed"]
    )
    # One outage: the write in flight fails once; a checkpoint save queued behind
    # it on the same connection may fail once too. Both then succeed.
    assert 1 <= failed <= 2, after


# -- bad input -------------------------------------------------------------------


def test_missing_sqlite_directory_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "runs.db"
    with (
        pytest.raises(ConfigError, match="does not exist") as info,
        ResilientSqliteSaver.from_conn_string(str(missing)),
    ):
        pass
    assert str(missing.parent) in str(info.value)
    assert not (tmp_path / "no").exists()


async def test_missing_sqlite_directory_async(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        async with AsyncResilientSqliteSaver.from_conn_string(str(tmp_path / "x" / "r.db")):
            pass


def test_unreachable_dsn_is_a_clear_error() -> None:
    dsn = "postgresql://postgres:s3cret@127.0.0.1:1/nowhere?connect_timeout=2"
    with pytest.raises(StoreUnavailable) as info, ResilientPostgresSaver.from_conn_string(dsn):
        pass
    message = str(info.value)
    assert "127.0.0.1" in message and "port=1" in message and "nowhere" in message
    assert "s3cret" not in message
    assert isinstance(info.value, ConnectionError)


async def test_unreachable_dsn_async() -> None:
    with pytest.raises(StoreUnavailable, match="cannot connect to Postgres"):
        async with AsyncResilientPostgresSaver.from_conn_string(
            "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2"
        ):
            pass


# -- schema versions -----------------------------------------------------------------


async def test_newer_schema_is_refused_and_left_alone(store: tuple[str, str]) -> None:
    backend, target = store
    async with AsyncExitStack() as stack:
        saver = await open_saver(backend, False, target, stack)
        await asyncio.to_thread(put_first_checkpoint, saver, "kept")
    future = _schema.SCHEMA_VERSION + 1
    sql(backend, target, "INSERT INTO resilience_migrations (v) VALUES (?)", (future,))
    with pytest.raises(ConfigError, match="newer than this"):
        async with AsyncExitStack() as stack:
            saver = await open_saver(backend, False, target, stack)
            saver.get_tuple({"configurable": {"thread_id": "kept"}})  # SQLite sets up on first use
    assert sql(backend, target, "SELECT max(v) FROM resilience_migrations")[0][0] == future
    assert (
        sql(backend, target, "SELECT count(*) FROM checkpoints WHERE thread_id = 'kept'")[0][0] == 1
    )
    sql(backend, target, "DELETE FROM resilience_migrations WHERE v = ?", (future,))


async def test_postgres_without_setup_is_a_clear_error(pg_dsn: str) -> None:
    import uuid

    from conftest import PG_URL, _with_db

    name = "lgr_nosetup_" + uuid.uuid4().hex[:8]
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        dsn = _with_db(PG_URL, name)
        with (
            ResilientPostgresSaver.from_conn_string(dsn) as saver,
            pytest.raises(ConfigError, match=r"saver\.setup\(\)"),
        ):
            put_first_checkpoint(saver, "t")
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_langgraph_migration_list_is_left_alone() -> None:
    from langgraph.checkpoint.postgres.base import BasePostgresSaver

    assert ResilientPostgresSaver.MIGRATIONS is BasePostgresSaver.MIGRATIONS
    assert not any("resilience" in m for m in BasePostgresSaver.MIGRATIONS)
    assert len(_schema.migrations(_store.SQLITE)) == len(_schema.migrations(_store.POSTGRES))


# -- counters ----------------------------------------------------------------------


async def test_counters_are_stored_and_add_up_across_savers(store: tuple[str, str]) -> None:
    """Two savers (as two processes would) each run a pipeline; a third reads the sum."""
    backend, target = store
    async with AsyncExitStack() as stack:
        (await open_saver(backend, False, target, stack)).setup()
    sql(backend, target, "DELETE FROM resilience_counters")  # other tests share the database
    for run in range(2):
        async with AsyncExitStack() as stack:
            saver = await open_saver(backend, False, target, stack)
            graph = linear_graph(STEPS).compile(checkpointer=saver)
            config = {"configurable": {"thread_id": f"count-{run}"}}
            await asyncio.to_thread(graph.invoke, {"done": []}, config, durability="sync")
    async with AsyncExitStack() as stack:
        reader = await open_saver(backend, False, target, stack)
        counters = reader.read_counters()
    # per run: input + one checkpoint per step + the final one; one write per
    # task (the input's __start__ task and each step)
    assert counters == {
        "checkpoint_put_ok": 2 * (len(STEPS) + 2),
        "checkpoint_put_failed": 0,
        "writes_put_ok": 2 * (len(STEPS) + 1),
        "writes_put_failed": 0,
    }
    scopes = sql(backend, target, "SELECT count(DISTINCT scope) FROM resilience_counters")
    assert scopes[0][0] == 2


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_pipeline_mode_stores_its_counts_once_on_close(pg_dsn: str, is_async: bool) -> None:
    """A saver in pipeline mode stores what waits on close inside its pipeline: once,
    at once (it used to fail after the pipeline closed, and retry eight times)."""
    with ResilientPostgresSaver.from_conn_string(pg_dsn) as saver:
        saver.setup()
    thread = f"pipe-{is_async}"
    cls = AsyncResilientPostgresSaver if is_async else ResilientPostgresSaver
    before = sql("postgres", pg_dsn, "SELECT coalesce(sum(value), 0) FROM resilience_counters")
    started = time.monotonic()
    async with AsyncExitStack() as stack:
        if is_async:
            saver = await stack.enter_async_context(cls.from_conn_string(pg_dsn, pipeline=True))
        else:
            saver = stack.enter_context(cls.from_conn_string(pg_dsn, pipeline=True))
        graph = linear_graph(STEPS).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": thread}}
        if is_async:
            await graph.ainvoke({"done": []}, config, durability="sync")
        else:
            await asyncio.to_thread(graph.invoke, {"done": []}, config, durability="sync")
    assert time.monotonic() - started < 2.0  # no retries on close
    after = sql("postgres", pg_dsn, "SELECT coalesce(sum(value), 0) FROM resilience_counters")
    # input + one checkpoint per step + the final one; one write per task
    assert int(after[0][0]) - int(before[0][0]) == (len(STEPS) + 2) + (len(STEPS) + 1)


def test_savers_draw_no_more_uuid4_than_stock(store: tuple[str, str], monkeypatch: Any) -> None:
    """Building and using our saver draws no uuid4 of its own: a program (or test) that
    patches uuid4 for deterministic ids sees the same ids as with LangGraph's saver."""
    import uuid

    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    backend, target = store
    real = uuid.uuid4
    drawn: list[int] = []

    def counting() -> uuid.UUID:
        drawn.append(1)
        return real()

    def draws(saver_class: Any) -> int:
        with saver_class.from_conn_string(target) as saver:
            saver.setup()
        thread = f"uuid4-{real().hex}"
        monkeypatch.setattr(uuid, "uuid4", counting)
        drawn.clear()
        try:
            with saver_class.from_conn_string(target) as saver:
                graph = linear_graph(STEPS).compile(checkpointer=saver)
                graph.invoke({"done": []}, {"configurable": {"thread_id": thread}})
                graph.invoke({"done": []}, {"configurable": {"thread_id": thread + "b"}})
            return len(drawn)
        finally:
            monkeypatch.setattr(uuid, "uuid4", real)

    ours_class = ResilientSqliteSaver if backend == "sqlite" else ResilientPostgresSaver
    stock_class = SqliteSaver if backend == "sqlite" else PostgresSaver
    assert draws(ours_class) == draws(stock_class)


def test_postgres_pool_survives_terminated_backends(pg_dsn: str) -> None:
    """With a ConnectionPool, broken pooled connections are dropped and replaced."""
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    with ConnectionPool(pg_dsn, min_size=2, max_size=2, kwargs=kwargs, open=True) as pool:
        saver = ResilientPostgresSaver(pool, store_retry=FAST)
        saver.setup()

        def behaviour(name: str) -> None:
            if name == "c":  # every backend the pool holds is terminated
                with psycopg.connect(pg_dsn, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )

        graph = linear_graph(STEPS, behaviour).compile(checkpointer=saver)
        out = graph.invoke({"done": []}, {"configurable": {"thread_id": "pool"}}, durability="sync")
        counters = saver.read_counters()
    assert out["done"] == STEPS
    assert counters["checkpoint_put_failed"] + counters["writes_put_failed"] >= 1
