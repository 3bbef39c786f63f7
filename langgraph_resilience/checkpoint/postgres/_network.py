"""How the Postgres savers reach their server, and how long they wait for it.

- `PgTimeouts` (pure): the bounded waits a saver sets on the connections it opens
  itself, rendered as libpq parameters and server settings added to a DSN: the
  connect timeout, ``statement_timeout``, ``lock_timeout``,
  ``idle_in_transaction_session_timeout``, TCP keepalives and ``tcp_user_timeout``,
  and ``read``, a client-side bound on every wait for a reply.
- `BoundedConnection` / `AsyncBoundedConnection`: psycopg connections that apply
  ``read``. It is the one bound that holds when the TCP connection stays up but
  nothing comes back (a hung server, proxy or pooler): TCP keepalives and user
  timeouts only notice a peer that stops acknowledging.
- The connection one try runs on: `needs_new_connection` decides whether a saver
  replaces its own, `connect` / `aconnect` open one, `pooled` / `apooled` take a
  live one from a pool (within the pool's ``timeout``) and bound its waits by
  ``read`` too, a pool the caller built without `BoundedConnection` included.
- `target_of`, `unavailable` and `give_up`: the `StoreUnavailable` a saver raises
  when it stops trying, naming the server without its password.
"""

from __future__ import annotations

import inspect
import math
import os
import re
import select
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection, Connection
from psycopg.abc import PQGen
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, Row, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_resilience._store_errors import is_refused_login, is_unavailable_error
from langgraph_resilience.checkpoint.store._store_retry import retry_window
from langgraph_resilience.errors import ConfigError, StoreUnavailable
from langgraph_resilience.policy import Backoff

__all__ = [
    "CONNECT_KWARGS",
    "AsyncBoundedConnection",
    "AsyncConn",
    "BoundedConnection",
    "Conn",
    "PgTimeouts",
    "aconnect",
    "aconnect_beside",
    "apooled",
    "connect",
    "connect_beside",
    "give_up",
    "live_conninfo",
    "needs_new_connection",
    "peer_closed",
    "pooled",
    "target_of",
    "unavailable",
]

RV = TypeVar("RV")

# What LangGraph's Postgres savers take as their connection: one, or a pool. Its
# own aliases live in private modules, so the savers spell the same unions here;
# tests/test_langgraph_door.py pins them as LangGraph's.
Conn = Connection[DictRow] | ConnectionPool[Connection[DictRow]]
AsyncConn = AsyncConnection[DictRow] | AsyncConnectionPool[AsyncConnection[DictRow]]

#: What LangGraph's savers need of a connection (its ``from_conn_string`` sets the same).
CONNECT_KWARGS: dict[str, Any] = {
    "autocommit": True,
    "prepare_threshold": 0,
    "row_factory": dict_row,
}

# psycopg wakes up this often while it waits (to notice Ctrl-C); it is its own default.
_WAIT_INTERVAL = 0.1
# psycopg >= 3.3 bounds a wait and raises this internal error when the bound passes.
_WAIT_TIMEOUT: type[BaseException] | None = getattr(psycopg.errors, "_WaitTimeout", None)
# tcp_user_timeout is a libpq parameter since PostgreSQL 12; an older libpq refuses it.
_LIBPQ_HAS_TCP_USER_TIMEOUT = psycopg.pq.version() >= 120000
# A server setting already given in ``options``: "-c name=value" or "--name=value".
_SETTING_IN_OPTIONS = r"(?:-c\s*|--){name}\s*="


