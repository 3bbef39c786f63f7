"""The four recovery tests, written once as a generator of runs (no I/O here).

`suite_steps` yields a `Run` (run the graph under a plan, or resume it) and is
sent back a `RunResult`; the sync and async drivers (`_suite`) only do the runs.
It first runs the graph clean (the reference), then, for each case, runs it
under a plan and resumes it until it completes, and judges the case against
the reference (`judge`).
"""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from langchain_core.messages import BaseMessage

from langgraph_resilience.errors import ConfigError
from langgraph_resilience.testing._faults import CrashFault
from langgraph_resilience.testing._plan import FaultPlan
from langgraph_resilience.testing._report import CaseResult, Family, RecoverySuiteReport
from langgraph_resilience.testing._taps import Execution, Tracker

__all__ = ["Run", "RunResult", "SuiteSpec", "comparable", "judge", "pick", "suite_steps"]

T = TypeVar("T")
Outcome = Literal["completed", "crashed", "failed"]
_MAX_RUNS = 4  # a case's runs: the faulted one and up to three resumes


@dataclass(frozen=True, kw_only=True)
class Run:
    """Run the graph under ``plan`` on ``thread_id``: start it with ``input``, or
    (``resume``) resume it from its last checkpoint, or start it again with
    ``input`` if none was stored (as a `Worker` does)."""

    plan: FaultPlan
    tracker: Tracker
    thread_id: str
    input: Any
    resume: bool = False
    #: Settle these effects first, as a person would after checking the outside
    #: system (idempotency key -> the outcome the crash kept from the store),
    #: then ``retry_failed`` instead of resuming.
    settle: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """How a run ended, and the thread's state after it."""

    outcome: Outcome
    error: str | None = None
    values: Any = None
    resumed_from: int | None = None  # step of the checkpoint the run started from
    settled: tuple[str, ...] = ()  # effects settled by hand before it (`Run.settle`)


@dataclass(frozen=True, kw_only=True)
class SuiteSpec:
    """What the suite runs: the input, the effect counters, how states compare,
    and how many cases of each family at most (0: all)."""

    input: Any
    counters: Mapping[str, Callable[[], int]]
    compare: Callable[[Any], Any]
    max_cases: int
    #: The side effects whose services deduplicate by idempotency key: a re-call
    #: with the same key is not a duplicate (``recovery_suite(dedupe_effects=)``).
    dedupe: frozenset[str] = frozenset()
    #: Run only the cases of these names, whatever ``max_cases`` says
    #: (``recovery_suite(cases=)``); None runs the cases ``max_cases`` picks.
    only: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.max_cases < 0:
            raise ConfigError(f"max_cases must be >= 0 (0 runs every case), got {self.max_cases}")


def comparable(values: Any) -> Any:
    """A state as the default comparison sees it: without the run log
    (``resilience``: timings, attempts), messages without their random ids."""
    if isinstance(values, BaseMessage):
        calls = [(c["name"], comparable(c["args"])) for c in getattr(values, "tool_calls", [])]
        return (values.type, comparable(values.content), values.name, calls)
    if isinstance(values, Mapping):
        return {k: comparable(v) for k, v in values.items() if k != "resilience"}
    if isinstance(values, (list, tuple)):
        return [comparable(v) for v in values]
    return values


def pick(items: Sequence[T], limit: int) -> tuple[list[T], list[T]]:
    """At most ``limit`` items spread evenly, first and last kept; and the rest."""
    if limit <= 0 or len(items) <= limit:
        return list(items), []
    if limit == 1:
        chosen = [0]
    else:
        chosen = sorted({round(i * (len(items) - 1) / (limit - 1)) for i in range(limit)})
    return [items[i] for i in chosen], [x for i, x in enumerate(items) if i not in chosen]


def _delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


