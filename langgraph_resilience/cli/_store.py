"""What every subcommand of the command line needs: the store named by ``--db``
(or ``LGR_DB``), opened without changing it, and the graph named by ``--graph``.

A store that cannot be used is a `CliError`: one line for stderr and exit code 2.
Reads never set a store up: a mistyped SQLite path is an error, not a new empty
file, and a database without the resilience tables says to run
``langgraph-resilience setup``.
"""

from __future__ import annotations

import importlib
import os
import sqlite3
import sys
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph

from langgraph_resilience.checkpoint import ResilientSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.store._schema import SCHEMA_VERSION, schema_version
from langgraph_resilience.checkpoint.store._store import POSTGRES, SQLITE, execute, is_postgres
from langgraph_resilience.checkpoint.store._sums import StoreCheck, check_store
from langgraph_resilience.errors import ArchiveError, ConfigError, StoreUnavailable, needs_extra
from langgraph_resilience.worker._setup import bind

try:
    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
    from langgraph_resilience.checkpoint.postgres._network import target_of

    _POSTGRES_MISSING: str | None = None
except ImportError as missing:  # the base install, without the `postgres` extra
    _POSTGRES_MISSING = (
        needs_extra("a Postgres DSN needs", "postgres", missing) + ", or pass a SQLite file path"
    )

try:
    import redis

    from langgraph_resilience.checkpoint.redis import ResilientRedisSaver

    _REDIS_MISSING: str | None = None
except ImportError as missing:  # the base install, without the `redis` extra
    _REDIS_MISSING = needs_extra("a redis:// URL needs", "redis", missing)

__all__ = [
    "ARCHIVE_ENV",
    "DB_ENV",
    "CliError",
    "Store",
    "is_postgres",
    "load_graph",
    "one_line",
    "REDIS_SCHEMES",
    "open_store",
    "redis_saver",
    "redis_where",
    "refuse_redis",
    "store_check",
    "thread_exists",
]

DB_ENV = "LGR_DB"
#: URLs of a Redis store: ``redis://host:port/db#prefix``, the savers' key prefix after ``#``.
REDIS_SCHEMES = ("redis://", "rediss://")
#: What a refusal of a ``redis://`` URL says works on one.
ON_REDIS = (
    "on a redis://host:port/db#prefix URL, setup, runs, show, metrics, resume, retry, "
    "cancel, worker, limits and ui work"
)
#: Names the store's cold tier (an `Archive` URL) for every subcommand.
ARCHIVE_ENV = "LGR_ARCHIVE"


class CliError(Exception):
    """A command that cannot go on: its message is printed as one line, exit code 2."""


