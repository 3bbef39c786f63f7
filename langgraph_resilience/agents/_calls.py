"""One model or tool call under its `CallPolicy`: tries, persisted, decided, driven.

`call_loop` is the decision, written once: it yields the I/O to do (load the
task's earlier failed tries, call, store a failed try, compress, sleep) and
returns the call's result or a `GaveUp`. `run_sync` and `run_async` do that
I/O; they differ in their I/O lines only.

Under a `Worker`, a ``Retry-After`` longer than the policy's ``Backoff.max_wait``
with tries left is a durable wait, as for a graph node (`_node.durable_wait`):
the try is stored as ``waiting`` and the call interrupts; the worker releases
the run until the wait is over, and the next claim resumes it at the next try.

Failed tries are stored in the saver's attempt ledger (the same table a
`ResilientStateGraph` node's tries go to), keyed by the task the call runs in:
in an agent built by ``create_agent`` the model call is its ``model`` task and
every tool call its own ``tools`` task (one `Send` each), whose ids LangGraph
keeps across resumes. A process killed while it waits before a retry therefore
resumes at the next try, not the first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from langgraph.types import interrupt

from langgraph_resilience._engine import Action, Decision, decide
from langgraph_resilience.checkpoint import AttemptRecord
from langgraph_resilience.classify import Classification, Classifier, FailureKind, is_control_flow
from langgraph_resilience.errors import ConfigError, LeaseLost
from langgraph_resilience.graph._node import (
    CallResult,
    LoadAttempts,
    RecordAttempt,
    Sleep,
    durable_wait,
    try_record,
)
from langgraph_resilience.graph._task import CURRENT_ATTEMPT, TaskContext
from langgraph_resilience.policy import Attempt, NodePolicy

__all__ = ["Call", "CallContext", "Compress", "GaveUp", "call_loop", "run_async", "run_sync"]


class Call(NamedTuple):
    """Make try number ``number`` (replies a `CallResult`)."""

    number: int


class Compress(NamedTuple):
    """Shrink the context before the next try (the model's messages)."""


CallOp = Call | Compress | LoadAttempts | RecordAttempt | Sleep


@dataclass(frozen=True, kw_only=True, slots=True)
class CallContext:
    """What the loop knows of the call: its label in the attempt ledger
    (``model``, ``tool:<name>``), its policy and how failures are classified."""

    label: str
    policy: NodePolicy
    classifier: Classifier
    rand: Callable[[], float]
    resuming: bool
    durable_waits: bool = False  # under a `Worker`: a long Retry-After releases the run
    #: Told of every failed try and what comes of it (the log line, as a node's).
    on_try: Callable[[AttemptRecord, Decision], None] = lambda record, decision: None
    #: The call's failed tries, stored ones first (filled by `call_loop`; its
    #: step record counts them).
    tries: list[AttemptRecord] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True, slots=True)
class GaveUp:
    """The call failed for good: the last failure, its error and the tries made."""

    failure: Classification
    error: BaseException
    attempts: int
    retry_after: float | None = None


def _pause_value(ctx: CallContext, record: AttemptRecord) -> dict[str, Any]:
    return {
        "reason": "budget_exhausted",
        "node": ctx.label,
        "error": f"{record.error_type}: {record.reason}",
        "resume_with": "Command(resume=Budget(...)) with higher limits, or any value to retry",
    }


