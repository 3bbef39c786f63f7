"""How the agent middleware treats one kind of call: `CallPolicy` and `ToolEffect`.

Plain, validated settings; no LangChain import, so they are checked (and their
messages read) the same with or without the ``agents`` extra. `node_policy`
maps a `CallPolicy` onto the `NodePolicy` the pure decision core
(`_engine.decide`) reads, so a tool's or the model's tries are decided exactly
as a graph node's are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langgraph_resilience.classify import Classifier
from langgraph_resilience.effects._steps import EFFECT_LEASE, EffectSpec, OnUnknown
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.policy import Backoff, Limit, NodePolicy, limits_of

__all__ = ["CallPolicy", "OnFailure", "ToolEffect", "effect_spec", "node_policy"]

#: What a call that failed for good becomes: ``"continue"`` (a tool: an error
#: `ToolMessage` the model reads and can react to), ``"end"`` (the run ends with
#: the structured partial result), ``"raise"`` (the error escapes, as without
#: the middleware).
OnFailure = Literal["continue", "end", "raise"]
_ON_FAILURE = ("continue", "end", "raise")


@dataclass(frozen=True, kw_only=True)
class CallPolicy:
    """How the model's calls, or one tool's, are retried and given up on.

    Args:
        retry: backoff for TRANSIENT failures (rate limits, with their
            ``Retry-After``; timeouts; 5xx); None: no retry. The attempt count
            is stored through the resilient saver, so a crash during a wait
            does not reset it.
        on_failure: when the call fails for good: ``"continue"`` (tools only:
            the model gets an error `ToolMessage`), ``"end"`` (the run ends with
            ``state["resilience"]["status"] == "partial_complete"``, what was
            done, what failed and suggestions) or ``"raise"``. None (the
            default): ``"continue"`` for a tool, ``"raise"`` for the model.
        max_validation_attempts: tries in all that may fail validation
            (pydantic ``ValidationError``, ``OutputParserException``).
        classifier: rules in front of the middleware's own classifier.
        limits: shared `Limit` objects held around each call (a provider's
            concurrency or rate, shared by every process on the store; a
            ``Retry-After`` met while holding one pauses it for all).

    Example:
        >>> policy = CallPolicy(retry=Backoff(max_attempts=5), on_failure="end")
    """

    retry: Backoff | None = field(default_factory=Backoff)
    on_failure: OnFailure | None = None
    max_validation_attempts: int = 2
    classifier: Classifier | None = None
    limits: Sequence[Limit] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "limits", limits_of("CallPolicy", self.limits))
        if self.retry is not None and not isinstance(self.retry, Backoff):
            raise ConfigError(
                "CallPolicy retry must be a langgraph_resilience.Backoff (e.g. "
                f"Backoff(max_attempts=4)) or None for no retry, got {self.retry!r}"
            )
        if self.on_failure is not None and self.on_failure not in _ON_FAILURE:
            raise ConfigError(
                f'CallPolicy on_failure must be "continue", "end" or "raise", '
                f"got {self.on_failure!r}"
            )
        count = self.max_validation_attempts
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(
                f"CallPolicy max_validation_attempts must be an int >= 1, got {count!r}"
            )
        if self.classifier is not None and not isinstance(self.classifier, Classifier):
            raise ConfigError(
                "CallPolicy classifier must be a langgraph_resilience.Classifier (e.g. "
                f"Classifier().on(MyError, FailureKind.TRANSIENT)), got {self.classifier!r}"
            )


@dataclass(frozen=True, kw_only=True)
class ToolEffect:
    """A tool that acts on the world (an email, a payment): called once per tool call.

    An intent is stored before the call and the resulting `ToolMessage` after
    it, keyed by the tool call id (stable across resumes, retries and
    takeovers). A resumed or retried agent gets the stored `ToolMessage`
    instead of a second call.

    Args:
        reconcile: ``reconcile(idempotency_key)`` asks the outside system whether
            a call whose outcome was not stored (the process died during it)
            happened: it returns the tool's result (a `ToolMessage`, or content
            for one) if so, None if not. The key is what
            `tool_idempotency_key()` returned inside the call.
        on_unknown: without ``reconcile``, what to do about such a call:
            ``"reexecute"`` (call again with the same key) or ``"raise"``
            (`EffectOutcomeUnknown`: verify by hand).
        lease: seconds this executor's claim on the call holds without renewal.

    Example:
        >>> ToolEffect(reconcile=mailer.find_by_key)  # doctest: +SKIP
    """

    reconcile: Callable[[str], Any] | None = None
    on_unknown: OnUnknown = "reexecute"
    lease: float = EFFECT_LEASE

    def __post_init__(self) -> None:
        # The same checks as @side_effect's, with its messages.
        effect_spec(self, "tool")


def effect_spec(effect: ToolEffect, name: str) -> EffectSpec:
    """The ledger's description of a tool's calls (the name keeps them apart)."""
    return EffectSpec(
        name=f"tool:{name}".replace("|", "/"),
        reconcile=effect.reconcile,
        on_unknown=effect.on_unknown,
        lease=effect.lease,
    )


def node_policy(policy: CallPolicy) -> NodePolicy:
    """The `NodePolicy` whose decisions are this call policy's: no fallback node;
    giving up is "critical" (ends the run) only for ``on_failure="end"``."""
    return NodePolicy(
        retry=policy.retry,
        critical=policy.on_failure == "end",
        max_validation_attempts=policy.max_validation_attempts,
        limits=policy.limits,
    )
