"""One top-level run's scope in memory: the step records its nodes hand to the
saver, and the run's loop counts and usage, which live here, not in the state.

A `ResilientStateGraph` invoke (``invoke``, ``stream``, a `Worker`'s, a
`retry_failed`'s) puts one `RunScope` in its config (`SCOPE_KEY`); LangGraph
copies the key into every task's config and into the config of each
``put_writes``, so the node wrapper and the saver meet in it:

- a completed step whose record changes nothing in ``state["resilience"]``
  hands it over (`hand`, keyed by LangGraph's task id) in place of a
  ``resilience`` write; the saver's ``put_writes`` of that task takes it
  (`take`) and stores it as the step's row in the transaction of the task's
  writes. A task whose writes are an error drops it; a task whose writes are
  never stored leaves it here until the invoke returns and the scope goes;
- `Tally`: the executions per step path (loop iterations: ``review#3``) and
  the usage of each run the invoke drives, counted as its steps complete. An
  invoke that goes on with a run (a resume, `retry_failed`, a takeover) loads
  them once from the run's step rows (`load`): the rows are the truth, a crash
  loses nothing of them; a new run starts empty (``fresh``);
- the run the invoke drives (`run`: the one its input checkpoint started, as
  the saver stored it, or the one its steps tallied) and whether the saver
  stored that run's end at the checkpoint that left it nothing to run
  (`ended`): what the driver tells the ledger when the invoke raises
  (`outcome`, `_run_log.fail_run`), exactly, by number, never by clock.

An ``@entrypoint`` has no driver of ours, so no scope: a `@task` under a
policy (`graph._functional`) hands its step's record to the process's
`TASK_STEPS` instead (`hand_task`), keyed by its task id, which ``take``
reads when the config has no scope.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from langgraph_resilience._keys import SCOPE_KEY

__all__ = ["RunScope", "Tally", "hand_task", "landed", "scope_of", "take"]


class Tally:
    """One run's loop counts (executions per step path without its iteration)
    and usage (`budget.add_usage` keys) so far."""

    __slots__ = ("counts", "usage")

    def __init__(self, counts: Mapping[str, int], usage: Mapping[str, float]) -> None:
        self.counts = dict(counts)
        self.usage = dict(usage)


class RunScope:
    """What one top-level invoke shares between its node wrappers and its saver
    (thread-safe: a step's tasks run on threads, its writes are stored on others).

    ``fresh``: the invoke starts a new run (its input carries the new-run
    marker), so the first run it tallies has no rows to load; ``began``: then,
    when (the start a run stored only at its exit has: `_run_log.ledger_of_put`).
    """

    __slots__ = (
        "_ended",
        "_handed",
        "_lock",
        "_run",
        "_tallies",
        "_unstored",
        "began",
        "fresh",
        "keeps_rows",
    )

    def __init__(self, *, fresh: bool) -> None:
        self.fresh = fresh
        self.began = time.time() if fresh else None
        #: Whether the invoke's saver stores step rows (None: not asked yet).
        self.keeps_rows: bool | None = None
        self._lock = threading.Lock()
        self._tallies: dict[int, Tally] = {}
        self._handed: dict[str, dict[str, Any]] = {}
        self._unstored: dict[str, dict[str, Any]] = {}
        self._run: int | None = None
        self._ended: int | None = None

    # -- the run the invoke drives, and its end ------------------------------------------

    def stored(self, started: int | None, ended: int | None) -> None:
        """A put of the invoke was stored: it started run ``started`` (its input
        checkpoint), or stored the end of run ``ended`` at a checkpoint that
        leaves it nothing to run (each None: not this put)."""
        with self._lock:
            if started is not None:
                self._run = started
            if ended is not None:
                self._ended = ended

    def outcome(self) -> tuple[int | None, bool]:
        """(the run this invoke drove, whether the saver stored its end during
        the invoke): the run its input started, else the one its steps tallied
        last, else the one whose end it stored (None: none of these, the
        invoke stored nothing of a run)."""
        with self._lock:
            run = self._run
            if run is None and self._tallies:
                run = next(reversed(self._tallies))
            if run is None:
                run = self._ended
            return run, run is not None and self._ended == run

    # -- the step records handed to the saver -------------------------------------------

    def hand(self, task_id: str, log: dict[str, Any]) -> None:
        """A completed step's run-log entry, for its task's ``put_writes``
        (a retry of the task hands its own in place of the last)."""
        with self._lock:
            self._handed[task_id] = log

    def take(self, task_id: str) -> dict[str, Any] | None:
        """The entry handed for a task, removed (None: none was)."""
        if not self._handed:  # the usual write of a step without one
            return None
        with self._lock:
            return self._handed.pop(task_id, None)

    # -- the completed steps whose writes have not landed yet --------------------------

    def finished(self, task_id: str, step: dict[str, Any]) -> None:
        """A top-level step completed (its record): its task's writes, its row with
        them, are on their way to the store (LangGraph stores them in the
        background and goes on), until `landed`."""
        with self._lock:
            self._unstored[task_id] = step

    def landed(self, task_id: str) -> None:
        """The task's writes were stored (or will not be: they failed, or were
        not to be stored): the store has its step, if any."""
        if not self._unstored:  # every write of a run without a completed step pending
            return
        with self._lock:
            self._unstored.pop(task_id, None)

    def unstored(self, run: int) -> list[dict[str, Any]]:
        """The run's completed steps whose writes have not landed yet: what a read
        of the run's steps from the store may miss (the partial result lists
        them with those it read)."""
        with self._lock:
            return [s for s in self._unstored.values() if int(s.get("run") or 1) == run]

    # -- the runs' tallies ---------------------------------------------------------------

    def tally(self, run: int) -> Tally | None:
        """The run's tally, once started or loaded (None: not yet)."""
        return self._tallies.get(run)

    def latest(self) -> Tally | None:
        """The tally of the run started or loaded last (a nested step's budget
        adds the top-level steps' usage of its run)."""
        with self._lock:
            return next(reversed(self._tallies.values()), None)

    def start(self, run: int) -> Tally | None:
        """A new run's empty tally, if this invoke started it and has none yet
        (None: the run's rows are to be loaded, `load`)."""
        with self._lock:
            found = self._tallies.get(run)
            if found is None and self.fresh:
                self.fresh = False  # one new run per invoke: any other is loaded
                found = self._tallies[run] = Tally({}, {})
            return found

    def load(self, run: int, counts: Mapping[str, int], usage: Mapping[str, float]) -> Tally:
        """The run's tally from its stored rows (the first load wins)."""
        with self._lock:
            found = self._tallies.get(run)
            if found is None:
                found = self._tallies[run] = Tally(counts, usage)
            return found

    def count(self, tally: Tally, base: str) -> None:
        """One more execution of a step path."""
        with self._lock:
            tally.counts[base] = tally.counts.get(base, 0) + 1

    def spend(self, tally: Tally, usage: Mapping[str, float]) -> None:
        """Add a step's usage to its run's."""
        with self._lock:
            total = tally.usage
            for key, value in usage.items():
                total[key] = total.get(key, 0) + value

    def used(self, tally: Tally) -> dict[str, float]:
        """The run's usage so far (a copy: other steps may be adding to it)."""
        with self._lock:
            return dict(tally.usage)


