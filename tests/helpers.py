"""Small helpers shared by the tests and their worker scripts: ledgers on disk,
raw SQL on the store, history checks (the graphs and states: `graphs`)."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, cast

import psycopg


def script_parser(*positional: str, resume: bool = False) -> argparse.ArgumentParser:
    """A worker script's arguments: ``positional`` (by default BACKEND TARGET THREAD
    LEDGER), ``--async`` (``args.is_async``) and, with ``resume``, ``--resume``."""
    parser = argparse.ArgumentParser()
    for name in positional or ("backend", "target", "thread", "ledger"):
        parser.add_argument(name)
    if resume:
        parser.add_argument("--resume", action="store_true")
    parser.add_argument("--async", dest="is_async", action="store_true")
    return parser


async def run_graph(graph: Any, value: Any, config: Any, is_async: bool, **kwargs: Any) -> Any:
    """``graph.ainvoke``, or with a sync saver ``graph.invoke`` in a thread (a sync
    saver's calls would block the event loop)."""
    if is_async:
        return await graph.ainvoke(value, config, **kwargs)
    return await asyncio.to_thread(graph.invoke, value, config, **kwargs)


async def run_worker(h: Any, worker: Any, **kwargs: Any) -> dict[str, str]:
    """``worker.arun``, or on a sync saver ``worker.run`` in a thread (``h``: the
    conftest's harness)."""
    if h.is_async:
        return cast("dict[str, str]", await worker.arun(**kwargs))
    return cast("dict[str, str]", await asyncio.to_thread(worker.run, **kwargs))


def append(path: str | Path, line: str) -> None:
    """Add a line to a ledger file, on disk before this returns (a kill may follow)."""
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_ledger(path: str | Path) -> list[list[str]]:
    """A ledger's complete lines, split into words (none if it does not exist yet).

    A line another process is writing at this moment may be read in part: it has
    no newline yet and is left out (it is read complete the next time)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    return [line.split() for line in text.split("\n")[:-1] if line]


def sql(
    backend: str, target: str, query: str, params: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:
    """Run one statement on the store through a separate connection."""
    if backend == "redis":
        return _redis_ledger_sql(target, query, params)
    if backend == "sqlite":
        conn = sqlite3.connect(target)
        try:
            rows = conn.execute(query, params).fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()
    with psycopg.connect(target, autocommit=True) as conn:
        cur = conn.execute(query.replace("?", "%s"), params)
        return cur.fetchall() if cur.description else []


#: The run ledger's tables a test may read on Redis: one thread's rows (the query's
#: first parameter), loaded into the saver's snapshot as its readers load them.
_REDIS_LEDGER = (
    "resilience_run_log",
    "resilience_steps",
    "resilience_recoveries",
    "resilience_recovery_paths",
    "resilience_node_attempts",
)


def _redis_ledger_sql(prefix: str, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """A test's SELECT of one thread's run-ledger rows, on a Redis saver's keys."""
    tables = re.findall(r"FROM (\w+)", query)
    where = re.search(r"WHERE thread_id = \?", query)
    if not query.lstrip().upper().startswith("SELECT") or not where or not tables:
        raise NotImplementedError(f"no SQL on Redis (a test's SQL: {query!r})")
    if any(t not in _REDIS_LEDGER for t in tables):
        raise NotImplementedError(f"no SQL on Redis (a test's SQL: {query!r})")
    from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
    from langgraph_resilience.checkpoint.redis.runlog._runlog_parts import read_threads
    from langgraph_resilience.checkpoint.store._store import Stmt

    def select() -> Any:
        rows = yield Stmt(query, params, fetch=True)
        return [tuple(r) for r in rows]

    from redis_servers import REDIS_URL

    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as saver:
        found: list[tuple[Any, ...]] = saver._run(read_threads(saver.place, str(params[0]), select))
    return found


def db_arg(backend: str, target: str) -> str:
    """The CLI's ``--db`` for a harness's store: its SQLite path or Postgres DSN, or
    on Redis (``target``: the saver's key prefix) ``redis://...#prefix``."""
    if backend == "redis":
        from redis_servers import REDIS_URL

        return f"{REDIS_URL}#{target}"
    return target


def expire_lease(backend: str, target: str, run_id: str) -> None:
    """Let a run's lease run out now, as if its worker had stopped renewing it an hour
    ago (the lease clock is the database's, or on SQLite the boot clock it names, so
    the store is where time passes). On Redis ``target`` is the saver's key prefix."""
    if backend == "redis":
        from redis_servers import expire_run_lease

        expire_run_lease(target, run_id)
        return
    sql(
        backend,
        target,
        "UPDATE resilience_runs SET lease_expires_at = lease_expires_at - 3600, "
        "lease_ticks = lease_ticks - 3600 WHERE run_id = ?",
        (run_id,),
    )


def add_resilience_rows(backend: str, target: str, thread_id: str, checkpoint_id: str) -> None:
    """One node attempt, one effect and one run tied to a checkpoint of a thread."""
    now = time.time()
    sql(
        backend,
        target,
        "INSERT INTO resilience_node_attempts (thread_id, checkpoint_ns, checkpoint_id, task_id, "
        "attempt, node, status, started_at) VALUES (?, '', ?, 'task-1', 1, 'a', 'succeeded', ?)",
        (thread_id, checkpoint_id, now),
    )
    sql(
        backend,
        target,
        "INSERT INTO resilience_effects (thread_id, idempotency_key, checkpoint_ns, checkpoint_id, "
        "task_id, name, status, intent_at) VALUES (?, ?, '', ?, 'task-1', 'send', 'done', ?)",
        (thread_id, f"{thread_id}|send|{checkpoint_id}", checkpoint_id, now),
    )
    sql(
        backend,
        target,
        "INSERT INTO resilience_runs (run_id, thread_id, status, created_at, updated_at) "
        "VALUES (?, ?, 'success', ?, ?)",
        (f"run-{thread_id}-{checkpoint_id}", thread_id, now, now),
    )


def emptied(store: tuple[str, str], *tables: str) -> tuple[str, str]:
    """``store`` (a backend and its target) with ``tables`` emptied, by default the
    runs: a module's tests share its Postgres database (set up here first), while a
    SQLite store is a fresh file per test and is left as it is."""
    backend, target = store
    if backend == "postgres":
        from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver

        with ResilientPostgresSaver.from_conn_string(target) as saver:
            saver.setup()
        for table in tables or ("resilience_runs",):
            sql(backend, target, f"DELETE FROM {table}")
    return store


def saver_for(store: tuple[str, str]) -> Any:
    """A sync saver on ``store`` (a backend and its target), to open with ``with``."""
    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    backend, target = store
    cls = ResilientSqliteSaver if backend == "sqlite" else ResilientPostgresSaver
    return cls.from_conn_string(target)


#: The saver kinds a fixture is parametrized over for `saver_of_kind`.
SAVER_KINDS = ["sqlite", "postgres", "sqlite-async", "postgres-async"]


def saver_of_kind(request: Any, tmp_path: Path, db_name: str) -> tuple[str, Any]:
    """For a fixture parametrized over `SAVER_KINDS`: its store (the tests' Postgres
    database, the test skipped without one, or the SQLite file ``db_name`` in
    ``tmp_path``) and a saver of that kind on it, to open with ``(async) with``."""
    from conftest import require_postgres

    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
    from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
    from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver

    kind = request.param
    if kind.startswith("postgres"):
        require_postgres()
        target = request.getfixturevalue("pg_dsn")
    else:
        target = str(tmp_path / db_name)
    cls: Any = {
        "sqlite": ResilientSqliteSaver,
        "postgres": ResilientPostgresSaver,
        "sqlite-async": AsyncResilientSqliteSaver,
        "postgres-async": AsyncResilientPostgresSaver,
    }[kind]
    return target, cls.from_conn_string(target)


def resilience_counts(backend: str, target: str, thread_id: str) -> dict[str, int]:
    return {
        table: sql(
            backend, target, f"SELECT count(*) FROM {table} WHERE thread_id = ?", (thread_id,)
        )[0][0]
        for table in ("resilience_node_attempts", "resilience_effects", "resilience_runs")
    }


def assert_no_fork(backend: str, target: str, thread_id: str) -> None:
    """No checkpoint of the thread has two children in the same namespace."""
    if backend == "redis":
        from redis_servers import checkpoint_parents

        parents = [p for p in checkpoint_parents(target, thread_id).values() if p]
        twins = {k: n for k, n in Counter(parents).items() if n > 1}
        assert twins == {}, f"forked history in thread {thread_id!r}: {twins}"
        return
    rows = sql(
        backend,
        target,
        "SELECT checkpoint_ns, parent_checkpoint_id FROM checkpoints "
        "WHERE thread_id = ? AND parent_checkpoint_id IS NOT NULL",
        (thread_id,),
    )
    twins = {k: n for k, n in Counter(rows).items() if n > 1}
    assert twins == {}, f"forked history in thread {thread_id!r}: {twins}"


def put_first_checkpoint(saver: Any, thread_id: str) -> Any:
    """Store an empty input checkpoint that starts a thread (sync saver)."""
    from langgraph.checkpoint.base import empty_checkpoint

    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    return saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})


