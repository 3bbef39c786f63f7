"""An effect's outcome as the ledger stores it (`outcome_fields`), and as a
replay returns it (`replayed`): a value the serde cannot store, or one larger
than ``max_outcome_bytes``, is recorded as done without its value."""

from __future__ import annotations

import time
from typing import Any

from langgraph_resilience.checkpoint import AsyncEffectLedger, EffectLedger, OutcomeFields
from langgraph_resilience.effects._steps import EffectSpec, Replay, Settle
from langgraph_resilience.errors import describe

__all__ = ["UNSTORABLE", "outcome_fields", "raise_unstorable", "replayed"]

#: The outcome type of an effect that happened but whose value the serde cannot
#: store: recorded as done (so it is never called again), its replay raises.
UNSTORABLE = "lgr-unstorable"


def outcome_fields(
    spec: EffectSpec, saver: EffectLedger | AsyncEffectLedger, op: Settle
) -> OutcomeFields:
    if op.status == "done":
        try:
            type_, blob = saver.serde.dumps_typed(op.value)
        except TypeError as exc:
            return _unstorable(
                spec,
                f"returned a value the checkpointer cannot store "
                f"({type(op.value).__name__}: {exc})",
                "Return something storable from it (str, numbers, lists, dicts, pydantic "
                "models, dataclasses).",
                op.how,
            )
        if len(blob) > spec.max_outcome_bytes:
            return _unstorable(
                spec,
                f"returned {len(blob):,} bytes once serialized, more than its "
                f"max_outcome_bytes ({spec.max_outcome_bytes:,})",
                "Return a reference to a large result (an id, a URL) instead, or raise "
                "max_outcome_bytes.",
                op.how,
            )
        return OutcomeFields(
            status="done", at=time.time(), outcome_type=type_, outcome=blob, error=None, how=op.how
        )
    error = describe(op.error)[:1000] if op.error is not None else "None"
    return OutcomeFields(
        status="failed", at=time.time(), outcome_type=None, outcome=None, error=error, how=op.how
    )


def _unstorable(spec: EffectSpec, what: str, fix: str, how: str) -> OutcomeFields:
    """An effect that happened, recorded as done without its value."""
    error = (
        f"side effect {spec.name!r} {what}. It ran once and is recorded as done without "
        f"its value, so it is not called again. {fix}"
    )
    return OutcomeFields(
        status="done",
        at=time.time(),
        outcome_type=UNSTORABLE,
        outcome=None,
        error=error[:1000],
        how=how,
    )


def replayed(saver: EffectLedger | AsyncEffectLedger, replay: Replay) -> Any:
    record = replay.record
    if record.outcome_type == UNSTORABLE:
        raise TypeError(record.error)
    if record.outcome_type is None:
        return None
    return saver.serde.loads_typed((record.outcome_type, record.outcome or b""))


def raise_unstorable(fields: OutcomeFields) -> None:
    """An outcome recorded as done without its value: this try raises too."""
    if fields.outcome_type == UNSTORABLE:
        raise TypeError(fields.error)