def one_line(exc: BaseException | str) -> str:
    """An error's message on one line (psycopg and others span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass(frozen=True, kw_only=True)
class Store:
    """An open store: the saver and how to name it in messages (no password)."""

    saver: Any  # a ResilientSqliteSaver, ResilientPostgresSaver or ResilientRedisSaver
    where: str
    dialect: str  # "sqlite" | "postgres" | "redis"

    def __post_init__(self) -> None:
        if self.dialect not in ("sqlite", "postgres", "redis"):
            raise ValueError(
                f"dialect must be 'sqlite', 'postgres' or 'redis', got {self.dialect!r}"
            )


def _require_db(db: str | None) -> str:
    if not db:
        raise CliError(
            f"no store named: pass --db (a SQLite file path or a Postgres DSN such as "
            f"postgresql://user@host:5432/dbname) or set {DB_ENV}"
        )
    return db


def _schema_found(store: Store) -> int | None:
    """The store's resilience schema version (None: never set up), read without
    setting anything up (a SQLite saver would on its first read)."""
    saver = store.saver
    if isinstance(saver, ResilientSqliteSaver):
        try:
            with saver.lock:
                return execute(saver.conn.cursor(), schema_version(SQLITE))
        except sqlite3.DatabaseError as exc:
            raise CliError(
                f"{store.where} is not a SQLite database, or is damaged ({exc}): check the "
                "path, or restore the file from a backup"
            ) from exc
    assert isinstance(saver, ResilientPostgresSaver)
    return saver._transact(lambda: schema_version(POSTGRES), check=False, ride=False)


def _check_schema(store: Store, db: str) -> None:
    found = _schema_found(store)
    if found is not None and found == SCHEMA_VERSION:
        return
    if found is not None and found > SCHEMA_VERSION:
        raise CliError(
            f"the store at {store.where} was set up by a newer langgraph-resilience "
            f"(schema version {found}, this one knows up to {SCHEMA_VERSION}): upgrade "
            "langgraph-resilience"
        )
    state = "has no resilience tables" if found is None else f"is at schema version {found}"
    again = "the same DSN" if store.dialect == "postgres" else f"'{db}'"  # no password shown
    raise CliError(
        f"the store at {store.where} {state} (this release needs {SCHEMA_VERSION}): set it "
        f"up once with `langgraph-resilience setup --db {again}` (or saver.setup())"
    )


@contextmanager
def open_store(
    db: str | None, *, setup: bool = False, archive: str | None = None, redis_ok: bool = False
) -> Iterator[Store]:
    """Open the store ``db`` names; with ``setup``, create or migrate its tables,
    else refuse a store that is missing or not set up (`CliError`). ``archive``
    (default: the ``LGR_ARCHIVE`` variable) names its cold tier: archived
    threads are restored when read. ``redis_ok``: a command built on what the
    store a ``redis://`` URL's saver keeps (``redis://host:port/db#prefix``: its
    key prefix after ``#``, default ``lgr``); other commands refuse one.

    Raises:
        CliError: no ``db``, a SQLite file that does not exist, a server that cannot
            be reached, or (without ``setup``) a schema that is missing or old.
    """
    target = _require_db(db)
    if target.startswith(REDIS_SCHEMES):
        if not redis_ok:
            raise CliError(
                f"{redis_where(target)}: this command is not built on the Redis savers yet "
                f"(docs/redis.md): pass a SQLite file path or a Postgres DSN; {ON_REDIS}"
            )
        archived = archive or os.environ.get(ARCHIVE_ENV) or None
        with _redis_store(target, archived, setup=setup) as store:
            yield store
        return
    if _POSTGRES_MISSING and is_postgres(target):
        raise CliError(_POSTGRES_MISSING)
    named = target_of(target) if is_postgres(target) else repr(target)
    archive = archive or os.environ.get(ARCHIVE_ENV) or None
    options: dict[str, Any] = {"archive": archive} if archive else {}
    with ExitStack() as stack:
        try:
            if is_postgres(target):
                pg = stack.enter_context(ResilientPostgresSaver.from_conn_string(target, **options))
                store = Store(saver=pg, where=named, dialect="postgres")
            else:
                if not setup and target != ":memory:" and not os.path.exists(target):
                    raise CliError(
                        f"no SQLite database at {named} (cwd {os.getcwd()!r}): check the "
                        f"path, or create one with `langgraph-resilience setup --db '{target}'`"
                    )
                lite = stack.enter_context(ResilientSqliteSaver.from_conn_string(target, **options))
                store = Store(saver=lite, where=named, dialect="sqlite")
            if setup:
                store.saver.setup()
            else:
                _check_schema(store, target)
        except (StoreUnavailable, ConfigError, ArchiveError) as exc:  # they name the store
            raise CliError(one_line(exc)) from exc
        yield store


@contextmanager
def redis_saver(url: str, prefix: str, archive: str | None = None) -> Iterator[Any]:
    """A Redis saver on ``url`` under the key prefix ``prefix`` (nothing to set up;
    ``archive``: its cold tier), or a `CliError` if the install has no ``redis``
    extra."""
    if _REDIS_MISSING:
        raise CliError(_REDIS_MISSING)
    options: dict[str, Any] = {"archive": archive} if archive else {}
    with ExitStack() as stack:
        try:
            saver = stack.enter_context(
                ResilientRedisSaver.from_conn_string(url, prefix=prefix, **options)
            )
        except (ConfigError, ArchiveError) as exc:  # they name the archive or the prefix
            raise CliError(one_line(exc)) from exc
        yield saver


def redis_where(target: str) -> str:
    """A ``redis://`` URL as messages name it: host, port, db and key prefix, no password."""
    url, _, prefix = target.partition("#")
    return f"{url.split('@')[-1]}#{prefix or 'lgr'}"


