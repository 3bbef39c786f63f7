"""Drive an operation (`_ops`) against a client: each batch in one pipeline,
a batch retried after a transient error (every batch is idempotent), and the
scripts loaded again when the server forgot them (a restart, ``SCRIPT FLUSH``).
``setup()``'s round trips (`retried`: the server's version and configuration,
every script loaded) take the same tries, backoff and `StoreUnavailable`
(`_wait_after`, the one decision).

The twins differ only in their ``await``s.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis import exceptions as rx

from langgraph_resilience.checkpoint.redis.ledger._effects_lua import LEDGER_SCRIPTS
from langgraph_resilience.checkpoint.redis.ledger._limits_lua import LIMIT_SCRIPTS
from langgraph_resilience.checkpoint.redis.ledger._runs_fence import lease_lost_of
from langgraph_resilience.checkpoint.redis.ledger._runs_scripts import RUN_SCRIPTS
from langgraph_resilience.checkpoint.redis.runlog._runlog import RUNLOG_SCRIPTS
from langgraph_resilience.checkpoint.redis.store._ops import Command, Ops
from langgraph_resilience.checkpoint.redis.store._scripts import SCRIPTS, Script
from langgraph_resilience.errors import StoreUnavailable
from langgraph_resilience.policy import Backoff

__all__ = ["ALL_SCRIPTS", "adrive", "aretried", "drive", "retried", "transient"]

T = TypeVar("T")

#: Told of a failed try of a batch (None: not counted).
Failed = Callable[[], None] | None

#: Every script the savers run: loaded by ``setup()`` and again when forgotten.
ALL_SCRIPTS: tuple[Script, ...] = (
    *SCRIPTS,
    *RUN_SCRIPTS,
    *LEDGER_SCRIPTS,
    *LIMIT_SCRIPTS,
    *RUNLOG_SCRIPTS,
)


def transient(exc: BaseException) -> bool:
    """A lost or refused connection, a timeout, a server still loading its AOF."""
    return isinstance(exc, (rx.ConnectionError, rx.TimeoutError, rx.TryAgainError))


def _load(conn: Any) -> None:
    """Load every script again: ``script_load`` (not a pipeline), which a
    ``RedisCluster`` client sends to every primary (a pipeline's keyless command
    has no one node to go to)."""
    for script in ALL_SCRIPTS:
        conn.script_load(script.source)


async def _aload(conn: Any) -> None:
    for script in ALL_SCRIPTS:
        await conn.script_load(script.source)


def _unavailable(target: str, attempts: int, exc: BaseException) -> StoreUnavailable:
    return StoreUnavailable(
        f"Redis at {target} unreachable after {attempts} tries: {exc}",
        target=target,
        attempts=attempts,
    )


def _wait_after(
    exc: Exception, attempt: int, backoff: Backoff, target: str, failed: Failed
) -> float:
    """The seconds to wait before try ``attempt + 1`` after ``exc`` failed try
    ``attempt``; raises what ends the tries: a fenced write refused, an error
    that is not transient, or `StoreUnavailable` once ``backoff`` is spent."""
    if isinstance(exc, rx.ResponseError) and (lost := lease_lost_of(exc)):
        raise lost from None  # a fenced write refused
    if failed is not None and isinstance(exc, rx.RedisError):
        failed()  # a failed try, counted as the SQL savers count theirs
    if not transient(exc):
        raise exc
    if attempt >= backoff.max_attempts:
        raise _unavailable(target, attempt, exc) from exc
    return backoff.delay(attempt, random.random())


def retried(call: Callable[[], T], backoff: Backoff, target: str) -> T:
    """``call()`` (round trips that may be repeated), tried again after a
    transient error as a batch is: ``setup()``'s."""
    attempt = 1
    while True:
        try:
            return call()
        except Exception as exc:
            time.sleep(_wait_after(exc, attempt, backoff, target, None))
            attempt += 1


async def aretried(call: Callable[[], Awaitable[T]], backoff: Backoff, target: str) -> T:
    """Async twin of `retried`."""
    attempt = 1
    while True:
        try:
            return await call()
        except Exception as exc:
            await asyncio.sleep(_wait_after(exc, attempt, backoff, target, None))
            attempt += 1


def _run(conn: Any, batch: list[Command]) -> list[Any]:
    pipe = conn.pipeline(transaction=False)
    for command in batch:
        pipe.execute_command(*command)
    return list(pipe.execute())


def _send(
    conn: Any, batch: list[Command], backoff: Backoff, target: str, failed: Failed
) -> list[Any]:
    attempt = 1
    while True:
        try:
            return _run(conn, batch)
        except rx.NoScriptError:
            _load(conn)
        except Exception as exc:
            time.sleep(_wait_after(exc, attempt, backoff, target, failed))
            attempt += 1


def drive(conn: Any, op: Ops[T], backoff: Backoff, target: str, failed: Failed = None) -> T:
    """Run ``op``; ``failed`` is told of each batch's failed try (the save counters)."""
    reply: list[Any] | None = None
    while True:
        try:
            batch = op.send(reply) if reply is not None else next(op)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply = _send(conn, batch, backoff, target, failed)


async def _arun(conn: Any, batch: list[Command]) -> list[Any]:
    pipe = conn.pipeline(transaction=False)
    for command in batch:
        pipe.execute_command(*command)
    return list(await pipe.execute())


async def _asend(
    conn: Any, batch: list[Command], backoff: Backoff, target: str, failed: Failed
) -> list[Any]:
    attempt = 1
    while True:
        try:
            return await _arun(conn, batch)
        except rx.NoScriptError:
            await _aload(conn)
        except Exception as exc:
            await asyncio.sleep(_wait_after(exc, attempt, backoff, target, failed))
            attempt += 1


async def adrive(conn: Any, op: Ops[T], backoff: Backoff, target: str, failed: Failed = None) -> T:
    """Async twin of `drive`."""
    reply: list[Any] | None = None
    while True:
        try:
            batch = op.send(reply) if reply is not None else next(op)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply = await _asend(conn, batch, backoff, target, failed)
