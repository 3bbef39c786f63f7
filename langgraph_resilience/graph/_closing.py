"""The run ledger: how a top-level run returned, told by its driver.

The run's row (`checkpoint._run_log`) is started by its input checkpoint and
ended by the write that ends it; what no write says, the driver tells it when
``invoke`` / ``stream`` returns (`close_run`): a run with nothing left to do
ended ``success``, an interrupted one is ``paused``, and what the run used
(its invoke's tally's, `_tally.with_usage`). ``invoke`` tells it from its
output; a ``stream`` read to its end, from the stored state.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from langchain_core.runnables import RunnableConfig

from langgraph_resilience._langgraph import INTERRUPT_CHANNEL
from langgraph_resilience.checkpoint import AsyncResilientSaver, ResilientSaver
from langgraph_resilience.checkpoint._scope import RunScope
from langgraph_resilience.graph._lifecycle import nested
from langgraph_resilience.graph._tally import with_usage

__all__ = ["aclose_run", "aclosing", "close_run", "closing", "invoking"]

_LOG = "resilience"
logger = logging.getLogger("langgraph_resilience")

#: The (graph, thread) an ``invoke`` in this context drives: the stream it reads
#: leaves the run's row to it (`close_run` from its output, no read).
_INVOKING: ContextVar[tuple[int, str] | None] = ContextVar(
    "langgraph_resilience_invoking", default=None
)


def _driven(graph: Any, config: RunnableConfig | None) -> tuple[str, Any] | None:
    """(thread, saver) of a top-level run of ``graph`` on a resilient saver, or None."""
    if not config or nested(config):
        return None
    thread = (config.get("configurable") or {}).get("thread_id")
    saver = getattr(graph, "checkpointer", None)
    if thread is None or not isinstance(saver, (ResilientSaver, AsyncResilientSaver)):
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


_ENDED = ("success", "partial_complete")


def _closing_what(values: Any, interrupted: bool) -> tuple[int, str, Any] | None:
    """(run, status, usage) the driver tells the run's row, from the run's
    settled values (None: they hold no run log)."""
    log = values.get(_LOG) if isinstance(values, Mapping) else None
    if not isinstance(log, Mapping) or log.get("run") is None:
        return None
    status = log.get("status")
    if interrupted:
        status = "paused"
    elif status not in _ENDED:
        status = "running"
    return int(log["run"]), str(status), log.get("usage")


def _told(stored: Any) -> bool:
    """Whether the row knows already: the output as stored (before settling)
    ended the run, and the checkpoint after its last step told the row."""
    log = stored.get(_LOG) if isinstance(stored, Mapping) else None
    return (
        isinstance(log, Mapping) and log.get("status") in _ENDED and INTERRUPT_CHANNEL not in stored
    )


def close_run(
    graph: Any,
    config: RunnableConfig | None,
    out: Any,
    stored: Any = None,
    scope: RunScope | None = None,
) -> None:
    """Tell the run ledger how a top-level run returned: ``out``, ``invoke``'s
    settled output (``stored``: as it came back, before settling; nothing to
    tell if it ended the run), or None: the stored state (a ``stream``). Never
    fails the run: a store that cannot be reached now leaves the row as the
    writes left it."""
    driven = _driven(graph, config)
    if driven is None or not isinstance(driven[1], ResilientSaver) or _told(stored):
        return
    thread, saver = driven
    try:
        what = _closing_what(out, isinstance(out, Mapping) and INTERRUPT_CHANNEL in out)
        if what is None:
            snapshot = graph.get_state(config)
            what = _closing_what(with_usage(snapshot.values, scope), bool(snapshot.interrupts))
        if what is not None:
            saver.history.close_run(thread, *what)
    except Exception as exc:
        logger.warning("could not store how run of thread %s returned: %s", thread, exc)


async def aclose_run(
    graph: Any,
    config: RunnableConfig | None,
    out: Any,
    stored: Any = None,
    scope: RunScope | None = None,
) -> None:
    """Async twin of `close_run`."""
    driven = _driven(graph, config)
    if driven is None or not isinstance(driven[1], AsyncResilientSaver) or _told(stored):
        return
    thread, saver = driven
    try:
        what = _closing_what(out, isinstance(out, Mapping) and INTERRUPT_CHANNEL in out)
        if what is None:
            snapshot = await graph.aget_state(config)
            what = _closing_what(with_usage(snapshot.values, scope), bool(snapshot.interrupts))
        if what is not None:
            await saver.history.aclose_run(thread, *what)
    except Exception as exc:
        logger.warning("could not store how run of thread %s returned: %s", thread, exc)


def _left_to_stream(graph: Any, config: RunnableConfig | None) -> bool:
    driven = _driven(graph, config)
    return driven is not None and _INVOKING.get() != (id(graph), driven[0])


def closing(
    graph: Any, config: RunnableConfig | None, stream: Iterator[Any], scope: RunScope | None
) -> Iterator[Any]:
    """``stream``; read to its end, it tells the run ledger how the run returned
    (from the stored state, and the usage of ``scope``'s tally). One that
    ``invoke`` reads is left to ``invoke``."""
    if not _left_to_stream(graph, config):
        return stream

    def closed() -> Iterator[Any]:
        yield from stream
        close_run(graph, config, None, scope=scope)

    return closed()


async def aclosing(
    graph: Any, config: RunnableConfig | None, stream: AsyncIterator[Any], scope: RunScope | None
) -> AsyncIterator[Any]:
    """Async twin of `closing`."""
    left = _left_to_stream(graph, config)
    try:
        async for item in stream:
            yield item
    finally:  # closed early (a consumer that stops): close LangGraph's stream too
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
    if left:
        await aclose_run(graph, config, None, scope=scope)
