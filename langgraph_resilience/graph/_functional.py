"""`task`: LangGraph's ``@task`` under a `NodePolicy`, as a graph node is.

A task's tries are the one try loop's (`_tries.try_loop`, driven by
`_drivers.run_sync` / `run_async`), with the decisions a node's tries take
(`_engine.decide`: the six failure kinds, retry with backoff and full jitter,
adapt, compress is a node's only): one code path for the decisions. Its failed
tries are stored in the attempt ledger under the task's own id, which LangGraph
keeps across resumes, so a process killed while it waits before a retry
resumes at the next try, not the first.

How tries that failed for good end, as for a node: the policy's ``fallback``
(here the function ``fallback=``, called with the task's arguments), degraded
(``critical=False``: the task returns ``degraded``, ``None`` by default), or,
critical, the failure raised from the task's future, as LangGraph's own
``@task`` raises it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from langgraph.func import task as lg_task

from langgraph_resilience._engine import Action
from langgraph_resilience._keys import RETRY_FAILED_KEY
from langgraph_resilience.checkpoint.runlog._scope import hand_task
from langgraph_resilience.classify import Classifier
from langgraph_resilience.graph._drivers import run_async, run_sync
from langgraph_resilience.graph._task import TaskContext
from langgraph_resilience.graph._tries import Ended, GaveUp, Tried, Tries
from langgraph_resilience.policy import NodePolicy

__all__ = ["task"]


def _tries(name: str, policy: NodePolicy) -> Tries:
    """A task's tries: no budget check before each, none of its own callback
    runs (LangGraph's run of the task is one)."""
    return Tries(
        name=name,
        policy=policy,
        classifier=policy.classifier or Classifier(),
        rand=random.random,
        gated=False,
        metered=False,
        watched=False,
    )


def _end(tried: Tried, degraded: Any) -> tuple[bool, Any]:
    """(whether to call the fallback, the value otherwise); raises the failure of
    a critical task that failed for good. Hands the task's step record to its
    ``put_writes`` first (`_scope.hand_task`)."""
    result, end = tried
    gave = result if isinstance(result, GaveUp) else None
    action = gave.decision.action if gave is not None else None
    status = (
        "completed"
        if gave is None
        else "degraded"
        if action in (Action.FALLBACK, Action.DEGRADE)
        else "failed"
    )
    _hand(end, status, gave)
    if gave is None:
        return False, result
    if action is Action.FALLBACK:
        return True, None
    if action is Action.DEGRADE:
        return False, degraded
    raise gave.error


def _hand(end: Ended, status: str, gave: GaveUp | None) -> None:
    """The task's step record (`_scope.hand_task`): its path is its name."""
    task = end.task
    if task is None or not task.task_id or task.node is None:
        return
    if task.step_log is None and task.async_step_log is None:
        return  # no saver keeping step rows to take it: nothing would, it would stay
    path = task.node
    kinds = [r.kind for r in end.tries if r.kind]
    step: dict[str, Any] = {
        "path": path,
        "node": path,
        "status": status,
        "attempts": len(end.tries) + (1 if status == "completed" else 0),
        "kinds": kinds,
        "started_at": end.started_at,
        "ended_at": time.time(),
    }
    log: dict[str, Any] = {"step": step, "functional": True}
    if status != "failed" and task.resuming:
        # a resume re-ran it after it had failed: the run goes on
        log.update(cleared=True, status="running")
        if (task.config.get("configurable") or {}).get(RETRY_FAILED_KEY):
            log["clear"] = [path]  # a retry_failed recovery, re-running this task
    if status == "failed" and gave is not None:
        log["failed_step"] = {"path": path, "node": path, "kind": gave.failure.kind.value}
    hand_task(task.task_id, log)


def task(
    func: Callable[..., Any] | None = None,
    *,
    policy: NodePolicy | None = None,
    fallback: Callable[..., Any] | None = None,
    degraded: Any = None,
    name: str | None = None,
    **task_kwargs: Any,
) -> Any:
    """LangGraph's ``@task``, its tries under ``policy`` as a node's.

    Args:
        func: the task's function (sync or async).
        policy: the `NodePolicy` its tries run under (default ``NodePolicy()``:
            transient failures retried, a failure for good raised).
        fallback: called with the task's arguments when its tries fail for good
            (the policy's ``fallback`` route, for a task).
        degraded: what a task whose policy says ``critical=False`` returns when
            its tries fail for good.
        name: the task's name (default: the function's).
        **task_kwargs: LangGraph's own ``task`` arguments (``retry_policy``,
            ``cache_policy``).

    Example:
        >>> from langgraph_resilience import Backoff, NodePolicy
        >>> from langgraph_resilience.graph import task
        >>> @task(policy=NodePolicy(retry=Backoff(max_attempts=3), critical=False))
        ... def fetch(url: str) -> str:
        ...     return "page"
    """

    def decorate(fn: Callable[..., Any]) -> Any:
        label = name or fn.__name__
        given = policy if policy is not None else NodePolicy()
        if fallback is not None and given.fallback is None:
            given = replace(given, fallback=getattr(fallback, "__name__", None) or "fallback")
        what = _tries(label, given)

        def call(arg: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
            return fn(*arg[0], **arg[1])

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def arun(*args: Any, **kwargs: Any) -> Any:
                tried = await run_async(
                    what, {}, (args, kwargs), call, TaskContext.current(), sleep=_asleep
                )
                falls, value = _end(tried, degraded)
                if falls and fallback is not None:
                    value = fallback(*args, **kwargs)
                    if inspect.isawaitable(value):
                        value = await value
                return value

            return lg_task(name=label, **task_kwargs)(arun)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            tried = run_sync(
                what, {}, (args, kwargs), call, TaskContext.current(), sleep=time.sleep
            )
            falls, value = _end(tried, degraded)
            if falls and fallback is not None:
                value = fallback(*args, **kwargs)
            return value

        return lg_task(name=label, **task_kwargs)(run)

    return decorate(func) if func is not None else decorate


async def _asleep(seconds: float) -> None:
    await asyncio.sleep(seconds)