# -- the fault tests' private Postgres and their threads -------------------------------------


def private_db(pg_server: Any, prefix: str, *, synchronous_commit: bool = False) -> Iterator[str]:
    """A fresh, set-up database on the private server (`faults.PgServer`, running
    before and after), for a fixture to yield from. ``synchronous_commit``: on for
    this database (the server runs with it off for speed, and a SIGKILLed server
    then loses commits it acknowledged, which no client can notice)."""
    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver

    pg_server.ensure_running()
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    dsn: str = pg_server.create_database(name)
    if synchronous_commit:
        sql("postgres", pg_server.dsn(), f'ALTER DATABASE "{name}" SET synchronous_commit = on')
    with ResilientPostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
    yield dsn
    pg_server.ensure_running()


def wait_until(check: Callable[[], Any], timeout: float, what: str, tick: float = 0.01) -> float:
    """Poll ``check`` until true; the time.monotonic() it became true."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(tick)
    return time.monotonic()


def in_thread(fn: Callable[..., Any], *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """``fn(*args)`` in a daemon thread; its ``result`` or ``error`` lands in the dict."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["result"] = fn(*args)
        except BaseException as exc:  # reported by the test
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def rest_of(gen: Generator[Any, Any, Any], value: Any) -> Generator[Any, Any, Any]:
    """The rest of a store `Statements` generator whose last statement a tap
    answered with ``value`` (``return (yield from rest_of(gen, value))``)."""
    while True:
        try:
            stmt = gen.send(value)
        except StopIteration as stop:
            return stop.value
        value = yield stmt


