"""`run_report`: what happened in one run of a thread, read from the store.

The step completion map by task path, the timeline of tries and recoveries,
the side effects, budget use, the outcome and what to do next; as plain data
(`RunReport.to_dict`), a coloured Mermaid graph (`RunReport.to_mermaid`) and
text for a terminal (`RunReport.to_text`). `list_runs` lists the runs of the
store (the ``runs`` command).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig

import langgraph_resilience.history._render as render
from langgraph_resilience.checkpoint.runlog import _reads as reads
from langgraph_resilience.checkpoint.runlog._reads import Reads, SaverOrGraph
from langgraph_resilience.errors import ConfigError, UnknownThread, repr_of
from langgraph_resilience.graph._routes import PARTIAL_RESULT
from langgraph_resilience.history._entries import (
    EffectEntry,
    StepEntry,
    TryEntry,
    effect_entries,
    step_entries,
    suggestions_for,
    timeline_of,
)
from langgraph_resilience.history._ledger_runs import ThreadRun, ledger_runs
from langgraph_resilience.history._questions import questions_of
from langgraph_resilience.history._runs import (
    RunSummary,
    alist_runs,
    list_runs,
)

__all__ = [
    "EffectEntry",
    "RunReport",
    "RunSummary",
    "StepEntry",
    "TryEntry",
    "alist_runs",
    "arun_report",
    "list_runs",
    "run_report",
]


@dataclass(frozen=True, kw_only=True)
class RunReport:
    """One run of a thread, as the store tells it.

    Attributes:
        thread_id / run / run_id: the thread, the run's number on it, and its
            `Worker` run id (None for a plain ``invoke``).
        status: running, paused, success, partial_complete, error or cancelled.
        owner / claims: the `Worker` holding it, and how many times one claimed it.
        started_at / ended_at / duration: epoch seconds, and seconds.
        steps: the step completion map, one entry per task path (`StepEntry`).
        timeline: every failed try, completed step and recovery, in time order
            (`TryEntry`).
        effects: the run's side effects (`EffectEntry`).
        recoveries: each recovery (kind, when, by whom, what it redid).
        usage: what the run used (tokens, cost, seconds, steps); budget: its
            limits when known (a top-up given on resume, a Worker run's budget).
        failed_steps / degraded_steps: what ended the run short (each a
            `FailedStep`), and the paths of the steps skipped or replaced.
        suggestions: what to do next.
        error: for a run that ended ``error``, what it raised (``Type: message``).
        task_spec: the run's input, verbatim as it was given (its task
            specification; None when not stored).
        runs_on_thread: how many runs the thread has had.
        graph_version: the graph version the run started on, as text (None: an
            unversioned graph, or a run stored before versions).
        questions: for a paused run, what it asks: the values of the
            ``interrupt()`` calls it waits on (a node's, or a tool's in an agent).
    """

    thread_id: str
    run: int
    run_id: str | None = None
    status: str
    owner: str | None = None
    claims: int = 0
    started_at: float | None = None
    ended_at: float | None = None
    duration: float | None = None
    steps: tuple[StepEntry, ...] = ()
    timeline: tuple[TryEntry, ...] = ()
    effects: tuple[EffectEntry, ...] = ()
    recoveries: tuple[dict[str, Any], ...] = ()
    usage: dict[str, float] | None = None
    budget: dict[str, Any] | None = None
    failed_steps: tuple[dict[str, Any], ...] = ()
    degraded_steps: tuple[str, ...] = ()
    suggestions: tuple[str, ...] = ()
    runs_on_thread: int = 1
    error: str | None = None
    task_spec: Any = None
    graph_version: str | None = None
    questions: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.thread_id, str) or not self.thread_id:
            raise ConfigError(
                f"RunReport.thread_id must be a non-empty str, got {self.thread_id!r}"
            )
        if self.run < 0:
            raise ConfigError(f"RunReport.run must be >= 0 (0: never started), got {self.run}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe data: ``json.dumps(report.to_dict())`` works."""
        found: dict[str, Any] = _json_safe(asdict(self))
        return found

    def node_statuses(self) -> dict[str, str]:
        """What happened to each top-level node (`_report_render.NODE_STATUSES`)."""
        return render.node_statuses([asdict(s) for s in self.steps])

    def to_mermaid(self, graph: Any = None) -> str:
        """The graph in Mermaid, each node coloured by what happened to it:
        completed, retried, fallback, degraded, failed, not reached.

        ``graph``: the compiled graph (or its ``get_graph()`` drawing) to draw
        with every node, reached or not; without it, the nodes the run reached
        are drawn in the order they ran.
        """
        steps = [asdict(s) for s in self.steps]
        nodes, edges = render.drawn(graph) if graph is not None else render.seen(steps)
        tries: dict[str, int] = {}
        own = {render.top_node(s.path) for s in self.steps if "/" not in s.path}
        for s in self.steps:
            name = render.top_node(s.path)
            if "/" not in s.path or name not in own:  # a subgraph node's own tries, if known
                tries[name] = tries.get(name, 0) + s.attempts
        statuses = self.node_statuses()
        if self.status == "partial_complete":  # the run ended at the partial result
            statuses.setdefault(PARTIAL_RESULT, "failed")
        return render.mermaid(nodes, edges, statuses, tries)

    def to_text(self) -> str:
        """The report for a terminal."""
        return _text(self)

    def __str__(self) -> str:
        return self.to_text()


