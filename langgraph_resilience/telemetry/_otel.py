"""OpenTelemetry instruments, when the ``otel`` extra is installed and configured.

Without ``opentelemetry-api`` installed this module imports nothing of it and
every function here does nothing. With it installed but no tracer or meter
provider set by the application (the API's proxy providers), nothing is done
either: a step pays one global read per try. Once the application sets a
provider (``trace.set_tracer_provider``, ``metrics.set_meter_provider``), each
try is a span and the counters move. Instruments are created once per meter
provider.

Names (all counters are monotonic, attributes ``graph``, ``node``, ``kind``
where they apply):

- ``langgraph_resilience.tries``: every try of a node with a policy (``kind``:
  the failure kind, or ``ok``);
- ``langgraph_resilience.retries``, ``.fallbacks``, ``.degraded_steps``,
  ``.partial_results``;
- ``langgraph_resilience.checkpoint_writes`` (``write``: checkpoint | writes,
  ``outcome``: ok | failed);
- ``langgraph_resilience.recoveries`` (``kind``: takeover | retry_failed),
  ``.takeovers``, ``.steps_redone``;
- ``langgraph_resilience.effects_replayed``, ``.effects_reconciled``;
- ``langgraph_resilience.limit_busy`` (``limit``): tries a shared limit did
  not admit within their ``max_wait``;
- ``langgraph_resilience.serde_events`` (``kind``, ``module``, ``name``):
  LangGraph's msgpack allowlist events (see `_serde_events`);
- histograms ``langgraph_resilience.try_duration``,
  ``langgraph_resilience.retry_wait`` and ``langgraph_resilience.limit_wait``
  (seconds a try waited for its shared limits; ``limit``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from langgraph_resilience.errors import describe

try:  # the optional extra: nothing here may fail without it
    from opentelemetry import context as _context
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
    from opentelemetry.metrics import NoOpMeterProvider as _NoOpMeters
    from opentelemetry.metrics import _internal as _metrics_state
    from opentelemetry.trace import NoOpTracerProvider as _NoOpTracers
    from opentelemetry.trace import ProxyTracerProvider as _ProxyTracers
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # pragma: no cover - exercised in a subprocess test
    _metrics = None  # type: ignore[assignment]
    _metrics_state = None  # type: ignore[assignment]
    _trace = None  # type: ignore[assignment]

__all__ = [
    "AVAILABLE",
    "COUNTERS",
    "add",
    "end_try",
    "idle",
    "meter_provider_set",
    "record",
    "start_try",
    "watching",
]

AVAILABLE = _trace is not None
SCOPE = "langgraph_resilience"

COUNTERS = (
    "tries",
    "retries",
    "fallbacks",
    "degraded_steps",
    "partial_results",
    "checkpoint_writes",
    "recoveries",
    "takeovers",
    "steps_redone",
    "effects_replayed",
    "effects_reconciled",
    "limit_busy",
    "serde_events",
)
HISTOGRAMS = ("try_duration", "retry_wait", "limit_wait")

_instruments: dict[str, Any] = {}
_instruments_of: list[Any] = [None]  # the meter provider the instruments belong to


#: A provider named in the environment is loaded by the API on first use.
_FROM_ENV = {"OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER"} & set(os.environ)


def _meter_provider() -> Any:
    """The application's meter provider, or None if it set none.

    The API's ``get_meter_provider()`` reads the environment on every call
    (about a microsecond); the global it fills is read first, so a step pays a
    module attribute read while no provider is set.
    """
    if _metrics is None:
        return None
    if getattr(_metrics_state, "_METER_PROVIDER", True) is None and not _FROM_ENV:
        return None
    provider = _metrics.get_meter_provider()
    if isinstance(provider, _NoOpMeters) or type(provider).__name__ == "_ProxyMeterProvider":
        return None
    return provider


def _instrument(name: str) -> Any:
    provider = _meter_provider()
    if provider is None:
        return None
    if _instruments_of[0] is not provider:
        meter = provider.get_meter(SCOPE)
        _instruments.clear()
        for counter in COUNTERS:
            _instruments[counter] = meter.create_counter(f"{SCOPE}.{counter}", unit="1")
        for histogram in HISTOGRAMS:
            _instruments[histogram] = meter.create_histogram(f"{SCOPE}.{histogram}", unit="s")
        _instruments_of[0] = provider
    return _instruments.get(name)


def add(name: str, attributes: Mapping[str, Any], amount: int = 1) -> None:
    """Add ``amount`` to the counter ``name`` (nothing without a meter provider)."""
    counter = _instrument(name)
    if counter is not None:
        counter.add(amount, _clean(attributes))


def record(name: str, value: float, attributes: Mapping[str, Any]) -> None:
    """Record ``value`` in the histogram ``name`` (nothing without a meter provider)."""
    histogram = _instrument(name)
    if histogram is not None:
        histogram.record(value, _clean(attributes))


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if isinstance(v, (str, bool, int, float))}


def _tracer() -> Any:
    if _trace is None:
        return None
    if getattr(_trace, "_TRACER_PROVIDER", True) is None and not _FROM_ENV:
        return None  # nothing set (the fast answer; see `_meter_provider`)
    provider = _trace.get_tracer_provider()
    if isinstance(provider, (_ProxyTracers, _NoOpTracers)):
        return None
    if _tracer_of[0] is not provider:
        _tracer_of[:] = [provider, provider.get_tracer(SCOPE)]
    return _tracer_of[1]


_tracer_of: list[Any] = [None, None]  # the provider, its tracer


def start_try(node: str, attributes: Mapping[str, Any]) -> Any:
    """A span for one try of ``node``, current until `end_try` (None when no
    tracer provider is set)."""
    tracer = _tracer()
    if tracer is None:
        return None
    span = tracer.start_span(
        f"{node} try {attributes.get('attempt', 1)}", attributes=_clean(attributes)
    )
    token = _context.attach(_trace.set_span_in_context(span))
    return span, token


def end_try(handle: Any, error: BaseException | None, attributes: Mapping[str, Any]) -> None:
    """End a try's span: its outcome, and the error of a failed try."""
    if handle is None:
        return
    span, token = handle
    try:
        span.set_attributes(_clean(attributes))
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, describe(error)[:200]))
    finally:
        span.end()
        _context.detach(token)


def idle() -> bool:
    """Whether nothing is configured: the extra is not installed, or the
    application set neither a tracer nor a meter provider (and names none in
    the environment). The answer every write and every first try asks for:
    one call reading two globals, which the API sets once when a provider is
    set, so it is never stale."""
    if not _CAN_BE_SET:
        return True
    return (
        _IDLE_KNOWABLE
        and _trace._TRACER_PROVIDER is None
        and _metrics_state._METER_PROVIDER is None
    )


def watching() -> bool:
    """Whether the application set a tracer or a meter provider."""
    if idle():
        return False
    return _tracer() is not None or _meter_provider() is not None


def meter_provider_set() -> bool:
    """Whether the application set a meter provider."""
    return not idle() and _meter_provider() is not None


#: Whether a provider can be set at all (the extra is installed).
_CAN_BE_SET = _trace is not None
#: Whether the API's globals tell that none is set (they do unless the
#: environment names a provider, or an API version keeps them elsewhere).
_IDLE_KNOWABLE = (
    _CAN_BE_SET
    and not _FROM_ENV
    and hasattr(_trace, "_TRACER_PROVIDER")
    and hasattr(_metrics_state, "_METER_PROVIDER")
)
