"""What the demo proves, read from the evidence it kept: which process ran which
step (``steps.log``), the emails sent (``outbox.log``), the run's record and the
thread's final state. `check` is pure: evidence in, broken claims out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph_resilience.cli.demo.pipeline import FIXED_TARGET, read_lines

__all__ = ["Evidence", "Runner", "check", "expected_runs", "ran_by", "read_evidence"]

#: The steps before the one in flight, with the tries each must have taken, all in
#: the first worker: search fails twice, extract's first answer is rejected.
FIRST_WORKER_TRIES = {
    "plan": 1,
    "search": 3,
    "extract": 2,
    "enrich": 1,
    "enrich_cached": 1,
    "draft": 1,
}
ORDER = (*FIRST_WORKER_TRIES, "notify", "publish")


@dataclass(frozen=True, kw_only=True)
class Runner:
    """A process of the demo: its name and pid."""

    name: str
    pid: int

    def __post_init__(self) -> None:
        if not self.name or self.pid <= 0:
            raise ValueError(f"a Runner needs a name and a pid > 0, got {self!r}")


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """What the demo kept: step starts (node, pid), emails (message id, pid)."""

    starts: Sequence[tuple[str, int]]
    emails: Sequence[tuple[str, int]]
    run: Mapping[str, Any] = field(default_factory=dict)  # status, recoveries
    final: Mapping[str, Any] = field(default_factory=dict)  # the thread's state
    metrics: Mapping[str, Any] = field(default_factory=dict)  # RecoveryMetrics.to_dict()

    def __post_init__(self) -> None:
        if not isinstance(self.final, Mapping):
            raise ValueError(f"final must be the thread's state (a mapping), got {self.final!r}")


def read_evidence(directory: Path, run: Mapping[str, Any], final: Mapping[str, Any]) -> Evidence:
    starts = [(r[0], int(r[1])) for r in read_lines(directory / "steps.log") if len(r) == 3]
    emails = [(r[0], int(r[1])) for r in read_lines(directory / "outbox.log") if len(r) >= 2]
    return Evidence(
        starts=[s for s in starts if s[0] != "notify-sent"], emails=emails, run=run, final=final
    )


def ran_by(evidence: Evidence, step: str) -> list[int]:
    """The pids that started ``step``, in order (one per try)."""
    return [pid for name, pid in evidence.starts if name == step]


def expected_runs(first: Runner, second: Runner, fixer: Runner) -> dict[str, list[int]]:
    """Who must have started each step, once per try: everything up to the email
    in the first worker; the email step, in flight when it was killed, again in
    the second; publish failing in the second and succeeding in the fix."""
    runs = {step: [first.pid] * tries for step, tries in FIRST_WORKER_TRIES.items()}
    runs["notify"] = [first.pid, second.pid]
    runs["publish"] = [second.pid, fixer.pid]
    return runs


def check(evidence: Evidence, first: Runner, second: Runner, fixer: Runner) -> list[str]:
    """The demo's claims that do not hold (empty: all hold)."""
    problems = []
    names = {first.pid: first.name, second.pid: second.name, fixer.pid: fixer.name}
    for step, pids in expected_runs(first, second, fixer).items():
        got = ran_by(evidence, step)
        if got != pids:
            want = [names.get(p, str(p)) for p in pids]
            problems.append(f"{step} ran in {[names.get(p, str(p)) for p in got]}, expected {want}")
    if [pid for _, pid in evidence.emails] != [first.pid]:
        problems.append(
            f"the email was sent {len(evidence.emails)} times "
            f"(by {[names.get(p, str(p)) for _, p in evidence.emails]}), expected once, "
            f"by {first.name}"
        )
    if evidence.run.get("status") != "partial_complete":
        problems.append(
            f"the worker run ended {evidence.run.get('status')!r}, expected 'partial_complete'"
        )
    if evidence.run.get("recoveries") != 1:
        problems.append(
            f"the run was taken over {evidence.run.get('recoveries')} times, expected once"
        )
    log = evidence.final.get("resilience") or {}
    if log.get("status") != "success":
        problems.append(f"after retry_failed the thread is {log.get('status')!r}, not 'success'")
    if evidence.final.get("published") != f"{FIXED_TARGET}/tides-report":
        problems.append(f"published is {evidence.final.get('published')!r}")
    if evidence.final.get("email") != (evidence.emails[0][0] if evidence.emails else None):
        problems.append(f"the state's email id {evidence.final.get('email')!r} is not the one sent")
    by_kind = evidence.metrics.get("recoveries_by_kind") or {}
    redone = evidence.metrics.get("steps_redone_by_kind") or {}
    for kind in ("takeover", "retry_failed"):
        if (by_kind.get(kind), redone.get(kind)) != (1, 1):
            problems.append(
                f"metrics: {by_kind.get(kind)} {kind} recoveries redid {redone.get(kind)} "
                "steps, expected one that redid one (the step in flight, the failed step)"
            )
    if evidence.metrics.get("recovery_success_rate") != 1.0:
        problems.append(
            f"metrics: recovery_success_rate {evidence.metrics.get('recovery_success_rate')}, "
            "expected 1.0 (the recovered run ended success)"
        )
    if len(evidence.final.get("facts") or []) != 3:
        problems.append(f"extract kept {evidence.final.get('facts')!r}, not the 3 cited facts")
    return problems
