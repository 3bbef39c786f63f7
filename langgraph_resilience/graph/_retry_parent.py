"""`retry_failed` on a graph that keeps no run log of its own: a plain
``StateGraph`` parent (``create_supervisor``'s, ``create_swarm``'s) whose
nested agent ended short while the parent went on past it.

Its run is the saver's (`checkpoint.runlog._run_log.ledger_of_put`): the run's
row names the failed step, led by the parent's node that ran the agent
(``mailer/tools/send_email``). The failed agent call is re-run from the latest
checkpoint of that run whose next task is that node, copied first (LangGraph's
``as_node="__copy__"``): the copy's tasks have new ids, so the agent starts
afresh in a namespace of its own (the failed call's namespace still holds the
agent's ended state) on the state as it was before the failed call; what the
parent did after it (a supervisor answering on the failure) is left behind on
the old branch. The run's row is reopened (running, its failed step cleared, a
``retry_failed`` recovery naming the step), then ends as its steps do: a
second failure ends it ``partial_complete`` again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from langchain_core.runnables import RunnableConfig

from langgraph_resilience._keys import RETRY_FAILED_KEY
from langgraph_resilience.checkpoint.runlog._run_log_reads import RunLogRecord
from langgraph_resilience.errors import ConfigError, RunStateError

__all__ = [
    "Checkpointed",
    "FailedRun",
    "failed_run",
    "fork_point",
    "parent_retry_config",
    "refuse_options",
]

COPY = "__copy__"  # LangGraph's `update_state` node name that copies a checkpoint


def refuse_options(thread: str, update: Any, payload_given: bool) -> None:
    """A plain parent's retry re-runs its failed agent call as it was called.

    Raises:
        ConfigError: ``update=`` or ``payload=`` given.
    """
    if update is not None or payload_given:
        raise ConfigError(
            f"thread {thread!r}: the graph keeps no run log (a plain StateGraph), so "
            "retry_failed re-runs its failed agent call on the state it was called with; "
            "update= and payload= are for a ResilientStateGraph. Fix the cause (a tool, a "
            "service), then call retry_failed(graph, config) without them"
        )


class FailedRun(NamedTuple):
    """The thread's latest run that ended short, as a retry re-runs it."""

    run: int
    path: str  # the failed step's path (``mailer/tools/send_email``)
    node: str  # the parent's node it starts with (``mailer``)
    since: str | None  # the run's input checkpoint's id


def failed_run(thread: str, rows: Sequence[RunLogRecord], step: str | None) -> FailedRun:
    """The thread's latest run (``rows``: its newest run row, if any), if it ended short.

    Raises:
        RunStateError: no run, or its latest did not end ``partial_complete``
            naming a failed step (or not ``step``).
    """
    row = rows[0] if rows else None
    if row is None:
        raise RunStateError(
            f"thread {thread!r}: the graph keeps no run log and the saver holds no run "
            "of the thread (a saver without a run ledger, or no run yet), so there is "
            "no failed step to retry"
        )
    if row.status != "partial_complete" or not row.failed_step:
        raise RunStateError(
            f"thread {thread!r} has no failed step to retry (run {row.run}, status: "
            f"{row.status!r}); retry_failed is for a run that ended with a partial result"
        )
    if step is not None and step != row.failed_step:
        raise RunStateError(
            f"thread {thread!r} has no failed step {step!r} in its current run; steps "
            f"that can be re-run: {row.failed_step!r}"
        )
    return FailedRun(row.run, row.failed_step, top_node(row.failed_step), row.checkpoint_id)


def top_node(path: str) -> str:
    """The parent's node a nested step path starts with (``mailer/tools/x`` -> ``mailer``)."""
    return path.split("/", 1)[0].split("#", 1)[0].split("[", 1)[0]


class Checkpointed(Protocol):
    """A checkpoint of the thread's history, as `fork_point` reads it: a
    ``StateSnapshot``, or the Agent Server's thread state (its ``checkpoint``)."""

    @property
    def config(self) -> RunnableConfig: ...

    @property
    def next(self) -> tuple[str, ...]: ...


C = TypeVar("C", bound=Checkpointed)


def fork_point(thread: str, history: Iterable[C], node: str, since: str | None) -> C:
    """The latest checkpoint of the run (``since``: its input checkpoint's id)
    whose next task is ``node``: where the failed agent call began (``history``
    newest first, read no further back than ``since``).

    Raises:
        RunStateError: the run has no such checkpoint.
    """
    for snapshot in history:  # newest first
        at = str((snapshot.config.get("configurable") or {}).get("checkpoint_id") or "")
        if since is not None and at < since:
            break
        if node in snapshot.next:
            return snapshot
    raise RunStateError(
        f"thread {thread!r}: no checkpoint of the run has node {node!r} (the failed "
        "step's) to run next, so retry_failed cannot re-run it (its checkpoints were "
        "pruned or archived?); invoke the turn again"
    )


def parent_retry_config(config: RunnableConfig, fork: RunnableConfig) -> RunnableConfig:
    """The config that goes on from the fork: the caller's, at the copy, marked
    as `retry_failed`'s (not a resume after a crash)."""
    at: Mapping[str, Any] = fork.get("configurable") or {}
    conf = {**(config.get("configurable") or {}), **at, RETRY_FAILED_KEY: True}
    return {**config, "configurable": conf}