def _positive(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be seconds (a float or a timedelta) or None, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(
            f"{name} must be a finite number of seconds > 0, or None to leave it unset; "
            f"got {value!r}"
        )
    return float(value)


@dataclass(frozen=True, kw_only=True)
class PgTimeouts:
    """The bounded waits a Postgres saver sets on the connections it opens itself.

    ``from_conn_string`` adds them to its DSN, and so does every reconnection; a
    parameter the DSN (or ``PGCONNECT_TIMEOUT`` / ``PGOPTIONS``) already sets is
    kept as it is. ``None`` leaves one unset. Times are seconds (or timedelta).

    Server side (sent as ``options``): a statement runs at most ``statement``; a
    lock is waited for at most ``lock`` (then the try fails and is retried); a
    session idle inside a transaction for ``idle_in_transaction`` is ended by the
    server, so a client cut off between a statement and its ``COMMIT`` does not
    keep its row locks. Both ends: TCP keepalives notice a silent peer after
    ``keepalives_idle + keepalives_interval * keepalives_count``, and data left
    unacknowledged for ``tcp_user_timeout`` drops the connection. Client side:
    connecting takes at most ``connect`` per address, and no wait for a reply
    lasts longer than ``read`` (the connection is then closed and the try retried
    on another). On a pool's connections, which it did not open, the saver
    bounds the wait for a connection (``checkout``, whatever the pool's own
    ``timeout``) and every wait for a reply (``read``).

    Args:
        connect: libpq ``connect_timeout`` (whole seconds, at least 2).
        statement: ``statement_timeout``.
        lock: ``lock_timeout``.
        idle_in_transaction: ``idle_in_transaction_session_timeout``.
        read: the longest one wait for the server may last; more than ``statement``.
        checkout: the longest wait for a connection of a pool (None: the pool's
            own ``timeout``, 30 s by default in psycopg_pool).
        keepalives_idle: idle time before the first TCP keepalive probe (None: no
            keepalive settings).
        keepalives_interval: time between probes.
        keepalives_count: probes lost before the connection counts as dead.
        tcp_user_timeout: libpq's and the server's ``tcp_user_timeout`` (PostgreSQL 12+;
            None for an older server).

    Example:
        >>> dsn = PgTimeouts(statement=10, read=15).conninfo("host=db dbname=app")
        >>> "connect_timeout=5" in dsn and "-c statement_timeout=10000" in dsn
        True
    """

    connect: float | timedelta | None = 5.0
    statement: float | timedelta | None = 30.0
    lock: float | timedelta | None = 5.0
    idle_in_transaction: float | timedelta | None = 10.0
    read: float | timedelta | None = 35.0
    keepalives_idle: float | timedelta | None = 5.0
    keepalives_interval: float | timedelta = 2.0
    keepalives_count: int = 3
    tcp_user_timeout: float | timedelta | None = 10.0
    checkout: float | timedelta | None = 5.0

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name != "keepalives_count":
                object.__setattr__(self, f.name, _positive(f.name, getattr(self, f.name)))
        if self.keepalives_interval is None:
            raise ConfigError("keepalives_interval must be seconds > 0, e.g. 2")
        count = self.keepalives_count
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(f"keepalives_count must be an int >= 1, e.g. 3; got {count!r}")
        connect, statement, read = _s(self.connect), _s(self.statement), _s(self.read)
        if connect is not None and connect < 2:
            raise ConfigError(
                f"connect must be at least 2 seconds (libpq's minimum), got {connect:g}"
            )
        if read is not None and statement is not None and read <= statement:
            raise ConfigError(
                f"read ({read:g} s) must exceed statement ({statement:g} s): the server "
                "should end a slow statement before the client gives up on the "
                f"connection; e.g. read={statement + 5:g}"
            )

    @property
    def read_timeout(self) -> float | None:
        """``read`` in seconds (what a `BoundedConnection` takes)."""
        return _s(self.read)

    @property
    def checkout_timeout(self) -> float | None:
        """``checkout`` in seconds (what `pooled` takes)."""
        return _s(self.checkout)

    @property
    def try_bound(self) -> float | None:
        """The longest one try on a connection may last, in seconds: getting the
        connection (``connect``, or a pool's ``checkout``) and one wait for the
        reply (``read``); None: unbounded."""
        read = _s(self.read)
        if read is None or self.connect is None:
            return None
        return max(float(_whole(self.connect)), _s(self.checkout) or 0.0) + read

    def parameters(self) -> dict[str, str]:
        """The libpq connection parameters (whole seconds; ``tcp_user_timeout`` in ms)."""
        params: dict[str, str] = {}
        if self.connect is not None:
            params["connect_timeout"] = str(_whole(self.connect))
        if self.keepalives_idle is not None:
            params["keepalives"] = "1"
            params["keepalives_idle"] = str(_whole(self.keepalives_idle))
            params["keepalives_interval"] = str(_whole(self.keepalives_interval))
            params["keepalives_count"] = str(self.keepalives_count)
        if self.tcp_user_timeout is not None and _LIBPQ_HAS_TCP_USER_TIMEOUT:
            params["tcp_user_timeout"] = str(_ms(self.tcp_user_timeout))
        return params

    def settings(self) -> dict[str, str]:
        """The server settings, sent in ``options``: the timeouts, and the same TCP
        keepalives and user timeout for the server's end, so that it notices a
        client that vanished in any state (mid-pipeline too, where no transaction
        is idle yet). Milliseconds, keepalives in whole seconds."""
        named = {
            "statement_timeout": self.statement,
            "lock_timeout": self.lock,
            "idle_in_transaction_session_timeout": self.idle_in_transaction,
        }
        settings = {name: str(_ms(value)) for name, value in named.items() if value is not None}
        if self.keepalives_idle is not None:
            settings["tcp_keepalives_idle"] = str(_whole(self.keepalives_idle))
            settings["tcp_keepalives_interval"] = str(_whole(self.keepalives_interval))
            settings["tcp_keepalives_count"] = str(self.keepalives_count)
        if self.tcp_user_timeout is not None:
            settings["tcp_user_timeout"] = str(_ms(self.tcp_user_timeout))
        return settings

    def conninfo(self, dsn: str, env: Mapping[str, str] | None = None) -> str:
        """``dsn`` with the timeouts it does not set itself.

        ``env`` (default: the process environment) is read for ``PGCONNECT_TIMEOUT``
        and ``PGOPTIONS``, which libpq would apply when the DSN says nothing.
        """
        env = os.environ if env is None else env
        given = conninfo_to_dict(dsn)
        defaults = {"connect_timeout": env.get("PGCONNECT_TIMEOUT")}
        extra: dict[str, Any] = {
            key: value
            for key, value in self.parameters().items()
            if key not in given and not defaults.get(key)
        }
        options = str(given.get("options") or env.get("PGOPTIONS") or "")
        added = [
            f"-c {name}={value}"
            for name, value in self.settings().items()
            if not re.search(_SETTING_IN_OPTIONS.format(name=name), options)
        ]
        if added:
            extra["options"] = " ".join([options, *added]).strip()
        return make_conninfo(dsn, **extra)


def _s(value: float | timedelta | None) -> float | None:
    """A field in seconds (``__post_init__`` already turned a timedelta into them)."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def _whole(value: float | timedelta | None) -> int:
    return math.ceil(_s(value) or 0)


def _ms(value: float | timedelta | None) -> int:
    return max(1, math.ceil((_s(value) or 0) * 1000))


def _no_reply(seconds: float) -> psycopg.OperationalError:
    return psycopg.OperationalError(
        f"no reply from the server within {seconds:g} s (PgTimeouts.read); the "
        "connection was closed"
    )


class BoundedConnection(Connection[Row]):
    """A psycopg `Connection` whose every wait for the server is bounded.

    A Postgres saver opens its own connections as this class, and sets
    ``read_timeout`` from its `PgTimeouts` on every one of this class it uses;
    give a pool ``connection_class=BoundedConnection`` for the same bound on
    pooled connections. Needs psycopg >= 3.3 (on older versions, waits are not
    bounded).

    Attributes:
        read_timeout: the longest one wait for the server (a statement's reply, a
            ``COMMIT``) may last, in seconds; None: no bound. Past it the connection
            is closed and the call raises ``psycopg.OperationalError``, as for a
            lost connection.

    Example:
        >>> from psycopg_pool import ConnectionPool
        >>> from langgraph_resilience.checkpoint.postgres import (
        ...     BoundedConnection, PgTimeouts, ResilientPostgresSaver)
        >>> pool = ConnectionPool(  # doctest: +SKIP
        ...     PgTimeouts().conninfo(DSN),
        ...     connection_class=BoundedConnection,
        ...     kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        ... )
        >>> saver = ResilientPostgresSaver(pool)  # doctest: +SKIP
    """

    read_timeout: float | None = None

    def wait(
        self, gen: PQGen[RV], interval: float = _WAIT_INTERVAL, timeout: float | None = None
    ) -> RV:
        bound = self.read_timeout
        if timeout is not None or bound is None or _WAIT_TIMEOUT is None:
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, bound)
        except _WAIT_TIMEOUT:
            # Cut off in the middle of an exchange: the connection cannot be used again.
            self.pgconn.finish()
            raise _no_reply(bound) from None


class AsyncBoundedConnection(AsyncConnection[Row]):
    """Async twin of `BoundedConnection` (give an ``AsyncConnectionPool``
    ``connection_class=AsyncBoundedConnection``).

    Attributes:
        read_timeout: the longest one wait for the server may last, in seconds.
    """

    read_timeout: float | None = None

    async def wait(
        self, gen: PQGen[RV], interval: float = _WAIT_INTERVAL, timeout: float | None = None
    ) -> RV:
        bound = self.read_timeout
        if timeout is not None or bound is None or _WAIT_TIMEOUT is None:
            return await super().wait(gen, interval, timeout)
        try:
            return await super().wait(gen, interval, bound)
        except _WAIT_TIMEOUT:
            self.pgconn.finish()
            raise _no_reply(bound) from None


# -- the connection of one try ---------------------------------------------------------


def _readable(fd: int) -> bool:
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])


def peer_closed(conn: Connection[Any] | AsyncConnection[Any]) -> bool:
    """Whether an idle connection is gone: closed, broken, or closed by the server
    meanwhile (its last words, then end of file). Looks without waiting."""
    if conn.closed or conn.broken:
        return True
    try:
        # An idle connection only hears a goodbye: read it, then the end of file.
        for _ in range(3):
            if not _readable(conn.pgconn.socket):
                return False
            conn.pgconn.consume_input()
    except (OSError, ValueError, psycopg.Error):
        return True
    return conn.pgconn.status == psycopg.pq.ConnStatus.BAD


def needs_new_connection(conn: Connection[Any] | AsyncConnection[Any], *, suspect: bool) -> bool:
    """Whether a saver replaces its own connection before a try: it is closed or
    broken, or (after a failed try) the server has closed it meanwhile."""
    return conn.closed or conn.broken or (suspect and peer_closed(conn))


def connect(conninfo: str, read: float | None) -> BoundedConnection[DictRow]:
    """A connection for a saver (``conninfo`` carries its timeouts)."""
    conn = BoundedConnection[DictRow].connect(conninfo, **CONNECT_KWARGS)
    conn.read_timeout = read
    return conn


async def aconnect(conninfo: str, read: float | None) -> AsyncBoundedConnection[DictRow]:
    """Async twin of `connect`."""
    conn = await AsyncBoundedConnection[DictRow].connect(conninfo, **CONNECT_KWARGS)
    conn.read_timeout = read
    return conn


def connect_beside(pool: ConnectionPool[Any], read: float | None) -> BoundedConnection[DictRow]:
    """A connection of its own to ``pool``'s server (its conninfo and kwargs, either
    may be a callable), not one of the pool's: for a session lock held while the
    pool's connections serve the work."""
    conninfo: Any = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
    kwargs: Any = pool.kwargs() if callable(pool.kwargs) else pool.kwargs
    conn = BoundedConnection[DictRow].connect(conninfo, **{**(kwargs or {}), **CONNECT_KWARGS})
    conn.read_timeout = read
    return conn


