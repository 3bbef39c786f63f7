"""One checkpointer fixture over every backend: SQLite and Postgres, sync and async.

Postgres is reached through ``LGR_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``); each test module gets a fresh
database, dropped afterwards. Without a server the Postgres cases skip with the
reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

#: The scripts the tests run as processes (and import: `spawn`, the graphs they run).
SCRIPTS = Path(__file__).parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

PG_URL = os.environ.get("LGR_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
IN_CI = os.environ.get("CI", "").lower() == "true"
CRASH_CASES = int(os.environ.get("LGR_CRASH_CASES", "3"))


def _pg_reason() -> str | None:
    try:
        psycopg.connect(PG_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"Postgres at {PG_URL} unreachable ({str(exc).strip().splitlines()[0]})"
    return None


_PG_DOWN = _pg_reason()


def require_postgres() -> None:
    if _PG_DOWN is None:
        return
    if IN_CI:
        pytest.fail(f"CI=true but {_PG_DOWN}; Postgres tests must run in CI")
    pytest.skip(_PG_DOWN)


def _with_db(url: str, dbname: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo("", **params)


@pytest.fixture(scope="module")
def pg_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh Postgres database for this test module."""
    require_postgres()
    name = f"lgr_{request.module.__name__.split('.')[-1][:30]}_{uuid.uuid4().hex[:8]}".lower()
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_db(PG_URL, name)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sqlite_path(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoints.db")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(backend, target): a SQLite file path, or this module's Postgres database."""
    if request.param == "postgres":
        require_postgres()
        return "postgres", request.getfixturevalue("pg_dsn")
    return "sqlite", str(tmp_path / "store.db")


class RedisOpener:
    """``from_conn_string(prefix)``: a sync Redis saver on the tests' Redis under the
    key prefix a `Harness` names as its target."""

    @staticmethod
    @contextlib.contextmanager
    def from_conn_string(prefix: str, **kwargs: Any) -> Iterator[Any]:
        from redis_servers import REDIS_URL

        from langgraph_resilience.checkpoint.redis import ResilientRedisSaver

        with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix, **kwargs) as saver:
            yield saver


