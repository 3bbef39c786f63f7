"""A thread's runs and recoveries, read back from what the store keeps (pure).

Nothing is recorded for this on a step's happy path. The story of a thread is
in the writes of its top-level tasks, in checkpoint order:

- the input's run-log write carries ``new_run`` (a run starts, numbered);
- each step's run-log write carries its record (``step``: path, status, tries,
  start and end) and what it used (``usage``);
- the run-log writes that end a run say so (``status``: ``success``,
  ``partial_complete``); a run whose last step wrote no route onward
  (`BRANCH_PREFIX` channels, a `Send`) and left no interrupt has nothing left to do;
- a step that gave up stores its error with its route (and LangGraph an
  `ERROR_SOURCE_CHANNEL` marker beside it): its error handler goes on, so
  it is no error of the run;
- `retry_failed` writes ``clear`` (the paths it re-runs) with its command (a
  step that failed inside a subgraph: in the subgraph's namespace, where it
  re-runs, and with the parent's update that goes on from the subgraph node);
- a resume of an interrupted run writes to `RESUME_CHANNEL` beside the
  `INTERRUPT_CHANNEL` writes of the tasks that paused (a budget pause says
  ``reason: budget_exhausted``).

A nested graph's run-log writes (a subgraph node's, or those of a graph or
agent invoked inside a node: their namespace starts with the top-level task's)
belong to the run of the top-level task that ran them: their steps are that
run's, under their path; their markers and statuses are not the run's. Only
under a parent that keeps no run log (a plain ``StateGraph``) does a nested
run log tell its run's story.

The recoveries that leave no write (a `Worker`'s takeover, a resume after a
crash) are rows of ``resilience_recoveries``, each naming the checkpoint it
resumed: the steps it redid are those of that checkpoint that ended after it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_resilience._langgraph import (
    BRANCH_PREFIX,
    ERROR_CHANNEL,
    ERROR_SOURCE_CHANNEL,
    INTERRUPT_CHANNEL,
    NS_END,
    NS_SEP,
    NULL_TASK_ID,
    RESUME_CHANNEL,
    TASKS_CHANNEL,
)
from langgraph_resilience.checkpoint import RunRecord
from langgraph_resilience.checkpoint.runlog._events import RecoveryRecord
from langgraph_resilience.checkpoint.runlog._run_log import tried_task
from langgraph_resilience.checkpoint.saver._route_text import is_routed
from langgraph_resilience.history._writes import Write, checkpoint_time

__all__ = [
    "ENDED",
    "RECOVERY_KINDS",
    "Recovery",
    "ThreadRun",
    "scan_thread",
]

#: The kinds of recovery, in the order they are reported.
RECOVERY_KINDS = ("crash", "takeover", "retry_failed", "budget", "human")
#: The statuses of a run that ended.
ENDED = ("success", "partial_complete", "error", "cancelled")


@dataclass(kw_only=True)
class Recovery:
    """One recovery of a run, and what it redid.

    Attributes:
        kind: one of `RECOVERY_KINDS`.
        at: when (epoch seconds; for kinds read from writes, when the run
            went on: the first redone step's start, else the checkpoint's time).
        checkpoint_id: the checkpoint it resumed.
        redone: the step records of the executions it repeated.
        effects_replayed: effects whose recorded outcome a redone step
            replayed instead of calling again.
    """

    kind: str
    thread_id: str
    at: float | None
    run: int | None = None
    run_id: str | None = None
    owner: str | None = None
    checkpoint_id: str | None = None
    redone: list[dict[str, Any]] = field(default_factory=list)
    effects_replayed: int = 0
    paths: tuple[str, ...] = ()  # retry_failed: the paths it re-runs
    tasks: tuple[str, ...] = ()  # a resume: the tasks that had paused

    @property
    def steps_redone(self) -> int:
        return len(self.redone)

    @property
    def seconds_redone(self) -> float:
        return sum(_duration(s) for s in self.redone)

    @property
    def tokens_redone(self) -> float:
        return sum(float((s.get("usage") or {}).get("tokens") or 0) for s in self.redone)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "at": self.at,
            "run": self.run,
            "run_id": self.run_id,
            "owner": self.owner,
            "checkpoint_id": self.checkpoint_id,
            "steps_redone": self.steps_redone,
            "redone_paths": [str(s.get("path")) for s in self.redone],
            "seconds_redone": round(self.seconds_redone, 6),
            "tokens_redone": self.tokens_redone,
            "effects_replayed": self.effects_replayed,
        }


@dataclass(kw_only=True)
class ThreadRun:
    """One run of a thread, as read back from the store.

    Attributes:
        run: its number on the thread (0: a `Worker` run that never started).
        status: running, paused, success, partial_complete, error or cancelled.
        steps: its step records, oldest first (with their ``usage``).
        run_id / owner / claims / updated_at: its `Worker` run, if it had one.
    """

    thread_id: str
    run: int
    status: str = "running"
    started_at: float | None = None
    ended_at: float | None = None
    checkpoint_id: str | None = None  # its input checkpoint (its marker's)
    next_checkpoint: str | None = None  # the next run's (its own end: `_ledger_runs`)
    steps: list[dict[str, Any]] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    run_id: str | None = None
    owner: str | None = None
    claims: int = 0
    updated_at: float | None = None
    budget: tuple[str, bytes] | None = None  # a Worker run's, as stored
    paused_for: str | None = None  # why it last paused: budget or human
    # What its last step group left: routes onward, interrupts, errors.
    last_flags: tuple[bool, bool, bool] = (True, False, False)

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    @property
    def nodes(self) -> set[str]:
        return {
            str(s.get("path") or "").split("/", 1)[0].split("[", 1)[0].split("#", 1)[0]
            for s in self.steps
        }

    def last_seen(self) -> float | None:
        times = [t for t in (self.ended_at, self.updated_at, self.started_at) if t is not None]
        return max(times) if times else None


def _duration(step: Mapping[str, Any]) -> float:
    start, end = step.get("started_at"), step.get("ended_at")
    return max(0.0, float(end) - float(start)) if start is not None and end is not None else 0.0


class _Scan:
    """The state of one thread's scan."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.runs: dict[int, ThreadRun] = {}
        self.current: ThreadRun | None = None
        self.retries: dict[str, Recovery] = {}  # path -> the retry_failed re-running it
        self.task_runs: dict[str, int] = {}  # top-level task id -> its run
        self.marks: list[tuple[str, int]] = []  # (top-level checkpoint, the run then)
        self.inside: set[str] = set()  # paths a retry_failed re-runs inside a subgraph

    def run(self, number: int) -> ThreadRun:
        found = self.runs.get(number)
        if found is None:
            found = self.runs[number] = ThreadRun(thread_id=self.thread_id, run=number)
        if self.current is None or number >= self.current.run:
            self.current = found
        return found

    def new_run(self, started_at: float, checkpoint_id: str) -> None:
        run = self.run(max(self.runs, default=0) + 1)
        run.started_at, run.checkpoint_id = started_at, checkpoint_id

    def step(self, w: Write, value: Mapping[str, Any], number: int | None = None) -> ThreadRun:
        """A step record joins its run: ``number``, else the run it names."""
        step = dict(value["step"])
        if number is None:
            number = int(step.get("run") or (self.current.run if self.current else 1))
        step.update(
            run=number,
            usage=dict(value.get("usage") or {}),
            checkpoint_ns=w.ns,
            checkpoint_id=w.checkpoint_id,
            task_id=w.task_id,
            tried=tried_task(value, str(step.get("path"))),
        )
        run = self.run(number)
        run.steps.append(step)
        if step.get("ended_at") is not None:
            run.ended_at = max(run.ended_at or 0.0, float(step["ended_at"]))
        if run.started_at is None and step.get("started_at") is not None:
            run.started_at = float(step["started_at"])
        path = str(step.get("path"))
        waiting = self.retries.get(path)
        if waiting is not None and (w.ns == "" or path in self.inside):
            del self.retries[path]
            self.inside.discard(path)
            waiting.redone.append(step)
        return run

    def run_log(self, w: Write, value: Mapping[str, Any]) -> None:
        """A top-level run-log write."""
        if "new_run" in value:
            self.new_run(float(value["new_run"]), w.checkpoint_id)
        if _is_step(value):
            self.step(w, value)
        run = self.current
        if run is None:
            return
        if value.get("clear"):
            paths = tuple(str(p) for p in value["clear"])
            rec = Recovery(
                kind="retry_failed",
                thread_id=self.thread_id,
                at=checkpoint_time(w.checkpoint_id),
                run=run.run,
                checkpoint_id=w.checkpoint_id,
                paths=paths,
            )
            run.recoveries.append(rec)
            self.retries.update(dict.fromkeys(paths, rec))
        if isinstance(value.get("status"), str):
            run.status = value["status"]

    def retried_inside(self, paths: tuple[str, ...]) -> None:
        """A `retry_failed` that re-runs ``paths`` inside their subgraph (its
        parent's update, which clears them too, is read first: the writes of
        the top level come before a subgraph's): the re-run steps, in the
        subgraph, are what that recovery redid."""
        rec = next(
            (
                r
                for run in sorted(self.runs.values(), key=lambda r: r.run)
                for r in run.recoveries  # the oldest not yet matched: retries come in order
                if r.kind == "retry_failed"
                and set(paths) <= set(r.paths)
                and not r.redone
                and not set(paths) & self.inside
            ),
            None,
        )
        if rec is not None:
            self.retries.update(dict.fromkeys(paths, rec))
            self.inside.update(paths)

    def group(self, writes: Sequence[Write]) -> None:
        """The writes made on one top-level checkpoint."""
        interrupted = {w.task_id for w in writes if w.channel == INTERRUPT_CHANNEL}
        resumed = any(w.channel == RESUME_CHANNEL for w in writes)
        resume: Recovery | None = None
        for w in writes:
            if w.channel == "resilience" and isinstance(w.value, Mapping):
                self.run_log(w, w.value)
            elif w.channel == RESUME_CHANNEL and resume is None and self.current is not None:
                resume = Recovery(
                    kind="budget" if _paused_for_budget(writes) else "human",
                    thread_id=self.thread_id,
                    at=checkpoint_time(w.checkpoint_id),
                    run=self.current.run,
                    checkpoint_id=w.checkpoint_id,
                    tasks=tuple(sorted(interrupted)),
                )
                self.current.recoveries.append(resume)
        if interrupted and self.current is not None:
            self.current.paused_for = "budget" if _paused_for_budget(writes) else "human"
        if resume is not None and self.current is not None:
            resume.redone = [
                s
                for s in self.current.steps
                if s.get("checkpoint_id") == resume.checkpoint_id
                and s.get("task_id") in interrupted
                and not s.get("checkpoint_ns")
            ]
        if self.current is not None and any(w.task_id != NULL_TASK_ID for w in writes):
            # A routed error (stored with its route, or beside an error-handler
            # marker) is no error of the run: its handler goes on from it.
            handled = {w.task_id for w in writes if w.channel == ERROR_SOURCE_CHANNEL}
            errors = [w for w in writes if w.channel == ERROR_CHANNEL]
            routed = [w for w in errors if w.task_id in handled or is_routed(w.value)]
            failed = len(errors) > len(routed)  # e.g. a handler that failed in turn
            onward = (bool(routed) and not failed) or any(
                w.channel.startswith(BRANCH_PREFIX) or w.channel == TASKS_CHANNEL for w in writes
            )
            self.current.last_flags = (onward, bool(interrupted) and not resumed, failed)
        if self.current is not None and writes:
            number = self.current.run
            self.task_runs.update((w.task_id, number) for w in writes if w.task_id != NULL_TASK_ID)
            self.marks.append((writes[0].checkpoint_id, number))

    def nested(self, writes: Sequence[Write]) -> None:
        """The run-log writes of nested graphs (subgraph nodes, graphs and agents
        invoked inside a node), after the top-level ones. A nested graph is part
        of the run whose top-level task ran it: its steps join that run, under
        their namespace; its own markers and statuses are not the run's (the
        parent's node reports how it went). Only a nested run log under a parent
        that keeps none (a plain ``StateGraph``) tells its run's story itself."""
        by_task: dict[str, list[Write]] = {}
        for w in writes:
            top = w.ns.split(NS_SEP, 1)[0]
            by_task.setdefault(top.rpartition(NS_END)[2], []).append(w)
        for task_id, found in sorted(by_task.items(), key=lambda kv: _first_checkpoint(kv[1])):
            owner = self.task_runs.get(task_id) or self._run_at(_first_checkpoint(found))
            if owner is None:
                self.own_story(found)
                continue
            for w in found:
                if not isinstance(w.value, Mapping):
                    continue
                if w.value.get("clear"):  # a retry_failed re-running steps inside it
                    self.retried_inside(tuple(str(p) for p in w.value["clear"]))
                if _is_step(w.value):
                    self.step(w, w.value, owner)

    def _run_at(self, checkpoint_id: str) -> int | None:
        """The run current at the last top-level checkpoint made before this one
        (a task still in flight has no top-level write yet)."""
        at = bisect.bisect_right(self.marks, (checkpoint_id, float("inf")))
        return self.marks[at - 1][1] if at else None

    def own_story(self, writes: Sequence[Write]) -> None:
        """A nested run log under a parent that keeps none: its marker starts a
        run, its steps are that run's, its statuses end it."""
        run: ThreadRun | None = None
        for w in writes:
            value = w.value
            if not isinstance(value, Mapping):
                continue
            if "new_run" in value:
                self.new_run(float(value["new_run"]), w.checkpoint_id)
                run = self.current
            if _is_step(value):
                joined = self.step(w, value, run.run if run is not None else None)
                run = run or joined
            if run is not None and isinstance(value.get("status"), str):
                run.status = value["status"]


