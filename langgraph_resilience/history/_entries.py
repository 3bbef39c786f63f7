"""The entries of a `RunReport`: steps by task path, the timeline of tries and
recoveries, side effects, and what to do next (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_resilience.checkpoint import EffectRecord
from langgraph_resilience.checkpoint.runlog._events import StoredAttempt
from langgraph_resilience.graph._step_log import SubgraphStopped
from langgraph_resilience.history._ledger_runs import Recovery, ThreadRun, step_tasks

__all__ = [
    "EffectEntry",
    "StepEntry",
    "TryEntry",
    "effect_entries",
    "step_entries",
    "suggestions_for",
    "timeline_of",
]


@dataclass(frozen=True, kw_only=True)
class StepEntry:
    """One task path of a run: how it ended, after how many tries, when.

    ``runs``: how many times it ran to an end (more than one: a recovery or
    `retry_failed` ran it again); ``redone``: of those, how many a recovery
    caused.
    """

    path: str
    node: str
    status: str
    attempts: int
    kinds: tuple[str, ...] = ()
    started_at: float | None = None
    ended_at: float | None = None
    duration: float | None = None
    summary: str = ""
    runs: int = 1
    redone: int = 0


@dataclass(frozen=True, kw_only=True)
class TryEntry:
    """One event of the timeline.

    ``event``: ``failed`` (a try that failed; ``kind``, ``error`` and the
    ``wait`` before the next), a step's end (``completed``, ``degraded``,
    ``fallback``, ``gave_up``: failed for good) or ``recovery`` (``kind`` says
    which).
    ``worker``: who ran it, when known (the worker or process of the latest
    recovery before it).
    """

    at: float | None
    event: str
    path: str = ""
    node: str = ""
    attempt: int | None = None
    kind: str | None = None
    error: str | None = None
    wait: float | None = None
    worker: str | None = None

    def describe(self) -> str:
        who = f" [{self.worker}]" if self.worker else ""
        if self.event == "recovery":
            return f"recovery: {self.kind}{who}" + (f" ({self.error})" if self.error else "")
        if self.event == "failed" and self.attempt is not None:
            wait = f"; waits {self.wait:.2f}s" if self.wait else ""
            return f"{self.path} try {self.attempt} failed ({self.kind}: {self.error}){wait}{who}"
        tries = f" after {self.attempt} tries" if self.attempt and self.attempt > 1 else ""
        return f"{self.path} {self.event.replace('_', ' ')}{tries}{who}"


@dataclass(frozen=True, kw_only=True)
class EffectEntry:
    """One side effect of the run.

    ``replayed``: a step that ran again found its outcome in the ledger and did
    not call again; ``reconciled``: its intent was made before a recovery and
    settled after it (looked up or called by the step that ran again). ``how``
    its outcome came about: ``"called"``, ``"replayed"``, ``"reconciled"`` or
    ``"reexecuted"`` (called again under the same key: the first call's outcome
    was never recorded, so the outside system may have seen it twice).
    """

    key: str
    name: str
    path: str
    status: str
    intent_at: float
    outcome_at: float | None = None
    error: str | None = None
    replayed: bool = False
    reconciled: bool = False
    how: str | None = None

    def describe(self) -> str:
        extra = f" ({self.how})" if self.how and self.how != "called" else ""
        return f"{self.name} [{self.path or '?'}] {self.status}{extra} key={self.key}"


def effect_how(e: EffectRecord, replayed: bool, reconciled: bool) -> str | None:
    """How an effect's outcome came about: as stored (`EffectRecord.how`), where
    it says more than a plain call; else as the run's recoveries show (pure)."""
    if e.how in ("reexecuted", "reconciled"):
        return e.how
    if replayed:
        return "replayed"
    if reconciled and e.how is None:  # stored before schema 2
        return "reconciled"
    return e.how or ("called" if e.status != "intent" else None)


def _redone_counts(run: ThreadRun) -> dict[int, int]:
    return {id(s): sum(s is r for rec in run.recoveries for r in rec.redone) for s in run.steps}


