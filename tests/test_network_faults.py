"""Network and store faults, real ones (issue 12): a Postgres server of the tests'
own (`faults.PgServer`) stopped mid-run, and a TCP proxy (`faults.TcpProxy`)
between the savers and the server that blackholes connections.

Every fault test runs the four kinds of Postgres saver at once: a single
connection (``from_conn_string``) and a pool of `BoundedConnection` built as the
docs/savers.md ("Network faults") says, sync and async.

- Outage sweep: the server is stopped for 1, 2, 3 s (and 5, 8 s with
  ``LGR_FAULT_TRIALS`` > 1, which also repeats each length that many times) while
  every run waits in its second node; every run ends with the full result.
- Beyond the retry window: the run raises `StoreUnavailable` naming the server
  (not ``psycopg.OperationalError``), and resumes once the server is back.
- Blackhole without healing: every saver call returns or raises within
  ``store_retry.max_attempts * (connect or pool timeout + read) + window``.
- A session cut off between an ``UPDATE`` and its ``COMMIT``: the server ends it
  within ``idle_in_transaction``, and another session gets the row.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
import pytest
from faults import Outage, PgServer, TcpProxy
from graphs import linear_graph
from helpers import put_first_checkpoint
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_resilience._store_errors import (
    is_refused_login,
    is_transient_store_error,
    is_unavailable_error,
)
from langgraph_resilience.checkpoint.postgres import (
    BoundedConnection,
    PgTimeouts,
    ResilientPostgresSaver,
)
from langgraph_resilience.checkpoint.postgres._network import CONNECT_KWARGS
from langgraph_resilience.checkpoint.postgres.aio import (
    AsyncBoundedConnection,
    AsyncResilientPostgresSaver,
)
from langgraph_resilience.checkpoint.store._store import Stmt
from langgraph_resilience.checkpoint.store._store_retry import (
    DEFAULT_PG_STORE_RETRY,
    DEFAULT_STORE_RETRY,
    retry_window,
)
from langgraph_resilience.errors import ConfigError, StoreUnavailable
from langgraph_resilience.policy import Backoff

T = TypeVar("T")
STEPS = ["a", "b", "c", "d"]
TRIALS = int(os.environ.get("LGR_FAULT_TRIALS", "1"))
OUTAGES = [1.0, 2.0, 3.0] + ([5.0, 8.0] if TRIALS > 1 else [])
#: (async, pool) of each kind of saver.
KINDS = {
    "single": (False, False),
    "single-async": (True, False),
    "pool": (False, True),
    "pool-async": (True, True),
}
# The test's own blocking calls (sync runs, waits, pg_ctl) get threads of their own,
# so they never wait behind LangGraph's use of the default executor.
_EXECUTOR = ThreadPoolExecutor(max_workers=12, thread_name_prefix="fault-test")


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(_EXECUTOR, lambda: fn(*args, **kwargs))


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fault_dsn(pg_server: PgServer) -> str:
    """A database of this module on the private server, set up."""
    pg_server.ensure_running()
    dsn = pg_server.create_database(f"lgr_faults_{uuid.uuid4().hex[:8]}")
    with ResilientPostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
    return dsn


@pytest.fixture
def server(pg_server: PgServer) -> Iterator[PgServer]:
    """The private server, running before and after the test (a failed test may
    leave it stopped)."""
    pg_server.ensure_running()
    yield pg_server
    pg_server.ensure_running()


async def open_saver(
    kind: str,
    dsn: str,
    stack: AsyncExitStack,
    *,
    store_retry: Backoff | None = None,
    timeouts: PgTimeouts | None = None,
    pool_timeout: float = 2.0,
) -> Any:
    """A saver of ``kind`` on ``dsn``; a pool is built as docs/savers.md says."""
    is_async, is_pool = KINDS[kind]
    bounds = timeouts or PgTimeouts()
    options: dict[str, Any] = {"store_retry": store_retry, "timeouts": timeouts}
    sized: dict[str, Any] = {"min_size": 1, "max_size": 2, "timeout": pool_timeout}
    if is_pool and is_async:
        apool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            bounds.conninfo(dsn),
            connection_class=AsyncBoundedConnection,
            kwargs=CONNECT_KWARGS,
            open=False,
            **sized,
        )
        await apool.open(wait=True)
        stack.push_async_callback(apool.close, 5)
        return AsyncResilientPostgresSaver(apool, **options)
    if is_pool:
        pool: ConnectionPool[Any] = ConnectionPool(
            bounds.conninfo(dsn),
            connection_class=BoundedConnection,
            kwargs=CONNECT_KWARGS,
            open=True,
            **sized,
        )
        pool.wait()
        stack.callback(pool.close, 5)
        return ResilientPostgresSaver(pool, **options)
    if is_async:
        opened = AsyncResilientPostgresSaver.from_conn_string(dsn, **options)
        return await stack.enter_async_context(opened)
    return stack.enter_context(ResilientPostgresSaver.from_conn_string(dsn, **options))


async def call(kind: str, saver: Any, method: str, *args: Any) -> Any:
    """``saver.method(*args)``, or its a-prefixed twin on an async saver."""
    if KINDS[kind][0]:
        if method == "list":
            return [t async for t in saver.alist(*args)]
        return await getattr(saver, "a" + method)(*args)
    if method == "list":
        return await blocking(lambda: list(saver.list(*args)))
    return await blocking(getattr(saver, method), *args)


async def run(kind: str, saver: Any, thread: str, behaviour: Any, value: Any) -> Any:
    graph = linear_graph(STEPS, behaviour).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread}}
    if KINDS[kind][0]:
        return await graph.ainvoke(value, config, durability="sync")
    return await blocking(graph.invoke, value, config, durability="sync")


async def eventually(op: Callable[[], Awaitable[T]], seconds: float = 20) -> T:
    """``op()`` once it stops raising `StoreUnavailable` (a pool reconnects on its
    own schedule: psycopg_pool waits 1, 2, 4 ... s between attempts)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await op()
        except StoreUnavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def report(line: str) -> None:
    print(f"\n[network faults] {line}", end="")