def refuse_redis(db: str | None, command: str, why: str) -> None:
    """Refuse a command that the Redis savers do not offer, saying ``why`` and what does."""
    if db is not None and db.startswith(REDIS_SCHEMES):
        raise CliError(
            f"{redis_where(db)}: `langgraph-resilience {command}` is not built on the Redis "
            f"savers: {why} (docs/redis.md); {ON_REDIS}"
        )


@contextmanager
def _redis_store(target: str, archive: str | None, *, setup: bool = False) -> Iterator[Store]:
    """A Redis saver on ``redis://host:port/db[#prefix]``; nothing to set up (the
    scripts are loaded when first run), but ``setup`` checks the server (Redis >= 7)
    and reads what it keeps on disk (``saver.durability``, said by the command)."""
    url, _, prefix = target.partition("#")
    with redis_saver(url, prefix or "lgr", archive) as saver:
        store = Store(saver=saver, where=redis_where(target), dialect="redis")
        if setup:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # the command says it
                    saver.setup()
            except (redis.RedisError, ConfigError) as exc:
                raise CliError(f"Redis at {store.where}: {one_line(exc)}") from exc
        yield store


def store_check(store: Store) -> StoreCheck:
    """Every checksum of the store, and SQLite's ``PRAGMA quick_check`` (`check_store`)."""
    d = SQLITE if store.dialect == "sqlite" else POSTGRES
    saver: Any = store.saver
    try:
        return saver._query(lambda: check_store(d))  # type: ignore[no-any-return]
    except sqlite3.DatabaseError as exc:
        raise CliError(f"{store.where} is damaged beyond a check ({exc}): restore it") from exc


def thread_exists(saver: ResilientSaver, thread_id: str) -> bool:
    """Whether the store knows the thread: a checkpoint of it, or a run on it."""
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    if saver.get_tuple(config) is not None:
        return True
    return any(r.thread_id == thread_id for r in saver.list_runs())


def _import_target(spec: str) -> Any:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"--graph takes module:attribute, e.g. myapp.pipeline:builder; got {spec!r}")
    if os.getcwd() not in sys.path:  # `--graph myapp:graph` from the project's directory
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"--graph {spec}: cannot import {module_name!r}: {one_line(exc)}") from exc
    found: Any = module
    for part in attr.split("."):
        if not hasattr(found, part):
            raise CliError(f"--graph {spec}: {module_name!r} has no attribute {attr!r}")
        found = getattr(found, part)
    return found


def load_graph(
    spec: str, saver: BaseCheckpointSaver[Any]
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The graph ``module:attr`` names (a compiled graph, its builder, or a function
    of no arguments returning either), bound to ``saver``.

    Raises:
        CliError: the module or attribute cannot be found, or is not a graph.
    """
    found = _import_target(spec)
    if callable(found) and not isinstance(found, (StateGraph, CompiledStateGraph)):
        try:
            found = found()
        except Exception as exc:
            raise CliError(f"--graph {spec}: calling it raised {one_line(exc)}") from exc
    if not isinstance(found, (StateGraph, CompiledStateGraph)):
        raise CliError(
            f"--graph {spec} is a {type(found).__name__}, not a graph: name a "
            "ResilientStateGraph builder, a compiled graph, or a function returning one"
        )
    return bind(found, saver)
