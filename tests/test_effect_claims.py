"""Step leases on side effects: an intent names its executor and holds for a lease.

Two executors running the same step (two processes resuming one head) must not
both call an effect: the second finds the first's claim live and does not call.
A claim whose holder is gone (its process, on this machine; its lease; its run,
taken over by a worker with a higher fencing token) is taken over and settled.
The race itself, with real processes, is in ``test_crash.py``.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import pytest
from graphs import OutState as State
from graphs import one_node

from langgraph_resilience import Backoff, NodePolicy, ResilientStateGraph, side_effect
from langgraph_resilience._util._process import executing, executor_alive, executor_id
from langgraph_resilience.checkpoint import EffectRecord, OutcomeFields
from langgraph_resilience.checkpoint.ledger._ledger import judge_intent
from langgraph_resilience.errors import ConfigError, EffectInFlight, TransientError

NOW = 1000.0


def record(owner: str | None, *, status: str = "intent", lease: float = 30.0, token: Any = None):
    return EffectRecord(
        idempotency_key="k",
        name="pay",
        status=status,
        intent_at=NOW - 1,
        owner=owner,
        lease_until=None if owner is None else NOW + lease,
        fencing_token=token,
    )


@pytest.mark.parametrize(
    ("found", "mine", "alive", "verdict"),
    [
        (record("a", status="done"), record("b"), True, "done"),
        (record("a"), record("b"), True, "busy"),  # live holder, this machine
        (record("a"), record("b"), None, "busy"),  # live lease, another machine
        (record("a"), record("b"), False, "took_over"),  # its process is gone
        (record("a", lease=-1), record("b"), True, "took_over"),  # its lease ran out
        (record("a", status="failed"), record("b"), True, "took_over"),  # the call ended
        (record(None), record("b"), None, "took_over"),  # stored before leases existed
        (record("a", token=1), record("b", token=2), True, "took_over"),  # run taken over
        (record("a", token=2), record("b", token=2), True, "busy"),
    ],
)
def test_who_may_take_an_intent(
    found: EffectRecord, mine: EffectRecord, alive: bool | None, verdict: str
) -> None:
    assert judge_intent(found, mine, NOW, alive) == verdict


def test_a_process_is_known_dead_on_this_machine_only() -> None:
    me = executor_id("n1")
    with executing(me):  # this process: alive while its call runs, gone after
        assert executor_alive(me) is True
    assert executor_alive(me) is False
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    machine = me.split("|")[0]
    assert executor_alive(f"{machine}|{pid}|123|n") is False  # exited
    assert executor_alive(f"other-host~x~y|{os.getpid()}|1|n") is None
    assert executor_alive("not an executor id") is None


def intent(owner: str, key: str = "k", token: int | None = None) -> EffectRecord:
    return EffectRecord(
        idempotency_key=key,
        name="pay",
        status="intent",
        intent_at=time.time(),
        owner=owner,
        fencing_token=token,
    )


async def test_claims_on_each_backend(checkpointer: Any) -> None:
    h = checkpointer
    t = f"claims-{h.id}-{uuid.uuid4().hex[:6]}"
    a, b = executor_id("a"), executor_id("b")  # two calls of this (live) process

    first = await h.call("effects.claim", t, intent(a), None, 30.0)
    assert first.verdict == "new" and first.record is None
    with executing(a):  # while a's call runs, its claim is live
        second = await h.call("effects.claim", t, intent(b), None, 30.0)
    assert second.verdict == "busy" and second.record.owner == a
    # Once a's call ended (its outcome lost: a full disk), its claim is gone: b
    # takes it over at once, as from a process that died.
    ended = await h.call("effects.claim", t, intent(b, "k0"), None, 30.0)
    assert ended.verdict == "new"
    after = await h.call("effects.claim", t, intent(a, "k0"), None, 30.0)
    assert after.verdict == "took_over" and after.record.owner == b
    assert 25.0 < second.wait <= 30.0
    assert await h.call("effects.renew", t, "k", a, 30.0) is True
    assert await h.call("effects.renew", t, "k", b, 30.0) is False  # not its claim
    # Let go (a lease of 0): the next claimer takes it over and learns what it found.
    assert await h.call("effects.renew", t, "k", a, 0.0) is True
    taken = await h.call("effects.claim", t, intent(b), None, 30.0)
    assert taken.verdict == "took_over" and taken.record.owner == a
    assert (await h.call("effects.read", t, "k")).owner == b
    assert await h.call("effects.renew", t, "k", a, 30.0) is False  # a lost it

    # The holder's process is gone: taken over at once, though its lease holds.
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    dead = f"{a.split('|')[0]}|{pid}|123|x"
    await h.call("effects.claim", t, intent(dead, "k2"), None, 30.0)
    assert (await h.call("effects.claim", t, intent(b, "k2"), None, 30.0)).verdict == "took_over"

    # A holder on another machine is judged by its lease alone.
    far = "elsewhere~boot~ns|1|1|x"
    await h.call("effects.claim", t, intent(far, "k3"), None, 0.2)
    assert (await h.call("effects.claim", t, intent(b, "k3"), None, 30.0)).verdict == "busy"
    await asyncio.sleep(0.3)
    assert (await h.call("effects.claim", t, intent(b, "k3"), None, 30.0)).verdict == "took_over"

    # A worker that took the run over (a higher fencing token) takes its claims too.
    await h.call("effects.claim", t, intent(far, "k4", token=1), None, 30.0)
    late = await h.call("effects.claim", t, intent(b, "k4", token=2), None, 30.0)
    assert late.verdict == "took_over"

    # A recorded outcome is replayed, whoever asks.
    fields = OutcomeFields("done", time.time(), "json", b'"ok"', None)
    await h.call("effects.record", t, "k4", fields)
    done = await h.call("effects.claim", t, intent(a, "k4"), None, 30.0)
    assert done.verdict == "done" and done.record.outcome == b'"ok"'


async def test_a_call_longer_than_its_lease_keeps_its_claim(checkpointer: Any) -> None:
    """The claim is renewed while the call runs: a second executor arriving after
    the lease would have run out still finds it live. (A lease of 0.6 s, renewed every
    0.2 s: at 0.3 s, one late renewal of a loaded machine's event loop let the lease
    run out, about 1 case in 40.)"""
    h = checkpointer
    thread = f"renew-{h.id}-{uuid.uuid4().hex[:6]}"
    started = asyncio.Event()
    loop = asyncio.get_running_loop()

    if h.is_async:

        @side_effect(lease=0.6)
        async def slow(*, idempotency_key: str) -> str:
            started.set()
            await asyncio.sleep(2.0)
            return "sent"

        async def node(state: State) -> dict[str, Any]:
            return {"out": [await slow()]}
    else:

        @side_effect(lease=0.6)
        def slow(*, idempotency_key: str) -> str:  # type: ignore[misc]
            loop.call_soon_threadsafe(started.set)
            time.sleep(2.0)
            return "sent"

        def node(state: State) -> dict[str, Any]:  # type: ignore[misc]
            return {"out": [slow()]}

    g = one_node(ResilientStateGraph(State), "n", node)
    graph = g.compile(checkpointer=h.saver)
    config = {"configurable": {"thread_id": thread}}
    run = asyncio.ensure_future(h.invoke(graph, {"out": []}, config))
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.sleep(1.4)  # well past the 0.6 s lease
    [held] = await h.call("list_effects", thread)
    other = await h.call(
        "effects.claim", thread, intent(executor_id("z"), held.idempotency_key), None, 30.0
    )
    assert other.verdict == "busy", other
    assert (await run)["out"] == ["sent"]


async def test_a_second_executor_does_not_call_and_replays_once_recorded(
    checkpointer: Any,
) -> None:
    """In one graph: a node that finds a foreign live claim raises EffectInFlight
    (transient), does not call, and replays the outcome on a later try."""
    h = checkpointer
    thread = f"inflight-{h.id}-{uuid.uuid4().hex[:6]}"
    calls: list[str] = []
    fields = OutcomeFields("done", time.time(), "json", b'"theirs"', None)

    if h.is_async:

        @side_effect(name="pay")
        async def apay(*, idempotency_key: str) -> str:
            calls.append(idempotency_key)
            return "mine"

        async def node(state: State) -> dict[str, Any]:
            return {"out": [await apay()]}
    else:

        @side_effect(name="pay")
        def pay(*, idempotency_key: str) -> str:
            calls.append(idempotency_key)
            return "mine"

        def node(state: State) -> dict[str, Any]:  # type: ignore[misc]
            return {"out": [pay()]}

    async def settle_later(key: str) -> None:
        await asyncio.sleep(0.3)
        await h.call("effects.record", thread, key, fields)

    g = one_node(
        ResilientStateGraph(State),
        "n",
        node,
        policy=NodePolicy(retry=Backoff(max_attempts=5, initial_interval=0.01)),
    )
    graph = g.compile(checkpointer=h.saver, interrupt_before=["n"])
    config = {"configurable": {"thread_id": thread}}
    await h.invoke(graph, {"out": []}, config)
    # Another executor claims the step's effect first (the key the node will use).
    state = await graph.aget_state(config) if h.is_async else graph.get_state(config)
    task_id = state.tasks[0].id
    key = f"n:{task_id}|{task_id}|pay|1"  # the task's namespace, its id, the call
    other = executor_id("other")
    claim = await h.call("effects.claim", thread, intent(other, key), None, 30.0)
    assert claim.verdict == "new"
    with executing(other):  # its call runs until it settles
        settling = asyncio.ensure_future(settle_later(key))
        out = await h.invoke(graph, None, config)
        await settling
    assert calls == [] and out["out"] == ["theirs"]


def test_bad_lease_is_refused() -> None:
    with pytest.raises(ConfigError, match="lease= must be seconds > 0"):
        side_effect(lease=0)(lambda: None)
    assert issubclass(EffectInFlight, TransientError)