def call_loop(ctx: CallContext) -> Generator[CallOp, Any, Any]:
    """Try the call under ``ctx.policy``: yields I/O, returns its result or `GaveUp`.

    Interrupts, lost leases and configuration errors pass through untouched.
    """
    stored: list[AttemptRecord] = list((yield LoadAttempts())) if ctx.resuming else []
    earlier = ctx.tries
    earlier.extend(r for r in stored if r.node == ctx.label)
    if earlier and earlier[-1].kind == FailureKind.BUDGET_EXHAUSTED.value:
        interrupt(_pause_value(ctx, earlier[-1]))  # resumed: returns the resume value
    elif earlier and earlier[-1].status == "waiting":
        interrupt(durable_wait(ctx.label, earlier[-1]))  # resumed once the wait is over
    while True:
        number = len(earlier) + 1
        started = time.time()
        result: CallResult = yield Call(number)
        exc = result.error
        if exc is None:
            return result.output
        if is_control_flow(exc) or isinstance(exc, (LeaseLost, ConfigError)):
            raise exc
        failure = ctx.classifier(exc)
        kinds = [FailureKind(r.kind) for r in earlier if r.kind]
        decision = decide(ctx.policy, failure, kinds, ctx.rand(), durable_waits=ctx.durable_waits)
        record = try_record(number, ctx.label, failure, exc, decision)
        yield RecordAttempt(record, started)
        ctx.on_try(record, decision)
        earlier.append(record)
        if decision.action is Action.PAUSE:
            # Raises until resumed; the resumed call finds this try stored (above).
            interrupt(_pause_value(ctx, record))
            continue
        if decision.action is Action.WAIT:
            # Raises: the worker releases the run until the wait is over, then
            # resumes it; the call finds this try stored (above) and tries again.
            interrupt(durable_wait(ctx.label, record))
        if decision.action is Action.RETRY:
            if decision.compress:
                yield Compress()
            if decision.delay > 0:
                yield Sleep(decision.delay)
            continue
        return GaveUp(failure=failure, error=exc, attempts=number, retry_after=decision.retry_after)


# -- the drivers: the only sync/async difference ------------------------------------------


def run_sync(
    ctx: CallContext,
    task: TaskContext | None,
    call: Callable[[], Any],
    compress: Callable[[], None],
    sleep: Callable[[float], None],
) -> Any:
    """Drive `call_loop` with blocking I/O; returns the result or a `GaveUp`."""
    loop = call_loop(ctx)
    saver = task.saver if task is not None else None
    key = task.attempt_key if task is not None else None
    fence = task.fence if task is not None else None
    reply: Any = None
    while True:
        try:
            op = loop.send(reply)
        except StopIteration as stop:
            return stop.value
        reply = None
        if isinstance(op, Call):
            token = CURRENT_ATTEMPT.set(Attempt(number=op.number))
            try:
                reply = CallResult(call(), None, {})
            except Exception as exc:
                reply = CallResult(None, exc, {})
            finally:
                CURRENT_ATTEMPT.reset(token)
        elif isinstance(op, LoadAttempts):
            reply = saver.attempts.read(key) if saver is not None and key is not None else []
        elif isinstance(op, RecordAttempt):
            if saver is not None and key is not None:
                saver.attempts.record(key, op.record, op.started_at, fence)
        elif isinstance(op, Compress):
            compress()
        else:
            sleep(op.seconds)


async def run_async(
    ctx: CallContext,
    task: TaskContext | None,
    call: Callable[[], Awaitable[Any]],
    compress: Callable[[], None],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Any:
    """Drive `call_loop` with async I/O; returns the result or a `GaveUp`."""
    loop = call_loop(ctx)
    saver = task.async_saver if task is not None else None
    key = task.attempt_key if task is not None else None
    fence = task.fence if task is not None else None
    reply: Any = None
    while True:
        try:
            op = loop.send(reply)
        except StopIteration as stop:
            return stop.value
        reply = None
        if isinstance(op, Call):
            token = CURRENT_ATTEMPT.set(Attempt(number=op.number))
            try:
                reply = CallResult(await call(), None, {})
            except Exception as exc:
                reply = CallResult(None, exc, {})
            finally:
                CURRENT_ATTEMPT.reset(token)
        elif isinstance(op, LoadAttempts):
            found = await saver.attempts.aread(key) if saver is not None and key else []
            reply = found
        elif isinstance(op, RecordAttempt):
            if saver is not None and key is not None:
                await saver.attempts.arecord(key, op.record, op.started_at, fence)
        elif isinstance(op, Compress):
            compress()
        else:
            await sleep(op.seconds)
