"""The run log kept in ``state["resilience"]``, and the reducer that merges it.

Every entry is plain data (str, numbers, lists, dicts), so it is stored in every
checkpoint with LangGraph's own serializer and survives a crash with the state.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict, get_type_hints

from langgraph_resilience.budget import add_usage
from langgraph_resilience.errors import ConfigError

__all__ = ["ResilientState", "RunOutcome", "merge_run_log", "require_resilient_schema"]


class StepRecord(TypedDict, total=False):
    status: str  # completed | degraded | fallback | failed
    attempts: int
    kind: str  # the last failure's kind; absent when no try failed
    completed_at: float  # seconds since the epoch


class CompletedStep(TypedDict):
    node: str
    step: int | None
    completed_at: float  # seconds since the epoch
    summary: str


class FailedStep(TypedDict):
    node: str
    kind: str
    reason: str
    error_type: str
    message: str
    attempts: int
    task: str | None  # the failed task's namespace and id (keeps its side-effect keys)


class RunOutcome(TypedDict, total=False):
    """``state["resilience"]``: the run log and, at the end, the outcome.

    Keys:
        status: ``"running"``, then ``"success"`` or ``"partial_complete"``.
        task_spec: the run's first input, verbatim.
        steps: per executed node, its status, attempts, last failure kind and
            completion time (the step completion map; times are epoch seconds).
        completed_steps: node, step, completion time and a short summary of the
            output, in order.
        failed_step: the step that ended the run (None on success).
        degraded_steps: nodes that failed and were skipped or replaced.
        partial_output: the state when the run stopped short.
        recovery_suggestions: what to do next, by failure kind.
        context_summary: what context compression kept, and when.
        usage: what the run used so far: ``tokens``, ``cost``, ``seconds`` (of
            steps), ``steps`` (see `Budget`).
        budget: a budget given on resume (``Command(resume=Budget(...))``),
            in force from then on.
    """

    status: str
    task_spec: Any
    steps: dict[str, StepRecord]
    completed_steps: list[CompletedStep]
    failed_step: FailedStep | None
    degraded_steps: list[str]
    partial_output: dict[str, Any] | None
    recovery_suggestions: list[str]
    context_summary: list[dict[str, Any]]
    usage: dict[str, float]
    budget: dict[str, Any]


_APPENDED = ("completed_steps", "context_summary")


def merge_run_log(left: RunOutcome | None, right: RunOutcome | None) -> RunOutcome:
    """Merge a node's run-log update into the log.

    ``task_spec`` keeps its first value, ``steps`` merges by node,
    ``completed_steps`` and ``context_summary`` append, ``degraded_steps``
    appends new names, ``usage`` adds up, and every other key takes the newer
    value.
    """
    merged: dict[str, Any] = dict(left or {})
    update: dict[str, Any] = dict(right or {})
    for key, value in update.items():
        if key == "task_spec":
            merged.setdefault(key, value)
        elif key == "steps":
            merged[key] = {**merged.get(key, {}), **value}
        elif key in _APPENDED:
            merged[key] = [*merged.get(key, []), *value]
        elif key == "usage":
            merged[key] = add_usage(merged.get(key), value)
        elif key == "degraded_steps":
            known = list(merged.get(key, []))
            merged[key] = known + [v for v in value if v not in known]
        else:
            merged[key] = value
    return merged  # type: ignore[return-value]


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
        text = ", ".join(f"{k}={_short(v)}" for k, v in output.items() if k != "resilience")
    else:
        text = _short(output)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short(value: Any) -> str:
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        cut = value[:40].replace("\n", " ")
        return repr(cut) if len(value) <= 40 else repr(cut)[:-1] + "…'"
    if isinstance(value, (list, tuple, set, dict)):
        return f"<{type(value).__name__} of {len(value)}>"
    return f"<{type(value).__name__}>"