async def outage_during_runs(
    server: PgServer,
    savers: dict[str, Any],
    seconds: float,
    label: str,
) -> tuple[dict[str, Any], Outage]:
    """Run the pipeline on every saver; stop the server for ``seconds`` while every
    run waits in node b, then let them go on. Each run's result or error."""
    reached = threading.Barrier(len(savers) + 1, timeout=60)
    go = threading.Event()

    def behaviour(name: str) -> None:
        if name == "b" and not go.is_set():
            reached.wait()
            go.wait(60)

    finished: dict[str, float] = {}

    async def timed(kind: str, saver: Any) -> Any:
        try:
            return await run(kind, saver, f"{label}-{kind}", behaviour, {"done": []})
        finally:
            finished[kind] = time.monotonic()

    runs = {kind: asyncio.ensure_future(timed(kind, saver)) for kind, saver in savers.items()}
    await blocking(reached.wait)
    outage = await blocking(Outage, server, seconds)
    go.set()
    results = await asyncio.gather(*runs.values(), return_exceptions=True)
    await blocking(outage.wait)
    outage.finished = {kind: at - outage.back_at for kind, at in finished.items()}
    return dict(zip(runs, results, strict=True)), outage


# -- the pure parts ------------------------------------------------------------------------


def test_timeouts_fill_in_what_the_dsn_leaves_unset() -> None:
    rendered = PgTimeouts().conninfo("postgresql://u:pw@db:5433/app", env={})
    params = psycopg.conninfo.conninfo_to_dict(rendered)
    assert params["connect_timeout"] == "5"
    assert (params["keepalives"], params["keepalives_idle"]) == ("1", "5")
    assert (params["keepalives_interval"], params["keepalives_count"]) == ("2", "3")
    assert params["tcp_user_timeout"] == "10000"
    assert params["options"] == (
        "-c statement_timeout=30000 -c lock_timeout=5000 "
        "-c idle_in_transaction_session_timeout=10000 -c tcp_keepalives_idle=5 "
        "-c tcp_keepalives_interval=2 -c tcp_keepalives_count=3 -c tcp_user_timeout=10000"
    )
    assert (params["host"], params["port"], params["password"]) == ("db", "5433", "pw")

    # what the DSN (or PGCONNECT_TIMEOUT / PGOPTIONS) sets is kept; None leaves unset
    own = "host=db connect_timeout=9 options='-c statement_timeout=1min -c search_path=x'"
    bounds = PgTimeouts(lock=None, keepalives_idle=None, tcp_user_timeout=timedelta(seconds=3))
    params = psycopg.conninfo.conninfo_to_dict(bounds.conninfo(own, env={}))
    assert params["connect_timeout"] == "9"
    assert params["tcp_user_timeout"] == "3000"
    assert "keepalives" not in params
    assert params["options"] == (
        "-c statement_timeout=1min -c search_path=x "
        "-c idle_in_transaction_session_timeout=10000 -c tcp_user_timeout=3000"
    )
    env = {"PGCONNECT_TIMEOUT": "7", "PGOPTIONS": "-c lock_timeout=1s"}
    params = psycopg.conninfo.conninfo_to_dict(PgTimeouts().conninfo("host=db", env=env))
    assert "connect_timeout" not in params
    assert params["options"].startswith("-c lock_timeout=1s -c statement_timeout=30000")
    assert "lock_timeout=5000" not in params["options"]


