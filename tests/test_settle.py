"""Settling by hand a payment whose outcome is unknown (``on_unknown="raise"``).

The process stops right after the bank call, before its outcome is stored (a
`FaultPlan` crash leaves the store exactly as a SIGKILL would). The resumed run
stops with `EffectOutcomeUnknown` and a suggestion naming `settle_effect`; a
person records what the bank says, and `retry_failed` finishes the run.
"""

from __future__ import annotations

from typing import Any

import pytest
from graphs import ReceiptsState, one_node

from langgraph_resilience import (
    ConfigError,
    NodePolicy,
    ResilientStateGraph,
    aretry_failed,
    asettle_effect,
    retry_failed,
    settle_effect,
    side_effect,
)
from langgraph_resilience.errors import (
    RunStateError,
)
from langgraph_resilience.testing import FaultPlan, SimulatedCrash


def payment_graph(h: Any, bank: list[str]) -> Any:
    @side_effect(name="pay", on_unknown="raise")
    def pay(amount: int, *, idempotency_key: str) -> str:
        bank.append(idempotency_key)
        return f"po-{len(bank)}"

    def charge(state: ReceiptsState) -> dict[str, Any]:
        return {"receipts": [pay(42)]}

    g = one_node(
        ResilientStateGraph(ReceiptsState), "charge", charge, policy=NodePolicy(retry=None)
    )
    return g.compile(checkpointer=h.saver)


async def settle(h: Any, *args: Any, **kwargs: Any) -> Any:
    if h.is_async:
        return await asettle_effect(h.saver, *args, **kwargs)
    return settle_effect(h.saver, *args, **kwargs)


async def retry(h: Any, graph: Any, config: Any) -> Any:
    if h.is_async:
        return await aretry_failed(graph, config)
    return retry_failed(graph, config)


async def stopped_at_unknown(h: Any, thread: str, bank: list[str]) -> tuple[Any, Any, str]:
    """A payment made, its outcome lost, the run resumed: stopped for a person."""
    graph = payment_graph(h, bank)
    config = {"configurable": {"thread_id": f"{thread}-{h.id}"}}
    with pytest.raises(SimulatedCrash):
        await h.invoke(FaultPlan().crash_after_effect("pay").apply(graph), {}, config)
    # Resumed as a new process would (an empty plan: the saver writes again).
    out = await h.invoke(FaultPlan().apply(graph), None, config)
    outcome = out["resilience"]
    assert outcome["status"] == "partial_complete"
    assert outcome["failed_step"]["error_type"] == "EffectOutcomeUnknown"
    (key,) = bank  # the bank was called once; its key names the effect
    assert f"settle_effect(saver, thread_id, {key!r}" in outcome["recovery_suggestions"][0]
    return graph, config, key


async def test_a_payment_the_bank_made_is_recorded_and_never_made_again(
    checkpointer: Any,
) -> None:
    h, bank = checkpointer, []
    graph, config, key = await stopped_at_unknown(h, "made", bank)
    record = await settle(h, config["configurable"]["thread_id"], key, happened=True, result="po-1")
    assert record.status == "done"
    out = await retry(h, graph, config)
    assert out["resilience"]["status"] == "success"
    assert out["receipts"] == ["po-1"]  # the recorded result, replayed
    assert bank == [key]  # paid once
    with pytest.raises(RunStateError, match="already has its outcome"):
        await settle(h, config["configurable"]["thread_id"], key, happened=True)


async def test_a_payment_the_bank_never_made_is_made_with_the_same_key(
    checkpointer: Any,
) -> None:
    h, bank = checkpointer, []
    graph, config, key = await stopped_at_unknown(h, "not-made", bank)
    record = await settle(h, config["configurable"]["thread_id"], key, happened=False)
    assert record.status == "failed"
    out = await retry(h, graph, config)
    assert out["resilience"]["status"] == "success"
    assert bank == [key, key]  # called again, under the same idempotency key


async def test_settling_asks_for_a_known_effect_and_a_storable_result(
    checkpointer: Any,
) -> None:
    h, bank = checkpointer, []
    _, config, key = await stopped_at_unknown(h, "wrong", bank)
    thread = config["configurable"]["thread_id"]
    with pytest.raises(LookupError, match="list_effects"):
        await settle(h, thread, "no-such-key", happened=True)
    with pytest.raises(ConfigError, match="True or False"):
        await settle(h, thread, key, happened="yes")
    with pytest.raises(ConfigError, match="cannot be stored"):
        await settle(h, thread, key, happened=True, result=object())


def test_an_effect_whose_call_may_still_run_is_not_settled(tmp_path: Any) -> None:
    """A live process of this machine holds the intent (its call may still run):
    settling it could record the opposite of what the call is about to do."""
    import time

    from langgraph_resilience._util._process import executing, executor_id
    from langgraph_resilience.checkpoint import EffectRecord
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "s.db")) as saver:
        saver.setup()
        held = EffectRecord(
            idempotency_key="k1",
            name="pay",
            status="intent",
            intent_at=time.time(),
            owner=executor_id("call-1"),  # this very process
        )
        assert saver.effects.claim("t", held, None, 30.0, first=True).verdict == "new"
        with (
            executing(held.owner or ""),  # its call runs
            pytest.raises(RunStateError, match="may still be running"),
        ):
            settle_effect(saver, "t", "k1", happened=True, result="po-1")
        assert saver.effects.read("t", "k1").status == "intent"  # nothing changed