async def aconnect_beside(
    pool: AsyncConnectionPool[Any], read: float | None
) -> AsyncBoundedConnection[DictRow]:
    """Async twin of `connect_beside` (a callable may return an awaitable)."""
    conninfo: Any = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
    kwargs: Any = pool.kwargs() if callable(pool.kwargs) else pool.kwargs
    conninfo, kwargs = await _awaited(conninfo), await _awaited(kwargs)
    conn = await AsyncBoundedConnection[DictRow].connect(
        conninfo, **{**(kwargs or {}), **CONNECT_KWARGS}
    )
    conn.read_timeout = read
    return conn


async def _awaited(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _bound(conn: Connection[Any] | AsyncConnection[Any], read: float | None) -> None:
    """Bound every wait of a pooled connection by ``read``, whatever pool it came
    from: one of psycopg's own class (a pool built without ``connection_class``)
    is adopted as its bounded twin, which differs from it only in `wait`; a
    class of the caller's own is bounded only if it is a bounded one."""
    if type(conn) is Connection:
        conn.__class__ = BoundedConnection
    elif type(conn) is AsyncConnection:
        conn.__class__ = AsyncBoundedConnection
    if isinstance(conn, (BoundedConnection, AsyncBoundedConnection)):
        conn.read_timeout = read


def _checkout(pool_timeout: float | None, checkout: float | None) -> float | None:
    """The wait for a pool's connection: the saver's bound, or the pool's own
    ``timeout`` when that is shorter (a caller who set a short one keeps it)."""
    known = [t for t in (pool_timeout, checkout) if t is not None]
    return min(known) if known else None


@contextmanager
def pooled(
    pool: ConnectionPool[Any], suspect: bool, timeouts: PgTimeouts
) -> Iterator[Connection[Any]]:
    """A connection of ``pool`` for one try, returned afterwards (as
    ``pool.connection()`` does). After a failed try (``suspect``), one the server
    closed meanwhile goes back (the pool drops it and opens another) and the next
    is taken, up to the pool's size: after an outage a try does not spend itself
    on every dead connection in turn. Each wait for a connection lasts at most
    the saver's ``timeouts.checkout_timeout`` or the pool's own ``timeout``, the
    shorter (`_checkout`); the connection's reads are bounded by ``timeouts.read_timeout``."""
    checkout = _checkout(pool.timeout, timeouts.checkout_timeout)
    conn = pool.getconn(checkout)
    for _ in range(pool.max_size if suspect else 0):
        if not peer_closed(conn):
            break
        pool.putconn(conn)
        conn = pool.getconn(checkout)
    _bound(conn, timeouts.read_timeout)
    try:
        with conn:
            yield conn
    finally:
        pool.putconn(conn)


@asynccontextmanager
async def apooled(
    pool: AsyncConnectionPool[Any], suspect: bool, timeouts: PgTimeouts
) -> AsyncIterator[AsyncConnection[Any]]:
    """Async twin of `pooled`."""
    checkout = _checkout(pool.timeout, timeouts.checkout_timeout)
    conn = await pool.getconn(checkout)
    for _ in range(pool.max_size if suspect else 0):
        if not peer_closed(conn):
            break
        await pool.putconn(conn)
        conn = await pool.getconn(checkout)
    _bound(conn, timeouts.read_timeout)
    try:
        async with conn:
            yield conn
    finally:
        await pool.putconn(conn)


def live_conninfo(conn: Any) -> str | None:
    """How to reopen a psycopg connection (its DSN plus the password)."""
    info = getattr(conn, "info", None)
    if info is None:
        return None
    password = getattr(info, "password", None)
    return make_conninfo(info.dsn, **({"password": password} if password else {}))


# -- errors ------------------------------------------------------------------------------

_TARGET_KEYS = ("host", "hostaddr", "port", "dbname", "user")


def target_of(conninfo: str) -> str:
    """Where a DSN points (host, port, database, user), safe to print: no password."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "<unparseable DSN>"
    return make_conninfo("", **{k: params[k] for k in _TARGET_KEYS if params.get(k)})


def unavailable(
    target: str, exc: BaseException, attempts: int, window: float, *, connecting: bool = False
) -> StoreUnavailable:
    """The error a saver raises when it stops trying to reach ``target`` (after
    ``attempts`` tries, or at its first connection when ``connecting``)."""
    text = str(exc).strip()
    reason = text.splitlines()[0] if text else type(exc).__name__
    if connecting:
        head = f"cannot connect to Postgres at {target!r}: {reason}."
    else:
        head = f"Postgres at {target!r} is unavailable: {reason}."
    if is_refused_login(exc):
        advice = (
            "Trying again will not help: check the host, port, database, user and "
            "password in the DSN."
        )
    elif attempts > 1:
        advice = (
            f"The saver tried {attempts} times over a retry window of {window:g} s "
            "(store_retry); check that the server is running and reachable."
        )
    else:
        advice = (
            "Check that the server is running and that host, port, database and user "
            "in the DSN are right."
        )
    return StoreUnavailable(f"{head} {advice}", target=target, attempts=attempts)


def give_up(
    target: str, backoff: Backoff, exc: BaseException, attempts: int
) -> StoreUnavailable | None:
    """What a saver raises when it stops trying: `StoreUnavailable` for an error
    that says the server was not there or could not serve the call (never a raw
    ``psycopg.OperationalError``); None (raise it as it is) for the rest."""
    if not is_unavailable_error(exc):
        return None
    return unavailable(target, exc, attempts, retry_window(backoff))