def suite_steps(spec: SuiteSpec) -> Generator[Run, RunResult, RecoverySuiteReport]:
    """Run the reference, then every case; return the report."""
    prefix = f"recovery-{uuid.uuid4().hex[:8]}"
    ref_tracker = Tracker(spec.counters)
    before = ref_tracker.read_counters()
    ref = yield Run(
        plan=FaultPlan(), tracker=ref_tracker, thread_id=f"{prefix}-reference", input=spec.input
    )
    if ref.outcome != "completed":
        raise ConfigError(
            f"the graph's clean run did not complete ({ref.error}); recovery_suite compares "
            "faulted runs with a clean one: make the graph run to the end on this input first"
        )
    ref_effects = _delta(before, ref_tracker.read_counters())
    reference = _Reference(
        paths=[e.path for e in ref_tracker.executions],
        effects=ref_effects,
        outside=_outside(ref_effects, ref_tracker),
        executions=list(ref_tracker.executions),
        effect_calls=dict(ref_tracker.effect_calls),
        fresh=dict(ref_tracker.fresh),
        puts=ref_tracker.puts.get(1, 0),
        state=spec.compare(ref.values),
        dedupe=spec.dedupe,
    )
    unknown = sorted(spec.dedupe - set(reference.effect_calls))
    if unknown:
        called = ", ".join(sorted(reference.effect_calls)) or "none"
        raise ConfigError(
            f"dedupe_effects names {', '.join(map(repr, unknown))}, which the clean run never "
            f"called as a side_effect (its side effects: {called}); name side effects by "
            "their side_effect name (side_effect(name=...), default the function's name)"
        )
    planned, not_run = _cases(reference, spec.max_cases, spec.only)
    results: list[CaseResult] = []
    for n, (family, name, plan) in enumerate(planned):
        tracker = Tracker(spec.counters)
        before = tracker.read_counters()
        thread = f"{prefix}-{n}"
        runs = [(yield Run(plan=plan, tracker=tracker, thread_id=thread, input=spec.input))]
        while runs[-1].outcome != "completed" and len(runs) < _MAX_RUNS:
            again = Run(plan=plan, tracker=tracker, thread_id=thread, input=spec.input, resume=True)
            runs.append((yield again))
        lost = _left_for_a_person(runs[-1], tracker)
        if lost:  # on_unknown="raise" stopped for a person: settle as they would
            settle = Run(
                plan=plan, tracker=tracker, thread_id=thread, input=spec.input, settle=lost
            )
            runs.append(replace((yield settle), settled=tuple(sorted(lost))))
        effects = _delta(before, tracker.read_counters())
        results.append(
            judge(family, name, runs, tracker, effects, reference, spec.compare, plan=plan)
        )
    return RecoverySuiteReport(
        cases=tuple(results),
        reference_steps=tuple(reference.paths),
        reference_effects=reference.effects,
        not_run=tuple(not_run),
    )


@dataclass(frozen=True, kw_only=True)
class _Reference:
    paths: list[str]
    effects: dict[str, int]
    outside: dict[str, int]  # counter moves outside any side effect's call
    executions: list[Execution]
    effect_calls: dict[str, int]
    fresh: dict[tuple[str, str], int]  # (counter, effect) moves under new keys
    puts: int
    state: Any
    dedupe: frozenset[str] = frozenset()


def _outside(effects: Mapping[str, int], tracker: Tracker) -> dict[str, int]:
    """Per counter, its moves that no side effect's call made (no idempotency key)."""
    return {k: max(0, v - tracker.in_ledger.get(k, 0)) for k, v in effects.items()}


