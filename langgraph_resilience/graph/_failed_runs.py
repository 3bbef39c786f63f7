"""A top-level run whose ``invoke`` / ``stream`` raised ends ``error`` in the run
ledger, told by its driver (the one that knows: no write says it).

Without it the run's row stayed ``running`` for ever after an error LangGraph
raised (a node without a policy, an error handler that re-raised), and a
fan-out whose other branch reached the end wrote ``success`` before LangGraph
raised the failed branch's error: ``list_runs``, reports and metrics read a
success. The row is changed only if the run is the call's (`_run_log.fail_run`):
a call that failed before its input was stored leaves the earlier run alone.

Not told: a `Worker`'s run (the Worker stores its end: error, a takeover, a
retry), a run another process moved on (`CheckpointConflict`), LangGraph's
bubbling signals, and anything not an ``Exception`` (a cancellation, a
KeyboardInterrupt: the run may go on). A store that cannot be reached leaves
the row as it was (logged); the caller gets the run's own error either way.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp

import langgraph_resilience.graph._closing as closing
import langgraph_resilience.graph._lifecycle as lifecycle
from langgraph_resilience.checkpoint import AsyncResilientSaver, ResilientSaver
from langgraph_resilience.checkpoint._runs import fence_of
from langgraph_resilience.errors import CheckpointConflict, LeaseLost

__all__ = ["afailed", "astreamed", "failed", "streamed"]

logger = logging.getLogger("langgraph_resilience")

_NOT_TOLD = (GraphBubbleUp, CheckpointConflict, LeaseLost)


def _told(graph: Any, config: RunnableConfig | None, exc: BaseException) -> tuple[str, Any] | None:
    """(thread, saver) to tell, or None."""
    if not isinstance(exc, Exception) or isinstance(exc, _NOT_TOLD):
        return None
    if fence_of(config) is not None:
        return None
    return closing._driven(graph, config)


def _continued(input: Any) -> bool:
    """Whether the call went on with the thread's run (no new input: a resume, a
    ``Command``, ``retry_failed``), as `_lifecycle.with_marker` decides."""
    return not (isinstance(input, Mapping) and lifecycle._LOG not in input)


def failed(
    graph: Any, input: Any, config: RunnableConfig | None, since: float, exc: BaseException
) -> None:
    """Tell the run ledger the call that began at ``since`` raised ``exc``."""
    driven = _told(graph, config, exc)
    if driven is None or not isinstance(driven[1], ResilientSaver):
        return
    thread, saver = driven
    try:
        saver.history.fail_run(thread, since, _continued(input))
    except Exception as err:
        logger.warning("could not store that run of thread %s raised: %s", thread, err)


async def afailed(
    graph: Any, input: Any, config: RunnableConfig | None, since: float, exc: BaseException
) -> None:
    """Async twin of `failed`."""
    driven = _told(graph, config, exc)
    if driven is None or not isinstance(driven[1], AsyncResilientSaver):
        return
    thread, saver = driven
    try:
        await saver.history.afail_run(thread, since, _continued(input))
    except Exception as err:
        logger.warning("could not store that run of thread %s raised: %s", thread, err)


def streamed(
    graph: Any, input: Any, config: RunnableConfig | None, since: float, stream: Iterator[Any]
) -> Iterator[Any]:
    """``stream`` (called at ``since``, before its input was marked); one that
    raises tells the ledger (one ``invoke`` reads is left to ``invoke``)."""
    if not closing._left_to_stream(graph, config):
        return stream

    def watching() -> Iterator[Any]:
        try:
            yield from stream
        except Exception as exc:
            failed(graph, input, config, since, exc)
            raise

    return watching()


def astreamed(
    graph: Any, input: Any, config: RunnableConfig | None, since: float, stream: AsyncIterator[Any]
) -> AsyncIterator[Any]:
    """Async twin of `streamed`."""
    if not closing._left_to_stream(graph, config):
        return stream

    async def watching() -> AsyncIterator[Any]:
        try:
            async for item in stream:
                yield item
        except Exception as exc:
            await afailed(graph, input, config, since, exc)
            raise
        finally:  # closed early (a consumer that stops): close the stream it wraps
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    return watching()
