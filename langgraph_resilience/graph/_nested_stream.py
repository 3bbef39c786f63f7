"""A resilient graph streamed inside another's step (``for chunk in
inner.stream(...)`` in a node function: a supervisor forwarding what its worker
graph does) tells that step when it ends short, as ``invoke`` does
(`_lifecycle.ended`): the step fails naming the inner step.

What the stream yields is watched, never changed: the run log the chunks of
the nested graph's own level carry (a ``values`` chunk is its state, an
``updates`` or ``checkpoints`` chunk holds it one level down; with several
modes or ``subgraphs=True`` the chunk is a tuple's last item, its namespace
first), folded as the state folds it for what is read here (the latest status,
the run's first failed step). A stream read to its end whose log reads
``partial_complete`` tells the try (`_step_log.nested_stop`). Only ``messages`` or ``custom`` modes
carry no run log: such a stream cannot tell, and the step goes on (stream
``updates`` too, or call ``invoke``, to have it told).

Outside a resilient try (a top-level stream) the stream is returned as it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from langgraph_resilience.graph._step_log import NESTED_STOPS, nested_stop

__all__ = ["awatched", "watched"]

_LOG = "resilience"


def _logs_in(chunk: Any) -> list[Mapping[str, Any]]:
    """The run logs (or log updates) a chunk of the nested graph's own level carries."""
    if type(chunk) is tuple:
        if not chunk or (isinstance(chunk[0], tuple) and chunk[0]):
            return []  # a deeper graph's chunk (``subgraphs=True``)
        chunk = chunk[-1]
    if not isinstance(chunk, Mapping):
        return []
    if isinstance(log := chunk.get(_LOG), Mapping):
        return [log]
    return [
        part[_LOG]
        for part in chunk.values()
        if isinstance(part, Mapping) and isinstance(part.get(_LOG), Mapping)
    ]


def _folded(known: dict[str, Any], chunk: Any) -> dict[str, Any]:
    for log in _logs_in(chunk):
        first = known.get("failed_step")
        known = {**known, **log}
        if first:
            known["failed_step"] = first
    return known


def _tell(known: dict[str, Any]) -> None:
    if known:
        nested_stop({_LOG: known})


def watched(stream: Iterator[Any]) -> Iterator[Any]:
    """``stream``, watched if it runs inside a resilient try."""
    if NESTED_STOPS.get() is None:
        return stream

    def watching() -> Iterator[Any]:
        known: dict[str, Any] = {}
        try:
            for chunk in stream:
                known = _folded(known, chunk)
                yield chunk
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        _tell(known)

    return watching()


def awatched(stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Async twin of `watched`."""
    if NESTED_STOPS.get() is None:
        return stream

    async def watching() -> AsyncIterator[Any]:
        known: dict[str, Any] = {}
        try:
            async for chunk in stream:
                known = _folded(known, chunk)
                yield chunk
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
        _tell(known)

    return watching()