def test_timeouts_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"read .* must exceed statement"):
        PgTimeouts(statement=30, read=30)
    with pytest.raises(ConfigError, match="libpq's minimum"):
        PgTimeouts(connect=1)
    with pytest.raises(ConfigError, match="lock must be a finite number"):
        PgTimeouts(lock=0)
    with pytest.raises(ConfigError, match="keepalives_count"):
        PgTimeouts(keepalives_count=0)
    with (
        pytest.raises(ConfigError, match="PgTimeouts"),
        ResilientPostgresSaver.from_conn_string("host=x", timeouts=5),  # type: ignore[arg-type]
    ):
        pass
    assert PgTimeouts(statement=None, read=1).read_timeout == 1.0


def test_retry_windows_are_what_their_comments_say() -> None:
    assert retry_window(DEFAULT_PG_STORE_RETRY) == pytest.approx(11.1)
    assert DEFAULT_PG_STORE_RETRY.jitter == "none"  # the window is a promise
    assert DEFAULT_PG_STORE_RETRY.max_attempts == 10
    assert retry_window(DEFAULT_STORE_RETRY) == pytest.approx(6.35)


def test_refused_logins_are_not_transient() -> None:
    refused = [
        'connection failed: ... failed: FATAL:  role "nobody" does not exist',
        'connection failed: ... failed: FATAL:  database "nodb" does not exist',
        'FATAL:  password authentication failed for user "app"',
        'FATAL:  no pg_hba.conf entry for host "10.0.0.1", user "app"',
        "fe_sendauth: no password supplied",
    ]
    for message in refused:
        exc = psycopg.OperationalError(message)
        assert is_refused_login(exc) and not is_transient_store_error(exc), message
        assert is_unavailable_error(exc), message
    passing = [
        "connection failed: ... port 5432 failed: Connection refused",
        "connection failed: FATAL:  the database system is starting up",
        "consuming input failed: server closed the connection unexpectedly",
        "no reply from the server within 35 s (PgTimeouts.read); the connection was closed",
    ]
    for message in passing:
        assert is_transient_store_error(psycopg.OperationalError(message)), message
    assert is_transient_store_error(psycopg.errors.IdleInTransactionSessionTimeout())
    assert is_transient_store_error(psycopg.errors.LockNotAvailable())
    assert not is_transient_store_error(psycopg.errors.InvalidPassword())
    from psycopg_pool import PoolClosed, PoolTimeout

    assert is_transient_store_error(PoolTimeout("no connection in 2 s"))
    assert not is_transient_store_error(PoolClosed("the pool is closed"))
    assert not is_unavailable_error(psycopg.errors.UniqueViolation())


def test_bounded_waits_rely_on_psycopg_wait_timeout() -> None:
    """`BoundedConnection` bounds a wait through psycopg's own ``wait(timeout=)``
    and its ``_WaitTimeout``; an upgrade that drops either fails here first."""
    for cls in (psycopg.Connection, psycopg.AsyncConnection):
        assert "timeout" in inspect.signature(cls.wait).parameters
    assert issubclass(psycopg.errors._WaitTimeout, psycopg.OperationalError)