def step_entries(run: ThreadRun) -> tuple[StepEntry, ...]:
    """The completion map: one entry per path, its records merged in order."""
    redone = _redone_counts(run)
    by_path: dict[str, list[dict[str, Any]]] = {}
    for step in sorted(run.steps, key=lambda s: float(s.get("ended_at") or 0.0)):
        by_path.setdefault(str(step.get("path")), []).append(step)
    entries = []
    for path, records in by_path.items():
        first, last = records[0], records[-1]
        start, end = first.get("started_at"), last.get("ended_at")
        entries.append(
            StepEntry(
                path=path,
                node=str(last.get("node") or ""),
                status=str(last.get("status") or "completed"),
                attempts=sum(int(r.get("attempts") or 0) for r in records) or 1,
                kinds=tuple(str(k) for r in records for k in (r.get("kinds") or [])),
                started_at=start,
                ended_at=end,
                duration=(float(end) - float(start)) if start is not None and end else None,
                summary=str(last.get("summary") or ""),
                runs=len(records),
                redone=sum(redone[id(r)] for r in records),
            )
        )
    entries.sort(key=lambda e: e.started_at or 0.0)
    return tuple(entries)


def _worker_at(
    run: ThreadRun, step: Mapping[str, Any] | None, at: float | None, default: str | None
) -> str | None:
    """Who ran a step (or a try of ``step``) that ended at ``at``: the worker that
    took the run over last before then, else ``default``; nobody's when the
    step did not run under the Worker run's lease (a `retry_failed` or a resume
    by hand in another process)."""
    if step is None or not step.get("run_id") or step.get("run_id") != run.run_id:
        return None
    before = [
        r for r in run.recoveries if r.owner and r.at is not None and at is not None and r.at <= at
    ]
    return before[-1].owner if before else default


def _recorded_worker(run: ThreadRun, step: Mapping[str, Any]) -> str | None:
    """The worker a step's record names, if it ran under this run's lease."""
    worker = step.get("worker")
    return str(worker) if worker and step.get("run_id") == run.run_id else None


def _first_worker(run: ThreadRun) -> str | None:
    """The worker that ran the run before any takeover: named by a step record
    it stored (a step that ended before the first takeover), else the worker
    holding the run now if nobody took it over."""
    takeovers = [r.at for r in run.recoveries if r.owner and r.at is not None]
    first_takeover = min(takeovers) if takeovers else None
    for step in sorted(run.steps, key=lambda s: float(s.get("ended_at") or 0.0)):
        ended = step.get("ended_at")
        if first_takeover is not None and (ended is None or ended > first_takeover):
            break
        if (worker := _recorded_worker(run, step)) is not None:
            return worker
    return run.owner if not takeovers else None


def _step_of(run: ThreadRun, a: StoredAttempt) -> Mapping[str, Any] | None:
    """The step record a failed try belongs to: the step row of its task (or the
    row that stands for its task's tries: ``tried``), at its checkpoint."""
    for step in run.steps:
        if step.get("checkpoint_id") == a.checkpoint_id and a.task_id in step_tasks(step):
            return step
    return None


def _in_run(run: ThreadRun, checkpoint_id: str) -> bool:
    """Whether a checkpoint is one of the run's: from its input checkpoint to the
    next run's (a run with no input checkpoint known: any)."""
    if run.checkpoint_id is not None and checkpoint_id < run.checkpoint_id:
        return False
    return run.next_checkpoint is None or checkpoint_id < run.next_checkpoint


#: The error of a try whose nested graph (a subgraph node's) stopped short: the
#: node's wrapper, not a failure of its own (the inner step's tries are the failure).
_WRAPPER_ERROR = SubgraphStopped.__name__


def timeline_of(run: ThreadRun, attempts: Sequence[StoredAttempt]) -> tuple[TryEntry, ...]:
    """Failed tries (the attempts ledger), step ends and recoveries, in time order;
    a subgraph node's try that failed only because its subgraph stopped short is
    not one (the subgraph's step that failed has its own tries and end)."""
    # Before any takeover, the run's steps ran under its first worker (when known).
    owner = _first_worker(run)
    entries = []
    for a in attempts:
        if a.error_type == _WRAPPER_ERROR:
            continue  # a nested graph's stop, told by its failed step's own tries
        step = _step_of(run, a)
        if step is None and not _in_run(run, a.checkpoint_id):
            continue  # another run's try
        at = a.finished_at or a.started_at
        entries.append(
            TryEntry(
                at=at,
                event="failed",
                path=str(step.get("path")) if step is not None else a.node,
                node=a.node,
                attempt=a.attempt,
                kind=a.kind,
                error=f"{a.error_type}: {a.reason}" if a.error_type else a.reason,
                wait=a.wait,
                worker=_worker_at(run, step, at, owner),
            )
        )
    for step in run.steps:
        ended: float | None = step.get("ended_at")
        status = str(step.get("status") or "completed")
        entries.append(
            TryEntry(
                at=ended,
                event="gave_up" if status == "failed" else status,
                path=str(step.get("path")),
                node=str(step.get("node") or ""),
                attempt=int(step.get("attempts") or 1),
                worker=_recorded_worker(run, step) or _worker_at(run, step, ended, owner),
            )
        )
    for rec in run.recoveries:
        redid = ", ".join(str(s.get("path")) for s in rec.redone)
        asked = ", ".join(rec.paths)  # retry_failed: the steps it re-runs
        said = f"redid {redid}" if redid else f"re-runs {asked}" if asked else None
        entries.append(
            TryEntry(
                at=rec.at,
                event="recovery",
                kind=rec.kind,
                error=said,
                worker=rec.owner,
            )
        )
    entries.sort(key=lambda e: (e.at or 0.0, e.event != "recovery"))
    return tuple(entries)


