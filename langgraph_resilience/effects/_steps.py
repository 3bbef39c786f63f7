"""What to do for one side-effect call, decided apart from its I/O.

`effect_steps` is the decision (a generator of operations: look up, claim,
reconcile, call, settle); `effects` drives it, sync or async, and does the I/O.
`EffectSpec` is how one decorated function is recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from langgraph_resilience.checkpoint import EffectRecord, IntentVerdict
from langgraph_resilience.errors import ConfigError, EffectInFlight, EffectOutcomeUnknown

__all__ = [
    "EFFECT_LEASE",
    "MAX_OUTCOME_BYTES",
    "CallEffect",
    "ClaimIntent",
    "EffectOp",
    "EffectSpec",
    "Lookup",
    "OnUnknown",
    "Reconcile",
    "Replay",
    "Settle",
    "effect_steps",
]

#: Seconds an executor's claim on an effect holds without renewal (renewed every
#: third of it while the call runs): how long an executor on another machine that
#: vanished mid-call keeps others waiting before they settle its intent.
EFFECT_LEASE = 30.0
#: The longest an executor that found a live claim waits before it looks again.
_POLL = 0.25

OnUnknown = Literal["reexecute", "raise"]


#: The largest serialized outcome an effect record stores (16 MiB): a bigger one
#: bloats every read of the ledger and may pass the database's own limits (1 GB
#: per Postgres value, 1 GB per SQLite blob by default).
MAX_OUTCOME_BYTES = 16 * 2**20


@dataclass(frozen=True, kw_only=True)
class EffectSpec:
    """How one decorated function is recorded."""

    name: str
    key: Callable[..., Any] | None = None
    reconcile: Callable[[str], Any] | None = None
    on_unknown: OnUnknown = "reexecute"
    passes_key: bool = False
    lease: float = EFFECT_LEASE
    max_outcome_bytes: int = MAX_OUTCOME_BYTES
    #: Store the outcome with the saver's next write instead of in its own (see
    #: `side_effect`): a crash in the rest of the node leaves it unknown.
    defer_outcome: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "|" in self.name:
            raise ConfigError(
                f"side_effect name must be a non-empty str without '|', got {self.name!r}"
            )
        if self.key is not None and not callable(self.key):
            raise ConfigError(
                "side_effect key= must be a callable taking the function's arguments and "
                f"returning a business key (e.g. lambda order: order.id), got {self.key!r}"
            )
        if self.reconcile is not None and not callable(self.reconcile):
            raise ConfigError(
                "side_effect reconcile= must be a callable(idempotency_key) that returns the "
                f"effect's result if it happened, or None if it did not; got {self.reconcile!r}"
            )
        if (
            isinstance(self.lease, bool)
            or not isinstance(self.lease, (int, float))
            or not self.lease > 0
        ):
            raise ConfigError(
                f"side_effect lease= must be seconds > 0 (default {EFFECT_LEASE}), "
                f"got {self.lease!r}"
            )
        if (
            isinstance(self.max_outcome_bytes, bool)
            or not isinstance(self.max_outcome_bytes, int)
            or self.max_outcome_bytes < 1
        ):
            raise ConfigError(
                "side_effect max_outcome_bytes= must be an int > 0 (default "
                f"{MAX_OUTCOME_BYTES}), got {self.max_outcome_bytes!r}"
            )
        if self.on_unknown not in ("reexecute", "raise"):
            raise ConfigError(
                f'side_effect on_unknown= must be "reexecute" or "raise", got {self.on_unknown!r}'
            )
        if not isinstance(self.defer_outcome, bool):
            raise ConfigError(
                f"side_effect defer_outcome= must be True or False, got {self.defer_outcome!r}"
            )
        if self.defer_outcome and self.on_unknown == "raise" and self.reconcile is None:
            raise ConfigError(
                f"side effect {self.name!r}: defer_outcome=True leaves the outcome unknown "
                "after a crash anywhere in the rest of the node, and on_unknown='raise' would "
                "stop the run for a person each time. Drop defer_outcome (the outcome is "
                "then stored as the call returns), or give the effect a reconcile=."
            )


# -- the decision ------------------------------------------------------------------


class Lookup(NamedTuple):
    """Read the effect's record (replies an `EffectRecord` or None)."""


class ClaimIntent(NamedTuple):
    """Store the intent before the call, or learn who holds it (replies an `IntentVerdict`).

    ``first``: the task's first try, not resumed: no one else can hold the key.
    """

    first: bool


class Reconcile(NamedTuple):
    """Ask ``reconcile`` whether an unsettled effect happened (replies its result or None)."""


class CallEffect(NamedTuple):
    """Call the function (replies its result, or a failed `Settle` if it raised)."""


class Settle(NamedTuple):
    """Store the outcome: ``done`` with the call's value, or ``failed`` with its error;
    ``how`` it came about (`EffectRecord.how`)."""

    status: str  # done | failed
    value: Any = None
    error: BaseException | None = None
    how: str = "called"  # called | reconciled | reexecuted


class Replay(NamedTuple):
    """The decision's result when the outcome is recorded: return it, do not call."""

    record: EffectRecord


EffectOp = Lookup | ClaimIntent | Reconcile | CallEffect | Settle


def effect_steps(spec: EffectSpec, key: str, fresh: bool) -> Generator[EffectOp, Any, Any]:
    """What to do for one call: yields I/O, returns the result (or a `Replay`).

    ``fresh``: the first try of a task that is not being resumed, which cannot
    have records yet, so nothing is looked up.
    """
    found: EffectRecord | None = None if fresh else (yield Lookup())
    if found is not None and found.status == "done":
        return Replay(found)
    claim: IntentVerdict = yield ClaimIntent(fresh)
    if claim.verdict == "done" and claim.record is not None:
        return Replay(claim.record)
    if claim.verdict == "busy":
        owner = claim.record.owner if claim.record is not None else None
        raise EffectInFlight(
            f"side effect {spec.name!r} (idempotency key {key!r}) is claimed by another "
            f"executor ({owner}) whose call may be in flight: another process (or another "
            f"thread of this one) runs the same step. Not calling it again; its claim "
            f"holds {claim.wait:.1f} s more "
            "unless renewed. A retry replays the outcome once it is recorded.",
            idempotency_key=key,
            owner=owner or "",
            wait=min(claim.wait, _POLL),
        )
    prior = claim.record
    if prior is not None:  # an intent whose outcome is unknown, or a recorded error
        if spec.reconcile is not None:
            happened = yield Reconcile()
            if happened is not None:
                yield Settle("done", happened, how="reconciled")
                return happened
        elif spec.on_unknown == "raise" and prior.status == "intent":
            raise EffectOutcomeUnknown(
                f"side effect {spec.name!r} (idempotency key {key!r}) was started but its "
                "outcome was never recorded: the process stopped during the call. It will "
                "not be called again on its own (on_unknown='raise'). Check the outside "
                "system, record what you find with settle_effect(saver, thread_id, "
                f"{key!r}, happened=True, result=...) or happened=False (to call it again "
                "with the same key), then call retry_failed(graph, config).",
                effect=spec.name,
                idempotency_key=key,
            )
    # an intent without outcome: the first call may have happened, this one repeats it
    how = "reexecuted" if prior is not None and prior.status == "intent" else "called"
    result = yield CallEffect()
    if isinstance(result, Settle):  # the call raised
        yield result._replace(how=how)
        assert result.error is not None
        raise result.error
    yield Settle("done", result, how=how)
    return result
