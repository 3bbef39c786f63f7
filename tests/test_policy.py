"""NodePolicy validation and the pure decision core."""

from __future__ import annotations

from datetime import timedelta

import pytest

from langgraph_resilience import Backoff, Classification, ConfigError, FailureKind, NodePolicy
from langgraph_resilience._engine import Action, decide

K = FailureKind


def failure(kind: FailureKind, retry_after: float | None = None) -> Classification:
    return Classification(kind=kind, reason="test", retry_after=retry_after)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retry": Backoff(max_attempts=1), "max_validation_attempts": 0}, "max_validation"),
        ({"validate": "not callable"}, "validate must be a callable"),
        ({"adapt": 3}, "adapt must be a callable"),
        ({"compress": object()}, "compress must be a callable"),
        ({"fallback": ""}, "fallback must be a node name"),
        ({"critical": "yes"}, "critical must be True or False"),
        ({"timeout": -1}, "timeout must be"),
        ({"timeout": 0}, "timeout must be > 0"),
        ({"retry": 3}, "retry must be a Backoff"),
        ({"classifier": "strict"}, "classifier must be a Classifier"),
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        NodePolicy(**kwargs)  # type: ignore[arg-type]


def test_backoff_bad_values_say_what_is_right() -> None:
    with pytest.raises(ConfigError, match=r"max_attempts must be an int >= 1"):
        Backoff(max_attempts=0)
    with pytest.raises(ConfigError, match=r"initial_interval must be a finite number"):
        Backoff(initial_interval=-0.5)
    assert Backoff(initial_interval=timedelta(milliseconds=250)).initial_interval == 0.25
    assert NodePolicy(timeout=timedelta(seconds=2)).timeout == 2.0


def test_policies_are_frozen() -> None:
    policy = NodePolicy()
    with pytest.raises(AttributeError):
        policy.critical = False  # type: ignore[misc]


def test_full_jitter_backoff() -> None:
    b = Backoff(max_attempts=5, initial_interval=1.0, backoff_factor=2.0, max_interval=5.0)
    assert [b.cap(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    assert b.delay(3, 0.25) == 1.0
    assert Backoff(jitter="none", initial_interval=1.0).delay(2, 0.0) == 2.0


def test_transient_retries_until_max_attempts_then_gives_up() -> None:
    policy = NodePolicy(retry=Backoff(max_attempts=3, initial_interval=1.0))
    first = decide(policy, failure(K.TRANSIENT), [], rand=0.5)
    assert (first.action, first.delay) == (Action.RETRY, 0.5)
    second = decide(policy, failure(K.TRANSIENT), [K.TRANSIENT], rand=0.5)
    assert (second.action, second.delay) == (Action.RETRY, 1.0)
    third = decide(policy, failure(K.TRANSIENT), [K.TRANSIENT, K.TRANSIENT], rand=0.5)
    assert (third.action, third.exhausted) == (Action.PARTIAL, True)


def test_retry_after_is_honoured() -> None:
    policy = NodePolicy(retry=Backoff(initial_interval=0.1))
    assert decide(policy, failure(K.TRANSIENT, retry_after=4.0), [], rand=0.9).delay == 4.0


@pytest.mark.parametrize(
    ("policy", "action"),
    [
        (NodePolicy(fallback="cache"), Action.FALLBACK),
        (NodePolicy(critical=True), Action.PARTIAL),
        (NodePolicy(critical=False), Action.DEGRADE),
    ],
)
def test_giving_up_prefers_fallback_then_criticality(policy: NodePolicy, action: Action) -> None:
    assert decide(policy, failure(K.PERMANENT), [], rand=0.0).action is action
    exhausted = [K.TRANSIENT] * (policy.retry.max_attempts - 1)  # type: ignore[union-attr]
    assert decide(policy, failure(K.TRANSIENT), exhausted, rand=0.0).action is action


def test_validation_adapts_then_gives_up() -> None:
    policy = NodePolicy(adapt=lambda a: {"temperature": 0}, max_validation_attempts=2)
    retry = decide(policy, failure(K.VALIDATION), [], rand=0.0)
    assert (retry.action, retry.adapt, retry.delay) == (Action.RETRY, True, 0.0)
    assert decide(policy, failure(K.VALIDATION), [K.VALIDATION], rand=0.0).action is Action.PARTIAL


def test_context_overflow_compresses_then_retries() -> None:
    decision = decide(NodePolicy(), failure(K.CONTEXT_OVERFLOW), [], rand=0.0)
    assert (decision.action, decision.compress) == (Action.RETRY, True)


def test_degradable_goes_to_fallback_at_once_and_budget_pauses() -> None:
    assert (
        decide(NodePolicy(fallback="b"), failure(K.DEGRADABLE), [], 0.0).action is Action.FALLBACK
    )
    assert decide(NodePolicy(), failure(K.BUDGET_EXHAUSTED), [], 0.0).action is Action.PAUSE


def test_no_retry_policy_means_no_transient_retry() -> None:
    assert decide(NodePolicy(retry=None), failure(K.TRANSIENT), [], 0.0).action is Action.PARTIAL
