"""`recovery_metrics`: the four recovery metrics and the waste, from the store.

Every figure is an SQL aggregate over the run ledger's rows (runs, steps,
recoveries: `checkpoint.runlog._run_metrics`, which documents what a redone step is)
and the effects ledger, plus the save counters, so the figures add up across
workers, processes and restarts and cost what the runs inside ``since`` cost.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from langgraph_resilience.checkpoint.runlog import _reads as reads
from langgraph_resilience.checkpoint.runlog._reads import Reads, SaverOrGraph
from langgraph_resilience.checkpoint.runlog._run_log_reads import ENDED
from langgraph_resilience.checkpoint.runlog._run_metrics import Redone, RunCounts
from langgraph_resilience.checkpoint.store._counters import (
    CHECKPOINT_FAILED,
    CHECKPOINT_OK,
    WRITES_FAILED,
    WRITES_OK,
)
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.history._ledger_runs import RECOVERY_KINDS
from langgraph_resilience.telemetry import _serde_events

__all__ = [
    "COUNTS",
    "METRICS",
    "Metric",
    "RecoveryMetrics",
    "arecovery_metrics",
    "recovery_metrics",
]

Since = datetime | timedelta | float | int | None


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


@dataclass(frozen=True, kw_only=True, slots=True)
class Metric:
    """One recovery metric: a field of `RecoveryMetrics`, the rate of two of its
    counts (``numerator`` / ``denominator``; None when the denominator is 0).

    Attributes:
        name: the field (``partial_completion_rate``); its `title`, how a table
            or a plot names it, is the name in words.
        numerator / denominator: the count fields it is made of.
        numerator_says / denominator_says: what each count is, in a sentence
            (``3 partial / 10 ended``).
    """

    name: str
    numerator: str
    denominator: str
    numerator_says: str
    denominator_says: str

    @property
    def title(self) -> str:
        """How a table or a plot names it: ``partial completion rate``."""
        return self.name.replace("_", " ")

    def made_of(self, m: RecoveryMetrics) -> str:
        """The counts it is made of, in words."""
        part, whole = getattr(m, self.numerator), getattr(m, self.denominator)
        return f"{part} {self.numerator_says} / {whole} {self.denominator_says}"


#: The recovery metrics, in the order every reader shows them (the API's
#: `RecoveryMetrics`, the ``metrics`` command, the console's plots): a new
#: metric is a field of `RecoveryMetrics` and one entry here.
METRICS = (
    Metric(
        name="partial_completion_rate",
        numerator="runs_partial",
        denominator="runs_ended",
        numerator_says="partial",
        denominator_says="ended",
    ),
    Metric(
        name="checkpoint_save_success_rate",
        numerator="checkpoint_writes_succeeded",
        denominator="checkpoint_writes_tried",
        numerator_says="stored",
        denominator_says="tried",
    ),
    Metric(
        name="recovery_success_rate",
        numerator="runs_resumed_succeeded",
        denominator="runs_resumed_ended",
        numerator_says="succeeded",
        denominator_says="recovered and ended",
    ),
    Metric(
        name="steps_redone_per_recovery",
        numerator="steps_redone",
        denominator="recoveries",
        numerator_says="redone",
        denominator_says="recoveries",
    ),
)
#: The counts of `RecoveryMetrics` (whole numbers that add up over time: the
#: console subtracts one bucket's from the next's).
COUNTS = (
    "runs",
    "runs_ended",
    "runs_succeeded",
    "runs_partial",
    "runs_failed",
    "checkpoint_writes_tried",
    "checkpoint_writes_succeeded",
    "checkpoint_writes_failed",
    "runs_resumed",
    "runs_resumed_ended",
    "runs_resumed_succeeded",
    "recoveries",
    "steps_redone",
    "effects_replayed",
    "effects_reexecuted",
)


@dataclass(frozen=True, kw_only=True)
class RecoveryMetrics:
    """The four recovery metrics, their raw counts, and the waste.

    A *recovery* is a run going on from a stored checkpoint after it stopped,
    counted by kind (`recoveries_by_kind`):

    - ``crash``: ``invoke(None)`` / ``stream(None)`` on a thread whose run was
      still running when its process died (a resume after a crash);
    - ``takeover``: a `Worker` claiming a run whose worker's lease expired;
    - ``retry_failed``: `retry_failed` re-running the failed steps of a run
      that ended with a partial result;
    - ``budget``: a run paused by its `Budget` resumed (with a top-up or not);
    - ``human``: a run paused by ``interrupt()`` resumed with
      ``Command(resume=...)`` or `Worker.resume`.

    A `Worker` releasing a run (drain, store outage) and another claiming it is
    not a recovery: the run stopped at a step boundary and nothing is redone.

    Attributes:
        partial_completion_rate: runs ended ``partial_complete`` / runs ended
            (None: no run ended).
        checkpoint_save_success_rate: checkpoint and task-write tries that
            succeeded / tried, each store retry counted (None: none tried).
            Counted per process and per hour, for every graph: ``since`` counts
            the whole hour it falls in, and ``graph`` does not narrow it.
        recovery_success_rate: runs resumed by a recovery that then ended
            ``success`` / runs resumed that have ended (a run still running or
            paused is left out until it ends; None: none ended).
        steps_redone_per_recovery: node executions repeated because of a
            recovery / recoveries (None: no recovery). Redone: for a crash or
            takeover, the steps of the checkpoint it resumed that ended after it
            (the step in flight; a step of that checkpoint that had not started
            counts too: the store cannot tell them apart); for a budget or
            human resume, the paused steps (LangGraph runs an interrupted node
            again from its start); for `retry_failed`, the steps it re-ran.
        runs / runs_ended / runs_succeeded / runs_partial / runs_failed: runs
            counted, and how those that ended ended (failed: ``error`` or
            ``cancelled``).
        checkpoint_writes_tried / _succeeded / _failed: store tries.
        runs_resumed / runs_resumed_ended / runs_resumed_succeeded: runs with
            at least one recovery, those of them that ended, and ended ``success``.
        recoveries / recoveries_by_kind / steps_redone / steps_redone_by_kind:
            recoveries and the steps they redid, in all and by kind.
        seconds_redone: the time the redone executions took (the time their
            lost first runs took is not stored; this is its estimate).
        tokens_redone: model tokens the redone executions used.
        effects_replayed: side effects a redone step found recorded as done in
            the ledger and replayed instead of calling again.
        effects_reexecuted: side effects a redone step called again under the
            same idempotency key, their first call's outcome never recorded
            (a ``side_effect`` without ``reconcile`` that stopped mid-call).
        since: epoch seconds the figures start at (None: all).
        graph: the node names the runs were narrowed to (None: every run).
        serde_events: LangGraph's msgpack allowlist events this process saw
            since it started, by kind (``msgpack_unregistered_allowed``,
            ``msgpack_blocked``, ``msgpack_method_blocked``); not from the store,
            and not narrowed by ``since`` or ``graph``.

    Example:
        >>> m = recovery_metrics(saver, since=timedelta(hours=24))  # doctest: +SKIP
        >>> m.partial_completion_rate, m.to_dict()["recoveries_by_kind"]  # doctest: +SKIP
        (0.3, {'crash': 0, 'takeover': 1, 'retry_failed': 2, 'budget': 0, 'human': 0})
    """

    partial_completion_rate: float | None
    checkpoint_save_success_rate: float | None
    recovery_success_rate: float | None
    steps_redone_per_recovery: float | None
    runs: int = 0
    runs_ended: int = 0
    runs_succeeded: int = 0
    runs_partial: int = 0
    runs_failed: int = 0
    checkpoint_writes_tried: int = 0
    checkpoint_writes_succeeded: int = 0
    checkpoint_writes_failed: int = 0
    runs_resumed: int = 0
    runs_resumed_ended: int = 0
    runs_resumed_succeeded: int = 0
    recoveries: int = 0
    recoveries_by_kind: dict[str, int] = field(default_factory=dict)
    steps_redone: int = 0
    steps_redone_by_kind: dict[str, int] = field(default_factory=dict)
    seconds_redone: float = 0.0
    tokens_redone: float = 0.0
    effects_replayed: int = 0
    effects_reexecuted: int = 0
    since: float | None = None
    graph: list[str] | None = None
    serde_events: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in (
            "partial_completion_rate",
            "checkpoint_save_success_rate",
            "recovery_success_rate",
        ):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ConfigError(f"RecoveryMetrics.{name} must be within [0, 1] or None")
        unknown = set(self.recoveries_by_kind) - set(RECOVERY_KINDS)
        if unknown:
            raise ConfigError(
                f"RecoveryMetrics: unknown recovery kind(s) {sorted(unknown)}; "
                f"the kinds are {', '.join(RECOVERY_KINDS)}"
            )

    @classmethod
    def of_counts(cls, counts: Mapping[str, int], **rest: Any) -> RecoveryMetrics:
        """The metrics of ``counts`` (`COUNTS`, each missing one 0): each rate of
        `METRICS` from its two counts; ``rest``: the fields that are no count
        (by kind, seconds and tokens redone, ``since``, ``graph``)."""
        known = {name: int(counts.get(name, 0)) for name in COUNTS}
        rates = {m.name: _rate(known[m.numerator], known[m.denominator]) for m in METRICS}
        values: dict[str, Any] = {**rates, **known, **rest}
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe data (rates may be None)."""
        return asdict(self)


