"""Retry and node policies: frozen, keyword-only, validated on construction."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from langgraph_resilience.classify import Classifier, FailureKind
from langgraph_resilience.errors import ConfigError

__all__ = ["Attempt", "Backoff", "Limit", "NodePolicy", "Seconds", "limits_of"]

Seconds = float | timedelta
Jitter = Literal["full", "none"]


def seconds_of(name: str, value: Seconds) -> float:
    """``value`` (seconds as a float, or a timedelta) in seconds, checked: a
    finite number >= 0, else a `ConfigError` naming ``name`` (the package's one
    reading of a duration it is given)."""
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
            self, "initial_interval", seconds_of("initial_interval", self.initial_interval)
        )
        object.__setattr__(self, "max_interval", seconds_of("max_interval", self.max_interval))
        object.__setattr__(self, "max_wait", seconds_of("max_wait", self.max_wait))
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


_LIMIT_NAME_MAX = 200


@dataclass(frozen=True)
class Limit:
    """A limit kept in the store, shared by every process on it (`langgraph_resilience.limits`).

    ``NodePolicy(limits=[...])`` holds it around each try of a node,
    ``CallPolicy(limits=[...])`` around each model or tool call of an agent.
    A try waits for it at most its policy's ``Backoff.max_wait``.

    Args:
        name: the limit's name in the store; every process that names it shares it.
        concurrency: at most this many tries hold the limit at once, across all
            processes (None: no such bound). A crashed holder's slot is free at
            once for processes on its machine, elsewhere when its lease runs out.
        rate: at most this many tries start in any window of ``per`` seconds,
            across all processes (None: no such bound).
        per: the rate's window, seconds or timedelta (> 0).
        pause_on_retry_after: a try that fails with a ``Retry-After`` (or
            ``retry_after=``) while holding the limit pauses the limit for every
            process until then.

    Example:
        >>> Limit("search-api", concurrency=8, rate=500, per=60)
        Limit(name='search-api', concurrency=8, rate=500, per=60.0, pause_on_retry_after=True)
    """

    name: str
    concurrency: int | None = field(default=None, kw_only=True)
    rate: int | None = field(default=None, kw_only=True)
    per: Seconds = field(default=1.0, kw_only=True)
    pause_on_retry_after: bool = field(default=True, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or "\x00" in self.name:
            raise ConfigError(f"a Limit's name must be a non-empty str, got {self.name!r}")
        if len(self.name) > _LIMIT_NAME_MAX:
            raise ConfigError(f"a Limit's name is at most {_LIMIT_NAME_MAX} characters long")
        for what in ("concurrency", "rate"):
            value = getattr(self, what)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigError(
                    f"Limit {self.name!r}: {what} must be an int >= 1 or None (no bound), got "
                    f"{value!r}" + (" (0 would admit nothing: leave it None)" if value == 0 else "")
                )
        if self.concurrency is None and self.rate is None:
            raise ConfigError(
                f"Limit {self.name!r} bounds nothing: give concurrency= (tries at once) "
                "and/or rate= with per= (tries started per window of seconds)"
            )
        if self.per is None:
            raise ConfigError(
                f"Limit {self.name!r}: per must be the rate's window in seconds (e.g. "
                "rate=500, per=60 for 500 a minute), got None"
            )
        per = seconds_of("per", self.per)
        if per <= 0:
            raise ConfigError(f"Limit {self.name!r}: per must be seconds > 0, got {self.per!r}")
        object.__setattr__(self, "per", per)
        if not isinstance(self.pause_on_retry_after, bool):
            raise ConfigError(
                f"Limit {self.name!r}: pause_on_retry_after must be True or False, "
                f"got {self.pause_on_retry_after!r}"
            )

    @property
    def numbers(self) -> tuple[int | None, int | None, float | None]:
        """What two processes naming the limit must agree on (``per`` only with a rate)."""
        return (self.concurrency, self.rate, float(self.per) if self.rate else None)  # type: ignore[arg-type]


def limits_of(where: str, limits: object) -> tuple[Limit, ...]:
    """A policy's ``limits=``, checked: `Limit` objects, each name once."""
    if limits is None:
        return ()
    if isinstance(limits, (str, Limit)) or not isinstance(limits, (list, tuple)):
        raise ConfigError(
            f"{where} limits must be a list of langgraph_resilience.Limit, e.g. "
            f'limits=[Limit("search-api", concurrency=8)]; got {limits!r}'
        )
    found = tuple(limits)
    wrong = [x for x in found if not isinstance(x, Limit)]
    if wrong:
        raise ConfigError(f"{where} limits must hold Limit objects only, got {wrong[0]!r}")
    names = [x.name for x in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"{where} limits name {twice[0]!r} twice; give each limit once")
    return found


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
        limits: shared `Limit` objects held around each try (waiting for them is
            bounded by ``retry``'s ``max_wait``).

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
    limits: Sequence[Limit] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "limits", limits_of("NodePolicy", self.limits))
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
            seconds = seconds_of("timeout", self.timeout)
            if seconds <= 0:
                raise ConfigError(f"timeout must be > 0 seconds, got {self.timeout!r}")
            object.__setattr__(self, "timeout", seconds)
        if self.classifier is not None and not isinstance(self.classifier, Classifier):
            raise ConfigError(f"classifier must be a Classifier, got {self.classifier!r}")
