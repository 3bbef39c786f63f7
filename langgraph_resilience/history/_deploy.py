"""`check_deploy`: every thread that is not finished, checked against a new graph version.

Before a deploy, each thread the store holds in flight (queued, running, paused
on an interrupt, a `Budget` or a `Limit`, or ended with a partial result that
waits for ``retry_failed``) is read once (its latest checkpoint) and planned as
the new graph would plan it on its next run (`graph._versions.plan`): ``ok`` (it
goes on as stored), ``migrates`` (these migrations and renames would run) or
``blocked`` (why: a removed node, a newer version stored it). Nothing is
written. ``langgraph-resilience check-deploy`` prints the report and exits 1 when
a thread is blocked, so a CI pipeline can gate the deploy on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from langgraph_resilience.checkpoint.runlog import _reads as reads
from langgraph_resilience.checkpoint.runlog._reads import SaverOrGraph
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.graph._upgrade import plan_of, versioning_of
from langgraph_resilience.graph._versions import Plan, pending_nodes
from langgraph_resilience.history._runs import alist_runs, list_runs

__all__ = ["DeployReport", "ThreadCheck", "acheck_deploy", "check_deploy"]

#: The run statuses of a thread in flight (a partial result waits for retry_failed).
IN_FLIGHT = ("queued", "running", "paused", "partial_complete")
_ALL = 10**9


@dataclasses.dataclass(frozen=True, kw_only=True)
class ThreadCheck:
    """One thread in flight under the new version.

    Attributes:
        thread_id: the thread.
        status: its run's status (queued, running, paused, partial_complete).
        verdict: ``ok``, ``migrates`` or ``blocked``.
        stored_version: the graph version that stored it (None: unversioned).
        migrations: the migrations that would run, in order.
        renamed: stored node -> new node, for the nodes it has pending.
        reasons: why it is blocked (empty otherwise).
    """

    thread_id: str
    status: str
    verdict: str
    stored_version: int | str | None
    migrations: tuple[int | str, ...] = ()
    renamed: Mapping[str, str] = dataclasses.field(default_factory=dict)
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "renamed": dict(self.renamed)}

    def line(self) -> str:
        """One line of the ``check-deploy`` report."""
        head = f"{self.verdict:<9}{self.thread_id}  ({self.status}, stored v{self.stored_version})"
        if self.verdict == "blocked":
            return f"{head}: {'; '.join(self.reasons)}"
        done = [f"migration to {m!r}" for m in self.migrations]
        done += [f"{old} -> {new}" for old, new in self.renamed.items()]
        return f"{head}: {', '.join(done)}" if done else head


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeployReport:
    """Every thread in flight under a new graph version (`check_deploy`).

    Attributes:
        version: the new graph's version.
        threads: each thread checked, in the store's order (newest first).
    """

    version: int | str | None
    threads: tuple[ThreadCheck, ...]

    @property
    def ok(self) -> list[ThreadCheck]:
        """The threads that go on as stored."""
        return [t for t in self.threads if t.verdict == "ok"]

    @property
    def migrates(self) -> list[ThreadCheck]:
        """The threads a migration or a rename would upgrade on their next run."""
        return [t for t in self.threads if t.verdict == "migrates"]

    @property
    def blocked(self) -> list[ThreadCheck]:
        """The threads the new version cannot take (each says why)."""
        return [t for t in self.threads if t.verdict == "blocked"]

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "threads": [t.to_dict() for t in self.threads]}

    def __str__(self) -> str:
        counts = f"{len(self.ok)} ok, {len(self.migrates)} migrate, {len(self.blocked)} blocked"
        lines = [f"graph version {self.version!r}: {len(self.threads)} threads in flight: {counts}"]
        lines += [t.line() for t in self.threads if t.verdict != "ok"]
        return "\n".join(lines)


def _compiled(saver: Any, builder: Any) -> Any:
    if hasattr(builder, "compile"):
        return builder.compile(checkpointer=saver)
    if hasattr(builder, "builder") and hasattr(builder, "nodes"):
        return builder  # already compiled
    raise ConfigError(
        f"check_deploy takes the new graph's builder (a ResilientStateGraph) or the graph "
        f"compiled from it, got {type(builder).__name__}"
    )


def _verdict(thread: str, status: str, the_plan: Plan) -> ThreadCheck:
    verdict = (
        "blocked"
        if the_plan.blocked
        else "migrates"
        if the_plan.migrations or the_plan.renamed
        else "ok"
    )
    return ThreadCheck(
        thread_id=thread,
        status=status,
        verdict=verdict,
        stored_version=the_plan.stored,
        migrations=the_plan.migrations,
        renamed=dict(the_plan.renamed),
        reasons=the_plan.blocked,
    )


def _in_flight(found: CheckpointTuple | None, status: str) -> bool:
    """Whether the thread's latest checkpoint still has work (a queued run has none yet)."""
    if found is None:
        return False
    if status == "queued" or pending_nodes(found.checkpoint):
        return True
    outcome = (found.checkpoint.get("channel_values") or {}).get("resilience")
    return isinstance(outcome, Mapping) and outcome.get("status") == "partial_complete"


def _threads(runs: Iterable[Any]) -> dict[str, str]:
    """Each thread's newest run in flight (runs come newest first)."""
    found: dict[str, str] = {}
    for run in runs:
        found.setdefault(run.thread_id, run.status)
    return found


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def check_deploy(saver: SaverOrGraph, builder: Any) -> DeployReport:
    """Every thread in flight in ``saver``, checked against the new graph ``builder``.

    Reads each thread's latest checkpoint once; writes nothing.

    Args:
        saver: the store the new version will run on.
        builder: the new version's `ResilientStateGraph` (or the graph compiled from it).

    Example:
        >>> report = check_deploy(saver, build_graph())  # doctest: +SKIP
        >>> [t.thread_id for t in report.blocked]  # doctest: +SKIP
    """
    store = reads.saver_of(saver, "check_deploy")
    graph = _compiled(store, builder)
    versioning = versioning_of(graph)
    checks = []
    for thread, status in _threads(list_runs(saver, status=IN_FLIGHT, limit=_ALL)).items():
        found = store.get_tuple(_config(thread))
        if _in_flight(found, status):
            assert found is not None
            checks.append(_verdict(thread, status, plan_of(graph, found, versioning)))
    return DeployReport(version=versioning.version, threads=tuple(checks))


async def acheck_deploy(saver: SaverOrGraph, builder: Any) -> DeployReport:
    """Async twin of `check_deploy`."""
    store = reads.async_saver_of(saver, "acheck_deploy")
    graph = _compiled(store, builder)
    versioning = versioning_of(graph)
    checks = []
    runs = await alist_runs(saver, status=IN_FLIGHT, limit=_ALL)
    for thread, status in _threads(runs).items():
        found = await store.aget_tuple(_config(thread))
        if _in_flight(found, status):
            assert found is not None
            checks.append(_verdict(thread, status, plan_of(graph, found, versioning)))
    return DeployReport(version=versioning.version, threads=tuple(checks))
