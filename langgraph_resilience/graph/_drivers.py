"""The drivers of the try loop, the only sync/async difference, and the
wrapper LangGraph runs in place of a node.

`_tries.try_loop` decides; a driver does its I/O: the try (metered, as the
current `Attempt`, in its own callback run when watched, within the node's
timeout when async), the attempt ledger, the waits. One pair of drivers serves
a graph node's tries and an agent's model and tool calls (`_tries.Tries` says
what a try is).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.config import get_config

from langgraph_resilience.budget import Meter
from langgraph_resilience.graph._node import NodeAction, NodeContext
from langgraph_resilience.graph._slots import anode_turn, node_turn, user_config
from langgraph_resilience.graph._step_log import NESTED_STOPS, not_run, stopped
from langgraph_resilience.graph._tally import aensure, ensure
from langgraph_resilience.graph._task import CURRENT_ATTEMPT, TaskContext
from langgraph_resilience.graph._tries import (
    Call,
    CallResult,
    LoadAttempts,
    RecordAttempt,
    Tries,
    try_loop,
)
from langgraph_resilience.limits._admit import Admit, Held, Release
from langgraph_resilience.limits._drive import admit_async, admit_sync, release_async, release_sync
from langgraph_resilience.policy import Attempt, seconds_of
from langgraph_resilience.telemetry._emit import (
    TryRun,
    aannounce,
    announce,
    begin_try,
    failed_try,
    has_callbacks,
    try_config,
)

__all__ = ["NOT_RUN", "is_async", "run_async", "run_sync", "wrap"]


# -- the drivers: the only sync/async difference ------------------------------------------


class _Unmetered:
    """The meter of a try that meters itself (an agent's call): counts nothing."""

    def __enter__(self) -> _Unmetered:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def usage(self, seconds: float) -> dict[str, float]:
        return {}

    def inner_usage(self) -> dict[str, float]:
        return {}


_UNMETERED = _Unmetered()


def _call_sync(call: Callable[[Any], Any], arg: Any, attempt: Attempt, metered: bool) -> CallResult:
    """One try, metered."""
    output: Any = None
    error: BaseException | None = None
    token = CURRENT_ATTEMPT.set(attempt)
    stops: list[Mapping[str, Any]] = []
    nested = NESTED_STOPS.set(stops)
    started = time.monotonic()
    with Meter() if metered else _UNMETERED as meter:
        try:
            output = call(arg)
        except Exception as exc:
            error = exc
        finally:
            CURRENT_ATTEMPT.reset(token)
            NESTED_STOPS.reset(nested)
    usage = meter.usage(time.monotonic() - started)
    return CallResult(output, error, usage, stops[0] if stops else None, meter.inner_usage())


def run_sync(
    what: Tries,
    state: Any,
    arg: Any,
    call: Callable[[Any], Any],
    task: TaskContext | None,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """Drive `try_loop` with blocking I/O: ``call(arg)`` is a try."""
    loop = try_loop(what, state, arg, task)
    watched = task if what.watched else None  # the task whose tries are runs of their own
    # Whether its tries' events go to callbacks: its config's, asked once for all of them.
    told = watched is not None and has_callbacks(watched.config)
    tr: TryRun | None = None  # the try in progress, when someone watches it
    number = 0  # the try last started, when someone watches it (0: none yet)
    held: Any = None  # what the try holds of its shared limits
    reply: Any = None
    while True:
        try:
            op = loop.send(reply)
        except StopIteration as stop:
            if tr is not None:
                tr.end_sync(stop.value, None, None)
            if told and watched is not None and number:
                announce("try_ended", watched.config, node=what.name, attempt=number)
            return stop.value
        except BaseException as exc:
            if tr is not None:
                tr.end_sync(None, exc, None)
            raise
        if isinstance(op, Call):
            if watched is not None:
                number = op.attempt.number
                if told:
                    announce("try_started", watched.config, node=what.name, attempt=number)
                tr = begin_try(what.name, number, watched.config)
                if tr is not None:
                    tr.start_sync(op.arg)
            try:
                reply = _call_sync(call, op.arg, op.attempt, what.metered)
            except BaseException:
                if isinstance(held, Held):  # interrupted: free its slots
                    with contextlib.suppress(Exception):
                        release_sync(Release(held))
                raise
        elif isinstance(op, Admit):
            reply = held = admit_sync(
                task.limit_saver if task is not None else None, what.name, op, sleep
            )
        elif isinstance(op, Release):
            release_sync(op)
            held = None
        elif isinstance(op, LoadAttempts):
            saver = task.ledger if task is not None else None
            key = task.attempt_key if task is not None else None
            reply = saver.attempts.read(key) if saver is not None and key is not None else []
        elif isinstance(op, RecordAttempt):
            saver = task.ledger if task is not None else None
            key = task.attempt_key if task is not None else None
            if saver is not None and key is not None and task is not None:
                saver.attempts.record(key, op.record, op.started_at, task.fence)
            if watched is not None:
                number, config = op.record.attempt, watched.config
                tr = failed_try(tr, what.name, number, config, op.started_at)
                tr.end_sync(None, op.error, op.record.kind)
            tr = reply = None
            number = 0  # that try ended (failed)
        else:
            sleep(op.seconds)
            reply = None


async def _call_async(
    name: str,
    call: Callable[[Any], Awaitable[Any]],
    arg: Any,
    attempt: Attempt,
    timeout: float | None,
    metered: bool,
) -> CallResult:
    """Async twin of `_call_sync`, with the node's timeout."""
    output: Any = None
    error: BaseException | None = None
    token = CURRENT_ATTEMPT.set(attempt)
    stops: list[Mapping[str, Any]] = []
    nested = NESTED_STOPS.set(stops)
    started = time.monotonic()
    own: list[BaseException] = []  # a TimeoutError the node raised itself

    async def guarded(value: Any) -> Any:
        try:
            return await call(value)
        except asyncio.TimeoutError as exc:
            own.append(exc)
            raise

    with Meter() if metered else _UNMETERED as meter:
        try:
            output = await asyncio.wait_for(guarded(arg), timeout)
        except asyncio.TimeoutError as exc:
            if own or timeout is None:  # the user's, shown as raised
                error = exc
            else:
                error = TimeoutError(f"{name} took longer than {timeout}s")
                error.__cause__ = exc
        except Exception as exc:
            error = exc
        finally:
            CURRENT_ATTEMPT.reset(token)
            NESTED_STOPS.reset(nested)
    usage = meter.usage(time.monotonic() - started)
    return CallResult(output, error, usage, stops[0] if stops else None, meter.inner_usage())


async def run_async(
    what: Tries,
    state: Any,
    arg: Any,
    call: Callable[[Any], Awaitable[Any]],
    task: TaskContext | None,
    timeout: float | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Any:
    """Drive `try_loop` with async I/O: ``await call(arg)`` is a try."""
    loop = try_loop(what, state, arg, task)
    watched = task if what.watched else None  # the task whose tries are runs of their own
    # Whether its tries' events go to callbacks: its config's, asked once for all of them.
    told = watched is not None and has_callbacks(watched.config)
    tr: TryRun | None = None  # the try in progress, when someone watches it
    number = 0  # the try last started, when someone watches it (0: none yet)
    held: Any = None  # what the try holds of its shared limits
    reply: Any = None
    while True:
        try:
            op = loop.send(reply)
        except StopIteration as stop:
            if tr is not None:
                await tr.end_async(stop.value, None, None)
            if told and watched is not None and number:
                await aannounce("try_ended", watched.config, node=what.name, attempt=number)
            return stop.value
        except BaseException as exc:
            if tr is not None:
                await tr.end_async(None, exc, None)
            raise
        if isinstance(op, Call):
            if watched is not None:
                number = op.attempt.number
                if told:
                    await aannounce("try_started", watched.config, node=what.name, attempt=number)
                tr = begin_try(what.name, number, watched.config)
                if tr is not None:
                    await tr.start_async(op.arg)
            try:
                reply = await _call_async(
                    what.name, call, op.arg, op.attempt, timeout, what.metered
                )
            except BaseException:
                if isinstance(held, Held):  # cancelled, interrupted: free its slots
                    with contextlib.suppress(Exception):
                        await release_async(Release(held))
                raise
        elif isinstance(op, Admit):
            saver = task.limit_saver if task is not None else None
            reply = held = await admit_async(saver, what.name, op, sleep)
        elif isinstance(op, Release):
            await release_async(op)
            held = None
        elif isinstance(op, LoadAttempts):
            ledger = task.async_ledger if task is not None else None
            key = task.attempt_key if task is not None else None
            reply = (
                await ledger.attempts.aread(key) if ledger is not None and key is not None else []
            )
        elif isinstance(op, RecordAttempt):
            ledger = task.async_ledger if task is not None else None
            key = task.attempt_key if task is not None else None
            if ledger is not None and key is not None and task is not None:
                await ledger.attempts.arecord(key, op.record, op.started_at, task.fence)
            if watched is not None:
                number, config = op.record.attempt, watched.config
                tr = failed_try(tr, what.name, number, config, op.started_at)
                await tr.end_async(None, op.error, op.record.kind)
            tr = reply = None
            number = 0  # that try ended (failed)
        else:
            await sleep(op.seconds)
            reply = None


# -- the wrapper LangGraph calls ------------------------------------------------------------


class _NotRun:
    def __repr__(self) -> str:
        return "<step not run: the run stopped short>"


#: What the wrapper of a step returns in place of running it when the run has
#: stopped short (`_step_log.stopped`): the compiled graph holds its writes and
#: its edges (`_langgraph.hold_writes`), so nothing after a failed critical step
#: fires, a fan-in included, and the step's trigger is spent as if it had run.
NOT_RUN: Any = _NotRun()


def _not_run(ctx: NodeContext, state: Any, task: TaskContext) -> Any:
    """A step not run, the run having stopped short (`stopped`): its event said so."""
    not_run(ctx.name, task, state)
    return NOT_RUN


def wrap(ctx: NodeContext, action: NodeAction) -> NodeAction:
    """The node LangGraph runs in place of ``action``: ``action`` under ``ctx``'s policy.

    A runnable stays a runnable (sync and async); a function keeps its name,
    signature and sync-or-async kind, so LangGraph passes it what it asks for.
    Before the step, its run's tally is loaded if the invoke has none yet
    (`_tally.ensure`: the one read of a step row it may make).
    """
    policy = ctx.policy
    timeout = seconds_of("timeout", policy.timeout) if policy and policy.timeout else None
    if isinstance(action, Runnable):

        def sync_runnable(state: Any, config: RunnableConfig) -> Any:
            task = ensure(config, state)
            if stopped(state):
                return _not_run(ctx, state, task)
            call = lambda s: action.invoke(s, user_config(try_config(config)))  # noqa: E731
            with node_turn(config):
                return run_sync(ctx, state, state, call, task)

        async def async_runnable(state: Any, config: RunnableConfig) -> Any:
            task = await aensure(config, state)
            if stopped(state):
                return _not_run(ctx, state, task)
            call = lambda s: action.ainvoke(s, user_config(try_config(config)))  # noqa: E731
            async with anode_turn(config):
                return await run_async(ctx, state, state, call, task, timeout)

        return RunnableLambda(sync_runnable, afunc=async_runnable, name=ctx.name)
    if is_async(action):

        @functools.wraps(action)
        async def async_node(state: Any, *args: Any, **kwargs: Any) -> Any:
            config = get_config()
            if kwargs:  # a node function that asks for the config, a runtime
                kwargs = _users(kwargs)
            task = await aensure(config, state)
            if stopped(state):
                return _not_run(ctx, state, task)
            call = lambda s: action(s, *args, **kwargs)  # noqa: E731
            async with anode_turn(config):
                return await run_async(ctx, state, state, call, task, timeout)

        return async_node

    @functools.wraps(action)
    def sync_node(state: Any, *args: Any, **kwargs: Any) -> Any:
        config = get_config()
        if kwargs:  # a node function that asks for the config, a runtime
            kwargs = _users(kwargs)
        task = ensure(config, state)
        if stopped(state):
            return _not_run(ctx, state, task)
        call = lambda s: action(s, *args, **kwargs)  # noqa: E731
        with node_turn(config):
            return run_sync(ctx, state, state, call, task)

    return sync_node


def _users(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A node function's keyword arguments, the config among them as its code is
    to see it (`_slots.user_config`)."""
    if isinstance(kwargs.get("config"), dict):
        return {**kwargs, "config": user_config(kwargs["config"])}
    return kwargs


def is_async(action: NodeAction) -> bool:
    """Whether LangGraph runs ``action`` as an async node."""
    # A callable object counts by its __call__ method.
    call = action if inspect.isfunction(action) else type(action).__dict__.get("__call__")
    return inspect.iscoroutinefunction(action) or inspect.iscoroutinefunction(call)