def _tasks(step: dict[str, Any], rec: Recovery, run: ThreadRun) -> set[str]:
    """The tasks whose effects a redone step meets: its own (task ids are unique),
    and for a `retry_failed` the failed task whose effect keys it keeps (the
    task the path's failed row stands for)."""
    tasks = {str(step.get("task_id"))}
    if rec.kind == "retry_failed":
        for f in run.steps:
            if f.get("path") == step.get("path") and f.get("status") == "failed":
                tasks |= step_tasks(f)
    return tasks


def effect_entries(run: ThreadRun, effects: Sequence[EffectRecord]) -> tuple[EffectEntry, ...]:
    """The run's effects (made while it ran), each marked replayed or reconciled."""
    paths = {t: str(s.get("path")) for s in run.steps for t in step_tasks(s)}
    entries = []
    for e in effects:
        if e.task_id not in paths and not _in_run(run, e.checkpoint_id):
            continue  # another run's effect
        task = e.task_id
        replayed = reconciled = False
        for rec in run.recoveries:
            for step in rec.redone:
                if task not in _tasks(step, rec, run):
                    continue
                end = float(step.get("ended_at") or 0.0)
                if e.status == "done" and e.outcome_at is not None and e.outcome_at < end:
                    replayed = True
                elif rec.at is not None and e.intent_at < rec.at and (e.outcome_at or 0) >= rec.at:
                    reconciled = True
        how = effect_how(e, replayed, reconciled)
        replayed, reconciled = how == "replayed", how == "reconciled"
        entries.append(
            EffectEntry(
                key=e.idempotency_key,
                name=e.name,
                path=paths.get(task, ""),
                status=e.status,
                intent_at=e.intent_at,
                outcome_at=e.outcome_at,
                error=e.error,
                replayed=replayed,
                reconciled=reconciled,
                how=how,
            )
        )
    return tuple(entries)


def error_advice(error: str | None) -> str:
    """What to do about a run that ended ``error`` on ``error`` (``Type: message``)."""
    said = f" ({error.splitlines()[0]})" if error else ""
    if error and error.startswith("GraphRecursionError"):
        return (
            f"the run ended with an error{said}: it took more steps than its recursion "
            "limit. If the loop is meant to go on, graph.invoke(None, {**config, "
            '"recursion_limit": <more>}) goes on from its last checkpoint; if not, fix the '
            "edge that loops"
        )
    return (
        f"the run ended with an error{said}: fix its cause, then graph.invoke(None, config) "
        "goes on from its last checkpoint, re-running the step that raised"
    )


def suggestions_for(
    run: ThreadRun, stored: list[str], *, keeps_log: bool = True
) -> tuple[str, ...]:
    """What to do next: the run log's own suggestions, and the run's state
    (``keeps_log``: the thread's graph keeps a run log in its state; a plain
    ``StateGraph`` parent went on past its failed step: `retry_failed` re-runs
    that agent call from a copy of the checkpoint it began at)."""
    found = [str(s) for s in stored]
    if run.status == "partial_complete" and not found and not keeps_log:
        found.append(
            "an agent nested in the graph ended short and the graph (a plain StateGraph, "
            "such as create_supervisor's or create_swarm's) went on without it: fix the "
            "cause, then retry_failed(graph, config) re-runs the agent's call from the "
            "checkpoint it began at and goes on from there"
        )
    if run.status == "partial_complete" and not found:
        found.append(
            "the run ended with a partial result: fix the cause of the failed step, then "
            "retry_failed(graph, config) re-runs it and goes on"
        )
    elif run.status == "paused":
        found.append(
            "the run waits at an interrupt: resume it with graph.invoke(Command(resume=...), "
            "config), or Worker.resume(run_id, value) for a Worker run"
        )
    elif run.status == "running" and not run.owner:
        found.append(
            "the run stopped with steps left and nobody runs it (its process died?): "
            "graph.invoke(None, config) resumes it from its last checkpoint"
        )
    elif run.status == "error":
        found.append(error_advice(run.error))
    return tuple(found)
