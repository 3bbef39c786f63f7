"""The run ledger: what a top-level run's driver tells its row.

The run's row (`checkpoint.runlog._run_log`) is started by its input checkpoint and
ended by the saver, at the checkpoint that ends the run (the write that ends
it, or the checkpoint that leaves it nothing to do). The driver tells it only
what no checkpoint says: a run that returned interrupted is ``paused``, with
its usage (`close_run`: a run stored only at its exit has no row before), and
a call that raised (`failed`). ``invoke`` tells it from its output; a
``stream`` read to its end, from the stored state.

A call that raised ends its run ``error`` (`failed`): without it the run's row
stayed ``running`` for ever after an error LangGraph raised (a node without a
policy, an error handler that re-raised), and a fan-out whose other branch
reached the end wrote ``success`` before LangGraph raised the failed branch's
error. The row is changed only if the run is the call's, by its number, never
by comparing clocks (`_run_log.failing`): the invoke's `RunScope` knows the run
(its input checkpoint's, or the one its steps tallied) and whether the saver
stored that run's end at the checkpoint that left it nothing to run (then what
raised came after the run: its row stays as the saver wrote it, unless a
task's error write that landed after the saver's check says the run raised).
A call that failed before its input was stored leaves the earlier run alone.
Not told: a `Worker`'s run (the Worker stores its end: error, a takeover, a
retry), a run another process moved on (`CheckpointConflict`), LangGraph's
bubbling signals, and anything not an ``Exception`` (a cancellation, a
KeyboardInterrupt: the run may go on). A store that cannot be reached leaves
the row as it was (logged); the caller gets the run's own error either way.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp

from langgraph_resilience._langgraph import INTERRUPT_CHANNEL
from langgraph_resilience.checkpoint import AsyncRunLedger, RunLedger
from langgraph_resilience.checkpoint.ledger._runs import fence_of
from langgraph_resilience.checkpoint.runlog._scope import RunScope
from langgraph_resilience.errors import CheckpointConflict, LeaseLost, describe
from langgraph_resilience.graph._lifecycle import arun_part, nested, run_part, unrecovered_steps
from langgraph_resilience.graph._tally import with_usage
from langgraph_resilience.graph._task import conforms

__all__ = ["aclose_run", "aclosing", "afailed", "close_run", "closing", "failed", "invoking"]

_LOG = "resilience"
logger = logging.getLogger("langgraph_resilience")

#: The (graph, thread) an ``invoke`` in this context drives: the stream it reads
#: leaves the run's row to it (`close_run` from its output, no read).
_INVOKING: ContextVar[tuple[int, str] | None] = ContextVar(
    "langgraph_resilience_invoking", default=None
)


def _driven(
    graph: Any, config: RunnableConfig | None, ledger: Any = None
) -> tuple[str, Any] | None:
    """(thread, saver) of a top-level run of ``graph`` on a resilient saver (one
    that is a ``ledger``, if given), or None."""
    if not config or nested(config):
        return None
    thread = (config.get("configurable") or {}).get("thread_id")
    saver = getattr(graph, "checkpointer", None)
    ledgers = (RunLedger, AsyncRunLedger) if ledger is None else (ledger,)
    if thread is None or not any(conforms(saver, x) for x in ledgers):
        return None
    return str(thread), saver


@contextmanager
def invoking(graph: Any, config: RunnableConfig | None) -> Iterator[None]:
    """While ``graph.invoke`` runs: its stream leaves the run's row to it."""
    driven = _driven(graph, config)
    token = _INVOKING.set((id(graph), driven[0]) if driven else None)
    try:
        yield
    finally:
        _INVOKING.reset(token)


def _paused(values: Any, interrupted: bool) -> tuple[int, str, Any] | None:
    """(run, ``paused``, usage) the driver tells the row of a run that returned
    interrupted (None: it did not, or its values hold no run log). How a run
    ended the saver wrote, at the checkpoint that ended it; a run that goes on
    (steps left, or it raised: `failed`) keeps what its row says."""
    log = values.get(_LOG) if isinstance(values, Mapping) else None
    if not interrupted or not isinstance(log, Mapping) or log.get("run") is None:
        return None
    return int(log["run"]), "paused", log.get("usage")


def _began(scope: RunScope | None) -> float | None:
    """When the call that started the run began (a row the run has not got yet)."""
    return scope.began if scope is not None else None


def _returned(out: Any, snapshot: Any, scope: RunScope | None) -> tuple[int, str, Any] | None:
    """`_paused`, from ``out``, ``invoke``'s output, or if None from the stored
    ``snapshot`` (with the usage of ``scope``'s tally)."""
    if out is None:
        return _paused(with_usage(snapshot.values, scope), bool(snapshot.interrupts))
    return _paused(out, isinstance(out, Mapping) and INTERRUPT_CHANNEL in out)


_NOT_STORED = "could not store how run of thread %s returned: %s"


def close_run(
    graph: Any,
    config: RunnableConfig | None,
    out: Any,
    scope: RunScope | None = None,
) -> None:
    """Tell the run ledger that a top-level run returned paused (an interrupt:
    a run stored only at its exit has no row before), from ``out``, ``invoke``'s
    output, or None: the stored state (a ``stream``). Never fails the run: a
    store that cannot be reached now leaves the row as the writes left it."""
    driven = _driven(graph, config, RunLedger)
    if driven is None:
        return
    thread, saver = driven
    try:
        snapshot = graph.get_state(config) if out is None else None
        what = _returned(out, snapshot, scope)
        if what is not None:
            saver.history.close_run(thread, *what, _began(scope))
    except Exception as exc:
        logger.warning(_NOT_STORED, thread, exc)