def since_of(since: Since, now: float | None = None) -> float | None:
    """``since`` as epoch seconds: a datetime (naive: local time), a timedelta
    back from now, or a number of seconds back from now."""
    now = time.time() if now is None else now
    if since is None:
        return None
    if isinstance(since, datetime):
        return since.timestamp()
    if isinstance(since, timedelta):
        return now - since.total_seconds()
    if isinstance(since, bool) or not isinstance(since, (int, float)) or not math.isfinite(since):
        raise ConfigError(
            f"since must be a datetime, a timedelta or seconds back from now, got {since!r}"
        )
    if since < 0:
        raise ConfigError(f"since in seconds back from now must be >= 0, got {since!r}")
    return now - float(since)


def nodes_of(graph: Any) -> frozenset[str] | None:
    """The node names a ``graph=`` filter narrows runs to: of a compiled graph or
    a builder, or given as names."""
    if graph is None:
        return None
    nodes = getattr(graph, "nodes", None)
    if isinstance(nodes, Mapping):
        return frozenset(str(n) for n in nodes if not str(n).startswith("__"))
    if isinstance(graph, str):
        return frozenset([graph])
    if isinstance(graph, Iterable):
        return frozenset(str(n) for n in graph)
    raise ConfigError(
        f"graph= takes a compiled graph, its builder, or node names; got {type(graph).__name__}"
    )


