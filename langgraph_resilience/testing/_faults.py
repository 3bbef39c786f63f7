"""The faults a `FaultPlan` holds, as data, and how a task path is aimed at.

- a **task path** (``"search"``, ``"research/fetch"``, ``"work[2]"``,
  ``"review#3"``), as the run log and `run_report` name steps; shell-style
  wildcards match many (``"review*"`` every visit, ``"work[[]*"`` every branch);
- a **try** of that step: 1 is the first call, 2 the first retry, and so on;
- an **effect** by its `side_effect` name and its call number in the run;
- a **checkpoint write** by its number in the run (1 = the first ``put``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, cast

from langgraph_resilience.errors import ConfigError, StoreUnavailable

__all__ = [
    "CrashFault",
    "CrashWhen",
    "NodeFault",
    "StoreFault",
    "make_error",
    "matches",
    "try_numbers",
]

CrashWhen = Literal["before", "after", "stored"]
StoreTarget = Literal["checkpoint", "writes"]


def matches(pattern: str, path: str) -> bool:
    """Whether a task path is aimed at by ``pattern`` (exact, else a wildcard)."""
    return pattern == path or fnmatch.fnmatchcase(path, pattern)


def try_numbers(tries: int | tuple[int, ...]) -> tuple[int, ...]:
    found = (tries,) if isinstance(tries, int) else tuple(tries)
    if not found or any(isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in found):
        raise ConfigError(f"tries must be try numbers >= 1 (1 = the first call), got {tries!r}")
    return found


@dataclass(frozen=True, kw_only=True)
class NodeFault:
    """Raise ``error`` (made fresh by ``make``) in the step at ``path`` on ``tries``."""

    path: str
    make: Callable[[], BaseException]
    tries: tuple[int, ...] = (1,)

    def __post_init__(self) -> None:
        if not self.path:
            raise ConfigError("a fault needs a task path, e.g. 'search' or 'research/fetch'")
        object.__setattr__(self, "tries", try_numbers(self.tries))


@dataclass(frozen=True, kw_only=True)
class CrashFault:
    """Crash the run at a step (``path``, before or after its body ran) or right
    after an effect's call returned (``effect``, its ``call``-th call in the run)."""

    path: str | None = None
    when: CrashWhen = "after"
    effect: str | None = None
    call: int = 1
    kill: bool = False

    def __post_init__(self) -> None:
        if (self.path is None) == (self.effect is None):
            raise ConfigError(
                "a crash is aimed at a step (path='draft') or an effect (effect='send_report'),"
                " exactly one of them"
            )
        if self.when not in ("before", "after", "stored"):
            raise ConfigError(
                "when must be 'before' or 'after' the step's body, or 'stored' (after its "
                f"writes were stored), got {self.when!r}"
            )
        try_numbers(self.call)


@dataclass(frozen=True, kw_only=True)
class StoreFault:
    """Make a store write fail: the ``at``-th checkpoint ``put`` of the run, or the
    writes of the step at ``path``, ``times`` times in a row, raising ``make()``."""

    target: StoreTarget
    at: int = 1
    path: str | None = None
    times: int = 1
    make: Callable[[], BaseException] = field(
        default=lambda: StoreUnavailable(
            "injected by FaultPlan: the store refused the write", target="fault-plan", attempts=1
        )
    )

    def __post_init__(self) -> None:
        if self.target not in ("checkpoint", "writes"):
            raise ConfigError(f"target must be 'checkpoint' or 'writes', got {self.target!r}")
        if self.target == "writes" and not self.path:
            raise ConfigError("a failed task write needs the task path: fail_writes('draft')")
        try_numbers(self.at)
        try_numbers(self.times)


def make_error(
    error: BaseException | type[BaseException] | Callable[[], BaseException],
) -> Callable[[], BaseException]:
    """A fresh exception per injection (a raised exception keeps its traceback)."""
    if isinstance(error, type) and issubclass(error, BaseException):
        kind: type[BaseException] = error
        return lambda: kind(f"injected by FaultPlan: {kind.__name__}")
    if isinstance(error, BaseException):
        template = error
        return lambda: _copied(template)
    if callable(error):
        return cast(Callable[[], BaseException], error)
    raise ConfigError(
        f"error must be an exception, an exception class or a function making one, got {error!r}"
    )


def _copied(template: BaseException) -> BaseException:
    try:
        fresh = type(template)(*template.args)
    except TypeError:  # a constructor with keyword-only arguments: reuse it
        return template
    fresh.__dict__.update(template.__dict__)
    return fresh
