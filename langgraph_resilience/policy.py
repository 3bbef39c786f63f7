"""Retry and node policies: frozen, keyword-only, validated on construction."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from langgraph_resilience.classify import Classifier, FailureKind
from langgraph_resilience.errors import ConfigError

__all__ = ["Attempt", "Backoff", "NodePolicy", "Seconds"]

Seconds = float | timedelta
Jitter = Literal["full", "none"]


def _seconds(name: str, value: Seconds) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be seconds as a float or a timedelta, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Exponential backoff with full jitter.

    The n-th retry waits a random time in ``[0, min(max_interval,
    initial_interval * backoff_factor ** (n - 1))]`` ("full jitter"), or exactly
    that cap with ``jitter="none"``. Field names follow LangGraph's
    ``RetryPolicy`` where they mean the same thing.

    Args:
        max_attempts: tries in all, the first included (>= 1).
        initial_interval: cap of the first wait, seconds or timedelta.
        backoff_factor: growth of the cap per retry (>= 1).
        max_interval: largest cap, seconds or timedelta (>= initial_interval).
        jitter: ``"full"`` (default) or ``"none"``.
        max_wait: the longest a node waits in place for one retry, backoff and a
            failing service's ``Retry-After`` alike (default 60 s). A service that
            asks for longer ends the step's tries (its fallback, degrade or
            partial result), with a suggestion that says when to retry.

    Example:
        >>> Backoff(max_attempts=4, initial_interval=0.5).cap(3)
        2.0
    """

    max_attempts: int = 3
    initial_interval: Seconds = 0.5
    backoff_factor: float = 2.0
    max_interval: Seconds = 60.0
    jitter: Jitter = "full"
    max_wait: Seconds = 60.0

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or self.max_attempts < 1
        ):
            raise ConfigError(
                f"max_attempts must be an int >= 1 (1 means no retry), got {self.max_attempts!r}"
            )
        object.__setattr__(
            self, "initial_interval", _seconds("initial_interval", self.initial_interval)
        )
        object.__setattr__(self, "max_interval", _seconds("max_interval", self.max_interval))
        object.__setattr__(self, "max_wait", _seconds("max_wait", self.max_wait))
        if self.max_interval < self.initial_interval:  # type: ignore[operator]
            raise ConfigError(
                f"max_interval ({self.max_interval} s) is smaller than initial_interval "
                f"({self.initial_interval} s): every wait would be cut to max_interval. Raise "
                "max_interval or lower initial_interval."
            )
        if not self.max_wait > 0:  # type: ignore[operator]
            raise ConfigError(f"max_wait must be seconds > 0, got {self.max_wait!r}")
        if (
            isinstance(self.backoff_factor, bool)
            or not isinstance(self.backoff_factor, (int, float))
            or not math.isfinite(self.backoff_factor)
            or self.backoff_factor < 1
        ):
            raise ConfigError(f"backoff_factor must be a number >= 1, got {self.backoff_factor!r}")
        if self.jitter not in ("full", "none"):
            raise ConfigError(f'jitter must be "full" or "none", got {self.jitter!r}')

    def cap(self, retry: int) -> float:
        """The longest wait before the ``retry``-th retry (1-based)."""
        exponent = max(retry - 1, 0)
        initial = float(self.initial_interval)  # type: ignore[arg-type]
        largest = float(self.max_interval)  # type: ignore[arg-type]
        try:
            raw = initial * self.backoff_factor**exponent
        except OverflowError:
            raw = largest
        return min(largest, raw)

    def delay(self, retry: int, rand: float) -> float:
        """The wait before the ``retry``-th retry, given ``rand`` uniform in [0, 1)."""
        cap = min(self.cap(retry), float(self.max_wait))  # type: ignore[arg-type]
        return cap * rand if self.jitter == "full" else cap


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """What a node sees of its own retries, through `current_attempt()`.

    Attributes:
        number: this try of the task, 1-based; it counts tries before a crash too.
        last_kind: the kind of the previous try's failure, if there was one.
        last_error: the previous failure, as ``"Type: message"``.
        overrides: the `NodePolicy.adapt` overrides in force for this try.
        validation_failures: how many tries so far failed validation.
    """

    number: int = 1
    last_kind: FailureKind | None = None
    last_error: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    validation_failures: int = 0


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _optional_callable(name: str, value: object, what: str) -> None:
    if value is not None and not callable(value):
        raise ConfigError(f"{name} must be a callable ({what}) or None, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class NodePolicy:
    """How one node answers each kind of failure (README, "The failure model").

    Args:
        retry: backoff for TRANSIENT failures (``None``: no retry).
        fallback: name of the node to run when this one fails for good, or at
            once on a DEGRADABLE failure.
        critical: when it fails for good without a fallback, ``True`` ends the run
            with a partial result; ``False`` marks the step degraded and goes on
            along the node's normal edges.
        validate: ``validate(output)`` checks a successful output; it raises
            `ValidationFailed` (or returns ``False``) to reject it.
        adapt: ``adapt(attempt) -> dict`` gives overrides for the next try after a
            VALIDATION failure (another prompt, temperature, model); the node
            reads them with ``current_attempt().overrides``.
        max_validation_attempts: tries in all that may fail validation.
        compress: ``compress(state) -> dict`` shrinks the context after a
            CONTEXT_OVERFLOW failure; by default the ``messages`` key is trimmed
            with langchain-core, keeping the system message.
        timeout: seconds (or timedelta) one try of an async node may take; a try
            that takes longer fails as TRANSIENT.
        classifier: rules of this node in front of the default ones.

    Example:
        >>> from langgraph_resilience import Backoff, NodePolicy
        >>> NodePolicy(retry=Backoff(max_attempts=4), fallback="search_cache", critical=False)
        NodePolicy(...)  # doctest: +SKIP
    """

    retry: Backoff | None = field(default_factory=Backoff)
    fallback: str | None = None
    critical: bool = True
    validate: Callable[[Any], Any] | None = None
    adapt: Callable[[Attempt], Mapping[str, Any]] | None = None
    max_validation_attempts: int = 3
    compress: Callable[[Any], Mapping[str, Any]] | None = None
    timeout: Seconds | None = None
    classifier: Classifier | None = None

    def __post_init__(self) -> None:
        if self.retry is not None and not isinstance(self.retry, Backoff):
            raise ConfigError(f"retry must be a Backoff or None, got {self.retry!r}")
        if self.fallback is not None and (not isinstance(self.fallback, str) or not self.fallback):
            raise ConfigError(f"fallback must be a node name (str) or None, got {self.fallback!r}")
        if not isinstance(self.critical, bool):
            raise ConfigError(f"critical must be True or False, got {self.critical!r}")
        _optional_callable("validate", self.validate, "output -> None, raising ValidationFailed")
        _optional_callable("adapt", self.adapt, "Attempt -> dict of overrides")
        _optional_callable("compress", self.compress, "state -> dict update")
        _positive_int("max_validation_attempts", self.max_validation_attempts)
        if self.timeout is not None:
            seconds = _seconds("timeout", self.timeout)
            if seconds <= 0:
                raise ConfigError(f"timeout must be > 0 seconds, got {self.timeout!r}")
            object.__setattr__(self, "timeout", seconds)
        if self.classifier is not None and not isinstance(self.classifier, Classifier):
            raise ConfigError(f"classifier must be a Classifier, got {self.classifier!r}")
