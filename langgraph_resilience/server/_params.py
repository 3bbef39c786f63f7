"""The console's query parameters, read with a reason for each bad one.

Each reader takes a page's query parameters and returns the value the page
asks the store for, or raises a `ConfigError` saying what is wrong;
`bad_parameter` is the console's answer to it: 400, in plain text.
Nothing reaches the store unread (a NUL in ``?thread=``, a status no run row
has), so a bad link is a 400 that says why, never a 500.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from langgraph_resilience.checkpoint.runlog._run_log_reads import STATUSES
from langgraph_resilience.checkpoint.saver._base import check_thread_id
from langgraph_resilience.errors import ConfigError

__all__ = ["bad_parameter", "per", "run_number", "statuses", "thread"]

_PER = ("hour", "day")


def statuses(query: Any) -> list[str]:
    """``?status=`` (repeatable): run-row statuses; ``queued`` is a Worker's run
    not started yet, which has no run row to list."""
    given = [s for s in query.getlist("status") if s]
    unknown = [s for s in given if s not in STATUSES]
    if unknown:
        raise ConfigError(
            f"?status={unknown[0]!r} is not a status the runs page lists: one of "
            f"{', '.join(STATUSES)} (a queued run has no run row until a worker starts it: "
            "langgraph-resilience runs lists those)"
        )
    return given


def thread(query: Mapping[str, str], name: str = "thread") -> str:
    """``?thread=``: a thread id by the rule every backend keeps (`check_thread_id`),
    or "" when not given."""
    raw = query.get(name) or ""
    if not raw:
        return ""
    try:
        return check_thread_id(raw)
    except ConfigError as exc:
        raise ConfigError(f"?{name}= is not a thread id: {exc}") from None


def run_number(query: Mapping[str, str]) -> int | str | None:
    """``?run=``: a run's number on its thread (1, 2, ...) or a run id; None when
    not given (the latest)."""
    raw = query.get("run") or ""
    if not raw:
        return None
    if raw.isdigit():
        return int(raw)
    if "\x00" in raw or len(raw) > 200 or not raw.isprintable():
        raise ConfigError(f"?run= must be a run's number or a run id, got {raw[:60]!r}")
    return raw


def per(query: Mapping[str, str]) -> str:
    """``?per=``: ``hour`` (the default) or ``day``."""
    given = query.get("per") or "hour"
    if given not in _PER:
        raise ConfigError(f"?per= takes hour or day, got {given[:40]!r}")
    return given


async def bad_parameter(request: Request, exc: Exception) -> Response:
    """The console's answer to a `ConfigError` from a page: 400, saying why."""
    return PlainTextResponse(f"bad request: {exc}", status_code=400)
