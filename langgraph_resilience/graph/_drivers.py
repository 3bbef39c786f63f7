"""The drivers of a node's tries: the only sync/async difference, and the wrapper
LangGraph runs in place of the node.

`_node.node_loop` decides; a driver does its I/O (the call, the attempt ledger,
the waits). On the happy path (`_node.plain_start`: not a resume, no budget) the
driver makes the first try itself and returns at once if it completed, without
entering the loop: that path runs on every step of every run.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.config import get_config

from langgraph_resilience.budget import Meter
from langgraph_resilience.graph._node import (
    _FIRST,
    CallNode,
    CallResult,
    FirstTry,
    LoadAttempts,
    NodeAction,
    NodeContext,
    RecordAttempt,
    first_done,
    node_loop,
    plain_start,
)
from langgraph_resilience.graph._task import CURRENT_ATTEMPT, TaskContext
from langgraph_resilience.policy import Attempt
from langgraph_resilience.telemetry._emit import TryRun, begin_try, failed_try, try_config

__all__ = ["is_async", "run_async", "run_sync", "wrap"]


# -- the drivers: the only sync/async difference ------------------------------------------


def _call_sync(call: Callable[[Any], Any], state: Any, attempt: Attempt) -> CallResult:
    """One try of the node, metered."""
    output: Any = None
    error: BaseException | None = None
    token = CURRENT_ATTEMPT.set(attempt)
    started = time.monotonic()
    with Meter() as meter:
        try:
            output = call(state)
        except Exception as exc:
            error = exc
        finally:
            CURRENT_ATTEMPT.reset(token)
    return CallResult(output, error, meter.usage(time.monotonic() - started))


def run_sync(ctx: NodeContext, state: Any, call: Callable[[Any], Any], task: TaskContext) -> Any:
    first: FirstTry | None = None
    tr: TryRun | None = None  # the try in progress, when someone watches it
    if plain_start(state, task):  # the happy path: no loop unless the try fails
        at = time.time()
        if (tr := begin_try(ctx.name, 1, task.config)) is not None:
            tr.start_sync(state)
        done = first_done(ctx, state, task, _call_sync(call, state, _FIRST), at)
        if not isinstance(done, FirstTry):
            if tr is not None:
                tr.end_sync(done, None, None)
            return done
        first = done
    loop = node_loop(ctx, state, task, first)
    reply: Any = None
    while True:
        try:
            op = loop.send(reply)
        except StopIteration as stop:
            if tr is not None:
                tr.end_sync(stop.value, None, None)
            return stop.value
        except BaseException as exc:
            if tr is not None:
                tr.end_sync(None, exc, None)
            raise
        if isinstance(op, CallNode):
            tr = begin_try(ctx.name, op.attempt.number, task.config)
            if tr is not None:
                tr.start_sync(op.state)
            reply = _call_sync(call, op.state, op.attempt)
        elif isinstance(op, LoadAttempts):
            saver, key = task.saver, task.attempt_key
            reply = saver.attempts.read(key) if saver is not None and key is not None else []
        elif isinstance(op, RecordAttempt):
            saver, key = task.saver, task.attempt_key
            if saver is not None and key is not None:
                saver.attempts.record(key, op.record, op.started_at, task.fence)
            tr = failed_try(tr, ctx.name, op.record.attempt, task.config, op.started_at)
            tr.end_sync(None, op.error, op.record.kind)
            tr = reply = None
        else:
            time.sleep(op.seconds)
            reply = None


async def _call_async(
    name: str,
    call: Callable[[Any], Awaitable[Any]],
    state: Any,
    attempt: Attempt,
    timeout: float | None,
) -> CallResult:
    """Async twin of `_call_sync`, with the node's timeout."""
    output: Any = None
    error: BaseException | None = None
    token = CURRENT_ATTEMPT.set(attempt)
    started = time.monotonic()
    with Meter() as meter:
        try:
            output = await asyncio.wait_for(call(state), timeout)
        except asyncio.TimeoutError as exc:
            error = TimeoutError(f"{name} took longer than {timeout}s")
            error.__cause__ = exc
        except Exception as exc:
            error = exc
        finally:
            CURRENT_ATTEMPT.reset(token)
    return CallResult(output, error, meter.usage(time.monotonic() - started))


