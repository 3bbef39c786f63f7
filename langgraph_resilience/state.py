"""The run log kept in ``state["resilience"]``, and the reducer that merges it.

Every entry is plain data (str, numbers, lists, dicts), so it is stored in every
checkpoint with LangGraph's own serializer and survives a crash with the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypedDict, get_type_hints

from langgraph_resilience.budget import add_usage
from langgraph_resilience.errors import ConfigError

__all__ = [
    "FAILED_FIELDS",
    "FailedStep",
    "ResilientState",
    "RunOutcome",
    "StepRecord",
    "brief",
    "merge_run_log",
    "new_run_marker",
    "require_resilient_schema",
    "step_base",
]


#: How many step paths the loop-iteration count remembers (the most recently run).
COUNTED_PATHS = 32
#: How many context-compression summaries it keeps (the latest).
RECENT_SUMMARIES = 10


class StepRecord(TypedDict, total=False):
    """One step of a run: one task of a node, keyed by its path.

    Keys:
        run: the run's number on its thread (1, 2, ... one per new input).
        path: where the step ran, readable and unique in the run: the subgraph
            path and node (``research/fetch``), the `Send` branch (``work[2]``),
            the loop iteration (``review#3``, from the second on).
        node: the node's name.
        status: ``completed``, ``degraded``, ``fallback``, ``failed`` (or
            ``interrupted`` in the stored history).
        attempts: tries made.
        kinds: the failure kinds of the failed tries, in order.
        started_at / ended_at: epoch seconds.
        summary: a short summary of the output.
        run_id: the `Worker` run it ran under (absent when no Worker ran it).
        worker: the id of the `Worker` that ran it (absent when none did).
    """

    run: int
    path: str
    node: str
    status: str
    attempts: int
    kinds: list[str]
    started_at: float
    ended_at: float
    summary: str
    run_id: str
    worker: str


class FailedStep(TypedDict, total=False):
    """A step that failed for good: the one shape of a failure, wherever it is
    read (``failed_step`` and ``failed_steps`` of `RunOutcome`, `RunReport`'s
    ``failed_steps``, the ``failed`` entries of the ``show`` command). The route
    a node's error carries to its handler (`graph._routes.route_of`, recorded
    in the attempt row that chose it) is these keys and where the step goes
    (``route``, ``target``, ``exhausted``, ``suggestion``, ``run_id``); its
    step record (`StepRecord`, status ``failed``) is the step's, as every
    step has one.

    Keys:
        path / node: the step (its path, as `StepRecord` has it) and its node.
        kind: the `FailureKind` value of the last failure.
        reason: why it was classified so.
        error_type / message: the error's class name and message (500 characters).
        attempts: tries made.
        task: the failed task's namespace and id (``ns|id``): `retry_failed`
            re-runs it as a new task that keeps its side-effect keys.
        send: a failed `Send` branch's own payload (re-run with it).

    A run stored before its run log named them (an earlier run of the thread,
    read by `run_report` from its step records) has ``path``, ``node`` and
    ``kind`` only.
    """

    path: str
    node: str
    kind: str
    reason: str
    error_type: str
    message: str
    attempts: int
    task: str | None  # the failed task's namespace and id (keeps its side-effect keys)
    send: Any  # a failed Send branch's own payload (re-run with it)


#: The keys of a `FailedStep` its route carries (all but ``send``: the route
#: says whether it is a `Send` branch; the payload is the task's input).
FAILED_FIELDS = tuple(k for k in FailedStep.__annotations__ if k != "send")


class RunOutcome(TypedDict, total=False):
    """``state["resilience"]``: the current run's log and, at the end, its outcome.

    A run is one task on a thread: each new input (``invoke(input)``,
    ``Worker.submit``) starts one, and every key below describes that run only.
    Earlier runs' steps stay readable in the store (`saver.step_history`).

    Keys:
        status: ``"running"``, then ``"success"`` or ``"partial_complete"``.
        run: the run's number on the thread (1, 2, ...).
        started_at: not kept (a log stored by an earlier release may hold it):
            when the run's input arrived is its run row's (`run_report`,
            ``saver.history``), so checkpoints do not carry it.
        completed_steps: in a partial result only: the run's completed steps
            (`StepRecord` in brief, read from the store; a run that goes on or
            succeeds keeps none here: `saver.step_history` lists them).
        failed_step: the step that ended the run (None once it ended without
            one; absent while it goes on: ``invoke``'s output has it, None).
        failed_steps: every step that failed for good in the run (several
            `Send` branches may); `retry_failed` re-runs them all.
        degraded_steps: paths of steps that failed and were skipped or replaced.
        degraded_sends: the degraded `Send` branches' paths and payloads
            (``{"path", "send"}``), so ``retry_failed(step=path)`` re-runs one
            with its own payload.
        partial_output: the state when the run stopped short.
        recovery_suggestions: what to do next, by failure kind.
        context_summary: what context compression kept, and when (the latest).
        usage: what the run used: ``tokens``, ``cost``, ``seconds`` (of
            steps), ``steps`` (see `Budget`). A `ResilientStateGraph` run's is
            set when the run ends (``run_usage``: success, a partial result);
            while it goes on, its invoke's tally holds it (`graph._tally`) and
            ``invoke``'s output carries it. A nested graph's steps and an
            agent's add theirs up here as they go.
        budget: a budget given on resume (``Command(resume=Budget(...))``),
            in force from then on.
        counts: executions per step path in this run (loop iterations) of a
            nested graph's steps or an agent's; a top-level step of a
            `ResilientStateGraph` counts in its invoke's tally instead.
        step: one step's record, on its way to the store (not kept in the state).
        new_run / clear / tallied / run_usage: markers of an update (a new run
            starts; these step paths are re-run; the step was counted in its
            invoke's tally; the run's usage as it ends), not kept as such.
    """

    status: str
    run: int
    started_at: float
    completed_steps: list[StepRecord]
    failed_step: FailedStep | None
    failed_steps: list[FailedStep]
    degraded_steps: list[str]
    degraded_sends: list[dict[str, Any]]
    partial_output: dict[str, Any] | None
    recovery_suggestions: list[str]
    context_summary: list[dict[str, Any]]
    usage: dict[str, float]
    budget: dict[str, Any]
    counts: dict[str, int]
    step: StepRecord
    new_run: float
    clear: list[str]


#: What a new run starts with: everything that describes one run, reset.
#: What describes one run: reset when the next starts (absent until set, so a
#: checkpoint carries no empty fields).
_PER_RUN = (
    "started_at",  # a log stored by an earlier release kept it (the run's row does)
    "failed_step",
    "completed_steps",
    "failed_steps",
    "degraded_steps",
    "degraded_sends",
    "partial_output",
    "recovery_suggestions",
    "context_summary",
    "usage",
    "counts",
    "budget",
)


def _fresh_run(previous: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in previous.items() if k not in _PER_RUN}
    return {
        **kept,
        "status": "running",
        "run": int(previous.get("run") or 0) + 1,
    }


def new_run_marker(at: float) -> RunOutcome:
    """What an input carries to start a new run (`ResilientCompiledStateGraph`)."""
    return {"new_run": at}


def merge_run_log(left: RunOutcome | None, right: RunOutcome | None) -> RunOutcome:
    """Merge a run-log update into the log.

    ``new_run`` (an input's marker) resets what describes one run and numbers
    the next; ``step`` (one step's record, stored as its step row) counts its
    path, unless the update is ``tallied`` (counted in its invoke's tally), and
    is not kept (a whole ``completed_steps``, the partial result's, is kept as
    given); ``run_usage`` (the run's usage as it ends) is ``usage`` (the
    greater of two totals, key by key);
    ``clear`` (`retry_failed`) drops ``usage`` too (the run goes on: its tally
    holds it again), its ``cleared_at`` (when it was told) is the store's only;
    ``context_summary`` appends (the latest `RECENT_SUMMARIES`);
    ``degraded_steps``, ``degraded_sends`` and ``failed_steps`` append new entries; ``failed_step``
    keeps the run's first; ``usage`` adds up; ``counts`` merge; a ``status`` of
    ``partial_complete`` stays (against a step that ran beside the failed one)
    until a new run starts or `retry_failed` clears the failed steps; every
    other key takes the newer value.
    """
    merged: dict[str, Any] = dict(left or {})
    update: Mapping[str, Any] = right or {}
    started = update.get("new_run")
    if started is not None:
        merged = _fresh_run(merged)
    cleared = update.get("clear")
    if cleared:  # steps being re-run (`retry_failed`) are no longer failed or degraded
        merged = _cleared(merged, set(cleared))
    for key, value in update.items():
        if key in _MARKERS:
            continue
        if key == "step":
            # The record itself goes to the store (a step row), not the state;
            # a tallied one is counted in its invoke's tally (`graph._tally`).
            if value.get("status") in _RAN and not update.get("tallied"):
                merged["counts"] = _count(
                    merged.get("counts"), value
                )  # a re-run failed step keeps its path
        elif key == "run_usage":  # the run's usage as it ends (its tally's)
            # Totals only grow: of two steps that end the run side by side, the
            # later total holds the other's usage too.
            known = merged.get("usage") or {}
            merged["usage"] = {**known, **{k: max(v, known.get(k, v)) for k, v in value.items()}}
        elif key == "context_summary":
            merged[key] = [*merged.get(key, []), *value][-RECENT_SUMMARIES:]
        elif key == "usage":
            merged[key] = add_usage(merged.get(key), value)
        elif key == "counts":
            merged[key] = {**merged.get(key, {}), **value}
        elif key in ("degraded_steps", "degraded_sends", "failed_steps"):
            known = list(merged.get(key, []))
            merged[key] = known + [v for v in value if v not in known]
        elif key == "failed_step":
            if value is None or not merged.get(key):
                merged[key] = value
        elif key == "status" and merged.get(key) == "partial_complete" and not (started or cleared):
            continue  # a step that ran beside one that failed for good: the run stopped short
        else:
            merged[key] = value
    if "failed_step" not in merged and merged.get("status") in _ENDS:
        merged["failed_step"] = None  # an ended run names its failed step, or none
    return merged  # type: ignore[return-value]


_ENDS = ("success", "partial_complete")


_RAN = ("completed", "degraded")
#: Keys of an update that mark it (read above), never kept in the log.
_MARKERS = frozenset(("new_run", "clear", "cleared_at", "tallied"))
#: What the state's window keeps of a step (the store keeps all of it).
_BRIEF = ("path", "attempts", "kinds", "ended_at", "summary")


def brief(step: Mapping[str, Any]) -> dict[str, Any]:
    """A step as the state's window keeps it."""
    return {k: v for k in _BRIEF if (v := step.get(k))}


def _cleared(log: dict[str, Any], paths: set[str]) -> dict[str, Any]:
    failed = [f for f in log.get("failed_steps") or [] if f.get("path") not in paths]
    first = log.get("failed_step")
    # The run goes on: its usage is its tally's again (`graph._tally`), until it ends.
    return {
        **{k: v for k, v in log.items() if k != "usage"},
        "failed_steps": failed,
        "failed_step": None if first and first.get("path") in paths else first,
        "degraded_steps": [p for p in log.get("degraded_steps") or [] if p not in paths],
        "degraded_sends": [d for d in log.get("degraded_sends") or [] if d["path"] not in paths],
    }


def _count(counts: dict[str, int] | None, step: StepRecord) -> dict[str, int]:
    """Executions per path, the most recently run `COUNTED_PATHS` only: a loop
    revisits few paths, and a long chain of distinct nodes must not grow the log."""
    base = step_base(step.get("path", ""))
    known = dict(counts) if counts else {}
    seen = known.pop(base, 0)
    known[base] = seen + 1
    while len(known) > COUNTED_PATHS:  # forget the least recently run
        del known[next(iter(known))]
    return known


def step_base(path: str) -> str:
    """A step path without its loop iteration (``review#3`` -> ``review``)."""
    return path.partition("#")[0]


class ResilientState(TypedDict, total=False):
    """Base for the state of a `ResilientStateGraph`: adds the ``resilience`` key.

    Example:
        >>> class State(ResilientState):
        ...     query: str
    """

    resilience: Annotated[RunOutcome, merge_run_log]


def require_resilient_schema(schema: Any) -> None:
    """Refuse a state schema without the run log, saying how to fix it."""
    try:
        hints = get_type_hints(schema, include_extras=True)
    except Exception:
        hints = {}
    metadata = getattr(hints.get("resilience"), "__metadata__", ())
    if merge_run_log not in metadata:
        name = getattr(schema, "__name__", repr(schema))
        raise ConfigError(
            f"the state schema {name} does not extend ResilientState, so the graph has "
            "nowhere to keep its run log. Declare it as "
            f"`class {name}(ResilientState): ...` (from langgraph_resilience import "
            "ResilientState)."
        )


def summarize(output: Any, limit: int = 120) -> str:
    """A short, single-line summary of a node's output.

    Cheap on large outputs: strings are cut before anything is built, and
    collections are summarised by their length, never rendered whole.
    """
    if isinstance(output, dict):
        text = ", ".join(
            [
                f"{k}={v!r}" if type(v) in _PLAIN else f"{k}={_short(v)}"
                for k, v in output.items()
                if k != "resilience"
            ]
        )
    else:
        text = _short(output)
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: Values whose summary is their ``repr`` (`_short`), told by their type alone.
_PLAIN = frozenset((int, float, bool, type(None)))


def _short(value: Any) -> str:
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        cut = value[:40].replace("\n", " ")
        return repr(cut) if len(value) <= 40 else repr(cut)[:-1] + "…'"
    if isinstance(value, (list, tuple, set, dict)):
        return f"<{type(value).__name__} of {len(value)}>"
    return f"<{type(value).__name__}>"
