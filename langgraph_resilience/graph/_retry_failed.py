"""`retry_failed`: re-run what made a run stop short, and go on from there.

Every step that failed for good is re-run (a failed `Send` branch with its own
payload), or ``step=`` one failed or degraded step; a step that failed inside a
subgraph node is re-run inside the subgraph, from its own checkpoint, and the
parent goes on from that node. Completed steps are not run again: their results
are in the state.

The steps that were due when the run stopped short, and so did not run
(`_drivers.NOT_RUN`), run once the failed steps are re-run: those an edge out of
a re-run step leads to run after it, as they would have (a fan-in runs once, on
every branch's result); the others (fed by a step that finished beside the
failed one) are re-run with it. A step due through a conditional edge that
declares no destinations may be either: it is left to the re-run step's edges.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel import Pregel
from langgraph.types import Command, Send, StateSnapshot

import langgraph_resilience.graph._closing as _closing
import langgraph_resilience.graph._retry_parent as _parent
from langgraph_resilience._keys import EFFECT_SCOPE_KEY, RETRIED_SENDS_KEY, RETRY_FAILED_KEY
from langgraph_resilience._langgraph import ERROR_HANDLER_PREFIX, SEND_PATH
from langgraph_resilience.checkpoint import AsyncRunLedger, RunLedger
from langgraph_resilience.errors import ConfigError, RunStateError
from langgraph_resilience.graph._routes import PARTIAL_RESULT
from langgraph_resilience.graph._task import nested_task
from langgraph_resilience.telemetry._emit import recovery_event

__all__ = [
    "RetryPlan",
    "aretry_failed",
    "innermost_node",
    "keeps_run_log",
    "retried_sends",
    "retry_failed",
    "retry_plan",
]


def _to_retry(values: Mapping[str, Any], thread: str, step: str | None) -> list[Mapping[str, Any]]:
    """The steps `retry_failed` re-runs: every step that failed for good, or ``step``."""
    log = values.get("resilience") or {}
    failed = list(
        log.get("failed_steps") or ([log["failed_step"]] if log.get("failed_step") else [])
    )
    if step is not None:
        chosen = [f for f in failed if f.get("path") == step]
        if chosen:
            return chosen
        if step in (log.get("degraded_steps") or []):
            degraded: dict[str, Any] = {"path": step, "node": innermost_node(step)}
            for sent in log.get("degraded_sends") or ():
                if sent.get("path") == step:  # a Send branch: its own payload
                    degraded["send"] = sent.get("send")
            return [degraded]
        known = [f.get("path") for f in failed] + list(log.get("degraded_steps") or [])
        raise RunStateError(
            f"thread {thread!r} has no failed or degraded step {step!r} in its current run; "
            f"steps that can be re-run: {', '.join(map(repr, known)) or 'none'}"
        )
    if "resilience" not in values:
        raise RunStateError(
            f"thread {thread!r}: the graph keeps no run log (a plain StateGraph, such as "
            "create_supervisor's or create_swarm's, or an @entrypoint), so LangGraph went on "
            "past a step that ended short and retry_failed cannot re-run that step alone; "
            "run_report(saver, thread) names it. Invoke the turn again, or add the agents "
            "as nodes of a ResilientStateGraph, whose node then fails and stops the run"
        )
    if log.get("status") != "partial_complete" or not failed:
        raise RunStateError(
            f"thread {thread!r} has no failed step to retry (status: "
            f"{log.get('status', 'unknown')!r}); retry_failed is for runs that ended with "
            "a partial result, or give step= a degraded step's path"
        )
    return failed


def innermost_node(path: str) -> str:
    """The node of a step path (``research/fetch#2`` -> ``fetch``)."""
    return path.rsplit("/", 1)[-1].split("#", 1)[0].split("[", 1)[0]


def not_run(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    before: StateSnapshot | None,
    steps: list[Mapping[str, Any]],
) -> list[str]:
    """The nodes that were due when the run stopped short and did not run, and
    that re-running ``steps`` does not lead to (``before``: the checkpoint the
    run's last step started from; none unless the run had stopped there)."""
    log = before.values.get("resilience") if before is not None else None
    if before is None or not isinstance(log, Mapping) or log.get("status") != "partial_complete":
        return []
    again = {str(f.get("node")) for f in steps}
    builder = graph.builder
    led = {end for start, end in builder.edges if start in again}
    led |= {end for starts, end in builder.waiting_edges if again & set(starts)}
    for start in again:
        for branch in builder.branches.get(start, {}).values():
            if branch.ends is None:  # it may lead anywhere: leave it to the re-run
                return []
            led.update(branch.ends.values())
    due = [
        t.name
        for t in before.tasks
        if t.name in builder.nodes
        and t.path[:1] != (SEND_PATH,)  # a Send's payload is not in the snapshot
        and not t.name.startswith(ERROR_HANDLER_PREFIX)
        and t.name not in (PARTIAL_RESULT, *led)
    ]
    return list(dict.fromkeys(due))


_KEEP = object()  # payload=: the Send branch's own payload, as it was sent


def _with_payload(
    steps: list[Mapping[str, Any]], payload: Any, thread: str
) -> list[Mapping[str, Any]]:
    """The steps to re-run, the failed `Send` branch given ``payload`` instead of
    the payload it was sent (``_KEEP``: as sent)."""
    if payload is _KEEP:
        return steps
    sends = [f for f in steps if "send" in f]
    if len(steps) != 1 or len(sends) != 1:
        paths = ", ".join(repr(f.get("path")) for f in steps)
        raise ConfigError(
            f"thread {thread!r}: payload= replaces the payload of one failed Send branch; "
            f"the steps to re-run are {paths or 'none'}"
            + ("" if sends else " (none of them a Send branch)")
            + ": name the branch with step='node[i]'"
        )
    return [{**steps[0], "send": payload}]


def _retry_command(
    steps: list[Mapping[str, Any]], update: Mapping[str, Any] | None, due: list[str]
) -> Command[Any]:
    gotos: list[Any] = [Send(f["node"], f["send"]) if "send" in f else f["node"] for f in steps]
    gotos += due
    reset: dict[str, Any] = {
        "status": "running",
        "partial_output": None,
        "recovery_suggestions": [],
        "clear": [f["path"] for f in steps if f.get("path")],
        # The recovery's time, told before the steps re-run: the saver is
        # handed this write beside them, on a thread of its own.
        "cleared_at": time.time(),
    }
    return Command(goto=gotos, update={**(update or {}), "resilience": reset})


def _retry_keys(steps: list[Mapping[str, Any]], head_step: Any, ns: str) -> dict[str, Any]:
    """The configurable keys for re-running failed steps: a failed step's side
    effects keep their keys, a failed `Send` branch re-runs as its own next try."""
    keys = retried_sends(steps, head_step, ns)
    tasks = [f for f in steps if f.get("task")]
    if len(tasks) == 1:  # several branches of one node: each keys its effects anew
        keys[EFFECT_SCOPE_KEY] = {"node": tasks[0]["node"], "task": tasks[0]["task"]}
    return keys


def _retry_config(
    config: RunnableConfig, steps: list[Mapping[str, Any]], head: StateSnapshot
) -> RunnableConfig:
    """The config for re-running ``steps`` from the thread's ``head``."""
    configurable = config.get("configurable") or {}
    ns = str(configurable.get("checkpoint_ns") or "")
    keys = _retry_keys(steps, (head.metadata or {}).get("step"), ns)
    return {**config, "configurable": {**configurable, **keys}} if keys else config


_BRANCH = re.compile(r"\[(\d+)\](?:#\d+)?$")


def retried_sends(steps: list[Mapping[str, Any]], head_step: Any, ns: str = "") -> dict[str, Any]:
    """The configurable key under which the failed `Send` branches re-run as
    their own next tries (``work[2]``, not the re-run's ``work[0]``): each
    branch's node and index, in the order `_retry_command` sends them, at the
    step after the head's (``head_step``), in the graph at namespace ``ns``
    (none: no branch, or the head's step unknown)."""
    sends = [f for f in steps if "send" in f]
    if not sends or not isinstance(head_step, int):
        return {}
    branches = []
    for f in sends:
        found = _BRANCH.search(str(f.get("path") or ""))
        if found is None:  # not named as a branch: numbered as LangGraph numbers it
            return {}
        branches.append([str(f["node"]), int(found.group(1))])
    return {RETRIED_SENDS_KEY: {"step": head_step + 1, "ns": ns, "sends": branches}}


def _inner_retry(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    config: RunnableConfig,
    steps: list[Mapping[str, Any]],
) -> tuple[CompiledStateGraph[Any, Any, Any, Any], RunnableConfig, str] | None:
    """A step that failed inside a subgraph node, to be re-run in the subgraph's
    own namespace, where its completed steps are checkpointed: (the subgraph
    with the parent's saver, its config as its parent's task gave it, the
    parent's node), or None."""
    if len(steps) != 1 or not graph.checkpointer:
        return None
    failed = steps[0]
    path, task = str(failed.get("path") or ""), str(failed.get("task") or "")
    sub = getattr(graph.builder, "_actions", {}).get(failed.get("node"))
    if "/" not in path or "|" not in task or not isinstance(sub, CompiledStateGraph):
        return None
    namespace, task_id = task.rsplit("|", 1)  # the subgraph node's task: where it ran
    conf = {**(config.get("configurable") or {}), **nested_task(namespace, task_id)}
    inner = sub.copy(update={"checkpointer": graph.checkpointer})
    return inner, {**config, "configurable": conf}, str(failed["node"])


def _stopped_again(out: Any) -> bool:
    log = out.get("resilience") if isinstance(out, Mapping) else None
    return isinstance(log, Mapping) and log.get("status") == "partial_complete"


def _inner_done(out: Mapping[str, Any], steps: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The parent's update once its subgraph node finished on retry: the
    subgraph's output (as LangGraph applies a subgraph node's), and the run log
    going on without the failure."""
    reset = {
        "status": "running",
        "partial_output": None,
        "recovery_suggestions": [],
        "clear": [f["path"] for f in steps if f.get("path")],
    }
    return {**{k: v for k, v in out.items() if k != "resilience"}, "resilience": reset}


def _going_on(config: RunnableConfig) -> RunnableConfig:
    """The parent's config to go on from its subgraph node once the subgraph's
    failed step was re-run: part of this `retry_failed`, not a resume after a
    crash (`_lifecycle.note_resume` counts none)."""
    return {
        **config,
        "configurable": {**(config.get("configurable") or {}), RETRY_FAILED_KEY: True},
    }


class RetryPlan(NamedTuple):
    """What `retry_failed` would run, for a caller that runs it elsewhere (the
    Agent Server's run API): the steps, the `Command`, and the keys to add to
    the run's ``configurable`` (the failed step's effects keep their keys)."""

    steps: list[Mapping[str, Any]]
    command: Command[Any]
    configurable: dict[str, Any]


def retry_plan(
    values: Mapping[str, Any],
    thread_id: str,
    *,
    update: Mapping[str, Any] | None = None,
    step: str | None = None,
    due: Sequence[str] = (),
    head_step: int | None = None,
) -> RetryPlan:
    """`retry_failed`'s run, from the thread's state ``values``, without running it.

    A step that failed inside a subgraph node is not planned here: it re-runs
    in the subgraph's own namespace, which only `retry_failed` reaches.
    ``due``: nodes that were due beside the failed step when the run stopped
    short and that the re-run steps do not lead to (`not_run`, which needs the
    compiled graph); without them only the failed steps and what their edges
    lead to run. ``head_step``: the step of the thread's head checkpoint (its
    metadata's ``step``), so that a failed `Send` branch re-runs as its own next
    try (``work[2]``); without it the re-run is recorded as LangGraph numbers it.

    Raises:
        RunStateError: nothing to retry, or the step failed inside a subgraph.
    """
    steps = _to_retry(values, thread_id, step)
    nested = [str(f.get("path")) for f in steps if "/" in str(f.get("path") or "")]
    if nested:
        raise RunStateError(
            f"thread {thread_id!r}: step {nested[0]!r} failed inside a subgraph; re-run it "
            "with retry_failed(graph, config) on the compiled graph, which re-enters "
            "the subgraph at its own checkpoint"
        )
    scoped = _retry_keys(steps, head_step, "")
    return RetryPlan(
        steps=steps, command=_retry_command(steps, update, list(due)), configurable=scoped
    )


def _is_entrypoint(graph: Any) -> bool:
    """Whether ``graph`` is an ``@entrypoint`` (a `Pregel` no builder made)."""
    return isinstance(graph, Pregel) and not isinstance(graph, CompiledStateGraph)


def _entrypoint_retry(
    head: StateSnapshot, thread: str, update: Mapping[str, Any] | None
) -> list[str]:
    """The failed tasks an entrypoint's resume re-runs (its finished tasks are
    handed their results by LangGraph), or why there is nothing to re-run.

    Raises:
        ConfigError: ``update=`` (an entrypoint's state is its input and its tasks').
        RunStateError: the entrypoint did not stop at a failed task.
    """
    if update is not None:
        raise ConfigError(
            "retry_failed(update=...) corrects a graph's state; an @entrypoint's state is "
            "its input and its tasks' results: fix the cause, then retry_failed(entrypoint, "
            "config) without update="
        )
    failed = [t.name for t in head.tasks if t.error is not None]
    if not failed:
        raise RunStateError(
            f"thread {thread!r}: the entrypoint did not stop at a failed task, so there is "
            "nothing to retry (a run that ended is not re-run; invoke it with a new input)"
        )
    return failed


def _require_compiled(graph: Any) -> None:
    if not isinstance(graph, CompiledStateGraph):
        raise ConfigError(
            f"retry_failed needs the compiled graph, got {type(graph).__name__}: pass "
            "builder.compile(checkpointer=...) (the graph the run was invoked on)"
        )


def _thread_of(config: RunnableConfig) -> str:
    thread = (config.get("configurable") or {}).get("thread_id") if config else None
    if thread is None:
        raise ConfigError(
            "retry_failed needs the thread's config, e.g. "
            '{"configurable": {"thread_id": "job-42"}}'
        )
    return str(thread)


def keeps_run_log(values: Any) -> bool:
    """Whether the thread's state is a run log of its graph's own (one that
    numbers its runs); a plain parent has none, or one a resilient graph
    nested in it handed up with its output (its schema a `ResilientState`)."""
    log = values.get("resilience") if isinstance(values, Mapping) else None
    return isinstance(log, Mapping) and log.get("run") is not None


def _ledgered(graph: Any) -> bool:
    """Whether ``graph``'s saver keeps a run ledger (its runs' rows)."""
    return isinstance(graph.checkpointer, (RunLedger, AsyncRunLedger))


def _retry_parent(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    config: RunnableConfig,
    thread: str,
    update: Mapping[str, Any] | None,
    step: str | None,
    payload_given: bool,
) -> Any:
    """A plain parent's failed agent call, re-run from a copy of the checkpoint
    it began at (`_retry_parent`)."""
    _parent.refuse_options(thread, update, payload_given)
    history = graph.checkpointer.history  # type: ignore[union-attr]
    rows = history.run_rows(thread, limit=1)
    failed = _parent.failed_run(thread, rows, step)
    at = _parent.fork_point(thread, graph.get_state_history(config), failed.node, failed.since)
    fork = graph.update_state(at.config, None, as_node=_parent.COPY)
    history.reopen_run(
        thread, failed.run, str(fork["configurable"]["checkpoint_id"]), [failed.path]
    )
    recovery_event("retry_failed", thread, [failed.path], graph.name)
    try:
        return graph.invoke(None, _parent.parent_retry_config(config, fork))
    except Exception as exc:  # no driver of ours ends the reopened run: this call does
        _closing.failed(graph, None, config, None, exc, run=failed.run)
        raise


async def _aretry_parent(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    config: RunnableConfig,
    thread: str,
    update: Mapping[str, Any] | None,
    step: str | None,
    payload_given: bool,
) -> Any:
    """Async twin of `_retry_parent`."""
    _parent.refuse_options(thread, update, payload_given)
    history = graph.checkpointer.history  # type: ignore[union-attr]
    rows = await history.arun_rows(thread, limit=1)
    failed = _parent.failed_run(thread, rows, step)
    snapshots = [s async for s in graph.aget_state_history(config)]
    at = _parent.fork_point(thread, snapshots, failed.node, failed.since)
    fork = await graph.aupdate_state(at.config, None, as_node=_parent.COPY)
    await history.areopen_run(
        thread, failed.run, str(fork["configurable"]["checkpoint_id"]), [failed.path]
    )
    recovery_event("retry_failed", thread, [failed.path], graph.name)
    try:
        return await graph.ainvoke(None, _parent.parent_retry_config(config, fork))
    except Exception as exc:  # no driver of ours ends the reopened run: this call does
        await _closing.afailed(graph, None, config, None, exc, run=failed.run)
        raise


def retry_failed(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    config: RunnableConfig,
    *,
    update: Mapping[str, Any] | None = None,
    step: str | None = None,
    payload: Any = _KEEP,
) -> dict[str, Any] | Any:
    """Re-run the step that ended a run with a partial result, and go on from there.

    Completed steps are not run again: their results are in the state. Pass
    ``update`` to correct the state first (the fix for a PERMANENT failure).
    Every step that failed for good is re-run (each failed `Send` branch with
    its own payload); ``step=`` names one failed or degraded step's path
    (``state["resilience"]["degraded_steps"]``) to re-run instead. A failed
    `Send` branch re-runs with the payload it was sent, kept as it was;
    ``payload`` gives it a corrected one (``step=`` names the branch when
    several steps failed).

    Raises:
        RunStateError: the thread did not end with a partial result.
        ConfigError: ``payload`` for steps that are not one `Send` branch.

    Example:
        >>> out = retry_failed(graph, config, update={"query": "fixed"})  # doctest: +SKIP

    An ``@entrypoint`` whose task failed for good (a `task` under a policy)
    re-runs that task; its finished tasks are not called again.
    """
    thread = _thread_of(config)
    if _is_entrypoint(graph):
        failed = _entrypoint_retry(graph.get_state(config), thread, update)
        recovery_event("retry_failed", thread, failed, graph.name)
        return graph.invoke(None, _going_on(config))
    _require_compiled(graph)
    head = graph.get_state(config)
    if not keeps_run_log(head.values) and _ledgered(graph):
        return _retry_parent(graph, config, thread, update, step, payload is not _KEEP)
    steps = _with_payload(_to_retry(head.values, thread, step), payload, thread)
    recovery_event("retry_failed", thread, [str(f.get("path")) for f in steps], graph.name)
    inner = _inner_retry(graph, config, steps)
    if inner is not None:  # re-enter the subgraph at its failed step
        sub, sub_config, node = inner
        out = retry_failed(sub, sub_config, update=update)
        if _stopped_again(out):
            return graph.get_state(config).values
        graph.update_state(config, _inner_done(out, steps), as_node=node)
        return graph.invoke(None, _going_on(config))
    before = graph.get_state(head.parent_config) if head.parent_config else None
    command = _retry_command(steps, update, not_run(graph, before, steps))
    return graph.invoke(command, _retry_config(config, steps, head))


async def aretry_failed(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    config: RunnableConfig,
    *,
    update: Mapping[str, Any] | None = None,
    step: str | None = None,
    payload: Any = _KEEP,
) -> dict[str, Any] | Any:
    """Async twin of `retry_failed`."""
    thread = _thread_of(config)
    if _is_entrypoint(graph):
        failed = _entrypoint_retry(await graph.aget_state(config), thread, update)
        recovery_event("retry_failed", thread, failed, graph.name)
        return await graph.ainvoke(None, _going_on(config))
    _require_compiled(graph)
    head = await graph.aget_state(config)
    if not keeps_run_log(head.values) and _ledgered(graph):
        return await _aretry_parent(graph, config, thread, update, step, payload is not _KEEP)
    steps = _with_payload(_to_retry(head.values, thread, step), payload, thread)
    recovery_event("retry_failed", thread, [str(f.get("path")) for f in steps], graph.name)
    inner = _inner_retry(graph, config, steps)
    if inner is not None:  # re-enter the subgraph at its failed step
        sub, sub_config, node = inner
        out = await aretry_failed(sub, sub_config, update=update)
        if _stopped_again(out):
            return (await graph.aget_state(config)).values
        await graph.aupdate_state(config, _inner_done(out, steps), as_node=node)
        return await graph.ainvoke(None, _going_on(config))
    before = await graph.aget_state(head.parent_config) if head.parent_config else None
    command = _retry_command(steps, update, not_run(graph, before, steps))
    return await graph.ainvoke(command, _retry_config(config, steps, head))
