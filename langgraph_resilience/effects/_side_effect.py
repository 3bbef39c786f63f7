"""`side_effect`: non-idempotent calls (email, payment, webhook) made exactly once.

A retried or resumed node re-runs from its first line, so every call in it runs
again unless it is recorded. Decorated with `side_effect`, a call inside a node
of a graph compiled with a resilient saver:

1. derives an idempotency key: the thread, the task (stable across retries,
   resumes and crash recovery of the same step with ``durability="sync"``),
   the effect's name and its call number within the try, plus ``key=``'s
   business key if given;
2. returns the recorded outcome, without calling, if there is one;
3. if an intent has no outcome (the process died during the call, or the call
   raised), asks ``reconcile(idempotency_key)`` when given; otherwise calls
   again with the same key (``on_unknown="reexecute"``) or raises
   `EffectOutcomeUnknown` (``on_unknown="raise"``, for payments);
4. records the intent durably before the call and the outcome (or the error)
   after it. A function with an ``idempotency_key`` parameter receives the key,
   to pass on to the service so that it can deduplicate too.

The intent names its executor and holds for ``lease`` seconds, renewed while the
call runs. Two executors that run the same step at once (two processes resuming
one thread's head) race for it: one calls, the other finds the claim live and
raises `EffectInFlight` (a transient failure: its node retries, and replays the
outcome once it is recorded) instead of treating the intent as unknown in 3. An
intent whose executor's process is gone (on this machine: known at once;
elsewhere: once its lease ran out) is settled as in 3.

The outcome is stored as the call returns, in its own write (one statement,
one round trip, committed without waiting for the disk: a killed process keeps
it), before control goes back to the node: a crash later in the node replays
it. What is left unknown is the call itself: a process killed during the call
(or in the microseconds between its return and that write) leaves the intent
without an outcome, settled as in 3. ``defer_outcome=True`` saves that write:
the outcome rides along with the saver's next write (the next effect's intent,
or the node's own writes as it ends), so the unknown window is the rest of the
node, which a crash there calls again.

Under a `Worker` (the task carries its run's fence), the call is made only
while the worker can prove it still holds the run's lease with a margin
(`_leases`: its last renewal, on the monotonic and the wall clock): a worker
that was stalled past its lease (a long pause, a SIGSTOP, a partition right
after the intent was stored) or cannot renew does not call, and raises
`LeaseLost`; the worker that took the run over settles the intent. While less
than the margin is left, the call waits for the next renewal. A stall between
that check and the call itself (microseconds, unless the process freezes right
there for longer than the margin) is the one window left: give such calls an
idempotency key the service honours, or ``reconcile``.

The decision is written once (`effect_steps`, `_leases.check_lease`); the sync
and async drivers (`drive_sync`, `drive_async`) only do its I/O, for a
`side_effect` call and for an agent's recorded tool call alike (`EffectCall`
says what differs: the key, and whether the arguments' digest is stored).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any, NamedTuple, TypeVar, overload

from langgraph_resilience._util._heartbeat import Beat, every
from langgraph_resilience._util._process import executing, executor_id
from langgraph_resilience.checkpoint import (
    AsyncEffectLedger,
    EffectLedger,
    EffectRecord,
    Fence,
)
from langgraph_resilience.effects._outcome import outcome_fields, raise_unstorable, replayed
from langgraph_resilience.effects._steps import (
    EFFECT_LEASE,
    MAX_OUTCOME_BYTES,
    CallEffect,
    ClaimIntent,
    EffectSpec,
    Lookup,
    OnUnknown,
    Reconcile,
    Replay,
    Settle,
    effect_steps,
)
from langgraph_resilience.errors import (
    ConfigError,
    LeaseLost,
)
from langgraph_resilience.graph._task import CURRENT_ATTEMPT, TaskContext
from langgraph_resilience.graph._versions import define_effect
from langgraph_resilience.telemetry._emit import effect_event
from langgraph_resilience.worker._leases import LEASES

__all__ = ["EFFECT_LEASE", "EffectSpec", "side_effect"]

F = TypeVar("F", bound=Callable[..., Any])


# -- where the call is -----------------------------------------------------------------

_SEQ: ContextVar[tuple[tuple[Any, ...], dict[str, int]] | None] = ContextVar(
    "langgraph_resilience_effect_seq", default=None
)


def task_thread(
    task: TaskContext | None, missing: Callable[[], ConfigError]
) -> tuple[TaskContext, str]:
    """The task a recorded call is made in, and its thread; ``missing()`` is
    raised when there is no task or it runs without a thread."""
    thread = task.thread_id if task is not None else None
    if task is None or thread is None:
        raise missing()
    return task, thread


def _task_of(spec: EffectSpec) -> tuple[TaskContext, str]:
    """The task the effect is called in, and its thread."""
    return task_thread(
        TaskContext.current(),
        lambda: ConfigError(
            f"side effect {spec.name!r} was called outside a node of a graph with a "
            "checkpointer. Call it from inside a node, and compile the graph with a "
            "resilient saver, e.g. graph.compile(checkpointer=ResilientSqliteSaver(...)); "
            "run it with a thread_id in config['configurable']."
        ),
    )


def _no_saver(spec: EffectSpec, task: TaskContext) -> ConfigError:
    return ConfigError(
        f"side effect {spec.name!r} needs a resilient saver to record it, but the graph "
        f"uses {task.saver_type}. Compile with one of "
        "langgraph_resilience.checkpoint's savers (ResilientSqliteSaver, ResilientRedisSaver, "
        "ResilientPostgresSaver or their async twins)."
    )


def _key_of(
    spec: EffectSpec, task: TaskContext, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, bool]:
    """The call's idempotency key, and whether it is fresh (see `effect_steps`)."""
    ours = CURRENT_ATTEMPT.get()
    scope = (task.task_id, task.node_attempt, ours.number if ours else 0)
    held = _SEQ.get()
    if held is None or held[0] != scope:
        held = (scope, {})
        _SEQ.set(held)
    seq = held[1][spec.name] = held[1].get(spec.name, 0) + 1
    parts = [task.effect_scope, spec.name, str(seq)]
    if spec.key is not None:
        parts.append(str(spec.key(*args, **kwargs)))
    # The first try of a task that is not being resumed cannot have records yet.
    fresh = not task.resuming and not task.retrying and scope[1:] in ((1, 0), (1, 1))
    return "|".join(parts), fresh