def _metrics(since: float | None, nodes: frozenset[str] | None) -> Reads[RecoveryMetrics]:
    counters: dict[str, int] = yield reads.counters(since)
    found: RunCounts = yield reads.metrics(since, sorted(nodes) if nodes is not None else None)
    status = found.by_status
    ended = sum(n for s, n in status.items() if s in ENDED)
    partial = status.get("partial_complete", 0)
    resumed = found.resumed_by_status
    resumed_ended = sum(n for s, n in resumed.items() if s in ENDED)
    resumed_ok = resumed.get("success", 0)
    kinds = {k: found.by_kind.get(k, Redone()) for k in RECOVERY_KINDS}
    recoveries = sum(k.recoveries for k in kinds.values())
    steps_redone = sum(k.steps for k in kinds.values())
    ok = counters.get(CHECKPOINT_OK, 0) + counters.get(WRITES_OK, 0)
    failed = counters.get(CHECKPOINT_FAILED, 0) + counters.get(WRITES_FAILED, 0)
    counts = {
        "runs": sum(status.values()),
        "runs_ended": ended,
        "runs_succeeded": status.get("success", 0),
        "runs_partial": partial,
        "runs_failed": status.get("error", 0) + status.get("cancelled", 0),
        "checkpoint_writes_tried": ok + failed,
        "checkpoint_writes_succeeded": ok,
        "checkpoint_writes_failed": failed,
        "runs_resumed": sum(resumed.values()),
        "runs_resumed_ended": resumed_ended,
        "runs_resumed_succeeded": resumed_ok,
        "recoveries": recoveries,
        "steps_redone": steps_redone,
        "effects_replayed": sum(k.effects for k in kinds.values()),
        "effects_reexecuted": sum(k.reexecuted for k in kinds.values()),
    }
    return RecoveryMetrics.of_counts(
        counts,
        recoveries_by_kind={k: v.recoveries for k, v in kinds.items()},
        steps_redone_by_kind={k: v.steps for k, v in kinds.items()},
        seconds_redone=round(sum(k.seconds for k in kinds.values()), 6),
        tokens_redone=sum(k.tokens for k in kinds.values()),
        since=since,
        graph=sorted(nodes) if nodes is not None else None,
        serde_events=_serde_events.counts(),
    )


def recovery_metrics(
    checkpointer: SaverOrGraph, *, since: Since = None, graph: Any = None
) -> RecoveryMetrics:
    """The four recovery metrics of the runs in ``checkpointer``'s store.

    Args:
        checkpointer: a resilient saver (or a graph compiled with one).
        since: only runs seen and recoveries made from then on: a datetime, a
            timedelta or a number of seconds back from now.
        graph: only runs of this graph (a compiled graph, its builder, or node
            names): runs whose steps all ran nodes of it.

    See `RecoveryMetrics` for what each figure counts and what a recovery is.

    Raises:
        ConfigError: not a resilient saver, or a bad ``since``/``graph``.

    Example:
        >>> recovery_metrics(saver).partial_completion_rate  # doctest: +SKIP
        0.3
    """
    saver = reads.saver_of(checkpointer, "recovery_metrics")
    return reads.drive(saver, _metrics(since_of(since), nodes_of(graph)))


async def arecovery_metrics(
    checkpointer: SaverOrGraph, *, since: Since = None, graph: Any = None
) -> RecoveryMetrics:
    """Async twin of `recovery_metrics` (on an async resilient saver)."""
    saver = reads.async_saver_of(checkpointer, "arecovery_metrics")
    steps = _metrics(since_of(since), nodes_of(graph))
    return await reads.adrive(saver, steps)