def _cases(
    ref: _Reference, limit: int, only: frozenset[str] | None = None
) -> tuple[list[tuple[Family, str, FaultPlan]], list[str]]:
    """The cases to run (at most ``limit`` per family, or those named in ``only``),
    and the names of those left out."""
    if only is not None:
        limit = 0  # the names are chosen among every case
    paths = list(dict.fromkeys(ref.paths))
    planned: list[tuple[Family, str, FaultPlan]] = []
    left: list[str] = []
    every: list[str] = []

    def add(family: Family, items: list[tuple[str, FaultPlan]]) -> None:
        every.extend(name for name, _ in items)
        if only is None:
            chosen, rest = pick(items, limit)
        else:
            chosen = [(name, plan) for name, plan in items if name in only]
            rest = [(name, plan) for name, plan in items if name not in only]
        planned.extend((family, name, plan) for name, plan in chosen)
        left.extend(name for name, _ in rest)

    crashes = [(f"crash after step {p!r}", FaultPlan().crash(p)) for p in paths]
    # A handoff (Command(graph=PARENT)) is crashed where it happens: after the
    # step's body handed off (above) and once the handoff is stored.
    handoffs = dict.fromkeys(e.path for e in ref.executions if e.handoff)
    crashes += [
        (
            f"crash after step {p!r} handed off, its handoff stored",
            FaultPlan().crash(p, when="stored"),
        )
        for p in handoffs
    ]
    # A functional task's result is stored on its own: a crash between two tasks.
    tasks = dict.fromkeys(e.path for e in ref.executions if e.task)
    crashes += [
        (f"crash after task {p!r}, its result stored", FaultPlan().crash(p, when="stored"))
        for p in tasks
    ]
    add("step_crash", crashes)
    writes = [
        (f"checkpoint write {i} of {ref.puts} fails", FaultPlan().fail_checkpoint_write(at=i))
        for i in range(1, ref.puts + 1)
    ]
    stored = dict.fromkeys(e.path for e in ref.executions if e.stored)
    writes += [(f"the writes of step {p!r} fail", FaultPlan().fail_writes(p)) for p in stored]
    add("checkpoint_write", writes)
    spread, _ = pick(paths, limit + 1 if limit else 0)  # limit pairs of neighbours
    pairs = [
        (f"crash after {a!r}, then after {b!r}", FaultPlan().crash(a).crash(b))
        for a, b in itertools.pairwise(spread)
    ]
    add("double_recovery", pairs)
    effect_cases = [
        (
            f"crash right after effect {name!r} call {n} returned",
            FaultPlan().crash_after_effect(name, call=n),
        )
        for name, count in sorted(ref.effect_calls.items())
        for n in range(1, count + 1)
    ]
    add("effect_replay", effect_cases)  # each call's window, and each caller: up to limit each
    callers = dict.fromkeys(e.path for e in ref.executions if e.effects)
    effect_cases = [
        (
            f"crash after step {p!r}, which calls {', '.join(sorted(_moved(ref, p)))}",
            FaultPlan().crash(p),
        )
        for p in callers
    ]
    add("effect_replay", effect_cases)
    unknown = sorted((only or frozenset()) - set(every))
    if unknown:
        raise ConfigError(
            f"cases names {', '.join(map(repr, unknown))}, which this graph's suite does "
            f"not have (its cases: {', '.join(map(repr, every))})"
        )
    return planned, left


def _moved(ref: _Reference, path: str) -> set[str]:
    return {k for e in ref.executions if e.path == path for k in e.effects}


def _completed_before_failure(tracker: Tracker, run: int) -> set[str]:
    """The steps of ``run`` done before it stopped: their writes were stored, or
    a later step of the same graph had started (so they had finished)."""
    mine = [e for e in tracker.executions if e.run == run]
    return {
        e.path
        for e in mine
        if e.finished
        and (e.stored or any(o.namespace == e.namespace and o.step > e.step for o in mine))
    }


