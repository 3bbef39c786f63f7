"""The pure decision core: (policy, the task's failures so far, this failure) -> action.

No I/O, no clock, no randomness of its own: the node wrapper passes a random
number in and performs the action (sleep, call again, raise to the router).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from langgraph_resilience.classify import Classification, FailureKind
from langgraph_resilience.policy import NodePolicy

__all__ = ["Action", "Decision", "decide"]


class Action(str, Enum):
    RETRY = "retry"  # call the node again (after `delay`), maybe adapted or compressed
    FALLBACK = "fallback"  # route to the policy's fallback node
    DEGRADE = "degrade"  # mark the step degraded, continue along normal edges
    PARTIAL = "partial"  # route to the partial_result terminal node
    PAUSE = "pause"  # interrupt the run until the budget is topped up
    WAIT = "wait"  # release the run until the service's Retry-After (under a Worker)


@dataclass(frozen=True, kw_only=True)
class Decision:
    action: Action
    delay: float = 0.0
    adapt: bool = False
    compress: bool = False
    exhausted: bool = False  # the kind had retries and used them all
    retry_after: float | None = None  # the service asked to wait longer than max_wait

    @property
    def wait(self) -> float | None:
        """Seconds until the next try, when there is one."""
        if self.action is Action.WAIT:
            return self.retry_after
        return self.delay if self.action is Action.RETRY else None


def _give_up(policy: NodePolicy, *, exhausted: bool, retry_after: float | None = None) -> Decision:
    if policy.fallback is not None:
        action = Action.FALLBACK
    elif policy.critical:
        action = Action.PARTIAL
    else:
        action = Action.DEGRADE
    return Decision(action=action, exhausted=exhausted, retry_after=retry_after)


def decide(
    policy: NodePolicy,
    failure: Classification,
    earlier: Iterable[FailureKind],
    rand: float,
    *,
    durable_waits: bool = False,
) -> Decision:
    """What to do about ``failure``, given the kinds of the task's earlier failures.

    Args:
        policy: the node's policy.
        failure: this try's classification.
        earlier: kinds of the failures before this one (persisted across crashes).
        rand: uniform in [0, 1), for the backoff's jitter.
        durable_waits: a wait longer than ``max_wait`` that a service asked for
            (``Retry-After``) can be waited out of process: the run is released
            until then (under a `Worker`). Without it such a failure gives up.
    """
    kind = failure.kind
    count = Counter(earlier)[kind] + 1  # failures of this kind, this one included
    if kind is FailureKind.BUDGET_EXHAUSTED:
        return Decision(action=Action.PAUSE)
    if kind is FailureKind.DEGRADABLE:
        return _give_up(policy, exhausted=False)
    if kind is FailureKind.TRANSIENT and policy.retry is not None:
        asked = failure.retry_after
        too_long = asked is not None and asked > float(policy.retry.max_wait)  # type: ignore[arg-type]
        left = count < policy.retry.max_attempts
        if too_long and not (left and durable_waits):
            return _give_up(policy, exhausted=True, retry_after=asked)  # no waiting in place
        if too_long:
            return Decision(action=Action.WAIT, retry_after=asked)
        if left:
            delay = policy.retry.delay(count, rand)
            if asked is not None:
                delay = max(delay, asked)
            return Decision(action=Action.RETRY, delay=delay)
        return _give_up(policy, exhausted=True)
    if kind is FailureKind.VALIDATION:
        if count < policy.max_validation_attempts:
            return Decision(action=Action.RETRY, adapt=policy.adapt is not None)
        return _give_up(policy, exhausted=True)
    if kind is FailureKind.CONTEXT_OVERFLOW:
        limit = policy.retry.max_attempts if policy.retry is not None else 2
        if count < max(limit, 2):
            return Decision(action=Action.RETRY, compress=True)
        return _give_up(policy, exhausted=True)
    return _give_up(policy, exhausted=False)
