"""Default classification rules and the Classifier's rule list."""

from __future__ import annotations

import email.utils
import time

import pytest
from langchain_core.exceptions import OutputParserException
from langgraph.errors import GraphInterrupt, NodeTimeoutError
from pydantic import BaseModel, ValidationError

from langgraph_resilience import (
    BudgetExhausted,
    Classifier,
    ConfigError,
    ContextOverflow,
    DegradableError,
    FailureKind,
    PermanentError,
    TransientError,
    ValidationFailed,
    classify,
)

K = FailureKind


class FakeResponse:
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status
        self.headers = headers or {}


class ProviderError(Exception):
    """Shaped like the SDK errors of common model providers (status on the error)."""

    def __init__(
        self,
        message: str,
        status: int,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status
        self.code = code
        self.response = FakeResponse(status, headers)


class HTTPStatusError(Exception):
    """Shaped like httpx / requests errors (status only on the response)."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.response = FakeResponse(status, headers)


def validation_error() -> ValidationError:
    class Model(BaseModel):
        n: int

    try:
        Model(n="not a number")  # type: ignore[arg-type]
    except ValidationError as exc:
        return exc
    raise AssertionError


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (TransientError("x"), K.TRANSIENT),
        (PermanentError("x"), K.PERMANENT),
        (ValidationFailed("x"), K.VALIDATION),
        (DegradableError("x"), K.DEGRADABLE),
        (ContextOverflow("x"), K.CONTEXT_OVERFLOW),
        (BudgetExhausted("x"), K.BUDGET_EXHAUSTED),
        (ConnectionError("reset"), K.TRANSIENT),
        (TimeoutError("slow"), K.TRANSIENT),
        (ConnectionResetError(), K.TRANSIENT),
        (HTTPStatusError(503), K.TRANSIENT),
        (HTTPStatusError(429), K.TRANSIENT),
        (HTTPStatusError(408), K.TRANSIENT),
        (ProviderError("overloaded", 529), K.TRANSIENT),
        (HTTPStatusError(404), K.PERMANENT),
        (ProviderError("bad key", 401), K.PERMANENT),
        (
            ProviderError(
                "This model's maximum context length is 8192 tokens",
                400,
                code="context_length_exceeded",
            ),
            K.CONTEXT_OVERFLOW,
        ),
        (ValueError("prompt is too long: 250000 tokens > 200000 maximum"), K.CONTEXT_OVERFLOW),
        (Exception("database is locked"), K.TRANSIENT),
        (validation_error(), K.VALIDATION),
        (OutputParserException("not JSON"), K.VALIDATION),
        (KeyError("bug"), K.PERMANENT),
        (ValueError("bad input"), K.PERMANENT),
    ],
)
def test_default_rules(exc: BaseException, kind: FailureKind) -> None:
    assert classify(exc).kind is kind


def test_node_timeout_is_transient() -> None:
    exc = NodeTimeoutError.__new__(NodeTimeoutError)
    Exception.__init__(exc, "timed out")
    assert classify(exc).kind is K.TRANSIENT


def test_retry_after_from_marker_header_seconds_and_date() -> None:
    assert classify(TransientError("x", retry_after=3)).retry_after == 3.0
    assert classify(HTTPStatusError(429, {"retry-after": "7"})).retry_after == 7.0
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    wait = classify(ProviderError("slow down", 429, headers={"Retry-After": when})).retry_after
    assert wait is not None and 25 <= wait <= 31
    assert classify(HTTPStatusError(503, {"retry-after": "soon"})).retry_after is None
    assert classify(PermanentError("x")).retry_after is None


def test_marker_exceptions_validate_retry_after() -> None:
    with pytest.raises(ConfigError, match="retry_after"):
        TransientError("x", retry_after=-1)
    assert TransientError("x", attempt_id=4).details == {"attempt_id": 4}


def test_classifier_rules_come_first_and_are_immutable() -> None:
    base = Classifier()
    custom = base.on(KeyError, K.DEGRADABLE).on(lambda e: "quota" in str(e), K.BUDGET_EXHAUSTED)
    assert base.rules == ()
    assert custom(KeyError("cache miss")).kind is K.DEGRADABLE
    assert custom(RuntimeError("quota exceeded")).kind is K.BUDGET_EXHAUSTED
    assert custom(ConnectionError()).kind is K.TRANSIENT  # defaults still apply
    assert "KeyError" in custom(KeyError()).reason


def test_classifier_rejects_bad_rules() -> None:
    with pytest.raises(ConfigError, match="exception type or"):
        Classifier().on(42, K.TRANSIENT)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="FailureKind"):
        Classifier().on(KeyError, "transient")  # type: ignore[arg-type]


def test_a_broken_predicate_does_not_break_classification() -> None:
    def broken(exc: BaseException) -> bool:
        raise RuntimeError("predicate bug")

    assert Classifier().on(broken, K.TRANSIENT)(ConnectionError()).kind is K.TRANSIENT


def test_control_flow_is_never_classified() -> None:
    with pytest.raises(ConfigError, match="control flow"):
        classify(GraphInterrupt(()))
