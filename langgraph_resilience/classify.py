"""Failure classification: which kind of failure a live exception is.

`classify(exc)` applies the default rules; a `Classifier` puts rules of its own
before them (``Classifier().on(MyError, FailureKind.TRANSIENT)``). Rules are
duck-typed: no model provider's SDK is imported, yet their errors' shapes are
recognised (an HTTP status on the error or its ``response``, a ``Retry-After``
header, "context length" messages and codes).

LangGraph's control-flow exceptions (``GraphBubbleUp``: interrupts, drains,
parent commands) are never classified: `classify` refuses them, and the node
wrapper re-raises them untouched.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from langchain_core.exceptions import OutputParserException
from langgraph.errors import GraphBubbleUp

from langgraph_resilience._store_errors import is_transient_store_error
from langgraph_resilience.errors import (
    BudgetExhausted,
    ConfigError,
    ContextOverflow,
    DegradableError,
    NodeFailure,
    PermanentError,
    TransientError,
    ValidationFailed,
    message_of,
)

__all__ = ["Classification", "Classifier", "FailureKind", "classify", "is_control_flow"]


class FailureKind(str, Enum):
    """What kind of failure an exception is; each kind has its own response."""

    TRANSIENT = "transient"
    PERMANENT = "permanent"
    VALIDATION = "validation"
    DEGRADABLE = "degradable"
    CONTEXT_OVERFLOW = "context_overflow"
    BUDGET_EXHAUSTED = "budget_exhausted"


@dataclass(frozen=True, kw_only=True)
class Classification:
    """The verdict on one exception.

    Attributes:
        kind: the failure kind.
        reason: why, in a few words (which rule matched).
        retry_after: seconds the failing service asked to wait, if it said.
    """

    kind: FailureKind
    reason: str
    retry_after: float | None = None


Predicate = Callable[[BaseException], bool]
Rule = tuple[Predicate, FailureKind, str]


def is_control_flow(exc: BaseException) -> bool:
    """LangGraph's own signals (interrupt, drain, parent command): never handled here."""
    return isinstance(exc, GraphBubbleUp)


