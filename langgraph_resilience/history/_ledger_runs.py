"""A thread's runs folded from the run ledger's rows (`run_report`): runs,
their steps, recoveries and what each redid, keyed by run and task.

What a recovery redid is defined as `checkpoint.runlog._run_metrics` counts it (the
same rows, one thread): a crash or takeover, the top-level steps of the
checkpoint it resumed that ended after it; a budget or human resume, the steps
of that checkpoint whose task had paused there; a ``retry_failed``, the first
step of each path it re-runs that ended after the path's last failure before
it. A redone step replayed the
effects recorded ``done`` for its task (for a ``retry_failed``, also for the
task whose tries its path's failed row stands for: ``tried``) before it ended.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_resilience.checkpoint import EffectRecord, RunRecord
from langgraph_resilience.checkpoint.runlog import _reads as reads
from langgraph_resilience.checkpoint.runlog._reads import Reads
from langgraph_resilience.checkpoint.runlog._run_log_reads import ENDED
from langgraph_resilience.checkpoint.runlog._run_summaries import ThreadLedger

__all__ = ["RECOVERY_KINDS", "Recovery", "ThreadRun", "ledger_runs", "step_tasks"]

#: The kinds of recovery, in the order they are reported.
RECOVERY_KINDS = ("crash", "takeover", "retry_failed", "budget", "human")


@dataclass(kw_only=True)
class Recovery:
    """One recovery of a run, and what it redid.

    Attributes:
        kind: one of `RECOVERY_KINDS`.
        at: when it was stored (epoch seconds).
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
        graph_version: the graph version it started on (None: an unversioned graph).
    """

    thread_id: str
    run: int
    status: str = "running"
    started_at: float | None = None
    ended_at: float | None = None
    checkpoint_id: str | None = None  # its input checkpoint (its marker's)
    next_checkpoint: str | None = None  # the next run's (its own end)
    steps: list[dict[str, Any]] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    run_id: str | None = None
    owner: str | None = None
    claims: int = 0
    updated_at: float | None = None
    budget: tuple[str, bytes] | None = None  # a Worker run's, as stored
    error: str | None = None  # what a run that ended ``error`` raised
    task_spec: tuple[str, bytes] | None = None  # its input, as stored
    graph_version: str | None = None

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


def step_tasks(step: dict[str, Any]) -> set[str]:
    """The tasks a step row stands for: its own, and the one whose tries it
    records (``tried``, ``namespace|task id``)."""
    tried = step.get("tried")
    return {str(step.get("task_id")), *([str(tried).rpartition("|")[2]] if tried else [])}


def _redone(rec: Recovery, run: ThreadRun, led: ThreadLedger) -> list[dict[str, Any]]:
    at = rec.at or 0.0
    if rec.kind in ("crash", "takeover"):
        return [
            s
            for s in run.steps
            if not s["checkpoint_ns"]
            and s["checkpoint_id"] == rec.checkpoint_id
            and float(s.get("ended_at") or 0.0) >= at
        ]
    if rec.kind in ("budget", "human"):
        paused = led.interrupted.get(str(rec.checkpoint_id), set())
        return [
            s
            for s in run.steps
            if not s["checkpoint_ns"]
            and s["checkpoint_id"] == rec.checkpoint_id
            and s["task_id"] in paused
        ]
    redone = []
    for path in rec.paths:
        failed = [
            float(s.get("ended_at") or 0.0)
            for s in run.steps
            if s["path"] == path and s["status"] == "failed" and float(s.get("ended_at") or 0) < at
        ]
        bound = max(failed) if failed else at
        mine = [s for s in run.steps if s["path"] == path]
        after = [s for s in mine if float(s.get("ended_at") or 0.0) > bound]
        if after:
            redone.append(min(after, key=lambda s: float(s["ended_at"])))
    return redone


def _replayed(rec: Recovery, run: ThreadRun, effects: Sequence[EffectRecord]) -> int:
    count = 0
    for step in rec.redone:
        tasks = {str(step["task_id"])}
        if rec.kind == "retry_failed":
            for f in run.steps:
                if f["path"] == step["path"] and float(f.get("ended_at") or 0.0) < (rec.at or 0):
                    tasks |= step_tasks(f)
        end = float(step.get("ended_at") or 0.0)
        count += sum(
            1
            for e in effects
            if e.status == "done"
            and e.task_id in tasks
            and e.outcome_at is not None
            and e.outcome_at < end
            and (e.how or "called") in ("called", "replayed")
        )
    return count


def _run_of(record: Any, worker: RunRecord | None) -> ThreadRun:
    run = ThreadRun(
        thread_id=record.thread_id,
        run=record.run,
        status=record.status,
        started_at=record.started_at,
        ended_at=record.ended_at,
        checkpoint_id=record.checkpoint_id,
        run_id=record.run_id,
        updated_at=record.updated_at,
        error=record.error,
        graph_version=record.graph_version,
    )
    if record.task_spec_type is not None and record.task_spec is not None:
        run.task_spec = (record.task_spec_type, bytes(record.task_spec))
    if worker is not None:
        run.owner, run.claims = worker.owner, worker.attempts
        run.updated_at = max(record.updated_at, worker.updated_at)
        if worker.budget_type is not None:
            run.budget = (worker.budget_type, bytes(worker.budget or b""))
        if worker.status in ("error", "cancelled") or record.status not in ENDED:
            run.status = worker.status
    return run


def ledger_runs(thread_id: str) -> Reads[list[ThreadRun]]:
    """The runs of one thread, oldest first (a `Worker` run that never started:
    run 0, last), with their steps and recoveries."""
    led: ThreadLedger = yield reads.thread_ledger(thread_id)
    workers: list[RunRecord] = yield reads.runs(thread_id)
    by_id = {w.run_id: w for w in workers}
    runs = [_run_of(r, by_id.get(r.run_id) if r.run_id else None) for r in led.runs]
    by_number = {r.run: r for r in runs}
    for this, after in itertools.pairwise(runs):
        this.next_checkpoint = after.checkpoint_id
    for step in led.steps:
        run = by_number.get(int(step["run"] or 1))
        if run is not None:
            run.steps.append(step)
    for row in led.recoveries:
        run = by_number.get(row.run) if row.run is not None else None
        if run is None:
            continue
        run.recoveries.append(
            Recovery(
                kind=row.kind,
                thread_id=row.thread_id,
                at=row.at,
                run=run.run,
                run_id=row.run_id,
                owner=row.owner,
                checkpoint_id=row.checkpoint_id,
                paths=tuple(led.paths.get(row.key, ())),
            )
        )
    effects: Sequence[EffectRecord] = ()
    if any(run.recoveries for run in runs):
        effects = yield reads.effects(thread_id)
    for run in runs:
        run.steps.sort(key=lambda s: (float(s.get("ended_at") or 0.0), s["path"]))
        run.recoveries.sort(key=lambda r: r.at or 0.0)
        for rec in run.recoveries:
            rec.redone = _redone(rec, run, led)
            rec.effects_replayed = _replayed(rec, run, effects)
    known = {r.run_id for r in runs if r.run_id}
    for w in workers:
        if w.run_id not in known:
            runs.append(
                ThreadRun(
                    thread_id=w.thread_id,
                    run=0,
                    status=w.status,
                    run_id=w.run_id,
                    owner=w.owner,
                    claims=w.attempts,
                    updated_at=w.updated_at,
                )
            )
    return runs