# -- a refused login -----------------------------------------------------------------------


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_refused_login_is_store_unavailable_at_once(
    server: PgServer, fault_dsn: str, is_async: bool
) -> None:
    dsn = fault_dsn.replace("postgres@", "nobody:s3cret@")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="will not help") as info:
        if is_async:
            async with AsyncResilientPostgresSaver.from_conn_string(dsn):
                pass
        else:
            with ResilientPostgresSaver.from_conn_string(dsn):
                pass
    assert time.monotonic() - started < 2
    assert "nobody" in str(info.value) and "s3cret" not in str(info.value)


# -- outages -------------------------------------------------------------------------------


@pytest.mark.parametrize("seconds", OUTAGES, ids=[f"{s:g}s" for s in OUTAGES])
async def test_outage_within_the_retry_window_every_run_succeeds(
    server: PgServer, fault_dsn: str, seconds: float
) -> None:
    ok = dict.fromkeys(KINDS, 0)
    failures: list[str] = []
    for trial in range(TRIALS):
        async with AsyncExitStack() as stack:
            savers = {kind: await open_saver(kind, fault_dsn, stack) for kind in KINDS}
            started = time.monotonic()
            results, outage = await outage_during_runs(
                server, savers, seconds, f"sweep-{seconds:g}-{trial}-{uuid.uuid4().hex[:6]}"
            )
            took = time.monotonic() - started
        for kind, result in results.items():
            if isinstance(result, dict) and result.get("done") == STEPS:
                ok[kind] += 1
            else:
                failures.append(f"{kind}: {result!r}")
        after = ", ".join(f"{k} {t:+.2f} s" for k, t in sorted(outage.finished.items()))
        report(
            f"outage {seconds:g} s (down {outage.down_for:.2f} s), trial {trial + 1}: "
            f"runs took {took:.2f} s; done after the server was back: {after}"
        )
    report(f"outage {seconds:g} s: " + ", ".join(f"{k} {n}/{TRIALS}" for k, n in ok.items()))
    assert failures == []


async def test_outage_beyond_the_retry_window_is_store_unavailable_then_resumes(
    server: PgServer, fault_dsn: str
) -> None:
    # Three tries over 0.5 s; a pooled try waits up to 0.5 s for a connection: every
    # saver gives up within about 2 s of a 3 s outage.
    retry = Backoff(max_attempts=3, initial_interval=0.2, max_interval=0.3, jitter="none")
    label = f"beyond-{uuid.uuid4().hex[:6]}"
    async with AsyncExitStack() as stack:
        savers = {
            kind: await open_saver(kind, fault_dsn, stack, store_retry=retry, pool_timeout=0.5)
            for kind in KINDS
        }
        results, _ = await outage_during_runs(server, savers, 3.0, label)
        for kind, result in results.items():
            assert isinstance(result, StoreUnavailable), f"{kind}: {result!r}"
            assert not isinstance(result, psycopg.Error)
            assert f"port={server.port}" in result.target and "dbname=lgr_faults" in result.target
            assert "tried 3 times" in str(result), str(result)
        # The same savers resume every thread once the server is back (a pool once
        # it has reconnected, on its own schedule).
        resumed = {
            kind: await eventually(lambda k=kind, s=saver: run(k, s, f"{label}-{k}", None, None))
            for kind, saver in savers.items()
        }
    for kind, result in resumed.items():
        assert result["done"] == STEPS, kind
    report("beyond the window: 4/4 StoreUnavailable, 4/4 resumed")


# -- a blackholed network ------------------------------------------------------------------


