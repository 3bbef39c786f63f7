"""Side effects exactly once: replay after retries, resumes and recovery, on every backend.

A fake external service counts calls per idempotency key; a node's effects must
reach it once per logical effect whatever happens to the node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import pytest
from graphs import FAST, one_node
from helpers import sql
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START
from langgraph.types import Send
from pydantic import BaseModel

from langgraph_resilience import (
    ConfigError,
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    aretry_failed,
    retry_failed,
    side_effect,
)


class Receipt(BaseModel):
    id: str
    amount: int


@dataclasses.dataclass
class Delivery:
    message_id: str
    to: str


class State(ResilientState, total=False):
    results: Annotated[list[Any], operator.add]
    item: int


class Service:
    """A fake outside system: counts calls, remembers what each key did."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()  # by effect name
        self.by_key: Counter[str] = Counter()
        self.done: dict[str, Any] = {}

    def deliver(self, to: str, key: str) -> Delivery:
        self.calls["email"] += 1
        self.by_key[key] += 1
        self.done[key] = Delivery(message_id=f"m{len(self.done)}", to=to)
        return self.done[key]

    def charge(self, amount: int, key: str) -> Receipt:
        self.calls["charge"] += 1
        self.by_key[key] += 1
        self.done[key] = Receipt(id=f"r{len(self.done)}", amount=amount)
        return self.done[key]


def effects_for(service: Service, is_async: bool, **options: Any) -> tuple[Any, Any]:
    if is_async:

        @side_effect(**options)
        async def email(to: str, *, idempotency_key: str) -> Delivery:
            await asyncio.sleep(0)
            return service.deliver(to, idempotency_key)

        @side_effect(name="charge")
        async def pay(amount: int, *, idempotency_key: str) -> Receipt:
            return service.charge(amount, idempotency_key)

        return email, pay

    @side_effect(**options)
    def email(to: str, *, idempotency_key: str) -> Delivery:  # type: ignore[misc]
        return service.deliver(to, idempotency_key)

    @side_effect(name="charge")
    def pay(amount: int, *, idempotency_key: str) -> Receipt:  # type: ignore[misc]
        return service.charge(amount, idempotency_key)

    return email, pay