def _is_step(value: Mapping[str, Any]) -> bool:
    return isinstance(value.get("step"), Mapping) and "path" in value["step"]


def _first_checkpoint(writes: Sequence[Write]) -> str:
    return min(w.checkpoint_id for w in writes)


def _paused_for_budget(writes: Sequence[Write]) -> bool:
    for w in writes:
        if w.channel != INTERRUPT_CHANNEL:
            continue
        for item in w.value if isinstance(w.value, (list, tuple)) else [w.value]:
            value = getattr(item, "value", item)
            if isinstance(value, Mapping) and value.get("reason") == "budget_exhausted":
                return True
    return False


def _settle(run: ThreadRun) -> None:
    """The status of a run whose run log still reads ``running``."""
    if run.status != "running":
        return
    onward, paused, errors = run.last_flags
    if paused:
        run.status = "paused"
    elif errors and not onward:
        run.status = "error"
    elif not onward:
        run.status = "success"  # nothing left to do (it left through a conditional edge)


def _stored(scan: _Scan, events: Sequence[RecoveryRecord]) -> None:
    """Takeovers and crash resumes: each redid the steps of the checkpoint it
    resumed that ended after it."""
    ordered = sorted(scan.runs.values(), key=lambda r: r.run)
    for ev in (e for e in events if e.kind in ("crash", "takeover")):  # others: writes
        run = next((r for r in ordered if ev.run_id and r.run_id == ev.run_id), None)
        if run is None:
            started = [r for r in ordered if (r.started_at or 0.0) <= ev.at]
            run = started[-1] if started else (ordered[-1] if ordered else None)
        if run is None:
            continue
        redone = [
            s
            for s in run.steps
            if not s.get("checkpoint_ns")
            and s.get("checkpoint_id") == ev.checkpoint_id
            and float(s.get("ended_at") or 0.0) >= ev.at
        ]
        run.recoveries.append(
            Recovery(
                kind=ev.kind,
                thread_id=ev.thread_id,
                at=ev.at,
                run=run.run,
                run_id=ev.run_id,
                owner=ev.owner,
                checkpoint_id=ev.checkpoint_id,
                redone=redone,
            )
        )