async def test_blackhole_every_call_returns_or_raises_within_its_bound(
    server: PgServer, fault_dsn: str
) -> None:
    timeouts = PgTimeouts(connect=2, statement=0.5, read=1.0, lock=0.4, idle_in_transaction=2)
    retry = Backoff(max_attempts=2, initial_interval=0.1, max_interval=0.1, jitter="none")
    pool_timeout = 1.0
    # A try: a connection (connect_timeout, or the pool's timeout) and one wait (read).
    bounds = {
        kind: retry.max_attempts * ((pool_timeout if KINDS[kind][1] else 2) + 1.0)
        + retry_window(retry)
        for kind in KINDS
    }
    label = f"blackhole-{uuid.uuid4().hex[:6]}"
    with TcpProxy(server.port) as proxy:
        async with AsyncExitStack() as stack:
            savers = {
                kind: await open_saver(
                    kind,
                    proxy.dsn(fault_dsn),
                    stack,
                    store_retry=retry,
                    timeouts=timeouts,
                    pool_timeout=pool_timeout,
                )
                for kind in KINDS
            }
            configs = {}
            for kind, saver in savers.items():
                stored = await blocking(put_first_checkpoint, saver, f"{label}-{kind}")
                configs[kind] = stored
            proxy.blackhole()

            async def calls(kind: str) -> list[tuple[str, float, BaseException | None]]:
                saver, config = savers[kind], configs[kind]
                timed = []
                for method, args in [
                    ("get_tuple", (config,)),
                    ("put_writes", (config, [("done", ["x"])], "task-1")),
                    ("list", (config,)),
                ]:
                    started = time.monotonic()
                    error: BaseException | None = None
                    try:
                        await asyncio.wait_for(call(kind, saver, method, *args), 60)
                    except Exception as exc:
                        error = exc
                    timed.append((method, time.monotonic() - started, error))
                return timed

            measured = dict(
                zip(KINDS, await asyncio.gather(*(calls(kind) for kind in KINDS)), strict=True)
            )
            proxy.heal()
            for kind, saver in savers.items():  # healed: the savers work again
                found = await eventually(
                    lambda k=kind, s=saver: call(k, s, "get_tuple", configs[k])
                )
                assert found is not None, kind
    for kind, timed in measured.items():
        worst = max(took for _, took, _ in timed)
        report(f"blackhole {kind}: longest call {worst:.2f} s (bound {bounds[kind]:.1f} s)")
        for method, took, error in timed:
            assert isinstance(error, StoreUnavailable), f"{kind}.{method}: {error!r}"
            assert took <= bounds[kind] + 0.5, f"{kind}.{method} took {took:.2f} s"


# -- a session stalled inside a transaction ------------------------------------------------


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_stalled_session_is_ended_and_its_row_lock_released(
    server: PgServer, fault_dsn: str, is_async: bool
) -> None:
    """The saver's connection is cut off after an UPDATE and before its COMMIT: the
    server ends the session within idle_in_transaction, so the row is free again."""
    idle = 1.0
    row = uuid.uuid4().int % 1_000_000
    with psycopg.connect(fault_dsn, autocommit=True) as admin:
        admin.execute("CREATE TABLE IF NOT EXISTS lgr_fault_rows (id INT PRIMARY KEY, n INT)")
        admin.execute("INSERT INTO lgr_fault_rows VALUES (%s, 0)", (row,))
    timeouts = PgTimeouts(connect=2, statement=1, read=2, idle_in_transaction=idle)
    retry = Backoff(max_attempts=1)
    cut = threading.Event()

    def stalling() -> Any:
        yield Stmt("UPDATE lgr_fault_rows SET n = n + 1 WHERE id = %s", (row,))
        proxy.blackhole()  # the COMMIT never reaches the server
        cut.set()

    with TcpProxy(server.port) as proxy:
        async with AsyncExitStack() as stack:
            kind = "single-async" if is_async else "single"
            saver = await open_saver(
                kind, proxy.dsn(fault_dsn), stack, store_retry=retry, timeouts=timeouts
            )
            write: Awaitable[Any] = (
                saver._transact(stalling) if is_async else blocking(saver._transact, stalling)
            )
            stalled = asyncio.ensure_future(write)
            await blocking(cut.wait, 10)
            started = time.monotonic()

            def take_row() -> None:
                with psycopg.connect(fault_dsn, autocommit=True) as other:
                    other.execute("SET lock_timeout = '10s'")
                    other.execute("UPDATE lgr_fault_rows SET n = n + 10 WHERE id = %s", (row,))

            await blocking(take_row)
            waited = time.monotonic() - started
            with pytest.raises(StoreUnavailable, match="no reply from the server"):
                await stalled
            proxy.heal()
    report(f"stalled session ({'async' if is_async else 'sync'}): row free after {waited:.2f} s")
    assert waited <= idle + 1.0
    with psycopg.connect(fault_dsn, autocommit=True) as admin:
        n = admin.execute("SELECT n FROM lgr_fault_rows WHERE id = %s", (row,)).fetchone()
    assert n == (10,)  # the stalled UPDATE was rolled back