async def run_async(
    ctx: NodeContext,
    state: Any,
    call: Callable[[Any], Awaitable[Any]],
    task: TaskContext,
    timeout: float | None,
) -> Any:
    first: FirstTry | None = None
    tr: TryRun | None = None  # the try in progress, when someone watches it
    if plain_start(state, task):  # the happy path: no loop unless the try fails
        at = time.time()
        if (tr := begin_try(ctx.name, 1, task.config)) is not None:
            await tr.start_async(state)
        result = await _call_async(ctx.name, call, state, _FIRST, timeout)
        done = first_done(ctx, state, task, result, at)
        if not isinstance(done, FirstTry):
            if tr is not None:
                await tr.end_async(done, None, None)
            return done
        first = done
    loop = node_loop(ctx, state, task, first)
    reply: Any = None
    while True:
        try:
            op = loop.send(reply)
        except StopIteration as stop:
            if tr is not None:
                await tr.end_async(stop.value, None, None)
            return stop.value
        except BaseException as exc:
            if tr is not None:
                await tr.end_async(None, exc, None)
            raise
        if isinstance(op, CallNode):
            tr = begin_try(ctx.name, op.attempt.number, task.config)
            if tr is not None:
                await tr.start_async(op.state)
            reply = await _call_async(ctx.name, call, op.state, op.attempt, timeout)
        elif isinstance(op, LoadAttempts):
            saver, key = task.async_saver, task.attempt_key
            reply = await saver.attempts.aread(key) if saver is not None and key is not None else []
        elif isinstance(op, RecordAttempt):
            saver, key = task.async_saver, task.attempt_key
            if saver is not None and key is not None:
                await saver.attempts.arecord(key, op.record, op.started_at, task.fence)
            tr = failed_try(tr, ctx.name, op.record.attempt, task.config, op.started_at)
            await tr.end_async(None, op.error, op.record.kind)
            tr = reply = None
        else:
            await asyncio.sleep(op.seconds)
            reply = None


# -- the wrapper LangGraph calls ------------------------------------------------------------


def wrap(ctx: NodeContext, action: NodeAction) -> NodeAction:
    """The node LangGraph runs in place of ``action``: ``action`` under ``ctx``'s policy.

    A runnable stays a runnable (sync and async); a function keeps its name,
    signature and sync-or-async kind, so LangGraph passes it what it asks for.
    """
    timeout = _seconds(ctx.policy.timeout) if ctx.policy is not None else None
    if isinstance(action, Runnable):

        def sync_runnable(state: Any, config: RunnableConfig) -> Any:
            call = lambda s: action.invoke(s, try_config(config))  # noqa: E731
            return run_sync(ctx, state, call, TaskContext(config=config))

        async def async_runnable(state: Any, config: RunnableConfig) -> Any:
            call = lambda s: action.ainvoke(s, try_config(config))  # noqa: E731
            return await run_async(ctx, state, call, TaskContext(config=config), timeout)

        return RunnableLambda(sync_runnable, afunc=async_runnable, name=ctx.name)
    if is_async(action):

        @functools.wraps(action)
        async def async_node(state: Any, *args: Any, **kwargs: Any) -> Any:
            call = lambda s: action(s, *args, **kwargs)  # noqa: E731
            return await run_async(ctx, state, call, TaskContext(config=get_config()), timeout)

        return async_node

    @functools.wraps(action)
    def sync_node(state: Any, *args: Any, **kwargs: Any) -> Any:
        call = lambda s: action(s, *args, **kwargs)  # noqa: E731
        return run_sync(ctx, state, call, TaskContext(config=get_config()))

    return sync_node


def is_async(action: NodeAction) -> bool:
    """Whether LangGraph runs ``action`` as an async node."""
    # A callable object counts by its __call__ method.
    call = action if inspect.isfunction(action) else type(action).__dict__.get("__call__")
    return inspect.iscoroutinefunction(action) or inspect.iscoroutinefunction(call)


def _seconds(timeout: float | timedelta | None) -> float | None:
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout) if timeout else None