def judge(
    family: Family,
    name: str,
    runs: list[RunResult],
    tracker: Tracker,
    effects: Mapping[str, int],
    ref: _Reference,
    compare: Callable[[Any], Any],
    *,
    plan: FaultPlan | None = None,
) -> CaseResult:
    """One case's verdict and evidence, against the reference run."""
    evidence = [_run_line(i, r) for i, r in enumerate(runs, 1)]
    final = runs[-1]
    faults = plan.faults if plan is not None else ()
    silent = [f for f in faults if not tracker.fired(f)]
    fired = bool(tracker.crashes or tracker.store_failures) and not silent
    if not fired:
        evidence.append(_not_fired(faults, silent))
    recovered = final.outcome == "completed"
    if not recovered:
        evidence.append(f"did not recover after {len(runs)} runs")
    state = compare(final.values) if recovered else None
    state_matches = recovered and state == ref.state
    if recovered and not state_matches:
        evidence += _state_diff(ref.state, state)
        stop = _partial(final.values)
        if stop:
            evidence.append(stop)
    went_back = _went_back(runs)
    if went_back:
        evidence.append(went_back)
    restarted = frozenset(  # the runs that found no checkpoint: started from the input
        i for i, r in enumerate(runs, 1) if i > 1 and r.resumed_from is None and not r.settled
    )
    redone_counts = Counter(e.path for e in tracker.executions) - Counter(ref.paths)
    redone = tuple(sorted(redone_counts.elements()))
    completed_redone: list[str] = []
    for i, r in enumerate(runs[:-1], 1):
        if r.outcome == "completed":
            continue
        done = _completed_before_failure(tracker, i)
        again = {e.path for e in tracker.executions if e.run > i and e.path in done}
        completed_redone += sorted(again - set(completed_redone))
    if completed_redone:
        why = (
            "the run found no checkpoint and started again from its input"
            if any(e.run in restarted for e in tracker.executions if e.path in completed_redone)
            else "their work was not stored in time: is the graph run with "
            "durability='sync', the default of ResilientStateGraph?"
        )
        evidence.append(
            f"completed before the failure and run again: {', '.join(completed_redone)} ({why})"
        )
    repeats = _repeats(effects, tracker, ref, restarted)
    duplicated = {k: rep.duplicated for k, rep in repeats.items() if rep.duplicated}
    missing = {
        k: ref.effects.get(k, 0) - v for k, v in effects.items() if v < ref.effects.get(k, 0)
    }
    for k, rep in sorted(repeats.items()):
        by = [f"{e.path} (run {e.run})" for e in tracker.executions if e.effects.get(k)]
        evidence.append(
            f"effect {k!r} called {effects[k]} times, {ref.effects.get(k, 0)} in the reference "
            f"(+{rep.extra}); called in: {', '.join(by) or 'unknown steps'}"
        )
        evidence += rep.said()
    for k, short in sorted(missing.items()):
        evidence.append(
            f"effect {k!r} called {effects[k]} times, {ref.effects[k]} in the "
            f"reference ({short} missing)"
        )
    passed = (
        not went_back
        and fired
        and recovered
        and state_matches
        and not completed_redone
        and not duplicated
        and not missing
    )
    return CaseResult(
        family=family,
        name=name,
        passed=passed,
        steps_redone=redone,
        completed_redone=tuple(completed_redone),
        effects_duplicated=duplicated,
        effects_same_key={k: n for k, r in repeats.items() if (n := r.unexcused_same_key)},
        effects_unkeyed={k: r.unkeyed for k, r in repeats.items() if r.unkeyed},
        effects_new_key={k: n for k, r in repeats.items() if (n := sum(r.new_key.values()))},
        effects_deduplicated={k: r.excused for k, r in repeats.items() if r.excused},
        effects_missing=missing,
        state_matches=state_matches,
        evidence=tuple(evidence),
    )


