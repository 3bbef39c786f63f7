"""Settle by hand a side effect whose outcome is unknown.

An effect with ``on_unknown="raise"`` (a payment, say) whose process stopped
during the call ends its run with `EffectOutcomeUnknown`: the library cannot
tell whether it happened and will not guess. A person checks the outside
system, then records what they found with `settle_effect`; `retry_failed` then
replays the recorded result (it happened) or calls again with the same
idempotency key (it did not).
"""

from __future__ import annotations

import time
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_resilience._util._process import executor_alive
from langgraph_resilience.checkpoint import EffectRecord, OutcomeFields
from langgraph_resilience.checkpoint.runlog._reads import SaverOrGraph, async_ledger_of, ledger_of
from langgraph_resilience.errors import ConfigError, RunStateError

__all__ = ["asettle_effect", "settle_effect"]

_WHAT = "settle_effect"


def settle_effect(
    checkpointer: SaverOrGraph,
    thread_id: str,
    idempotency_key: str,
    *,
    happened: bool,
    result: Any = None,
) -> EffectRecord:
    """Record what a person found out about an effect whose outcome is unknown.

    Args:
        checkpointer: the resilient saver (or a graph compiled with one).
        thread_id: the thread the effect belongs to.
        idempotency_key: the effect's key, as `EffectOutcomeUnknown` and the
            partial result's suggestion name it (also ``saver.list_effects``).
        happened: True if the outside system shows it happened; False if not.
        result: what the call would have returned, when it happened: a replay
            returns it to the node.

    Returns:
        The effect's record as now stored: ``done`` (replayed, never called
        again) or ``failed`` (the next try calls it again, with the same key).

    Raises:
        LookupError: no effect with that key on that thread.
        RunStateError: its outcome is already recorded, or another process holds
            its call right now.

    Example:
        >>> settle_effect(saver, "order-7", key, happened=True, result="po-981")  # doctest: +SKIP
        >>> retry_failed(graph, {"configurable": {"thread_id": "order-7"}})  # doctest: +SKIP
    """
    saver = ledger_of(checkpointer, _WHAT)
    found = saver.effects.read(thread_id, idempotency_key)
    fields = _settled(found, thread_id, idempotency_key, happened, result, saver.serde)
    saver.effects.record(thread_id, idempotency_key, fields)
    stored = saver.effects.read(thread_id, idempotency_key)
    assert stored is not None
    return stored


async def asettle_effect(
    checkpointer: SaverOrGraph,
    thread_id: str,
    idempotency_key: str,
    *,
    happened: bool,
    result: Any = None,
) -> EffectRecord:
    """Async twin of `settle_effect`, for the async savers."""
    saver = async_ledger_of(checkpointer, _WHAT)
    found = await saver.effects.aread(thread_id, idempotency_key)
    fields = _settled(found, thread_id, idempotency_key, happened, result, saver.serde)
    await saver.effects.arecord(thread_id, idempotency_key, fields)
    stored = await saver.effects.aread(thread_id, idempotency_key)
    assert stored is not None
    return stored


def _held_by_a_live_call(found: EffectRecord) -> bool:
    """Whether the intent's holder may still be calling: its claim holds and its
    process is not known to be gone (a process of this machine that died is
    known at once; one on another machine only when its claim runs out)."""
    return (
        found.status == "intent"
        and found.owner is not None
        and found.lease_until is not None
        and found.lease_until > time.time()
        and executor_alive(found.owner) is not False
    )


def _settled(
    found: EffectRecord | None,
    thread_id: str,
    key: str,
    happened: bool,
    result: Any,
    serde: SerializerProtocol,
) -> OutcomeFields:
    """The outcome to store, after checking the effect is one to settle."""
    if not isinstance(happened, bool):
        raise ConfigError(f"happened must be True or False, got {happened!r}")
    if found is None:
        raise LookupError(
            f"thread {thread_id!r} has no side effect with idempotency key {key!r}; "
            "saver.list_effects(thread_id) lists its effects and their keys"
        )
    if found.status == "done":
        raise RunStateError(
            f"side effect {found.name!r} ({key!r}) already has its outcome recorded "
            f"(done at {found.outcome_at}); there is nothing to settle"
        )
    if _held_by_a_live_call(found):
        raise RunStateError(
            f"side effect {found.name!r} ({key!r}) is held by {found.owner}, whose call may "
            f"still be running (its claim holds until {found.lease_until:.0f}); settle it once "
            "that process is gone or its claim has run out"
        )
    if not happened:
        return OutcomeFields(
            status="failed",
            at=time.time(),
            outcome_type=None,
            outcome=None,
            error="settled by hand: it did not happen (the next try calls it again)",
        )
    try:
        type_, blob = serde.dumps_typed(result)
    except TypeError as exc:
        raise ConfigError(
            f"result= cannot be stored by the checkpointer's serializer ({exc}); pass a "
            "str, number, list, dict, pydantic model or dataclass"
        ) from exc
    return OutcomeFields(
        status="done",
        at=time.time(),
        outcome_type=type_,
        outcome=blob,
        error=None,
        how="reconciled",
    )
