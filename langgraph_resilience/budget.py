"""Budgets per run: tokens, cost, step time and steps, paused at a step boundary.

A run's budget comes from ``config["configurable"]["budget"]`` (a `Budget`, or a
dict of its fields), by default from ``compile(budget=...)``; a top-up given on
resume (``Command(resume=Budget(...))``) replaces it from then on and is kept in
the run log. What a run used is kept with each step's record (its step row),
added up by each node as it completes in its invoke's tally (`graph._tally`,
read back from the rows when an invoke goes on with the run), so it survives
crashes and is shared by every worker that runs the thread; the run's total is
``state["resilience"]["usage"]`` once it ends (an agent's, and a nested graph's
own steps, add theirs up in their run log as they go):

- ``tokens``: counted from LangChain chat models' ``usage_metadata`` inside the
  node (automatically, through a callback hook), plus `report_usage(tokens=...)`;
- ``cost``: what nodes report with `report_usage(cost=...)`;
- ``seconds``: time spent running the run's steps (node calls, retries
  included; not time paused, queued or crashed);
- ``steps``: node executions completed.

Before a node runs, its wrapper compares usage with the budget; when a limit is
reached it pauses the run right there with a LangGraph ``interrupt`` whose value
says what ran out (``{"reason": "budget_exhausted", "exhausted": [...], "used":
{...}, "limits": {...}}``). ``Command(resume=Budget(...))`` continues from that
step with nothing redone.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import asdict, dataclass, fields
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.tracers.context import register_configure_hook

from langgraph_resilience.classify import FailureKind
from langgraph_resilience.errors import ConfigError

__all__ = ["Budget", "report_usage"]

USAGE_KEYS = ("tokens", "cost", "seconds", "steps")
_LIMITS = {
    "max_tokens": "tokens",
    "max_cost": "cost",
    "max_seconds": "seconds",
    "max_steps": "steps",
}


@dataclass(frozen=True, kw_only=True)
class Budget:
    """Limits for one run; None means no limit.

    Args:
        max_tokens: chat-model tokens (input plus output).
        max_cost: cost reported by nodes with `report_usage`, in your unit.
        max_seconds: seconds spent running steps.
        max_steps: node executions.

    Example:
        >>> graph.invoke(inputs, {"configurable": {"thread_id": "t",  # doctest: +SKIP
        ...     "budget": Budget(max_tokens=50_000, max_cost=2.0)}})
    """

    max_tokens: int | None = None
    max_cost: float | None = None
    max_seconds: float | None = None
    max_steps: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            whole = f.name in ("max_tokens", "max_steps")
            ok_type = isinstance(value, int) if whole else isinstance(value, (int, float))
            if isinstance(value, bool) or not ok_type or not math.isfinite(value) or value < 0:
                kind = "an int" if whole else "a number"
                raise ConfigError(
                    f"Budget {f.name} must be {kind} >= 0 or None (no limit), got {value!r}"
                )

    def exhausted(self, used: Mapping[str, float]) -> list[str]:
        """The limits ``used`` has reached (e.g. ``["max_tokens"]``)."""
        return [
            name
            for name, key in _LIMITS.items()
            if getattr(self, name) is not None and used.get(key, 0) >= getattr(self, name)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def coerce(cls, value: Any, *, where: str) -> Budget | None:
        """A `Budget` from a Budget, a dict of its fields, or None."""
        if value is None or isinstance(value, Budget):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - set(_LIMITS)
            if unknown:
                raise ConfigError(
                    f"{where}: unknown budget field(s) {sorted(unknown)}; the fields are "
                    f"{list(_LIMITS)}"
                )
            return cls(**value)
        raise ConfigError(
            f"{where} must be a langgraph_resilience.Budget (or a dict of its fields), "
            f"got {type(value).__name__}"
        )


def add_usage(
    left: Mapping[str, float] | None, right: Mapping[str, float] | None
) -> dict[str, float]:
    """Usage added up (the run log's reducer for ``usage``)."""
    total = dict(left or {})
    for key, value in (right or {}).items():
        total[key] = total.get(key, 0) + value
    return total


# -- metering one node call ---------------------------------------------------------------


class Meter(BaseCallbackHandler):
    """What one node call used: tokens and cost (thread-safe: a node may fan out).

    Also the context manager that meters the call (`metering`) and the callback
    handler that counts the chat models' tokens in it: one object per call, the
    cheapest a node's happy path can pay.
    """

    tokens: int = 0
    cost: float = 0.0
    # What meters entered inside this one used (a resilient graph's nodes or an
    # agent's calls, the graph or agent invoked inside this node's function):
    # each adds its own and its inner spend here as it exits (`inner_usage`).
    inner_tokens: int = 0
    inner_cost: float = 0.0
    _tokens: tuple[Any, Any] | None = None
    _outer: Meter | None = None

    def add(self, tokens: int = 0, cost: float = 0.0) -> None:
        with _ADDING:  # rare (a model call's end): one lock for every meter
            self.tokens += tokens
            self.cost += cost

    def _add_inner(self, tokens: int, cost: float) -> None:
        with _ADDING:
            self.inner_tokens += tokens
            self.inner_cost += cost

    def inner_usage(self) -> dict[str, float]:
        """What the meters entered inside this call used: tokens and cost."""
        found: dict[str, float] = {}
        if self.inner_tokens:
            found["tokens"] = self.inner_tokens
        if self.inner_cost:
            found["cost"] = self.inner_cost
        return found

    def usage(self, seconds: float) -> dict[str, float]:
        """This call's usage, with the time it took."""
        found: dict[str, float] = {"seconds": seconds}
        if self.tokens:
            found["tokens"] = self.tokens
        if self.cost:
            found["cost"] = self.cost
        return found

    def __enter__(self) -> Meter:
        self._outer = _METER.get()
        self._tokens = (_METER.set(self), _COUNTER.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tokens is not None:
            _COUNTER.reset(self._tokens[1])
            _METER.reset(self._tokens[0])
            self._tokens = None
        outer, self._outer = self._outer, None
        if outer is not None and (self.tokens or self.cost or self.inner_tokens or self.inner_cost):
            outer._add_inner(self.tokens + self.inner_tokens, self.cost + self.inner_cost)

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """Add a chat model's ``usage_metadata`` to this meter."""
        if _METER.get() is not self:
            # A node nested in this one (a subgraph's) meters its own calls;
            # its usage reaches this node through the subgraph's run log.
            return
        for generations in response.generations:
            for generation in generations:
                usage = None
                if isinstance(generation, ChatGeneration):
                    usage = getattr(generation.message, "usage_metadata", None)
                if usage:
                    self.add(tokens=int(usage.get("total_tokens") or 0))


_ADDING = threading.Lock()
_METER: ContextVar[Meter | None] = ContextVar("langgraph_resilience_meter", default=None)

# LangChain adds the handler in this variable to every callback manager
# configured while it is set (as get_usage_metadata_callback does).
_COUNTER: ContextVar[Meter | None] = ContextVar("langgraph_resilience_token_counter", default=None)
register_configure_hook(_COUNTER, inheritable=True)


def metering() -> Meter:
    """Meter the node call made inside the block (``with metering() as meter:``)."""
    return Meter()


def report_usage(*, tokens: int = 0, cost: float = 0.0) -> None:
    """Add spend the automatic count does not see to the current node's usage.

    Call it inside a node of a `ResilientStateGraph`: ``cost`` for money (the
    only way cost is counted), ``tokens`` for models outside LangChain.

    Raises:
        ConfigError: outside such a node, or with a negative amount.
    """
    meter = _METER.get()
    if meter is None:
        raise ConfigError(
            "report_usage() works only inside a node of a ResilientStateGraph (it adds "
            "to that run's budget usage)"
        )
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ConfigError(f"report_usage tokens must be an int >= 0, got {tokens!r}")
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not cost >= 0:
        raise ConfigError(f"report_usage cost must be a number >= 0, got {cost!r}")
    meter.add(tokens=tokens, cost=float(cost))


# -- the budget of a run --------------------------------------------------------------------


def topped_up(state: Any) -> Budget | None:
    """A top-up kept in the run log: in force instead of the run's configured budget."""
    log = state.get("resilience") if isinstance(state, Mapping) else None
    topped = (log or {}).get("budget")
    if topped is None:
        return None
    return Budget.coerce(topped, where="the run log's budget")


def used(state: Any) -> dict[str, float]:
    log = state.get("resilience") if isinstance(state, Mapping) else None
    return dict((log or {}).get("usage") or {})


def pause_value(
    node: str,
    budget: Budget | None,
    spent: Mapping[str, float],
    ran_out: list[str],
    *,
    error: str | None = None,
) -> dict[str, Any]:
    """What the interrupt of an exhausted budget says: the limits that ran out
    (``exhausted``) at a step boundary, or what a try raised (``error``: a
    `BudgetExhausted` from a service), with the run's usage and limits. One
    shape for a graph node and an agent's model or tool call."""
    return {
        "reason": FailureKind.BUDGET_EXHAUSTED.value,
        "node": node,
        "exhausted": ran_out,
        "used": {k: spent.get(k, 0) for k in USAGE_KEYS},
        "limits": budget.to_dict() if budget is not None else {},
        "error": error,
        # A try that raised is tried again on any resume value; a spent budget
        # pauses again until it is topped up.
        "resume_with": "Command(resume=Budget(...)) with higher limits"
        + (", or any value to retry" if error is not None else ""),
    }
