"""What a `Worker` offers for runs besides running them: submitting, resuming
(a human's answer, a budget top-up), cancelling, and settling a paused run that
was resumed by hand. Mixed into `Worker`, which supplies the saver and graph."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from langgraph_resilience.budget import Budget
from langgraph_resilience.checkpoint import AsyncResilientSaver, ResilientSaver
from langgraph_resilience.errors import ConfigError, RunStateError
from langgraph_resilience.graph._lifecycle import asettle_paused, settle_paused
from langgraph_resilience.worker._setup import not_open, not_paused

__all__ = ["RunControls"]


def _top(thread: str) -> RunnableConfig:
    """A thread's top-level state."""
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


class RunControls:
    """Submit, resume and cancel runs (the worker's saver and graph supply the I/O)."""

    saver: ResilientSaver
    graph: CompiledStateGraph[Any, Any, Any, Any]
    _async_saver: AsyncResilientSaver | None

    # -- submitting ----------------------------------------------------------------

    def submit(
        self,
        input: Any,
        *,
        thread_id: str | None = None,
        budget: Budget | Mapping[str, Any] | None = None,
    ) -> str:
        """Queue a run of the graph on ``input``; returns its run id.

        ``thread_id`` defaults to the run id. A thread takes one open run at a time.
        """
        run_id, thread, blobs = self._new_run(input, thread_id, budget)
        try:
            self.saver.runs.submit(run_id, thread, *blobs)
        except RunStateError:
            if not self._settle_paused(thread):
                raise
            self.saver.runs.submit(run_id, thread, *blobs)
        return run_id

    def _settle_paused(self, thread: str) -> bool:
        """End the thread's paused runs that were resumed by hand and have ended
        (so the thread takes the new submit), with the status their run's ledger
        row stores (`_lifecycle.settle_paused`); False if none had."""
        return settle_paused(self.saver, thread, lambda: self.graph.get_state(_top(thread)))

    async def asubmit(
        self,
        input: Any,
        *,
        thread_id: str | None = None,
        budget: Budget | Mapping[str, Any] | None = None,
    ) -> str:
        """Async twin of `submit`."""
        run_id, thread, blobs = self._new_run(input, thread_id, budget)
        saver = self._asaver()
        try:
            await saver.runs.asubmit(run_id, thread, *blobs)
        except RunStateError:
            if not await self._asettle_paused(thread):
                raise
            await saver.runs.asubmit(run_id, thread, *blobs)
        return run_id

    async def _asettle_paused(self, thread: str) -> bool:
        """Async twin of `_settle_paused`."""
        saver = self._asaver()
        return await asettle_paused(saver, thread, lambda: self.graph.aget_state(_top(thread)))

    def _new_run(
        self, input: Any, thread_id: str | None, budget: Budget | Mapping[str, Any] | None
    ) -> tuple[str, str, tuple[tuple[str, bytes], tuple[str, bytes] | None]]:
        if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
            raise ConfigError(f"thread_id must be a non-empty str or None, got {thread_id!r}")
        run_id = str(uuid.uuid4())
        return (
            run_id,
            thread_id or run_id,
            (self.saver.serde.dumps_typed(input), self._blob(budget)),
        )

    def _blob(self, budget: Budget | Mapping[str, Any] | None) -> tuple[str, bytes] | None:
        """A budget as the runs table keeps it (a dict of its limits)."""
        found = Budget.coerce(budget, where="budget")
        if found is None:
            return None
        return self.saver.serde.dumps_typed(found.to_dict())

    # -- paused runs -------------------------------------------------------------------

    def resume(
        self,
        run_id: str,
        value: Any = None,
        *,
        budget: Budget | Mapping[str, Any] | None = None,
    ) -> None:
        """Queue a paused run again; a worker resumes it at the step that paused,
        nothing redone.

        Args:
            value: the answer to the run's pending interrupts (a human's approval,
                say): one value for all, or a mapping of interrupt id to value, as
                ``Command(resume=...)`` takes. The node's ``interrupt(...)`` returns it.
            budget: a top-up for a run paused by its `Budget` (a `Budget` given as
                ``value`` is taken as one too).

        Raises:
            RunStateError: the run is not paused.
        """
        budget_blob, answer = self._resumed_with(value, budget)
        if not self.saver.runs.requeue(str(run_id), budget_blob, answer):
            raise RunStateError(not_paused(run_id, self.saver.read_run(str(run_id))))

    async def aresume(
        self,
        run_id: str,
        value: Any = None,
        *,
        budget: Budget | Mapping[str, Any] | None = None,
    ) -> None:
        """Async twin of `resume`."""
        saver = self._asaver()
        budget_blob, answer = self._resumed_with(value, budget)
        if not await saver.runs.arequeue(str(run_id), budget_blob, answer):
            raise RunStateError(not_paused(run_id, await saver.aread_run(str(run_id))))

    def cancel(self, run_id: str, reason: str) -> str:
        """End a queued, running or paused run as ``cancelled``; returns the status
        it had. A running run is fenced like a takeover: its worker's next write,
        renewal or side effect is refused, so it stops at its next step. The
        thread then takes new submits. ``reason`` is kept as the run's outcome
        (``{"cancelled": reason}``).

        Raises:
            RunStateError: the run is not open (unknown, or already ended).
        """
        had = self.saver.runs.cancel(str(run_id), self._cancelled(reason))
        if had is None:
            raise RunStateError(not_open(run_id, self.saver.read_run(str(run_id))))
        return had

    async def acancel(self, run_id: str, reason: str) -> str:
        """Async twin of `cancel`."""
        saver = self._asaver()
        had = await saver.runs.acancel(str(run_id), self._cancelled(reason))
        if had is None:
            raise RunStateError(not_open(run_id, await saver.aread_run(str(run_id))))
        return had

    def _cancelled(self, reason: str) -> tuple[str, bytes]:
        if not isinstance(reason, str) or not reason:
            raise ConfigError(f"cancel needs a reason (a non-empty str), got {reason!r}")
        return self.saver.serde.dumps_typed({"cancelled": reason})

    def _resumed_with(
        self, value: Any, budget: Budget | Mapping[str, Any] | None
    ) -> tuple[tuple[str, bytes] | None, tuple[str, bytes] | None]:
        if isinstance(value, Budget) and budget is None:  # resume(run_id, Budget(...))
            value, budget = None, value
        answer = None if value is None else self.saver.serde.dumps_typed(value)
        return self._blob(budget), answer

    def _asaver(self) -> AsyncResilientSaver:
        if self._async_saver is None:
            raise ConfigError(
                "Worker.arun, asubmit and aresume need an async resilient saver "
                "(AsyncResilientSqliteSaver or AsyncResilientPostgresSaver); this worker's "
                f"is {type(self.saver).__name__}: use run, submit and resume, or pass "
                "checkpointer= an async one."
            )
        return self._async_saver

    def _outcome_blob(self, outcome: dict[str, Any]) -> tuple[str, bytes]:
        return self.saver.serde.dumps_typed(outcome)