def _link_worker_runs(scan: _Scan, records: Sequence[RunRecord]) -> None:
    """Each `Worker` run names the thread run its input started (the first not
    yet named that started after it was submitted); one that never started is
    a run of its own (number 0)."""
    ordered = sorted(scan.runs.values(), key=lambda r: r.run)
    for record in sorted(records, key=lambda r: r.created_at):
        run = next(
            (
                r
                for r in ordered
                if r.run_id is None and (r.started_at or 0.0) >= record.created_at - 1.0
            ),
            None,
        )
        if run is None:
            run = ThreadRun(thread_id=scan.thread_id, run=0, status=record.status)
            scan.runs[-len(scan.runs) - 1] = run
        run.run_id, run.owner, run.claims = record.run_id, record.owner, record.attempts
        run.updated_at = record.updated_at
        if record.budget_type is not None:
            run.budget = (record.budget_type, bytes(record.budget or b""))
        if record.status in ("error", "cancelled") or not run.ended:
            run.status = record.status


def scan_thread(
    thread_id: str,
    writes: Sequence[Write],
    events: Sequence[RecoveryRecord] = (),
    records: Sequence[RunRecord] = (),
) -> list[ThreadRun]:
    """The runs of one thread, oldest first, with their recoveries.

    ``writes``: the thread's (`decode_writes`); ``events``: its stored
    recoveries; ``records``: its `Worker` runs (the effects a redone step
    replayed are counted from the rows: `_ledger_runs`).
    """
    scan = _Scan(thread_id)
    group: list[Write] = []
    for w in writes:
        if w.ns:
            continue
        if group and group[-1].checkpoint_id != w.checkpoint_id:
            scan.group(group)
            group = []
        group.append(w)
    if group:
        scan.group(group)
    scan.nested([w for w in writes if w.ns and w.channel == "resilience"])
    for run in scan.runs.values():
        _settle(run)
    _link_worker_runs(scan, records)
    _stored(scan, events)
    runs = sorted(scan.runs.values(), key=lambda r: (r.run == 0, r.run, r.started_at or 0.0))
    for run in runs:
        for rec in run.recoveries:
            if rec.kind in ("retry_failed", "budget", "human") and rec.redone:
                rec.at = min(float(s.get("started_at") or rec.at or 0.0) for s in rec.redone)
        run.recoveries.sort(key=lambda r: r.at or 0.0)
    return runs