@dataclass(frozen=True, kw_only=True)
class _Repeats:
    """One counter's calls beyond the reference, told apart: ``same_key`` (per
    side effect) were re-calls with an idempotency key called before, which its
    service may deduplicate; ``unkeyed`` were made outside the effect ledger."""

    extra: int
    same_key: Mapping[str, int]
    unkeyed: int
    dedupe: frozenset[str]
    #: per side effect, calls under an idempotency key not called before,
    #: beyond the reference's (a new intent: its key changed on the rerun)
    new_key: Mapping[str, int] = field(default_factory=dict)
    #: the steps that moved the counter again (in a resumed run when ``resumed``)
    rerun_by: tuple[str, ...] = ()
    resumed: bool = True  # else: called again within the faulted run (a retry)
    #: called again by a run that found no checkpoint and started from the input
    restarted: bool = False

    @property
    def excused(self) -> int:
        """Re-calls of side effects whose services deduplicate (``dedupe_effects``)."""
        return min(self.extra, sum(n for e, n in self.same_key.items() if e in self.dedupe))

    @property
    def duplicated(self) -> int:
        return self.extra - self.excused

    @property
    def unexcused_same_key(self) -> int:
        return sum(n for e, n in self.same_key.items() if e not in self.dedupe)

    def said(self) -> list[str]:
        """Why each extra call happened, one line per reason."""
        lines = []
        steps = ", ".join(repr(p) for p in self.rerun_by) or "a step"
        when = "after a resume" if self.resumed else "in the same run (a step retried)"
        for effect, n in sorted(self.same_key.items()):
            again = (
                f"  +{n}: side effect {effect!r} was called again with the same idempotency "
                f"key {when} (reexecuted: the failure left its outcome unknown)"
            )
            if effect in self.dedupe:
                lines.append(
                    f"{again}; its service deduplicates by that key (dedupe_effects), so "
                    "this is not a duplicate"
                )
            else:
                lines.append(
                    f"{again}: safe only if its service deduplicates by that key (then "
                    f"declare it: recovery_suite(..., dedupe_effects={{{effect!r}}})); "
                    "side_effect(reconcile=...) closes this window"
                )
        for effect, n in sorted(self.new_key.items()):
            if self.restarted:
                lines.append(
                    f"  +{n}: side effect {effect!r} was called again under a new idempotency "
                    f"key {when}: the run found no checkpoint to resume from and started "
                    f"again from its input, though {steps} had run before the failure (its "
                    "first checkpoint was never stored: an @entrypoint's body runs while "
                    "its input checkpoint is stored, even with durability='sync'); the "
                    "rerun is a new run whose steps are new tasks under new keys, so even "
                    "a service that deduplicates by key sends it twice"
                )
                continue
            lines.append(
                f"  +{n}: side effect {effect!r} was called again under a new idempotency "
                f"key {when} ({steps} ran again and the key changed: it comes from "
                "a value that differs on the rerun, such as a random id or a time in the "
                "arguments or the business key); the ledger saw a new intent, so even a "
                "service that deduplicates by key sends it twice: derive the key from what "
                "identifies the call"
            )
        if self.unkeyed:
            lines.append(
                f"  +{self.unkeyed}: called again outside the effect ledger {when} "
                f"({steps} ran again; the call is not made through a side_effect, so it "
                "has no idempotency key and no recorded outcome): the pipeline sends it "
                "twice; wrap the call in @side_effect"
            )
        rest = self.extra - sum(self.same_key.values()) - sum(self.new_key.values())
        rest -= self.unkeyed
        if rest > 0:
            lines.append(
                f"  +{rest}: the count moved while no step this suite ran was calling it "
                "(counted outside the graph's steps, or by another thread)"
            )
        return lines


def _repeats(
    effects: Mapping[str, int],
    tracker: Tracker,
    ref: _Reference,
    restarted: frozenset[int] = frozenset(),
) -> dict[str, _Repeats]:
    """Per counter that moved more than in the reference, where the extra came
    from; ``restarted``: the runs that found no checkpoint and started again
    from the input."""
    outside = _outside(effects, tracker)
    found = {}
    for counter, count in effects.items():
        extra = count - ref.effects.get(counter, 0)
        if extra <= 0:
            continue
        same_key = {e: n for (c, e), n in tracker.resent.items() if c == counter and n}
        unkeyed = min(extra, max(0, outside[counter] - ref.outside.get(counter, 0)))
        new_key = {
            e: n - ref.fresh.get((c, e), 0)
            for (c, e), n in tracker.fresh.items()
            if c == counter and n > ref.fresh.get((c, e), 0)
        }
        movers = [e for e in tracker.executions if e.effects.get(counter)]
        resumed = any(e.run > 1 for e in movers)
        rerun_by = _deepest([e for e in movers if e.run > 1 or not resumed])
        found[counter] = _Repeats(
            extra=extra,
            same_key=same_key,
            unkeyed=unkeyed,
            dedupe=ref.dedupe,
            new_key=new_key,
            rerun_by=rerun_by,
            resumed=resumed,
            restarted=any(e.run in restarted for e in movers),
        )
    return found