def scope_of(config: Mapping[str, Any] | None) -> RunScope | None:
    """The `RunScope` of the invoke a config belongs to (None: none)."""
    found = ((config or {}).get("configurable") or {}).get(SCOPE_KEY)
    return found if isinstance(found, RunScope) else None


def landed(config: Mapping[str, Any], task_id: str) -> None:
    """A task's writes landed (`RunScope.landed`; nothing without a scope)."""
    if (scope := scope_of(config)) is not None:
        scope.landed(task_id)


#: The step records of functional tasks, by task id, until their writes land.
TASK_STEPS: dict[str, dict[str, Any]] = {}
_TASK_LOCK = threading.Lock()


def hand_task(task_id: str, log: dict[str, Any]) -> None:
    """A functional task's step record, for its ``put_writes`` (see module doc)."""
    with _TASK_LOCK:
        TASK_STEPS[task_id] = log


def take(config: Mapping[str, Any], task_id: str) -> dict[str, Any] | None:
    """The run-log entry a task's node handed to its invoke's scope (or a
    functional task to `TASK_STEPS`), removed (None: none was)."""
    scope = scope_of(config)
    if scope is not None:
        return scope.take(task_id)
    if not TASK_STEPS:
        return None
    with _TASK_LOCK:
        return TASK_STEPS.pop(task_id, None)
