"""Retry and node policies: frozen, keyword-only, validated on construction."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from langgraph_resilience.errors import ConfigError

__all__ = ["Backoff", "Seconds"]

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
        max_interval: largest cap, seconds or timedelta.
        jitter: ``"full"`` (default) or ``"none"``.

    Example:
        >>> Backoff(max_attempts=4, initial_interval=0.5).cap(3)
        2.0
    """

    max_attempts: int = 3
    initial_interval: Seconds = 0.5
    backoff_factor: float = 2.0
    max_interval: Seconds = 60.0
    jitter: Jitter = "full"

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
        cap = self.cap(retry)
        return cap * rand if self.jitter == "full" else cap