def _digest(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    try:
        return hashlib.sha256(repr((args, sorted(kwargs.items()))).encode()).hexdigest()[:16]
    except Exception:
        return None


def _intent(spec: EffectSpec, task: TaskContext, key: str, fence: Fence | None) -> EffectRecord:
    return EffectRecord(
        idempotency_key=key,
        name=spec.name,
        status="intent",
        intent_at=time.time(),
        checkpoint_ns=task.checkpoint_ns,
        checkpoint_id=task.checkpoint_id,
        task_id=task.task_id,
        owner=executor_id(os.urandom(6).hex()),
        fencing_token=fence.token if fence is not None else None,
    )


def _renewing(
    saver: EffectLedger | AsyncEffectLedger, thread: str, spec: EffectSpec, intent: EffectRecord
) -> Beat:
    """Renew the claim every third of its lease while the call runs (the async
    savers' sync methods run on their event loop, which the call leaves free)."""
    owner = intent.owner or ""
    key = intent.idempotency_key
    return every(spec.lease / 3, lambda: saver.effects.renew(thread, key, owner, spec.lease))


def _release(saver: EffectLedger | AsyncEffectLedger, thread: str, intent: EffectRecord) -> None:
    """Let a claim go that this call will not settle (it raised before calling):
    its lease ends now, so the next try need not wait it out."""
    with contextlib.suppress(Exception):  # if not, the lease runs out on its own
        saver.effects.renew(thread, intent.idempotency_key, intent.owner or "", 0.0)


def _lease_waits(spec: EffectSpec, key: str, fence: Fence | None) -> Iterator[float]:
    """Seconds to wait before the call may go ahead under the run's lease (none
    without a fence); raises `LeaseLost` once the lease cannot be proven held."""
    if fence is None:
        return
    while True:
        found = LEASES.check(fence)
        if found.verdict == "call":
            return
        if found.verdict == "lost":
            raise LeaseLost(
                f"side effect {spec.name!r} (idempotency key {key!r}) was not called: "
                f"this worker cannot prove it still holds run {fence.run_id!r} (fencing "
                f"token {fence.token}): {found.reason}. The worker that takes the run "
                "over settles the effect; this one stops working on the run."
            )
        yield found.seconds


# -- the drivers -------------------------------------------------------------------------


class EffectCall(NamedTuple):
    """One recorded call, as the drivers make it. What differs between a
    `side_effect` call (keyed by its task: `_side_effect_call`) and an agent's
    tool call (keyed by its tool call id: ``agents._tool_effects``) is all here.

    ``fresh``: it cannot have records yet (see `effect_steps`); ``digest``: of
    its arguments, stored with the intent (None: not stored).
    """

    spec: EffectSpec
    task: TaskContext
    thread: str
    key: str
    fresh: bool
    digest: str | None


def drive_sync(call: EffectCall, saver: EffectLedger, invoke: Callable[[str], Any]) -> Any:
    """Make ``invoke(key)`` at most once for ``call`` (a recorded outcome is
    replayed instead); the I/O of `effect_steps`, sync."""
    spec, thread, key, fence = call.spec, call.thread, call.key, call.task.fence
    intent = _intent(spec, call.task, key, fence)
    steps = effect_steps(spec, key, call.fresh)
    reply: Any = None
    held = False  # our claim is stored and not settled
    with executing(intent.owner or ""):  # a later try of ours sees it gone after
        try:
            while True:
                try:
                    op = steps.send(reply)
                except StopIteration as stop:
                    return _result(saver, call, stop.value)
                reply = None
                if isinstance(op, Lookup):
                    reply = saver.effects.read(thread, key)
                elif isinstance(op, ClaimIntent):
                    reply = saver.effects.claim(
                        thread, intent, call.digest, spec.lease, fence, op.first
                    )
                    held = reply.verdict in ("new", "took_over")
                elif isinstance(op, Reconcile):
                    assert spec.reconcile is not None
                    reply = spec.reconcile(key)
                    effect_event("effect_reconciled", spec.name, key, thread, reply)
                elif isinstance(op, CallEffect):
                    for wait in _lease_waits(spec, key, fence):
                        time.sleep(wait)
                    beat = _renewing(saver, thread, spec, intent)
                    try:
                        reply = invoke(key)
                    except Exception as exc:
                        reply = Settle("failed", error=exc)
                    finally:
                        beat.stop()
                else:
                    held = False
                    fields = outcome_fields(spec, saver, op)
                    if spec.defer_outcome:
                        saver.effects.defer(thread, key, fields)
                    else:
                        saver.effects.record(thread, key, fields, fence)
                    raise_unstorable(fields)
        except BaseException:
            if held:
                _release(saver, thread, intent)
            raise


async def drive_async(
    call: EffectCall, saver: AsyncEffectLedger, invoke: Callable[[str], Awaitable[Any]]
) -> Any:
    """The async twin of `drive_sync`."""
    spec, thread, key, fence = call.spec, call.thread, call.key, call.task.fence
    intent = _intent(spec, call.task, key, fence)
    steps = effect_steps(spec, key, call.fresh)
    reply: Any = None
    held = False  # our claim is stored and not settled
    with executing(intent.owner or ""):  # a later try of ours sees it gone after
        try:
            while True:
                try:
                    op = steps.send(reply)
                except StopIteration as stop:
                    return _result(saver, call, stop.value)
                reply = None
                if isinstance(op, Lookup):
                    reply = await saver.effects.aread(thread, key)
                elif isinstance(op, ClaimIntent):
                    reply = await saver.effects.aclaim(
                        thread, intent, call.digest, spec.lease, fence, op.first
                    )
                    held = reply.verdict in ("new", "took_over")
                elif isinstance(op, Reconcile):
                    assert spec.reconcile is not None
                    reply = spec.reconcile(key)
                    if inspect.isawaitable(reply):
                        reply = await reply
                    effect_event("effect_reconciled", spec.name, key, thread, reply)
                elif isinstance(op, CallEffect):
                    for wait in _lease_waits(spec, key, fence):
                        await asyncio.sleep(wait)
                    beat = _renewing(saver, thread, spec, intent)
                    try:
                        reply = await invoke(key)
                    except Exception as exc:
                        reply = Settle("failed", error=exc)
                    finally:
                        beat.stop()
                else:
                    held = False
                    fields = outcome_fields(spec, saver, op)
                    if spec.defer_outcome:
                        saver.effects.defer(thread, key, fields)
                    else:
                        await saver.effects.arecord(thread, key, fields, fence)
                    raise_unstorable(fields)
        except BaseException:
            if held:
                with contextlib.suppress(Exception):  # if not, the lease runs out on its own
                    await saver.effects.arenew(thread, key, intent.owner or "", 0.0)
            raise


def _result(saver: EffectLedger | AsyncEffectLedger, call: EffectCall, value: Any) -> Any:
    """What a call returns once its steps are done: the call's value, or the
    recorded outcome it replays."""
    if not isinstance(value, Replay):
        return value
    effect_event("effect_replayed", call.spec.name, call.key, call.thread, None)
    return replayed(saver, value)


def _side_effect_call(
    spec: EffectSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[EffectCall, dict[str, Any]]:
    """A `side_effect` call, keyed by its task, and the keyword arguments to
    call the function with (its idempotency key added, if it takes one)."""
    task, thread = _task_of(spec)
    key, fresh = _key_of(spec, task, args, kwargs)
    if spec.passes_key:
        kwargs = {**kwargs, "idempotency_key": key}
    call = EffectCall(
        spec=spec, task=task, thread=thread, key=key, fresh=fresh, digest=_digest(args, kwargs)
    )
    return call, kwargs


def _effect_sync(
    spec: EffectSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    call, kwargs = _side_effect_call(spec, args, kwargs)
    saver = call.task.ledger
    if saver is None:
        raise _no_saver(spec, call.task)
    return drive_sync(call, saver, lambda key: fn(*args, **kwargs))


async def _effect_async(
    spec: EffectSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    call, kwargs = _side_effect_call(spec, args, kwargs)
    saver = call.task.async_ledger
    if saver is None:
        raise _no_saver(spec, call.task)
    return await drive_async(call, saver, lambda key: fn(*args, **kwargs))


@overload
def side_effect(fn: F) -> F: ...


@overload
def side_effect(
    *,
    name: str | None = None,
    key: Callable[..., Any] | None = None,
    reconcile: Callable[[str], Any] | None = None,
    on_unknown: OnUnknown = "reexecute",
    lease: float = EFFECT_LEASE,
    max_outcome_bytes: int = MAX_OUTCOME_BYTES,
    defer_outcome: bool = False,
) -> Callable[[F], F]: ...


def side_effect(
    fn: Any = None,
    *,
    name: str | None = None,
    key: Callable[..., Any] | None = None,
    reconcile: Callable[[str], Any] | None = None,
    on_unknown: OnUnknown = "reexecute",
    lease: float = EFFECT_LEASE,
    max_outcome_bytes: int = MAX_OUTCOME_BYTES,
    defer_outcome: bool = False,
) -> Any:
    """Record a non-idempotent call so that retries and resumes never repeat it.

    Args:
        name: the effect's name in keys and records (default: the function's).
        key: ``key(*args, **kwargs) -> str``, a business key (an order id) added to
            the idempotency key.
        reconcile: ``reconcile(idempotency_key)`` asks the outside system whether an
            effect whose outcome was not recorded happened: it returns the effect's
            result if so (anything but None), or None if not.
        on_unknown: without ``reconcile``, what to do about an intent without an
            outcome: ``"reexecute"`` (call again with the same key; the default) or
            ``"raise"`` (`EffectOutcomeUnknown`, which ends the run with a partial
            result saying which effect to verify).
        lease: seconds this executor's claim on the call holds without renewal
            (renewed every third of it while the call runs). Another process that
            runs the same step meanwhile does not call (`EffectInFlight`); one
            that finds the claim of a vanished executor on another machine waits
            this long before settling it (on this machine, a killed process's
            claim is settled at once).
        max_outcome_bytes: the largest result stored (serialized; 16 MiB by
            default). A bigger result, or one the checkpointer cannot serialize,
            is recorded as done without its value: the call is never made again,
            and this try and every replay raise a `TypeError` saying so. Return a
            reference (an id, a URL) to a large result instead.
        defer_outcome: store the outcome with the saver's next write (the next
            effect's intent, or the node's writes as it ends) instead of in a
            write of its own as the call returns: one round trip less per call,
            for cheap, frequent effects, but a crash anywhere in the rest of the
            node leaves the outcome unknown, so it is settled as after a crash
            during the call (``reconcile``, or called again with the same key).

    Example:
        >>> @side_effect(reconcile=mailer.lookup)  # doctest: +SKIP
        ... def send_report(to: str, body: str, *, idempotency_key: str) -> str:
        ...     return mailer.send(to, body, idempotency_key=idempotency_key)
    """

    def decorate(func: Any) -> Any:
        if not callable(func):
            raise ConfigError(f"side_effect decorates a function, got {func!r}")
        try:
            passes_key = "idempotency_key" in inspect.signature(func).parameters
        except (TypeError, ValueError):  # no signature to read (some builtins)
            passes_key = False
        spec = EffectSpec(
            name=name or str(getattr(func, "__name__", "effect")),
            key=key,
            reconcile=reconcile,
            on_unknown=on_unknown,
            passes_key=passes_key,
            lease=lease,
            max_outcome_bytes=max_outcome_bytes,
            defer_outcome=defer_outcome,
        )
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_effect(*args: Any, **kwargs: Any) -> Any:
                return await _effect_async(spec, func, args, kwargs)

            async_effect.effect_spec = spec  # type: ignore[attr-defined]
            define_effect(spec.name, async_effect)  # check_deploy knows its name
            return async_effect

        @functools.wraps(func)
        def sync_effect(*args: Any, **kwargs: Any) -> Any:
            return _effect_sync(spec, func, args, kwargs)

        sync_effect.effect_spec = spec  # type: ignore[attr-defined]
        define_effect(spec.name, sync_effect)
        return sync_effect

    if fn is not None:
        return decorate(fn)
    return decorate