@dataclass
class Harness:
    """A saver of one backend, with calls that read the same for sync and async."""

    backend: str  # "sqlite" | "postgres" | "redis"
    is_async: bool
    saver: Any
    target: str  # SQLite path or Postgres DSN
    variant: str = ""  # "pipe" or "pool" for those Postgres savers

    @property
    def id(self) -> str:
        variant = f"-{self.variant}" if self.variant else ""
        return f"{self.backend}{'-async' if self.is_async else ''}{variant}"

    @property
    def sync_saver_class(self) -> Any:
        """The backend's sync saver class (to open more savers on the same store)."""
        from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
        from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

        if self.backend == "redis":
            return RedisOpener
        return ResilientSqliteSaver if self.backend == "sqlite" else ResilientPostgresSaver

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``saver.method(...)``, or its a-prefixed twin on an async saver; a dotted
        ``method`` names one of the saver's interfaces (``"runs.claim"``)."""
        *where, name = method.split(".")
        target = self.saver
        for part in where:
            target = getattr(target, part)
        if self.is_async:
            return await getattr(target, "a" + name)(*args, **kwargs)
        return await asyncio.to_thread(getattr(target, name), *args, **kwargs)

    async def listed(self, config: Any, **kwargs: Any) -> list[Any]:
        if self.is_async:
            return [t async for t in self.saver.alist(config, **kwargs)]
        return await asyncio.to_thread(lambda: list(self.saver.list(config, **kwargs)))

    async def invoke(self, graph: Any, value: Any, config: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await graph.ainvoke(value, config, **kwargs)
        return await asyncio.to_thread(graph.invoke, value, config, **kwargs)


async def open_saver(backend: str, is_async: bool, target: str, stack: AsyncExitStack) -> Any:
    if backend == "redis":  # target: "redis" (a new key prefix), or [URL#]prefix (kept)
        url, _, prefix = target.rpartition("#")
        return await open_redis(is_async, stack, None if target == "redis" else prefix, url)
    if backend == "sqlite":
        if is_async:
            from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver

            return await stack.enter_async_context(
                AsyncResilientSqliteSaver.from_conn_string(target)
            )
        from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

        return stack.enter_context(ResilientSqliteSaver.from_conn_string(target))
    if is_async:
        from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver

        saver = await stack.enter_async_context(
            AsyncResilientPostgresSaver.from_conn_string(target)
        )
        await saver.setup()
        return saver
    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver

    saver = stack.enter_context(ResilientPostgresSaver.from_conn_string(target))
    await asyncio.to_thread(saver.setup)
    return saver


async def open_redis(
    is_async: bool, stack: AsyncExitStack, prefix: str | None = None, url: str = ""
) -> Any:
    """A Redis saver on the machine's Redis under a key prefix of its own, flushed
    when ``stack`` closes (`redis_servers`); or under ``prefix``, kept (on ``url``:
    a private server's)."""
    import warnings

    from redis_servers import REDIS_DOWN, REDIS_URL, flush_prefix

    from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
    from langgraph_resilience.checkpoint.redis.aio import AsyncResilientRedisSaver

    if REDIS_DOWN is not None and not url:
        if IN_CI:
            pytest.fail(f"CI=true but {REDIS_DOWN}; the Redis savers' tests must run in CI")
        pytest.skip(REDIS_DOWN)
    url = url or REDIS_URL
    if prefix is None:
        prefix = f"t{uuid.uuid4().hex[:12]}"
        stack.callback(flush_prefix, prefix)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the machine's Redis keeps no disk
        if is_async:
            cm = AsyncResilientRedisSaver.from_conn_string(url, prefix=prefix)
            saver: Any = await stack.enter_async_context(cm)
            await saver.setup()
        else:
            saver = stack.enter_context(ResilientRedisSaver.from_conn_string(url, prefix=prefix))
            saver.setup()
    return saver


async def open_pg_variant(is_async: bool, mode: str, target: str, stack: AsyncExitStack) -> Any:
    """A Postgres saver in pipeline mode (``mode="pipe"``) or on a connection pool."""
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
    from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver

    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    # LangGraph's own migrations cannot run in a pipeline (CREATE INDEX
    # CONCURRENTLY), so the database is set up first, as LangGraph's tests do.
    with ResilientPostgresSaver.from_conn_string(target) as plain:
        await asyncio.to_thread(plain.setup)
    if is_async:
        if mode == "pipe":
            opened = AsyncResilientPostgresSaver.from_conn_string(target, pipeline=True)
            saver = await stack.enter_async_context(opened)
        else:
            pool = AsyncConnectionPool(target, min_size=1, max_size=3, kwargs=kwargs, open=False)
            await pool.open()
            stack.push_async_callback(pool.close)
            saver = AsyncResilientPostgresSaver(pool)
        await saver.setup()
        return saver
    if mode == "pipe":
        saver = stack.enter_context(ResilientPostgresSaver.from_conn_string(target, pipeline=True))
    else:
        pool = stack.enter_context(
            ConnectionPool(target, min_size=1, max_size=3, kwargs=kwargs, open=True)
        )
        saver = ResilientPostgresSaver(pool)
    await asyncio.to_thread(saver.setup)
    return saver


#: Every saver a test can run on: (backend, async, variant).
SAVERS = {
    "sqlite": ("sqlite", False, ""),
    "sqlite-async": ("sqlite", True, ""),
    "postgres": ("postgres", False, ""),
    "postgres-async": ("postgres", True, ""),
    "postgres-pipe": ("postgres", False, "pipe"),
    "postgres-async-pipe": ("postgres", True, "pipe"),
    "postgres-pool": ("postgres", False, "pool"),
    "postgres-async-pool": ("postgres", True, "pool"),
}
#: The Redis savers: checkpoints, the step and run ledgers, no `Limit`s (docs/redis.md): apart.
REDIS_SAVERS = {"redis": ("redis", False, ""), "redis-async": ("redis", True, "")}


async def harness(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, stack: AsyncExitStack
) -> Harness:
    """The saver ``name`` names (a key of `SAVERS`), open until ``stack`` closes."""
    backend, is_async, variant = {**SAVERS, **REDIS_SAVERS}[name]
    if backend == "postgres":
        target = request.getfixturevalue("pg_dsn")
    elif backend == "redis":
        target = "redis"
    else:
        target = str(tmp_path / "checkpoints.db")
    if variant:
        saver = await open_pg_variant(is_async, variant, target, stack)
    else:
        saver = await open_saver(backend, is_async, target, stack)
    if backend == "redis":
        target = saver.place.prefix  # the saver's keys (tests' helpers read them)
    return Harness(backend, is_async, saver, target, variant)


#: The savers most tests run on; ``LGR_ALL_SAVERS=1`` (``make test-long``) adds
#: Postgres in pipeline mode and on a pool (the savers' own tests always have them).
CHECKPOINTERS = (
    list(SAVERS)
    if os.environ.get("LGR_ALL_SAVERS")
    else ["sqlite", "sqlite-async", "postgres", "postgres-async"]
)

#: The behaviour tests that run on the Redis savers too (sync and async), by
#: default: the graph's, the effects' and the worker's. Redis keeps checkpoints,
#: the effect and attempts ledgers and the run ledger but no `Limit`s
#: (docs/redis.md); many other files' tests read or break SQL tables of their own
#: (test_savers' own fixture keeps SQL; Redis has test_redis*).
#: ``LGR_REDIS_SAVERS=0`` leaves Redis out, ``LGR_REDIS_SAVERS=1`` puts it in every
#: file's saver fixture (README, "Two commands").
REDIS_FILES = frozenset(
    {
        "test_graph.py",
        "test_effects.py",
        "test_effect_claims.py",
        "test_effect_how.py",
        "test_settle.py",
        "test_raised_runs.py",
        "test_worker.py",
        "test_false_success.py",
        "test_archive.py",  # the cases that read the same on Redis's cold tier
        "test_archive_s3.py",
        "test_worker_faults.py",  # the SQL fault injections skip on Redis, saying why
        "test_run_ledger.py",
        "test_store_edges.py",
        "test_runs.py",
        "test_run_tally.py",
        "test_run_error.py",
        "test_run_end_decision.py",
        "test_agent_runs.py",
        "test_server_units.py",
        "test_deploy.py",
    }
)
_REDIS_SAVERS_ENV = os.environ.get("LGR_REDIS_SAVERS", "")


def runs_on_redis(file_name: str) -> bool:
    """Whether the tests in ``file_name`` get the Redis savers (`REDIS_FILES`)."""
    if _REDIS_SAVERS_ENV == "0":
        return False
    return bool(_REDIS_SAVERS_ENV) or file_name in REDIS_FILES


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Add the Redis savers to the ``checkpointer`` fixture's in `REDIS_FILES`
    (a test naming its own savers keeps them)."""
    if "checkpointer" not in metafunc.fixturenames:
        return
    # A file's own ``checkpointer`` fixture (test_savers') keeps its own savers.
    if metafunc._arg2fixturedefs["checkpointer"][-1].baseid.endswith(".py"):
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        if "checkpointer" in str(mark.args[0]):
            return
    if runs_on_redis(Path(metafunc.definition.path).name):
        savers = CHECKPOINTERS + list(REDIS_SAVERS)
        metafunc.definition.add_marker(
            pytest.mark.parametrize("checkpointer", savers, indirect=True)
        )


@pytest.fixture(params=CHECKPOINTERS)
async def checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """A resilient saver per backend: SQLite (file) and Postgres, sync and async;
    Redis too in `REDIS_FILES`, under a key prefix of its own, flushed after."""
    async with AsyncExitStack() as stack:
        yield await harness(request.param, request, tmp_path, stack)


# -- a private Postgres server, for network and store faults ---------------------------


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """A Postgres server of the tests' own (`faults.PgServer`: initdb once per session,
    a free loopback port) that fault tests stop, restart and cut off. Skipped with
    the reason where it cannot start, except under ``CI=true``, where that fails."""
    from faults import PgServer, PgUnavailable

    try:
        server = PgServer.create()
    except PgUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI=true but {exc}; the network fault tests must run in CI")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.destroy()