def tasks_written(backend: str, target: str, thread: str, channel: str) -> set[tuple[str, ...]]:
    """(namespace, checkpoint, task) of the node tasks of a thread whose writes
    to ``channel`` are stored (not the input's: LangGraph's ``__start__`` task)."""
    if backend == "redis":  # ``target``: the saver's key prefix
        from redis_servers import tasks_written as redis_tasks_written

        return redis_tasks_written(target, thread, channel)
    table = "writes" if backend == "sqlite" else "checkpoint_writes"
    rows = sql(
        backend,
        target,
        f"SELECT DISTINCT checkpoint_ns, checkpoint_id, task_id FROM {table} "
        "WHERE thread_id = ? AND channel = ? AND task_path NOT LIKE ?",
        (thread, channel, "%__start__%"),
    )
    return {tuple(r) for r in rows}


def empty_store(backend: str, tmp_path: Path, name: str) -> Iterator[tuple[str, str]]:
    """An empty store for a fixture to yield from: a SQLite file, or a Postgres
    database of its own (``name`` and a random suffix), dropped after."""
    from conftest import PG_URL, _with_db, require_postgres

    if backend == "sqlite":
        yield "sqlite", str(tmp_path / f"{name}.db")
        return
    require_postgres()
    db = f"lgr_{name}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{db}"')
    try:
        yield "postgres", _with_db(PG_URL, db)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