def _deepest(movers: Sequence[Execution]) -> tuple[str, ...]:
    """The steps among ``movers`` no other one is nested in (``work/tools[0]``,
    not ``work``) or called by (a task, not its entrypoint): the ones that made
    the call."""
    found = list(dict.fromkeys(e.path for e in movers))
    callers = {e.caller for e in movers}
    return tuple(
        p for p in found if p not in callers and not any(o.startswith(f"{p}/") for o in found)
    )


def _went_back(runs: list[RunResult]) -> str | None:
    """A resume that started from an earlier checkpoint than the resume before it
    (the later checkpoint was lost), said; None when every resume went forward."""
    starts = [(i, r.resumed_from) for i, r in enumerate(runs, 1) if i > 1]
    for (i, before), (j, after) in itertools.pairwise(starts):
        if before is not None and (after is None or after < before):
            return (
                f"run {j} resumed from an earlier checkpoint (step {after}) than run {i} "
                f"(step {before}): the later checkpoint was lost"
            )
    return None


def _left_for_a_person(result: RunResult, tracker: Tracker) -> dict[str, Any]:
    """The lost outcomes to settle when a run stopped with `EffectOutcomeUnknown`
    (``on_unknown="raise"``): the crash kept them from the store, and the
    suite, which saw the calls return, knows what the outside system would show."""
    log = result.values.get("resilience") if isinstance(result.values, Mapping) else None
    failed = log.get("failed_step") if isinstance(log, Mapping) else None
    if not isinstance(failed, Mapping) or failed.get("error_type") != "EffectOutcomeUnknown":
        return {}
    return dict(tracker.lost_outcomes)


def _not_fired(faults: Sequence[object], silent: Sequence[object]) -> str:
    """Why a case whose faults did not all fire is not a pass."""
    why = "the run did not reach its step (it took another path than the reference run)"
    if len(faults) < 2 or len(silent) == len(faults):
        return f"the fault never fired: {why}"
    return (
        f"only {len(faults) - len(silent)} of the {len(faults)} planned faults fired "
        f"({'; '.join(_fault_name(f) for f in silent)} did not: {why}), so this case "
        "did not test what it names"
    )


def _fault_name(fault: object) -> str:
    path, effect = getattr(fault, "path", None), getattr(fault, "effect", None)
    if effect is not None:
        return f"the crash after effect {effect!r} call {getattr(fault, 'call', 1)}"
    if isinstance(fault, CrashFault):
        return f"the crash {fault.when} step {path!r}"
    return f"the store fault at {path or getattr(fault, 'at', '?')!r}"


def _run_line(i: int, r: RunResult) -> str:
    if r.settled:
        return (
            f"run {i}: a person settled {', '.join(repr(k) for k in r.settled)} as the outside "
            f"system shows (settle_effect, it happened), then retry_failed, {r.outcome}"
        ) + (f" ({r.error})" if r.error else "")
    if i == 1:
        start = "started"
    elif r.resumed_from is not None:
        start = f"resumed from the checkpoint of step {r.resumed_from}"
    else:
        start = "found no checkpoint to resume from, started again from the input"
    stop = _partial(r.values) if r.outcome == "completed" else None
    return f"run {i}: {start}, {r.outcome}" + (f" ({r.error or stop})" if r.error or stop else "")


def _partial(values: Any) -> str | None:
    """What stopped a run that ended with a partial result, from its run log."""
    log = values.get("resilience") if isinstance(values, Mapping) else None
    if not isinstance(log, Mapping) or log.get("status") != "partial_complete":
        return None
    failed = log.get("failed_step")
    if not isinstance(failed, Mapping):
        return None
    error = f"{failed.get('error_type') or failed.get('kind')}: {failed.get('message')}"
    return f"the run ended with a partial result at step {failed.get('path')!r} ({_short(error)})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _state_diff(expected: Any, got: Any) -> list[str]:
    if isinstance(expected, Mapping) and isinstance(got, Mapping):
        keys = sorted(set(expected) | set(got), key=str)
        return [
            f"state[{k!r}]: expected {_short(expected.get(k))}, got {_short(got.get(k))}"
            for k in keys
            if expected.get(k) != got.get(k)
        ]
    return [f"state: expected {_short(expected)}, got {_short(got)}"]