def _json_safe(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    return str(value)


def _text(r: RunReport) -> str:
    head = f"thread {r.thread_id} · run {r.run}"
    if r.run_id:
        head += f" ({r.run_id})"
    if r.graph_version is not None:
        head += f" · graph v{r.graph_version}"
    head += f" · {r.status} · {len(r.steps)} steps · {render.seconds(r.duration)}"
    if r.owner:
        head += f" · worker {r.owner}"
    lines = [head]
    if r.error:
        lines.append(f"error: {r.error}")
    if r.task_spec is not None:
        lines.append(f"input: {_one_line(r.task_spec)}")
    lines += [f"asks: {_one_line(q)}" for q in r.questions]
    lines += ["", "steps:"]
    for s in r.steps:
        redone = f" · redone {s.redone}x" if s.redone else ""
        lines.append(
            f"  {s.path:<24} {s.status:<11} tries {s.attempts:<2} "
            f"{render.clock(s.started_at)} {render.seconds(s.duration)}{redone}"
        )
    lines += ["", "timeline:"]
    for t in r.timeline:
        lines.append(f"  {render.clock(t.at)}  {t.describe()}")
    if r.effects:
        lines += ["", "effects:"]
        for e in r.effects:
            lines.append(f"  {e.describe()}")
    if r.usage:
        used = ", ".join(f"{k}={v:g}" for k, v in sorted(r.usage.items()))
        limits = ", ".join(f"{k}={v}" for k, v in sorted((r.budget or {}).items()))
        lines += ["", f"usage: {used}" + (f" (budget: {limits})" if limits else "")]
    if r.failed_steps or r.degraded_steps:
        lines += ["", "outcome:"]
        for f in r.failed_steps:
            lines.append(f"  failed: {f.get('path')} ({f.get('kind')}: {f.get('message')})")
        for p in r.degraded_steps:
            lines.append(f"  degraded: {p}")
    if r.suggestions:
        lines += ["", "next:"] + [f"  - {s}" for s in r.suggestions]
    return "\n".join(lines) + "\n"


def _one_line(value: Any, limit: int = 400) -> str:
    """A run's input on one line, cut at ``limit`` characters."""
    text = " ".join(repr_of(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _chosen(runs: Sequence[ThreadRun], run: int | str | None, thread: str) -> ThreadRun:
    if run is None:
        started = [r for r in runs if r.run > 0]
        return (started or list(runs))[-1]
    for r in runs:
        if (isinstance(run, str) and r.run_id == run) or (isinstance(run, int) and r.run == run):
            return r
    known = ", ".join(str(r.run) + (f" ({r.run_id})" if r.run_id else "") for r in runs)
    raise UnknownThread(f"thread {thread!r} has no run {run!r}; its runs: {known}")


def _report(
    loads: Callable[[tuple[str, bytes]], Any], thread: str, run: int | str | None
) -> Reads[RunReport]:
    runs = yield from ledger_runs(thread)
    tuple_ = yield reads.checkpoint({"configurable": {"thread_id": thread}})
    if not runs and tuple_ is None:
        raise UnknownThread(
            f"thread {thread!r} is not in this store (no checkpoint, no run); "
            "`langgraph-resilience runs` lists the threads it has"
        )
    if not runs:
        runs = [ThreadRun(thread_id=thread, run=1)]
    chosen = _chosen(runs, run, thread)
    attempts = yield reads.thread_attempts(thread)
    effects = yield reads.effects(thread)
    values = tuple_.checkpoint.get("channel_values", {}) if tuple_ is not None else {}
    log = values.get("resilience") if isinstance(values, Mapping) else None
    current = isinstance(log, Mapping) and int(log.get("run") or 1) == chosen.run
    log = log if current and isinstance(log, Mapping) else {}
    steps = step_entries(chosen)
    usage = dict(log.get("usage") or {}) or _summed_usage(chosen)
    started = chosen.started_at
    ended = chosen.ended_at if chosen.ended else None
    return RunReport(
        thread_id=thread,
        run=chosen.run,
        run_id=chosen.run_id,
        status=chosen.status,
        owner=chosen.owner,
        claims=chosen.claims,
        started_at=started,
        ended_at=ended,
        duration=(ended - started) if started is not None and ended is not None else None,
        steps=steps,
        timeline=timeline_of(chosen, attempts),
        effects=effect_entries(chosen, effects),
        recoveries=tuple(rec.to_dict() for rec in chosen.recoveries),
        usage=usage or None,
        budget=dict(log.get("budget") or {}) or _worker_budget(chosen, loads),
        failed_steps=tuple(dict(f) for f in (log.get("failed_steps") or [])) or _failed_of(chosen),
        degraded_steps=tuple(str(p) for p in (log.get("degraded_steps") or []))
        or tuple(s.path for s in steps if s.status in ("degraded", "fallback")),
        suggestions=suggestions_for(
            chosen,
            list(log.get("recovery_suggestions") or []),
            keeps_log=isinstance(values, Mapping) and "resilience" in values,
        ),
        runs_on_thread=len([r for r in runs if r.run > 0]) or 1,
        error=chosen.error,
        task_spec=_task_spec(chosen, loads),
        graph_version=chosen.graph_version,
        questions=questions_of(tuple_.pending_writes)
        if chosen.status == "paused" and tuple_ is not None
        else (),
    )


def _task_spec(run: ThreadRun, loads: Callable[[tuple[str, bytes]], Any]) -> Any:
    """The run's input as it was given (None when not stored or not decodable here)."""
    if run.task_spec is None:
        return None
    try:
        return loads(run.task_spec)
    except Exception:  # an input this process cannot decode: not reported
        return None


def _worker_budget(
    run: ThreadRun, loads: Callable[[tuple[str, bytes]], Any]
) -> dict[str, Any] | None:
    """The budget a `Worker` run was submitted (or last resumed) with."""
    if run.budget is None:
        return None
    try:
        found = loads(run.budget)
    except Exception:  # a budget this process cannot decode: not reported
        return None
    return dict(found) if isinstance(found, Mapping) else None


def _failed_of(run: ThreadRun) -> tuple[dict[str, Any], ...]:
    """An earlier run's failed steps, from its step records (the run log keeps
    the current run's only)."""
    if run.status != "partial_complete":
        return ()
    return tuple(
        {"path": s.get("path"), "node": s.get("node"), "kind": (s.get("kinds") or [None])[-1]}
        for s in run.steps
        if s.get("status") == "failed"
    )


def _summed_usage(run: ThreadRun) -> dict[str, float]:
    total: dict[str, float] = {}
    for step in run.steps:
        for k, v in (step.get("usage") or {}).items():
            if isinstance(v, (int, float)):
                total[k] = total.get(k, 0.0) + float(v)
    return total


def run_report(
    checkpointer: SaverOrGraph, thread_id: str, *, run: int | str | None = None
) -> RunReport:
    """What happened in one run of a thread.

    Args:
        checkpointer: a resilient saver (or a graph compiled with one).
        thread_id: the thread.
        run: the run's number on the thread, or its `Worker` run id (default:
            the latest run).

    Raises:
        UnknownThread: the store has no such thread (or no such run of it); a
            `LookupError` (and a `RunStateError`).
        ConfigError: not a resilient saver.

    Example:
        >>> report = run_report(saver, "job-42")  # doctest: +SKIP
        >>> print(report.to_text()); print(report.to_mermaid(graph))  # doctest: +SKIP
    """
    saver = reads.saver_of(checkpointer, "run_report")
    saver.get_tuple(_latest(thread_id))  # restores an archived one
    return reads.drive(saver, _report(saver.serde.loads_typed, str(thread_id), run))


async def arun_report(
    checkpointer: SaverOrGraph, thread_id: str, *, run: int | str | None = None
) -> RunReport:
    """Async twin of `run_report` (on an async resilient saver)."""
    saver = reads.async_saver_of(checkpointer, "arun_report")
    await saver.aget_tuple(_latest(thread_id))  # restores an archived one
    return await reads.adrive(saver, _report(saver.serde.loads_typed, str(thread_id), run))


def _latest(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": str(thread_id)}}
