"""`FaultPlan`: which failures to inject where (the faults are in `_faults`),
and `FaultPlan.apply`, which puts them into a compiled graph (`_taps`).

A plan is immutable; each builder method returns a new plan. The same plan can
be applied to many graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from langgraph_resilience.errors import ConfigError
from langgraph_resilience.testing._faults import (
    CrashFault,
    CrashWhen,
    NodeFault,
    StoreFault,
    make_error,
    matches,
    try_numbers,
)
from langgraph_resilience.testing._saver_taps import tap_saver
from langgraph_resilience.testing._taps import Session, Tracker, instrument

__all__ = ["FaultPlan"]


@dataclass(frozen=True, kw_only=True)
class FaultPlan:
    """Failures to inject into a graph without changing its code.

    Build it with the methods below (each returns a new plan) and apply it with
    `apply` (or let `recovery_suite` build and apply its own).

    Example:
        >>> from langgraph_resilience import TransientError
        >>> plan = (
        ...     FaultPlan()
        ...     .fail("search", TransientError("rate limited"), tries=(1, 2))
        ...     .crash("draft")
        ...     .fail_checkpoint_write(at=3)
        ... )
        >>> len(plan.faults)
        3
    """

    faults: tuple[NodeFault | CrashFault | StoreFault, ...] = ()

    def __post_init__(self) -> None:
        for fault in self.faults:
            if not isinstance(fault, (NodeFault, CrashFault, StoreFault)):
                raise ConfigError(
                    f"a FaultPlan holds NodeFault, CrashFault or StoreFault, got {fault!r}; "
                    "build it with FaultPlan().fail(...), .crash(...), .fail_checkpoint_write(...)"
                )

    def _with(self, fault: NodeFault | CrashFault | StoreFault) -> FaultPlan:
        return replace(self, faults=(*self.faults, fault))

    def fail(
        self,
        path: str,
        error: BaseException | type[BaseException] | Callable[[], BaseException],
        *,
        tries: int | tuple[int, ...] = 1,
    ) -> FaultPlan:
        """Raise ``error`` inside the step at ``path`` on the given tries.

        The error is raised where the node's own code runs, inside its
        `NodePolicy`: a `TransientError` is retried, a `ValidationFailed` is
        retried with ``adapt``, a `PermanentError` routes to the fallback or the
        partial result, as if the node had raised it.

        Example:
            >>> plan = FaultPlan().fail("draft", ValueError, tries=(1, 2, 3))
        """
        return self._with(NodeFault(path=path, make=make_error(error), tries=try_numbers(tries)))

    def crash(self, path: str, *, when: CrashWhen = "after", kill: bool = False) -> FaultPlan:
        """Crash the run at the step at ``path``: ``"after"`` its body ran and
        before its writes are stored (the worst moment: its work is done and
        lost), ``"before"`` the body starts, or ``"stored"`` right after its
        writes were stored, before the next step runs (for a handoff,
        ``Command(graph=Command.PARENT)``: the handoff is stored, the next agent
        has not started).

        ``kill=False`` raises `SimulatedCrash` and cuts the saver off, leaving the
        store as a kill would; ``kill=True`` sends this process SIGKILL (run the
        graph in a child process to use it).

        Example:
            >>> plan = FaultPlan().crash("notify")
        """
        return self._with(CrashFault(path=path, when=when, kill=kill))

    def crash_after_effect(self, name: str, *, call: int = 1, kill: bool = False) -> FaultPlan:
        """Crash right after the ``call``-th call of the `side_effect` ``name`` in
        the run returned, before its outcome is stored (what a kill during the
        call leaves too): the window where the resumed run calls it again with
        the same idempotency key unless ``reconcile`` settles it.

        Example:
            >>> plan = FaultPlan().crash_after_effect("send_report")
        """
        return self._with(CrashFault(effect=name, call=call, kill=kill))

    def fail_checkpoint_write(
        self,
        *,
        at: int = 1,
        times: int = 1,
        error: BaseException | type[BaseException] | Callable[[], BaseException] | None = None,
    ) -> FaultPlan:
        """Make the ``at``-th checkpoint write (``put``) of the run raise, ``times``
        times in a row (default: `StoreUnavailable`, what a saver raises when its
        own retries are spent).

        Example:
            >>> plan = FaultPlan().fail_checkpoint_write(at=2)
        """
        fault = StoreFault(target="checkpoint", at=at, times=times)
        return self._with(fault if error is None else replace(fault, make=make_error(error)))

    def fail_writes(
        self,
        path: str,
        *,
        times: int = 1,
        error: BaseException | type[BaseException] | Callable[[], BaseException] | None = None,
    ) -> FaultPlan:
        """Make storing the writes of the step at ``path`` raise (a partial
        checkpoint: the step ran, its output is not stored).

        Example:
            >>> plan = FaultPlan().fail_writes("draft")
        """
        fault = StoreFault(target="writes", path=path, times=times)
        return self._with(fault if error is None else replace(fault, make=make_error(error)))

    # -- what the taps ask -----------------------------------------------------------

    def node_fault(self, path: str, try_number: int) -> BaseException | None:
        """The error to raise in this try of the step at ``path``, if any."""
        for fault in self.faults:
            if (
                isinstance(fault, NodeFault)
                and try_number in fault.tries
                and matches(fault.path, path)
            ):
                return fault.make()
        return None

    def crash_at(self, path: str, when: CrashWhen) -> CrashFault | None:
        """The crash aimed at this step and moment, if any."""
        for fault in self.faults:
            if (
                isinstance(fault, CrashFault)
                and fault.path is not None
                and fault.when == when
                and matches(fault.path, path)
            ):
                return fault
        return None

    def crash_after(self, effect: str, call: int) -> CrashFault | None:
        """The crash aimed right after this call of an effect, if any."""
        for fault in self.faults:
            if isinstance(fault, CrashFault) and fault.effect == effect and fault.call == call:
                return fault
        return None

    def store_faults(self) -> tuple[StoreFault, ...]:
        """The store faults of the plan."""
        return tuple(f for f in self.faults if isinstance(f, StoreFault))

    # -- putting it into a graph -------------------------------------------------------

    def apply(self, graph: Pregel[Any], *, tracker: Tracker | None = None) -> Pregel[Any]:
        """A copy of the compiled ``graph`` with this plan's faults in it.

        The graph's nodes are tapped on the copy; the store faults and the crash
        cut-off go on the graph's saver itself: once the plan crashes a run, that
        saver refuses every write (a killed process writes nothing more). Recover
        with a new saver on the same store and the graph without the plan, as a
        restarted process would. ``tracker`` collects what runs did (one per test
        case; `recovery_suite` reads it).

        Raises:
            ConfigError: the plan has crashes or store faults and the graph has no
                saver of its own.

        Example:
            >>> faulty = FaultPlan().crash("draft").apply(graph)  # doctest: +SKIP
            >>> faulty.invoke(input, config)  # raises SimulatedCrash  # doctest: +SKIP
            >>> with ResilientSqliteSaver.from_conn_string(path) as fresh:  # doctest: +SKIP
            ...     build(fresh).invoke(None, config)  # resumes after "draft"
        """
        session = Session(self, tracker if tracker is not None else Tracker())
        saver = graph.checkpointer
        if isinstance(saver, BaseCheckpointSaver):
            tap_saver(saver, session)
        elif any(isinstance(f, (CrashFault, StoreFault)) for f in self.faults):
            raise ConfigError(
                "crashes and store faults need the graph's own saver: compile it with "
                "checkpointer=ResilientSqliteSaver(...) (or another saver), not "
                f"{saver!r}"
            )
        return instrument(graph, session)