# -- duck-typed readers ----------------------------------------------------------


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an error carries (``status_code``, ``status`` or its response's)."""
    for holder in (exc, getattr(exc, "response", None)):
        for name in ("status_code", "status"):
            value = getattr(holder, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
                return value
    return None


def _headers(exc: BaseException) -> Any:
    response = getattr(exc, "response", None)
    return getattr(response, "headers", None) or getattr(exc, "headers", None)


def retry_after(exc: BaseException, now: float | None = None) -> float | None:
    """Seconds to wait that the error states: ``retry_after`` or a Retry-After header."""
    own = getattr(exc, "retry_after", None)
    if isinstance(own, (int, float)) and not isinstance(own, bool) and own >= 0:
        return float(own)
    headers = _headers(exc)
    if headers is None:
        return None
    try:
        raw = headers.get("retry-after") or headers.get("Retry-After")
    except Exception:
        return None
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except (TypeError, ValueError):
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(raw)).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


_CONTEXT_MARKERS = (
    "context length",
    "context_length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "reduce the length of the messages",
)


def _says_context_overflow(exc: BaseException) -> bool:
    code = str(getattr(exc, "code", "") or "").lower()
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            code += " " + str(inner.get("code", "") or inner.get("type", "")).lower()
    text = f"{code} {message_of(exc)}".lower()
    return any(marker in text for marker in _CONTEXT_MARKERS)


def _is_pydantic_validation(exc: BaseException) -> bool:
    return any(
        c.__name__ == "ValidationError" and c.__module__.startswith("pydantic")
        for c in type(exc).__mro__
    )


def _is_output_parser_error(exc: BaseException) -> bool:
    return isinstance(exc, OutputParserException)


def _is_node_timeout(exc: BaseException) -> bool:
    return type(exc).__name__ == "NodeTimeoutError" and type(exc).__module__.startswith("langgraph")


def _is_store_transient(exc: BaseException) -> bool:
    return is_transient_store_error(exc) or "database is locked" in message_of(exc).lower()


def _transient_status(exc: BaseException) -> bool:
    status = http_status(exc)
    return status is not None and (status in (408, 425, 429) or status >= 500)


def _client_status(exc: BaseException) -> bool:
    status = http_status(exc)
    return status is not None and 400 <= status < 500


_MARKERS: dict[type[NodeFailure], FailureKind] = {
    TransientError: FailureKind.TRANSIENT,
    PermanentError: FailureKind.PERMANENT,
    ValidationFailed: FailureKind.VALIDATION,
    DegradableError: FailureKind.DEGRADABLE,
    ContextOverflow: FailureKind.CONTEXT_OVERFLOW,
    BudgetExhausted: FailureKind.BUDGET_EXHAUSTED,
}

DEFAULT_RULES: tuple[Rule, ...] = (
    *(
        ((lambda e, t=t: isinstance(e, t)), kind, f"raised {t.__name__}")
        for t, kind in _MARKERS.items()
    ),
    (_says_context_overflow, FailureKind.CONTEXT_OVERFLOW, "the context is too long"),
    (_transient_status, FailureKind.TRANSIENT, "HTTP status worth a retry"),
    (_client_status, FailureKind.PERMANENT, "HTTP client error"),
    (_is_node_timeout, FailureKind.TRANSIENT, "node timed out"),
    (
        lambda e: isinstance(e, (ConnectionError, TimeoutError)),
        FailureKind.TRANSIENT,
        "connection or timeout error",
    ),
    (_is_store_transient, FailureKind.TRANSIENT, "database busy or disconnected"),
    (_is_pydantic_validation, FailureKind.VALIDATION, "pydantic validation error"),
    (_is_output_parser_error, FailureKind.VALIDATION, "output could not be parsed"),
)


def _predicate(match: type[BaseException] | Predicate) -> tuple[Predicate, str]:
    if isinstance(match, type):
        if not issubclass(match, BaseException):
            raise ConfigError(
                f"Classifier.on needs an exception type or a predicate, got {match!r}"
            )
        return (lambda e: isinstance(e, match)), f"matched {match.__name__}"
    if callable(match):
        return match, f"matched {getattr(match, '__name__', 'a predicate')}"
    raise ConfigError(
        f"Classifier.on needs an exception type or a callable(exc) -> bool, got {match!r}"
    )


@dataclass(frozen=True)
class Classifier:
    """An ordered, immutable list of rules in front of the default ones.

    The first rule that matches decides; an exception no rule matches is
    PERMANENT (a bug or bad input: retrying will not help).

    Example:
        >>> from langgraph_resilience import Classifier, FailureKind
        >>> c = Classifier().on(KeyError, FailureKind.DEGRADABLE)
        >>> c(KeyError("cache miss")).kind
        <FailureKind.DEGRADABLE: 'degradable'>
    """

    rules: tuple[Rule, ...] = ()

    def on(self, match: type[BaseException] | Predicate, kind: FailureKind) -> Classifier:
        """A new classifier that tries this rule after this one's own, before the defaults."""
        if not isinstance(kind, FailureKind):
            raise ConfigError(f"kind must be a FailureKind, got {kind!r}")
        predicate, reason = _predicate(match)
        return Classifier((*self.rules, (predicate, kind, reason)))

    def __call__(self, exc: BaseException) -> Classification:
        if is_control_flow(exc):
            raise ConfigError(
                f"{type(exc).__name__} is LangGraph control flow (an interrupt or a drain); "
                "re-raise it instead of classifying it"
            )
        for predicate, kind, reason in (*self.rules, *DEFAULT_RULES):
            try:
                matched = predicate(exc)
            except Exception:
                matched = False
            if matched:
                wait = retry_after(exc) if kind is FailureKind.TRANSIENT else None
                return Classification(kind=kind, reason=reason, retry_after=wait)
        return Classification(kind=FailureKind.PERMANENT, reason="no rule matched")


_DEFAULT = Classifier()


def classify(exc: BaseException) -> Classification:
    """Classify with the default rules.

    Example:
        >>> classify(ConnectionError("reset by peer")).kind
        <FailureKind.TRANSIENT: 'transient'>
    """
    return _DEFAULT(exc)