async def aclose_run(
    graph: Any,
    config: RunnableConfig | None,
    out: Any,
    scope: RunScope | None = None,
) -> None:
    """Async twin of `close_run`."""
    driven = _driven(graph, config, AsyncRunLedger)
    if driven is None:
        return
    thread, saver = driven
    try:
        snapshot = await graph.aget_state(config) if out is None else None
        what = _returned(out, snapshot, scope)
        if what is not None:
            await saver.history.aclose_run(thread, *what, _began(scope))
    except Exception as exc:
        logger.warning(_NOT_STORED, thread, exc)


def _left_to_stream(graph: Any, config: RunnableConfig | None) -> bool:
    driven = _driven(graph, config)
    return driven is not None and _INVOKING.get() != (id(graph), driven[0])


def closing(
    graph: Any,
    input: Any,
    config: RunnableConfig | None,
    stream: Iterator[Any],
    scope: RunScope | None,
) -> Iterator[Any]:
    """``stream``; read to its end, it tells the run ledger how the run returned
    (from the stored state, and the usage of ``scope``'s tally), or that it
    raised (`failed`: ``scope`` names its run). One that ``invoke`` reads is
    left to ``invoke``."""
    if not _left_to_stream(graph, config):
        return stream

    def closed() -> Iterator[Any]:
        try:
            yield from stream
        except Exception as exc:
            failed(graph, input, config, scope, exc)
            raise
        close_run(graph, config, None, scope=scope)

    return closed()


def aclosing(
    graph: Any,
    input: Any,
    config: RunnableConfig | None,
    stream: AsyncIterator[Any],
    scope: RunScope | None,
) -> AsyncIterator[Any]:
    """Async twin of `closing`."""
    if not _left_to_stream(graph, config):
        return stream

    async def closed() -> AsyncIterator[Any]:
        try:
            async for item in stream:
                yield item
        except Exception as exc:
            await afailed(graph, input, config, scope, exc)
            raise
        finally:  # closed early (a consumer that stops): close LangGraph's stream too
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
        await aclose_run(graph, config, None, scope=scope)

    return closed()


# -- a call that raised ------------------------------------------------------------------

_NOT_TOLD = (GraphBubbleUp, CheckpointConflict, LeaseLost)


def _to_tell(
    graph: Any, config: RunnableConfig | None, exc: BaseException, ledger: Any
) -> tuple[str, Any] | None:
    """(thread, saver: a ``ledger``) to tell that the call raised ``exc``, or None."""
    if not isinstance(exc, Exception) or isinstance(exc, _NOT_TOLD):
        return None
    if fence_of(config) is not None:
        return None
    return _driven(graph, config, ledger)


def _continued(input: Any) -> bool:
    """Whether the call went on with the thread's run (no new input: a resume, a
    ``Command``, ``retry_failed``), as `_lifecycle.with_marker` decides."""
    return not (isinstance(input, Mapping) and _LOG not in input)


def _outcome(scope: RunScope | None, run: int | None) -> tuple[int | None, bool]:
    """(the call's run, whether the saver stored its end during the call)."""
    return scope.outcome() if scope is not None else (run, False)


def _thread_top(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _still_ended(ended: bool, checkpoints: Iterable[Any]) -> bool:
    """Whether the end the saver stored stands now that LangGraph stored every
    write of the call (``checkpoints``: the run's, newest first): a task's error
    write that landed after the ending checkpoint's check (writes are stored in
    the background) makes it a run that raised, as the check would have found."""
    return ended and not unrecovered_steps(checkpoints)


_NOT_STORED_RAISED = "could not store that run of thread %s raised: %s"


def failed(
    graph: Any,
    input: Any,
    config: RunnableConfig | None,
    scope: RunScope | None,
    exc: BaseException,
    *,
    run: int | None = None,
) -> None:
    """Tell the run ledger the call raised ``exc``: ``scope``, the invoke's
    (`RunScope.outcome`); ``run``: the run a call without one drives (a plain
    parent's run `retry_failed` reopened)."""
    driven = _to_tell(graph, config, exc, RunLedger)
    if driven is None:
        return
    thread, saver = driven
    number, ended = _outcome(scope, run)
    try:
        if ended:
            ended = _still_ended(ended, run_part(saver.list(_thread_top(thread))))
        saver.history.fail_run(thread, number, ended, _continued(input), describe(exc))
    except Exception as err:
        logger.warning(_NOT_STORED_RAISED, thread, err)


async def afailed(
    graph: Any,
    input: Any,
    config: RunnableConfig | None,
    scope: RunScope | None,
    exc: BaseException,
    *,
    run: int | None = None,
) -> None:
    """Async twin of `failed`."""
    driven = _to_tell(graph, config, exc, AsyncRunLedger)
    if driven is None:
        return
    thread, saver = driven
    number, ended = _outcome(scope, run)
    try:
        if ended:
            found = await arun_part(saver.alist(_thread_top(thread)))
            ended = _still_ended(ended, found)
        await saver.history.afail_run(thread, number, ended, _continued(input), describe(exc))
    except Exception as err:
        logger.warning(_NOT_STORED_RAISED, thread, err)
