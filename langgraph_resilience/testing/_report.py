"""What `recovery_suite` found: one `CaseResult` per faulted run, in a report a
test asserts on (`RecoverySuiteReport.assert_ok`) and a person can read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from langgraph_resilience.errors import ConfigError, RecoveryFailed

__all__ = ["CaseResult", "FAMILIES", "Family", "RecoverySuiteReport"]

Family = Literal["step_crash", "checkpoint_write", "double_recovery", "effect_replay"]

#: The four recovery tests, in the order they run, with what each proves.
FAMILIES: Mapping[Family, str] = {
    "step_crash": "fail at each step: recovers from the last checkpoint, no completed step re-run",
    "checkpoint_write": "a checkpoint write fails: the missing or partial step re-runs cleanly",
    "double_recovery": "two crashes at different steps: the second resumes from the later one",
    "effect_replay": "side effects: every non-idempotent call happened exactly once",
}


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    """One faulted run of the graph, compared with the clean reference run.

    Attributes:
        family: which of the four tests (`FAMILIES`).
        name: what was injected, e.g. ``"crash after step 'draft'"``.
        passed: it recovered with the reference's final state, redid no completed
            step and called every effect as often as the reference did.
        steps_redone: steps executed more often than in the reference run (the
            step in flight at a crash is expected here).
        completed_redone: the redone steps that had completed before the failure
            (each is a recovery bug: work done twice).
        effects_duplicated / effects_missing: per effect, calls beyond / short of
            the reference's (re-calls excused by ``dedupe_effects`` left out).
        effects_same_key: per effect, the duplicated calls that re-called a
            `side_effect` with the idempotency key of a call made before (its
            outcome unknown after the crash): safe only if the service
            deduplicates by that key; ``reconcile`` closes the window.
        effects_unkeyed: per effect, the duplicated calls made outside the
            effect ledger (not through a `side_effect`: no key, sent twice).
        effects_new_key: per effect, the duplicated calls that called a
            `side_effect` again under a new idempotency key after a resume (its
            key changed on the rerun: a new intent, sent twice even by a
            deduplicating service).
        effects_deduplicated: per effect, same-key re-calls of side effects
            declared deduplicating (``dedupe_effects``): not duplicates.
        state_matches: the final state equals the reference's (after ``compare``).
        evidence: what happened, line by line (runs, errors, differences).
    """

    family: Family
    name: str
    passed: bool
    steps_redone: tuple[str, ...] = ()
    completed_redone: tuple[str, ...] = ()
    effects_duplicated: Mapping[str, int] = field(default_factory=dict)
    effects_same_key: Mapping[str, int] = field(default_factory=dict)
    effects_unkeyed: Mapping[str, int] = field(default_factory=dict)
    effects_new_key: Mapping[str, int] = field(default_factory=dict)
    effects_deduplicated: Mapping[str, int] = field(default_factory=dict)
    effects_missing: Mapping[str, int] = field(default_factory=dict)
    state_matches: bool = True
    evidence: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ConfigError(f"family must be one of {', '.join(FAMILIES)}, got {self.family!r}")

    def __str__(self) -> str:
        mark = "ok  " if self.passed else "FAIL"
        lines = [f"  [{mark}] {self.name}"]
        if self.steps_redone:
            lines.append(f"         steps redone: {', '.join(self.steps_redone)}")
        if self.effects_deduplicated:
            lines.append(
                "         re-called with the same idempotency key, deduplicated by the "
                f"service (dedupe_effects): {_counts(self.effects_deduplicated, ' +')}"
            )
        if not self.passed:
            lines += [f"         {line}" for line in self.evidence]
        return "\n".join(lines)


@dataclass(frozen=True, kw_only=True)
class RecoverySuiteReport:
    """The recovery suite's findings on one graph.

    Attributes:
        cases: every case run, grouped by family in `FAMILIES` order.
        reference_steps: the steps of the clean run, in order.
        reference_effects: effect calls in the clean run, by name.
        not_run: cases left out by the case limit (``max_cases``,
            ``LGR_RECOVERY_CASES``) or not named in ``cases``.

    Example:
        >>> report = recovery_suite(build_graph, {"query": "q"})  # doctest: +SKIP
        >>> print(report)  # doctest: +SKIP
        >>> report.assert_ok()  # doctest: +SKIP
    """

    cases: tuple[CaseResult, ...]
    reference_steps: tuple[str, ...] = ()
    reference_effects: Mapping[str, int] = field(default_factory=dict)
    not_run: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether every case passed."""
        return all(c.passed for c in self.cases)

    @property
    def failed(self) -> tuple[CaseResult, ...]:
        return tuple(c for c in self.cases if not c.passed)

    def family(self, family: Family) -> tuple[CaseResult, ...]:
        """The cases of one of the four tests."""
        return tuple(c for c in self.cases if c.family == family)

    @property
    def effects_duplicated(self) -> dict[str, int]:
        """Per effect, the most calls beyond the reference's seen in any case."""
        found: dict[str, int] = {}
        for case in self.cases:
            for name, n in case.effects_duplicated.items():
                found[name] = max(found.get(name, 0), n)
        return found

    @property
    def completed_redone(self) -> tuple[str, ...]:
        """Every completed step some case ran again."""
        return tuple(sorted({s for c in self.cases for s in c.completed_redone}))

    def __str__(self) -> str:
        passed = sum(c.passed for c in self.cases)
        head = "passed" if self.ok else "FAILED"
        lines = [f"recovery suite {head}: {passed}/{len(self.cases)} cases passed"]
        steps, effects = len(self.reference_steps), _counts(self.reference_effects)
        lines.append(f"  reference run: {steps} steps, effects {effects}")
        for family, what in FAMILIES.items():
            cases = self.family(family)
            if not cases:
                continue
            ok = sum(c.passed for c in cases)
            lines.append(f"{family} ({what}): {ok}/{len(cases)}")
            lines += [str(c) for c in cases]
        if self.not_run:
            lines.append(
                f"  {len(self.not_run)} more cases not run (max_cases or cases; set "
                "LGR_RECOVERY_CASES=0 and no cases= to run them all)"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data (JSON-ready), e.g. for a CI artifact.

        Example:
            >>> json.dumps(report.to_dict())  # doctest: +SKIP
        """
        return {
            "ok": self.ok,
            "reference_steps": list(self.reference_steps),
            "reference_effects": dict(self.reference_effects),
            "not_run": list(self.not_run),
            "cases": [
                {
                    "family": c.family,
                    "name": c.name,
                    "passed": c.passed,
                    "steps_redone": list(c.steps_redone),
                    "completed_redone": list(c.completed_redone),
                    "effects_duplicated": dict(c.effects_duplicated),
                    "effects_same_key": dict(c.effects_same_key),
                    "effects_unkeyed": dict(c.effects_unkeyed),
                    "effects_new_key": dict(c.effects_new_key),
                    "effects_deduplicated": dict(c.effects_deduplicated),
                    "effects_missing": dict(c.effects_missing),
                    "state_matches": c.state_matches,
                    "evidence": list(c.evidence),
                }
                for c in self.cases
            ],
        }

    def assert_ok(self) -> None:
        """Raise `RecoveryFailed` (an AssertionError) with the evidence if a case failed.

        Example:
            >>> recovery_suite(build_graph, {"query": "q"}).assert_ok()  # doctest: +SKIP
        """
        if not self.ok:
            raise RecoveryFailed(str(self))


def _counts(counts: Mapping[str, int], sign: str = "=") -> str:
    return ", ".join(f"{k}{sign}{v}" for k, v in sorted(counts.items())) or "none"
