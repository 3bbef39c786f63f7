"""A run's loop counts and usage where a top-level step reads and adds them:
the invoke's `RunScope` (`checkpoint.runlog._scope`), not ``state["resilience"]``.

`scoped` gives each top-level invoke its scope. A step at the top of the run
counts its path (``review#3``) and adds its usage in the run's `Tally`, loaded
once per invoke from the run's step rows when the invoke goes on with a run
(`ensure` / `aensure`, before the node's first try: the node's turn does that
I/O, the try loop none). A step nested in a run (a subgraph's, a graph's
invoked inside a node) keeps them in its own graph's run log, as before: its
node's output carries them to the step that ran it (`_step_log.nested_log`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config

from langgraph_resilience._keys import SCOPE_KEY
from langgraph_resilience.budget import add_usage
from langgraph_resilience.checkpoint.runlog._scope import RunScope, Tally, scope_of
from langgraph_resilience.graph._task import TaskContext, in_parent_task

__all__ = ["aensure", "ensure", "run_used", "scoped", "tally_of", "with_usage"]

_EMPTY: Mapping[str, Any] = {}


def _run(state: Any) -> int:
    log = state.get("resilience") if type(state) is dict or isinstance(state, Mapping) else None
    if type(log) is not dict and not isinstance(log, Mapping):  # the usual log: no ABC check
        log = _EMPTY
    return int(log.get("run") or 1)


def tally_of(task: TaskContext, log: Mapping[str, Any]) -> tuple[RunScope, Tally] | None:
    """The scope and tally a top-level step counts in (``log``: the run log of
    its state; None: a nested step, or no invoke's scope: the run log counts).
    A node's turn found them already (`ensure`: ``task.lean``)."""
    if task.lean is not None:
        return task.lean
    scope = task.scope
    if scope is None or not task.top_level:
        return None
    tally = scope.tally(int(log.get("run") or 1))
    return None if tally is None else (scope, tally)


def _due(config: RunnableConfig, state: Any) -> tuple[TaskContext, RunScope | None, int]:
    """The context of the task ``config`` is of, knowing its run's tally when the
    invoke has one (or none is needed: a nested step, or no scope); else with the
    scope and run whose tally to load from the run's step rows."""
    task = TaskContext(config=config)
    scope = task.scope
    if scope is None or not task.top_level:
        return task, None, 0
    run = _run(state)
    tally = scope.tally(run) or scope.start(run)
    if tally is None:
        return task, scope, run
    return task.knowing(scope, tally), None, 0


def ensure(config: RunnableConfig, state: Any) -> TaskContext:
    """The context of the task ``config`` is of, knowing its run's tally
    (`TaskContext.lean`), loaded from the run's step rows if the invoke has none
    yet (a nested step's knows none)."""
    task, scope, run = _due(config, state)
    if scope is None:
        return task
    saver, thread = task.step_log, task.thread_id
    counts, usage = saver.history.tally(thread, run) if saver and thread else ({}, {})
    return task.knowing(scope, scope.load(run, counts, usage))


async def aensure(config: RunnableConfig, state: Any) -> TaskContext:
    """Async twin of `ensure`."""
    task, scope, run = _due(config, state)
    if scope is None:
        return task
    saver, thread = task.async_step_log, task.thread_id
    if saver is not None and thread:
        counts, usage = await saver.history.atally(thread, run)
    else:
        counts, usage = {}, {}
    return task.knowing(scope, scope.load(run, counts, usage))


def run_used(state: Any, task: TaskContext | None) -> dict[str, float]:
    """The run's usage so far, as its budget reads it: the tally's at the top of
    a run; nested, the top-level steps' so far with what this graph's own run
    log counted."""
    log = state.get("resilience") if isinstance(state, Mapping) else None
    own = dict((log if isinstance(log, Mapping) else _EMPTY).get("usage") or {})
    scope = task.scope if task is not None else None
    if scope is None or task is None:
        return own
    if task.top_level:
        tally = scope.tally(_run(state))
        return dict(tally.usage) if tally is not None else own
    outer = scope.latest()
    return add_usage(outer.usage, own) if outer is not None else own


def scoped(config: RunnableConfig | None, input: Any) -> tuple[Any, RunScope | None]:
    """The config a top-level run hands LangGraph, with its invoke's `RunScope`
    (`checkpoint.runlog._scope`: the step records its nodes hand the saver, the run's
    loop counts and usage), and that scope; a config that has one (``invoke``'s
    ``stream``) as it is. A nested run has none of its own (None)."""
    if in_parent_task(ensure_config(config)):  # nested
        return config, None
    found = scope_of(config)
    if found is not None:
        return config, found
    scope = RunScope(fresh=isinstance(input, Mapping) and "resilience" not in input)
    out: dict[str, Any] = dict(config or {})
    out["configurable"] = {**(out.get("configurable") or {}), SCOPE_KEY: scope}
    return out, scope


def with_usage(out: Any, scope: RunScope | None) -> Any:
    """A top-level run's output with the run's usage so far (its tally's: the
    state carries it only once the run ended), if a step of it ran, and its
    ``failed_step`` (None while the run goes on: the state has none then)."""
    log = out.get("resilience") if isinstance(out, Mapping) else None
    if not isinstance(log, Mapping):
        return out
    tally = scope.tally(int(log.get("run") or 1)) if scope is not None else None
    if tally is not None and tally.usage:
        log = {**log, "usage": dict(tally.usage)}
    elif "failed_step" in log:
        return out
    return {**out, "resilience": {"failed_step": None, **log}}