def node_calling(h: Any, email: Any, pay: Any, fail: list[BaseException | None]) -> Any:
    """A node that charges, sends two emails, then fails as scripted."""

    def after(results: list[Any]) -> dict[str, Any]:
        exc = fail.pop(0) if fail else None
        if exc is not None:
            raise exc
        return {"results": results}

    if h.is_async:

        async def notify(state: dict[str, Any]) -> dict[str, Any]:
            results = [await pay(42), await email("a@x"), await email("b@x")]
            return after(results)

        return notify

    def notify(state: dict[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        return after([pay(42), email("a@x"), email("b@x")])

    return notify


def graph_with(h: Any, node: Any, policy: NodePolicy | None) -> Any:
    g = one_node(ResilientStateGraph(State), "notify", node, policy=policy)
    return g.compile(checkpointer=h.saver)


def cfg(h: Any, label: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}-{h.id}-{uuid.uuid4().hex[:6]}"}}


def stored_effects(h: Any, thread: str) -> list[tuple[str, str, str]]:
    """A Redis saver's effects of ``thread`` as stored: (name, status, key), read
    by a saver of its own (none of this one's outcomes waiting to be stored)."""
    from redis_servers import REDIS_URL

    from langgraph_resilience.checkpoint.redis import ResilientRedisSaver

    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=h.saver.place.prefix) as other:
        return [(r.name, r.status, r.idempotency_key) for r in other.list_effects(thread)]


async def list_effects(h: Any, thread: str) -> list[Any]:
    return list(await h.call("list_effects", thread))


# -- replay -------------------------------------------------------------------------


async def test_retries_replay_recorded_outcomes(checkpointer: Any) -> None:
    service = Service()
    email, pay = effects_for(service, checkpointer.is_async)
    fail: list[BaseException | None] = [ConnectionError("after sending"), TimeoutError("again")]
    graph = graph_with(
        checkpointer, node_calling(checkpointer, email, pay, fail), NodePolicy(retry=FAST)
    )
    config = cfg(checkpointer, "replay")
    out = await checkpointer.invoke(graph, {"results": []}, config)
    assert service.calls == {"charge": 1, "email": 2}
    assert all(n == 1 for n in service.by_key.values()) and len(service.by_key) == 3
    receipt, first, second = out["results"]
    assert isinstance(receipt, Receipt) and receipt == Receipt(id="r0", amount=42)
    assert isinstance(first, Delivery) and first.to == "a@x" and second.to == "b@x"
    records = await list_effects(checkpointer, config["configurable"]["thread_id"])
    assert [(r.name, r.status) for r in records] == [
        ("charge", "done"),
        ("email", "done"),
        ("email", "done"),
    ]
    assert all(r.outcome_at and r.outcome_at >= r.intent_at for r in records)


async def test_resume_after_a_failure_does_not_repeat_effects(checkpointer: Any) -> None:
    service = Service()
    email, pay = effects_for(service, checkpointer.is_async)
    graph = graph_with(
        checkpointer,
        node_calling(checkpointer, email, pay, [ValueError("bug after sending")]),
        None,
    )
    config = cfg(checkpointer, "resume")
    with pytest.raises(ValueError):
        await checkpointer.invoke(graph, {"results": []}, config)
    out = await checkpointer.invoke(graph, None, config)
    assert service.calls == {"charge": 1, "email": 2}
    assert [r.amount if isinstance(r, Receipt) else r.to for r in out["results"]] == [
        42,
        "a@x",
        "b@x",
    ]


@pytest.mark.parametrize("failures", [1, 2], ids=["once", "again-after-a-retry"])
async def test_retry_failed_keeps_the_failed_steps_keys(checkpointer: Any, failures: int) -> None:
    """Each retry_failed replays the effects the failed step completed, also when the
    retried step fails again (its keys stay the first failed task's)."""
    service = Service()
    email, pay = effects_for(service, checkpointer.is_async)
    fail: list[BaseException | None] = [KeyError("missing template")] * failures
    graph = graph_with(
        checkpointer, node_calling(checkpointer, email, pay, fail), NodePolicy(retry=FAST)
    )
    config = cfg(checkpointer, f"retry-failed-{failures}")
    out = await checkpointer.invoke(graph, {"results": []}, config)
    assert out["resilience"]["status"] == "partial_complete"
    for expected in ["partial_complete"] * (failures - 1) + ["success"]:
        if checkpointer.is_async:
            out = await aretry_failed(graph, config)
        else:
            out = await asyncio.to_thread(retry_failed, graph, config)
        assert out["resilience"]["status"] == expected
    assert service.calls == {"charge": 1, "email": 2}


async def test_keys_differ_per_call_loop_iteration_and_send_payload(checkpointer: Any) -> None:
    service = Service()
    email, _ = effects_for(service, checkpointer.is_async)

    if checkpointer.is_async:

        async def work(state: dict[str, Any]) -> dict[str, Any]:
            return {"results": [await email(f"user{state['item']}")]}
    else:

        def work(state: dict[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
            return {"results": [email(f"user{state['item']}")]}

    g = ResilientStateGraph(State)
    g.add_node("work", work, policy=NodePolicy(retry=FAST))
    g.add_node("again", lambda s: {})
    g.add_conditional_edges(START, lambda s: [Send("work", {"item": i}) for i in (1, 2, 3)])
    g.add_edge("work", "again")
    g.add_conditional_edges(
        "again", lambda s: END if len(s["results"]) >= 6 else "loop", {"loop": "work", END: END}
    )
    graph = g.compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "keys")
    out = await checkpointer.invoke(graph, {"results": [], "item": 9}, config)
    # three Send payloads, then three loop visits of "work" with the same item 9:
    # every one is a new step, so a new key, called once
    assert service.calls["email"] == len(out["results"]) == 6
    assert len(service.by_key) == 6 and set(service.by_key.values()) == {1}
    assert [r.to for r in out["results"]].count("user9") == 3


async def test_business_key_is_part_of_the_idempotency_key(checkpointer: Any) -> None:
    service = Service()
    email, _ = effects_for(service, checkpointer.is_async, key=lambda to: f"order-{to}")
    graph = graph_with(checkpointer, node_calling(checkpointer, email, _, []), None)
    config = cfg(checkpointer, "business")
    await checkpointer.invoke(graph, {"results": []}, config)
    keys = [
        r.idempotency_key
        for r in await list_effects(checkpointer, config["configurable"]["thread_id"])
    ]
    assert any(k.endswith("|email|1|order-a@x") for k in keys)
    assert any(k.endswith("|email|2|order-b@x") for k in keys)


# -- unknown outcomes --------------------------------------------------------------------


T = TypeVar("T")


class Crash(BaseException):
    """Stands in for a process dying between the call and its outcome record."""


async def expect_crash(run: Any) -> None:
    try:
        await run
    except Crash:
        return
    raise AssertionError("the run should have crashed")


def crashing_once(call: Callable[..., T]) -> Callable[..., T]:
    """``call``, whose first call does its work and then raises `Crash` (the process
    died between the call and its outcome record)."""
    crash = {"once": True}

    def once(*args: Any) -> T:
        result = call(*args)
        if crash.pop("once", False):
            raise Crash()
        return result

    return once


async def test_unknown_outcome_is_reconciled(checkpointer: Any) -> None:
    service = Service()
    asked: list[str] = []

    def lookup(key: str) -> Any:
        asked.append(key)
        return service.done.get(key)

    deliver = crashing_once(service.deliver)

    if checkpointer.is_async:

        @side_effect(reconcile=lookup)
        async def email(to: str, *, idempotency_key: str) -> Delivery:
            return deliver(to, idempotency_key)

        async def notify(state: dict[str, Any]) -> dict[str, Any]:
            return {"results": [await email("a@x")]}
    else:

        @side_effect(reconcile=lookup)
        def email(to: str, *, idempotency_key: str) -> Delivery:  # type: ignore[misc]
            return deliver(to, idempotency_key)

        def notify(state: dict[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
            return {"results": [email("a@x")]}

    graph = graph_with(checkpointer, notify, NodePolicy(retry=FAST))
    config = cfg(checkpointer, "reconcile")
    await expect_crash(checkpointer.invoke(graph, {"results": []}, config))
    records = await list_effects(checkpointer, config["configurable"]["thread_id"])
    assert [r.status for r in records] == ["intent"]
    out = await checkpointer.invoke(graph, None, config)
    assert service.calls["email"] == 1 and len(asked) == 1
    assert out["results"][0].to == "a@x"


async def test_unknown_outcome_can_stop_the_run_for_a_human(checkpointer: Any) -> None:
    service = Service()
    charge = crashing_once(service.charge)

    if checkpointer.is_async:

        @side_effect(on_unknown="raise")
        async def pay(amount: int, *, idempotency_key: str) -> Receipt:
            return charge(amount, idempotency_key)

        async def notify(state: dict[str, Any]) -> dict[str, Any]:
            return {"results": [await pay(42)]}
    else:

        @side_effect(on_unknown="raise")
        def pay(amount: int, *, idempotency_key: str) -> Receipt:  # type: ignore[misc]
            return charge(amount, idempotency_key)

        def notify(state: dict[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
            return {"results": [pay(42)]}

    graph = graph_with(checkpointer, notify, NodePolicy(retry=FAST))
    config = cfg(checkpointer, "raise")
    await expect_crash(checkpointer.invoke(graph, {"results": []}, config))
    out = await checkpointer.invoke(graph, None, config)
    assert service.calls["charge"] == 1  # never called again on its own
    failed = out["resilience"]["failed_step"]
    assert failed["error_type"] == "EffectOutcomeUnknown"
    assert (
        "'pay'" in failed["message"]
        and "settle_effect(" in out["resilience"]["recovery_suggestions"][0]
    )


# -- when the outcome is stored -----------------------------------------------------------


async def test_an_outcome_is_stored_as_the_call_returns_unless_deferred(
    checkpointer: Any,
) -> None:
    """An effect's outcome is stored before the call returns to the node; with
    ``defer_outcome=True`` it rides with the next intent (or the node's writes).
    Reads of the saver see both at once."""
    service = Service()
    email, _ = effects_for(service, checkpointer.is_async, defer_outcome=True)
    receipt, _ = effects_for(service, checkpointer.is_async, name="receipt")
    h = checkpointer
    seen: dict[str, Any] = {}

    def rows() -> list[tuple[str, str, str]]:  # (name, status, key), through a separate connection
        if h.backend == "redis":
            return stored_effects(h, thread)
        return sql(
            h.backend,
            h.target,
            "SELECT name, status, idempotency_key FROM resilience_effects WHERE thread_id = ? "
            "ORDER BY intent_at, idempotency_key",
            (thread,),
        )

    def stored() -> dict[str, str]:
        return {f"{name}{i}": status for i, (name, status, _) in enumerate(rows())}

    def look(label: str) -> None:
        seen[label] = stored()
        emails = [(key,) for name, _, key in rows() if name == "email"]
        if emails and not h.is_async:  # the saver's own read, from inside the node
            record = h.saver.effects.read(thread, emails[0][0])
            seen[label + " read"] = record.status

    if h.is_async:

        async def notify(state: dict[str, Any]) -> dict[str, Any]:
            results = [await receipt("r@x")]
            look("after receipt")
            results.append(await email("a@x"))
            look("after first email")
            results.append(await email("b@x"))
            look("after second email")
            return {"results": results}
    else:

        def notify(state: dict[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
            results = [receipt("r@x")]
            look("after receipt")
            results.append(email("a@x"))
            look("after first email")
            results.append(email("b@x"))
            look("after second email")
            return {"results": results}

    graph = graph_with(h, notify, None)
    config = cfg(h, "behind")
    thread = config["configurable"]["thread_id"]
    await h.invoke(graph, {"results": []}, config)
    assert seen["after receipt"] == {"receipt0": "done"}  # stored at once
    assert seen["after first email"] == {"receipt0": "done", "email1": "intent"}
    # The second intent carried the first outcome.
    assert seen["after second email"] == {"receipt0": "done", "email1": "done", "email2": "intent"}
    if not h.is_async:  # the saver's own reads see a waiting outcome
        assert seen["after first email read"] == "done"
    # The node's writes carried the last one.
    assert stored() == {"receipt0": "done", "email1": "done", "email2": "done"}


async def test_a_waiting_outcome_survives_a_failed_write_and_is_stored_on_close(
    tmp_path: Any,
) -> None:
    from langgraph_resilience.checkpoint import EffectRecord, OutcomeFields
    from langgraph_resilience.checkpoint.saver import _base
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    path = str(tmp_path / "behind.db")
    fields = OutcomeFields("done", 2.0, "json", b'"ok"', None)
    with ResilientSqliteSaver.from_conn_string(path) as saver:
        saver.setup()
        record = EffectRecord(idempotency_key="k1", name="email", status="intent", intent_at=1.0)
        saver.effects.claim("t1", record, None, 30.0)
        saver.effects.defer("t1", "k1", fields)
        with pytest.raises(RuntimeError), _base.Riders(saver._state, None):
            raise RuntimeError("the write failed")
        assert saver._state.outcomes.waiting == {("t1", "k1"): fields}  # given back
        assert sql("sqlite", path, "SELECT status FROM resilience_effects") == [("intent",)]
        assert saver.effects.read("t1", "k1").status == "done"  # type: ignore[union-attr]
    # Closing the saver stored it.
    assert sql("sqlite", path, "SELECT status, outcome FROM resilience_effects") == [
        ("done", b'"ok"')
    ]


# -- parallel branches ----------------------------------------------------------------------


async def test_parallel_branches_cancelled_by_a_failing_sibling_do_not_repeat(
    checkpointer: Any,
) -> None:
    """In async graphs LangGraph cancels running siblings when a node fails, and
    re-runs them on resume, effects included."""
    service = Service()
    email, _ = effects_for(service, checkpointer.is_async)
    fail = {"once": True}

    if checkpointer.is_async:

        async def branch(state: dict[str, Any]) -> dict[str, Any]:
            sent = await email(f"user{state['item']}")
            await asyncio.sleep(0.2)  # still running when the sibling fails
            return {"results": [sent]}

        async def failing(state: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(0.05)
            if fail.pop("once", False):
                raise RuntimeError("sibling failed")
            return {}
    else:

        def branch(state: dict[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
            return {"results": [email(f"user{state['item']}")]}

        def failing(state: dict[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
            if fail.pop("once", False):
                raise RuntimeError("sibling failed")
            return {}

    g = ResilientStateGraph(State)
    g.add_node("branch", branch)
    g.add_node("failing", failing, policy=None)  # LangGraph's: the failure stops the run
    g.add_conditional_edges(
        START, lambda s: [Send("branch", {"item": i}) for i in (1, 2)] + ["failing"]
    )
    g.add_edge("branch", END)
    g.add_edge("failing", END)
    graph = g.compile(checkpointer=checkpointer.saver)
    config = cfg(checkpointer, "parallel")
    with pytest.raises(RuntimeError):
        await checkpointer.invoke(graph, {"results": []}, config)
    out = await checkpointer.invoke(graph, None, config)
    assert service.calls["email"] == 2 and set(service.by_key.values()) == {1}
    assert sorted(r.to for r in out["results"]) == ["user1", "user2"]


# -- wiring mistakes -------------------------------------------------------------------------


def test_effect_outside_a_graph_says_how_to_wire_it() -> None:
    @side_effect
    def send() -> None:
        return None

    with pytest.raises(ConfigError, match="outside a node"):
        send()


def test_effect_needs_a_resilient_saver() -> None:
    @side_effect
    def send() -> str:
        return "sent"

    g = ResilientStateGraph(State)
    g.add_node("n", lambda s: {"results": [send()]})
    g.add_edge(START, "n")
    graph = g.compile(checkpointer=InMemorySaver())
    with pytest.raises(ConfigError, match="needs a resilient saver"):
        graph.invoke({"results": []}, {"configurable": {"thread_id": "x"}})


def test_bad_options_are_refused() -> None:
    with pytest.raises(ConfigError, match="on_unknown"):
        side_effect(on_unknown="ignore")(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="reconcile"):
        side_effect(reconcile="lookup")(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="key="):
        side_effect(key="order")(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="defer_outcome= must be True or False"):
        side_effect(defer_outcome="yes")(lambda: None)  # type: ignore[arg-type]
    # A deferred outcome a crash loses would stop the run for a person each time.
    with pytest.raises(ConfigError, match="defer_outcome=True leaves the outcome unknown"):
        side_effect(defer_outcome=True, on_unknown="raise")(lambda: None)
    side_effect(defer_outcome=True, on_unknown="raise", reconcile=lambda key: None)(lambda: None)


def test_an_outcome_is_one_statement_that_commits_durably(pg_dsn: str) -> None:
    """The outcome's own write is one statement on both dialects; on Postgres it
    leaves ``synchronous_commit`` as the server has it (a durable commit: the
    server and the process dying together keep it, tests/test_host_crash.py)."""
    import psycopg

    from langgraph_resilience.checkpoint import EffectRecord, OutcomeFields
    from langgraph_resilience.checkpoint.ledger import _ledger
    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
    from langgraph_resilience.checkpoint.store._store import POSTGRES, SQLITE

    fields = OutcomeFields("done", 2.0, "json", b'"ok"', None)
    for dialect in (SQLITE, POSTGRES):
        assert len(list(_ledger.record_outcome(dialect, "t", "k1", fields))) == 1
    with ResilientPostgresSaver.from_conn_string(pg_dsn) as saver:
        saver.setup()
        record = EffectRecord(idempotency_key="k1", name="email", status="intent", intent_at=1.0)
        saver.effects.claim("t-relaxed", record, None, 30.0)
    [stmt] = _ledger.record_outcome(POSTGRES, "t-relaxed", "k1", fields)
    with psycopg.connect(pg_dsn) as conn:  # a transaction, as the saver's write is
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        conn.execute(stmt.sql, stmt.params)
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
    rows = sql(
        "postgres",
        pg_dsn,
        "SELECT status FROM resilience_effects WHERE thread_id = ?",
        ("t-relaxed",),
    )
    assert rows == [("done",)]
