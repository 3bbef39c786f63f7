"""A route as a node's error carries it, and as the store keeps it (pure, no I/O).

A node wrapper that gives up raises the node's own error with its route
attached (`ROUTE_ATTR`). LangGraph stores an error write as the error's
``repr`` only, so the resilient savers store a routed error as its ``repr``
followed by the route (`stored_error`); the error handler that runs after a
crash (`parse_route`) and the metrics scan (`is_routed`) read it back from there.
"""

from __future__ import annotations

import json
import re
from typing import Any

from langgraph_resilience.errors import repr_of

__all__ = [
    "ROUTE_ATTR",
    "ROUTE_MARK",
    "ResilienceRoute",
    "carried_route",
    "is_routed",
    "parse_route",
    "route_repr",
    "stored_error",
]

#: The attribute under which a node's error carries its route.
ROUTE_ATTR = "lgr_route"
#: What starts a route's stored text.
ROUTE_MARK = "ResilienceRoute("

_ROUTE_RE = re.compile(r"ResilienceRoute\((\{.*\})\)\s*$", re.S)


def route_repr(route: dict[str, Any]) -> str:
    """A route as text: ``ResilienceRoute({...json...})``."""
    return f"{ROUTE_MARK}{json.dumps(route, sort_keys=True, default=str)})"


class ResilienceRoute(Exception):
    """Raised by a node wrapper to hand the task to its error handler, for an
    error that takes no attribute (`ROUTE_ATTR`).

    Not an error of the user's: it carries where the run goes next.
    """

    def __init__(self, route: dict[str, Any]) -> None:
        super().__init__(route.get("message", ""))
        self.route = route

    def __repr__(self) -> str:
        return route_repr(self.route)


def carried_route(error: object) -> dict[str, Any] | None:
    """The route a live error carries (None: none)."""
    if isinstance(error, ResilienceRoute):
        return error.route
    carried = getattr(error, ROUTE_ATTR, None)
    return carried if isinstance(carried, dict) else None


def parse_route(text: str) -> dict[str, Any] | None:
    """The route in an error's stored text (`stored_error`), or None."""
    match = _ROUTE_RE.search(text)
    if match is None:
        return None
    try:
        found = json.loads(match.group(1))
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def is_routed(stored: object) -> bool:
    """Whether an error write's stored value is a routed error's."""
    return isinstance(stored, str) and parse_route(stored) is not None


def stored_error(value: Any) -> Any:
    """What the store keeps of an error write: a routed error's ``repr`` and its
    route (LangGraph would keep the ``repr`` only); any other value as it is."""
    route = carried_route(value)
    if route is None or isinstance(value, ResilienceRoute):
        return value
    return f"{repr_of(value)} {route_repr(route)}"
