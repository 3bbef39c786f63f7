"""LangGraph's serde events, counted, logged once per type, and sent to OpenTelemetry.

LangGraph's msgpack decoder reports what its allowlist did with a stored type
(``register_serde_event_listener``): ``msgpack_unregistered_allowed`` (a type
no allowlist names, decoded with a warning: strict mode would block it),
``msgpack_blocked`` (a type strict mode refused: it decodes as a plain dict or
list) and ``msgpack_method_blocked``. One listener per process (`watch`, which
every resilient saver calls) counts them by kind (`counts`, which
`recovery_metrics` reports as ``serde_events``), logs a warning under the
``langgraph_resilience`` logger the first time it sees each kind and type, and
adds to the OpenTelemetry counter ``langgraph_resilience.serde_events``
(attributes ``kind``, ``module``, ``name``).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener

from langgraph_resilience.telemetry import _otel

__all__ = ["counts", "watch"]

logger = logging.getLogger("langgraph_resilience")

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_seen: set[tuple[str, ...]] = set()
_watching: list[bool] = [False]

_SAYS = {
    "msgpack_unregistered_allowed": "decoded a type no msgpack allowlist names "
    "(LANGGRAPH_STRICT_MSGPACK=true would block it)",
    "msgpack_blocked": "refused a type not in the msgpack allowlist (it decodes as plain data)",
    "msgpack_method_blocked": "refused a method call not in the msgpack allowlist",
}


def _on_event(event: Mapping[str, Any]) -> None:
    kind = str(event.get("kind", "unknown"))
    module, name = str(event.get("module", "")), str(event.get("name", ""))
    method = event.get("method")
    key = (kind, module, name, *((str(method),) if method else ()))
    with _lock:
        _counts[kind] += 1
        first = key not in _seen
        _seen.add(key)
    if first:
        where = f"{module}.{name}" + (f".{method}" if method else "")
        logger.warning(
            "checkpoint serializer %s: %s (logged once per type; allow it with "
            "JsonPlusSerializer(allowed_msgpack_modules=[(%r, %r)]))",
            _SAYS.get(kind, kind),
            where,
            module,
            name,
        )
    _otel.add("serde_events", {"kind": kind, "module": module, "name": name})


def watch() -> None:
    """Listen to LangGraph's serde events (once per process; idempotent)."""
    with _lock:
        if _watching[0]:
            return
        _watching[0] = True
    register_serde_event_listener(_on_event)


def counts() -> dict[str, int]:
    """The serde events this process saw since it started, by kind."""
    with _lock:
        return dict(_counts)
