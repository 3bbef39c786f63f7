"""Time travel and forks, and what they do to side effects, on every backend.

A replay from an earlier checkpoint with the state unchanged (``invoke(None,
config_with_checkpoint_id)``) is not a new intent: the step it replays returns
the recorded outcome of an effect it made, under the same idempotency key, and
nothing is called. A fork (``update_state`` on that checkpoint, then invoke)
changes the state: a new call under a new key, not reported as replayed.
Neither is a crash recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
import uuid
from typing import Annotated, Any

from conftest import Harness
from graphs import one_node
from langgraph.graph import END, START
from langgraph.types import Send

from langgraph_resilience import ResilientState, ResilientStateGraph, side_effect
from langgraph_resilience.history import arun_report, run_report


class MailState(ResilientState, total=False):
    to: str
    receipt: str
    receipts: Annotated[list[str], operator.add]


def mail_graph(sent: list[tuple[str, str]], *, fan_out: int = 0) -> ResilientStateGraph:
    """``prep`` → ``mail`` (sends one email; or ``fan_out`` of them by `Send`) → ``after``."""

    @side_effect
    def send(to: str, *, idempotency_key: str) -> str:
        sent.append((to, idempotency_key))
        return f"receipt-{len(sent)}"

    def mail(state: Any) -> dict[str, Any]:
        receipt = send(state["to"])
        return {"receipts": [receipt]} if fan_out else {"receipt": receipt, "receipts": [receipt]}

    g = ResilientStateGraph(MailState)
    g.add_node("prep", lambda s: {"to": s["to"]})
    g.add_node("mail", mail)
    g.add_node("after", lambda s: {})
    g.add_edge(START, "prep")
    if fan_out:
        g.add_conditional_edges(
            "prep", lambda s: [Send("mail", {"to": f"{s['to']}-{i}"}) for i in range(fan_out)]
        )
    else:
        g.add_edge("prep", "mail")
    g.add_edge("mail", "after")
    g.add_edge("after", END)
    return g


def cfg(label: str, h: Harness) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}-{h.id}-{uuid.uuid4().hex[:6]}"}}


async def before_mail(h: Harness, graph: Any, config: Any) -> Any:
    """The config of the first checkpoint whose next step is ``mail``."""
    if h.is_async:
        found = [s async for s in graph.aget_state_history(config)]
    else:
        found = await asyncio.to_thread(lambda: list(graph.get_state_history(config)))
    return [s for s in found if "mail" in s.next][-1].config


async def report(h: Harness, thread: str) -> Any:
    if h.is_async:
        return await arun_report(h.saver, thread)
    return await asyncio.to_thread(run_report, h.saver, thread)


async def effect_keys(h: Harness, thread: str) -> list[tuple[str, str]]:
    return sorted((e.key, e.status) for e in (await report(h, thread)).effects)


def mailing(h: Harness, label: str, fan_out: int = 0) -> tuple[list[Any], Any, Any]:
    """What `mail_graph` sent, it compiled on ``h``'s saver, and a thread's config."""
    sent: list[Any] = []
    return sent, mail_graph(sent, fan_out=fan_out).compile(checkpointer=h.saver), cfg(label, h)


async def test_a_replay_from_before_an_effect_returns_its_outcome_under_the_same_key(
    checkpointer: Harness,
) -> None:
    h = checkpointer
    sent, graph, config = mailing(h, "replay")
    first = await h.invoke(graph, {"to": "ann@example.com"}, config)
    assert len(sent) == 1 and first["receipt"] == "receipt-1"
    keys = await effect_keys(h, config["configurable"]["thread_id"])

    again = await h.invoke(graph, None, await before_mail(h, graph, config))

    assert sent == [sent[0]]  # not called again: a replay is not a new intent
    assert again["receipt"] == "receipt-1"  # the recorded outcome
    assert again["resilience"]["status"] == "success"
    assert await effect_keys(h, config["configurable"]["thread_id"]) == keys
    assert (await report(h, config["configurable"]["thread_id"])).recoveries == ()


async def test_a_fork_with_a_changed_state_is_a_new_call_under_a_new_key(
    checkpointer: Harness,
) -> None:
    h = checkpointer
    sent, graph, config = mailing(h, "fork")
    await h.invoke(graph, {"to": "ann@example.com"}, config)
    older = await before_mail(h, graph, config)
    if h.is_async:
        forked = await graph.aupdate_state(older, {"to": "bob@example.com"})
    else:
        forked = await asyncio.to_thread(graph.update_state, older, {"to": "bob@example.com"})

    out = await h.invoke(graph, None, forked)

    assert [to for to, _ in sent] == ["ann@example.com", "bob@example.com"]
    assert sent[0][1] != sent[1][1]  # a new key: a deduplicating service sends it too
    assert out["receipt"] == "receipt-2"
    got = await report(h, config["configurable"]["thread_id"])
    assert [e.status for e in got.effects] == ["done", "done"]
    assert not any(e.replayed for e in got.effects)  # it was called, not replayed
    assert got.recoveries == ()  # nothing crashed


async def test_a_replayed_fan_out_keeps_each_branchs_key(checkpointer: Harness) -> None:
    h = checkpointer
    sent, graph, config = mailing(h, "fan", fan_out=3)
    first = await h.invoke(graph, {"to": "team"}, config)
    assert len(sent) == 3

    again = await h.invoke(graph, None, await before_mail(h, graph, config))

    assert len(sent) == 3  # each branch replayed its own recorded outcome
    assert sorted(again["receipts"][-3:]) == sorted(first["receipts"][-3:])
    assert (await report(h, config["configurable"]["thread_id"])).recoveries == ()


async def test_a_resume_after_a_failure_is_still_a_recovery(checkpointer: Harness) -> None:
    """The head's own checkpoint named by id is a resume, as without an id."""
    h, sent, calls = checkpointer, [], []

    @side_effect
    def send(to: str) -> str:
        sent.append(to)
        return "receipt"

    def mail(state: Any) -> dict[str, Any]:
        receipt = send(state["to"])
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("the step dies after the send")
        return {"receipt": receipt}

    g = one_node(ResilientStateGraph(MailState), "mail", mail, policy=None)
    graph = g.compile(checkpointer=h.saver)
    config = cfg("head", h)
    with contextlib.suppress(ConnectionError):
        await h.invoke(graph, {"to": "ann@example.com"}, config)
    if h.is_async:
        head = (await graph.aget_state(config)).config
    else:
        head = (await asyncio.to_thread(graph.get_state, config)).config

    out = await h.invoke(graph, None, head)

    assert out["receipt"] == "receipt" and sent == ["ann@example.com"]
    kinds = [r["kind"] for r in (await report(h, config["configurable"]["thread_id"])).recoveries]
    assert kinds == ["crash"]


def test_what_a_run_from_a_named_checkpoint_is() -> None:
    """`travel_of`, the decision: the latest loop checkpoint is a resume (its steps
    keep their keys), an older one a time travel, the latest update a fork."""
    from langgraph.types import PregelTask, StateSnapshot

    from langgraph_resilience.graph._travel import travel_of

    def snap(at: str, source: str, step: int) -> StateSnapshot:
        task = PregelTask("t1", "mail", ("__pregel_pull", "mail"))
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": at}}
        return StateSnapshot(
            {}, ("mail",), config, {"source": source, "step": step}, None, None, (task,), ()
        )

    scopes = {"('__pregel_pull', 'mail')": "mail:t1|t1"}
    assert travel_of(snap("c1", "loop", 1), "c9") == {"travel": True, "step": 3, "scopes": scopes}
    assert travel_of(snap("c9", "loop", 1), "c9") == {"travel": False, "step": 3, "scopes": scopes}
    assert travel_of(snap("c9", "update", 2), "c9") == {"travel": True, "step": None, "scopes": {}}
