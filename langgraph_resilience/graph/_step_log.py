"""The run-log entry of one step: its path, its record, what a nested run
log (a subgraph's, or a graph invoked inside the node) brings, whether the
run has stopped short, and the log line of a failed try.

A completed step's record that changes nothing else in the run log is handed
to the saver by the node's wrapper (`_node`, the invoke's `RunScope`); any
other rides in the node's own run-log write (``{"resilience": {"step": ...}}``).
Either way the saver stores it as the step's row with the task's writes, and
the state keeps none of it. A top-level step's path counts its loop iteration
in the invoke's tally (`_tally`); a nested step's, in its graph's run log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

from langgraph.types import Command

import langgraph_resilience.state as run_log
from langgraph_resilience._engine import Action, Decision
from langgraph_resilience._keys import GRAPH_KEY
from langgraph_resilience.budget import used
from langgraph_resilience.checkpoint import AttemptRecord
from langgraph_resilience.checkpoint.runlog._scope import RunScope, Tally
from langgraph_resilience.graph._tally import tally_of
from langgraph_resilience.graph._task import TaskContext
from langgraph_resilience.telemetry._emit import emit

__all__ = [
    "NESTED_STOPS",
    "SubgraphStopped",
    "log_gave_up",
    "log_of",
    "log_try",
    "log_update",
    "nested_log",
    "nested_stop",
    "not_run",
    "step_ids",
    "stopped",
    "step_path",
    "with_log",
]


def step_path(
    name: str,
    task: TaskContext,
    log: Mapping[str, Any],
    lean: tuple[RunScope, Tally] | None = None,
) -> str:
    """The step's path in its run: subgraph path and node, the `Send` branch,
    and the loop iteration from the second on (``research/fetch``, ``work[2]``,
    ``review#3``), counted in the invoke's tally at the top of a run
    (`_tally.tally_of`, ``lean`` if known), else in the run log ``log``."""
    base = _base(name, task)
    if lean is None:
        lean = tally_of(task, log)
    counts = lean[1].counts if lean is not None else log.get("counts")
    seen = int(counts.get(base, 0)) if counts else 0
    return f"{base}#{seen + 1}" if seen else base


def _base(name: str, task: TaskContext) -> str:
    base = task.graph_path + name
    index = task.send_index
    return base if index is None else f"{base}[{index}]"


def log_of(state: Any) -> Mapping[str, Any]:
    """The run log in a state (empty if none)."""
    if type(state) is dict:  # the usual state: no ABC check
        known = state.get("resilience")
        if type(known) is dict:
            return known
    known = state.get("resilience") if isinstance(state, Mapping) else None
    return known if isinstance(known, Mapping) else _NONE


_NONE: Mapping[str, Any] = {}


def log_update(
    name: str,
    terminal: bool,
    task: TaskContext,
    state: Any,
    status: str,
    earlier: Sequence[AttemptRecord],
    output: Any,
    started_at: float,
) -> dict[str, Any]:
    """The run-log update of a step that ran: its record, and the run's status.

    At the top of an invoke's run (`_tally.tally_of`) the step's execution is
    counted in the run's tally, and the update is marked ``tallied``: the run
    log keeps no count of it."""
    known = log_of(state)
    lean = tally_of(task, known)
    path = step_path(name, task, known, lean)
    step: dict[str, Any] = {
        "run": int(known.get("run") or 1),
        "path": path,
        "node": name,
        "status": status,
        "attempts": len(earlier) + (1 if status == "completed" else 0),
        "kinds": [r.kind for r in earlier if r.kind] if earlier else [],
        "started_at": started_at,
        "ended_at": time.time(),
        "summary": run_log.summarize(output) if status == "completed" else "",
    }
    if (fence := task.fence) is not None:  # it ran under a Worker's lease (the report names it)
        step["run_id"] = fence.run_id
        if (worker := task.worker) is not None:
            step["worker"] = worker
    update: dict[str, Any] = {"step": step}
    if lean is not None:
        lean[0].count(lean[1], path.partition("#")[0])
        update["tallied"] = True
    if status != "completed":
        update["degraded_steps"] = [path]
    if terminal:
        update["status"] = "success"
    elif not known.get("status"):
        update["status"] = "running"
    return update


_NO_USAGE: dict[str, float] = {}


def stopped(state: Any) -> bool:
    """Whether the run in ``state`` has stopped short: a critical step failed for
    good (its error handler wrote ``partial_complete``), so no step after it runs."""
    return log_of(state).get("status") == "partial_complete"


def not_run(name: str, task: TaskContext, state: Any) -> None:
    """The event of a step that was due and did not run, because the run had
    stopped short (INFO: the partial result says why)."""
    known = log_of(state)
    failed = [str(f.get("path")) for f in known.get("failed_steps") or () if f.get("path")]
    path = step_path(name, task, known)
    emit(
        "not_run",
        logging.INFO,
        "step %s not run: the run stopped short at %s",
        path,
        ", ".join(failed) or "a failed step",
        **step_ids(name, task, known, path),
        failed_paths=failed,
    )


class SubgraphStopped(Exception):
    """A subgraph node's graph ended with a partial result: the node failed."""

    def __init__(self, failed: Mapping[str, Any]) -> None:
        super().__init__(failed.get("message") or "the subgraph stopped short")
        self.failed = dict(failed)


#: The failed steps of the resilient graphs that a try invoked (inside the node
#: function: the supervisor pattern) and that ended short, collected by the
#: driver around each try: the try failed, as a subgraph node's does.
NESTED_STOPS: ContextVar[list[Mapping[str, Any]] | None] = ContextVar(
    "langgraph_resilience_nested_stops", default=None
)


def nested_stop(output: Any, under: str = "") -> None:
    """Tell the try that invoked a resilient graph that it ended short (its
    ``output`` reads ``partial_complete``): the try fails naming its step.

    ``under``: the graph path the run's own step paths leave out (an agent's
    read ``tools/send_email`` wherever it runs; invoked in node ``mail`` of
    a swarm's ``bob``, its step is ``mail/bob/tools/send_email``), as a
    resilient graph's step paths carry it."""
    stops = NESTED_STOPS.get()
    log = output.get("resilience") if isinstance(output, Mapping) else None
    if stops is None or not isinstance(log, Mapping) or log.get("status") != "partial_complete":
        return
    found = dict(_inner_failure(log))
    path = found.get("path")
    if under and isinstance(path, str) and not path.startswith(under):
        found["path"] = under + path
    stops.append(found)


def nested_log(output: Any, state: Any) -> tuple[dict[str, float], Mapping[str, Any] | None]:
    """What a node's output carries from a nested run log (a subgraph's, which
    started from this state's log): the usage it added (seconds aside: this
    node's own clock counts them), and its failed step if it stopped short."""
    if type(output) is dict:  # the usual output: no ABC check
        inner = output.get("resilience")
        if inner is None:
            return _NO_USAGE, None
    else:
        inner = output.get("resilience") if isinstance(output, Mapping) else None
    if not isinstance(inner, Mapping):
        return _NO_USAGE, None
    before = used(state)
    delta = {
        k: v - before.get(k, 0)
        for k, v in (inner.get("usage") or {}).items()
        if k != "seconds" and v > before.get(k, 0)
    }
    return delta, _inner_failure(inner) if inner.get("status") == "partial_complete" else None


def _inner_failure(log: Mapping[str, Any]) -> Mapping[str, Any]:
    """The failed step of a nested run log that stopped short, with what it
    suggests doing (``suggestions``): its parent's failure is that step's."""
    failed = log.get("failed_step")
    found = dict(failed) if isinstance(failed, Mapping) else {"message": "it stopped short"}
    suggestions = log.get("recovery_suggestions")
    if suggestions:
        found["suggestions"] = [str(s) for s in suggestions]
    return found


_VERDICTS = {
    Action.RETRY: "retrying in {delay:.2f}s",
    Action.PAUSE: "pausing the run until its budget is topped up",
    Action.WAIT: "releasing the run to its workers for {delay:.0f}s (the service's Retry-After)",
    Action.DEGRADE: "skipping the step as degraded",
    Action.FALLBACK: "taking the fallback",
    Action.PARTIAL: "giving up: the run ends with a partial result",
}


def log_try(
    name: str,
    task: TaskContext,
    state: Any,
    record: AttemptRecord,
    decision: Decision,
    *,
    step: str | None = None,
) -> None:
    """One event per failed try and what comes of it (`_telemetry.emit`: a log
    line, a custom stream event, OTel counts), with the step's ids as
    structured extras (``thread_id``, ``run_id``, ``run``, ``graph``, ``path``,
    ``node``, ``attempt``, ``kind``, ``action``, ``wait``, ``error``).

    ``step``: the name the step's path is made of when it is not the node's
    (an agent's tool call: node ``tool:search``, path ``tools/search[0]``, as
    its step record and `run_report` name it).

    Level: WARNING for a try that is retried (or waited on, or paused on),
    ERROR for the try after which the run ends with a partial result, WARNING
    for a fallback or a degraded step (their own events say so too).
    """
    level = logging.WARNING if decision.action is not Action.PARTIAL else logging.ERROR
    known = log_of(state)
    path = step_path(step or name, task, known)
    action = _VERDICTS[decision.action].format(delay=decision.wait or 0.0)
    emit(
        "try_failed",
        level,
        "step %s try %d failed (%s, %s: %s); %s",
        path,
        record.attempt,
        record.kind,
        record.error_type,
        record.reason,
        action,
        **step_ids(name, task, known, path),
        attempt=record.attempt,
        kind=record.kind,
        action=decision.action.value,
        wait=decision.wait,
        error=f"{record.error_type}: {record.reason}",
    )


def step_ids(name: str, task: TaskContext, known: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The ids an event of a step carries: thread, worker run, run-log run,
    graph, path and node."""
    fence = task.fence
    return {
        "thread_id": task.thread_id,
        "run_id": fence.run_id if fence is not None else None,
        "run": int(known.get("run") or 1),
        "graph": (task.config.get("configurable") or {}).get(GRAPH_KEY),
        "path": path,
        "node": name,
    }


def log_gave_up(
    name: str,
    task: TaskContext,
    state: Any,
    path: str,
    kind: str,
    attempts: int,
    fallback: str | None,
) -> None:
    """The event of a step that gave up and did not end the run (WARNING):
    ``fallback`` (it goes to that node) or ``degraded`` (skipped, the run goes on)."""
    ids = step_ids(name, task, log_of(state), path)
    if fallback is not None:
        message = "step %s gave up after %d tries (%s); taking its fallback %s"
        emit(
            "fallback",
            logging.WARNING,
            message,
            path,
            attempts,
            kind,
            fallback,
            **ids,
            kind=kind,
            attempts=attempts,
            fallback=fallback,
        )
    else:
        message = "step %s degraded after %d tries (%s): skipped, the run goes on without it"
        emit(
            "degraded",
            logging.WARNING,
            message,
            path,
            attempts,
            kind,
            **ids,
            kind=kind,
            attempts=attempts,
        )


def with_log(output: Any, log: dict[str, Any]) -> Any:
    """The node's output with the run-log update added."""
    if output is None:
        return {"resilience": log}
    if isinstance(output, dict):  # a nested run log (a subgraph's) gives way to ours
        return {**output, "resilience": log}
    if isinstance(output, Command):
        update = output.update
        if update is None:
            return replace(output, update={"resilience": log})
        if isinstance(update, dict):
            return replace(output, update=with_log(update, log))
        return replace(output, update=[*update, ("resilience", log)])
    return output  # another state type: left as LangGraph would have it
