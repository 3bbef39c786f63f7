"""`check_deploy`: every thread that is not finished, checked against a new graph version.

Before a deploy, each thread the store holds in flight (running, paused on an
interrupt, a `Budget` or a `Limit`, or ended with a partial result that waits
for ``retry_failed``; a queued `Worker` run that has not started has no state
yet, and nothing to check) is read once, all in one read
(`checkpoint.runlog._heads`; on Redis, each thread's rows and head in one
script, the threads one after another: `redis.runlog._runlog_parts`), and planned as
the new graph would plan it on its next run (`graph._versions.plan`): ``ok`` (it
goes on as stored), ``migrates`` (these migrations and renames would run) or
``blocked`` (why: a removed node, a newer version stored it, a required field
its state lacks with no migration to add it, a degraded step of a node this
version makes critical, a side effect its re-running task recorded under a name
no side effect of this version has). Nothing is
written. ``langgraph-resilience check-deploy`` prints the report and exits 1 when
a thread is blocked, so a CI pipeline can gate the deploy on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from langgraph_resilience.checkpoint.runlog import _reads as reads
from langgraph_resilience.checkpoint.runlog._heads import Head
from langgraph_resilience.checkpoint.runlog._reads import SaverOrGraph
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.graph._upgrade import critical_nodes, required_of, versioning_of
from langgraph_resilience.graph._versions import (
    VERSION_KEY,
    Plan,
    defined_effects,
    missing_fields,
    node_of,
    pending_nodes,
    plan,
)

__all__ = ["DeployReport", "ThreadCheck", "acheck_deploy", "check_deploy"]


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


class _Planner:
    """Plans heads; threads stored alike (the same version, pending nodes, failed
    node and facts of the ledger: most of a store) share one plan."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.versioning = versioning_of(graph)
        self.nodes = frozenset(graph.nodes)
        self.required = required_of(graph)
        self.critical = critical_nodes(graph)
        self.effect_names = defined_effects()
        self.plans: dict[tuple[Any, ...], Plan] = {}

    def check(self, head: Head, checkpoint: Mapping[str, Any]) -> ThreadCheck:
        failed = node_of(head.failed_step) if head.failed_step else None
        failed = failed if head.status == "partial_complete" else None
        stored = head.metadata.get(VERSION_KEY)
        stored = stored if isinstance(stored, int | str) else None
        pending = pending_nodes(checkpoint)
        missing = missing_fields(checkpoint, self.required) if self.required else frozenset()
        key = (type(stored), stored, pending, failed, missing, head.degraded, head.effects)
        the_plan = self.plans.get(key)
        if the_plan is None:
            the_plan = self.plans[key] = plan(
                self.versioning,
                stored=stored,
                pending=pending,
                failed_node=failed,
                nodes=self.nodes,
                missing=missing,
                degraded=head.degraded,
                critical=self.critical,
                effects=head.effects,
                effect_names=self.effect_names,
            )
        return _verdict(head.thread_id, head.status, the_plan)


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def check_deploy(saver: SaverOrGraph, builder: Any) -> DeployReport:
    """Every thread in flight in ``saver``, checked against the new graph ``builder``.

    One read of every thread's head (its newest run and latest checkpoint);
    writes nothing.

    Args:
        saver: the store the new version will run on.
        builder: the new version's `ResilientStateGraph` (or the graph compiled from it).

    Example:
        >>> report = check_deploy(saver, build_graph())  # doctest: +SKIP
        >>> [t.thread_id for t in report.blocked]  # doctest: +SKIP
    """
    store = reads.saver_of(saver, "check_deploy")
    planner = _Planner(_compiled(store, builder))
    checks = []
    for head in store.history.heads():
        checkpoint: Mapping[str, Any] = head.checkpoint
        if head.sends_in_blob:  # a fan-out paused mid-step: its sends are read in full
            found = store.get_tuple(_config(head.thread_id))
            checkpoint = found.checkpoint if found is not None else checkpoint
        checks.append(planner.check(head, checkpoint))
    return DeployReport(version=planner.versioning.version, threads=tuple(checks))


async def acheck_deploy(saver: SaverOrGraph, builder: Any) -> DeployReport:
    """Async twin of `check_deploy`."""
    store = reads.async_saver_of(saver, "acheck_deploy")
    planner = _Planner(_compiled(store, builder))
    checks = []
    for head in await store.history.aheads():
        checkpoint: Mapping[str, Any] = head.checkpoint
        if head.sends_in_blob:
            found = await store.aget_tuple(_config(head.thread_id))
            checkpoint = found.checkpoint if found is not None else checkpoint
        checks.append(planner.check(head, checkpoint))
    return DeployReport(version=planner.versioning.version, threads=tuple(checks))
