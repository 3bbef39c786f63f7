"""Workers, leases and fencing in one process, on every backend.

The multi-process cases (SIGKILL takeover, SIGSTOP zombie, SIGTERM drain) are in
test_crash.py.
"""

from __future__ import annotations

import asyncio
import operator
import sqlite3
import threading
import time
import uuid
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from graphs import CountState as State
from graphs import one_node
from graphs import pipeline as one_try_pipeline
from helpers import assert_no_fork, expire_lease, run_worker, sql
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from redis_servers import patch_run

from langgraph_resilience import (
    ConfigError,
    LeaseLost,
    NodePolicy,
    PermanentError,
    ResilientState,
    ResilientStateGraph,
    Worker,
)
from langgraph_resilience.checkpoint import AttemptRecord, EffectRecord, Fence
from langgraph_resilience.errors import (
    RunStateError,
)

STEPS = ["a", "b", "c"]


def pipeline(behaviour: Any = None, *, critical: bool = True) -> ResilientStateGraph:
    return one_try_pipeline(behaviour, critical=critical, schema=State)


@pytest.fixture
def h(checkpointer: Any) -> Any:
    """The backend's saver, with no runs left by an earlier test (Postgres databases
    are shared by a module's tests, and a worker waits for every open run)."""
    if checkpointer.backend == "postgres":  # SQLite: a fresh file per test
        sql(checkpointer.backend, checkpointer.target, "DELETE FROM resilience_runs")
    return checkpointer


async def submit(h: Any, worker: Worker, value: Any, **kwargs: Any) -> str:
    if h.is_async:
        return await worker.asubmit(value, **kwargs)
    return await asyncio.to_thread(worker.submit, value, **kwargs)


def outcome(h: Any, record: Any) -> Any:
    return h.saver.serde.loads_typed((record.outcome_type, record.outcome))


async def test_a_worker_runs_every_submitted_run_to_its_end(h: Any) -> None:

    def behaviour(name: str, state: Any) -> None:
        if name == "b" and state.get("n") == 2:
            raise PermanentError("bad input for b")

    worker = Worker(pipeline(behaviour), checkpointer=h.saver, lease_ttl=5, concurrency=2)
    ids = [await submit(h, worker, {"done": [], "n": n}) for n in range(3)]
    named = await submit(h, worker, {"done": [], "n": 9}, thread_id=f"named-{uuid.uuid4()}")
    left = await run_worker(h, worker)
    assert left == {
        ids[0]: "success",
        ids[1]: "success",
        ids[2]: "partial_complete",
        named: "success",
    }
    for run_id in ids:
        record = await h.call("read_run", run_id)
        assert record.status == left[run_id] and record.attempts == 1 and record.recoveries == 0
        assert record.owner is None and record.lease_expires_at is None
        assert record.fencing_token == 1
    first = outcome(h, await h.call("read_run", ids[0]))
    assert first["values"]["done"] == STEPS
    failed = outcome(h, await h.call("read_run", ids[2]))["values"]["resilience"]
    assert failed["failed_step"]["node"] == "b"
    if h.backend != "redis":  # completed steps come from the run log: not on Redis yet
        assert [s["path"] for s in failed["completed_steps"]] == ["a"]
    assert (await h.call("read_run", named)).thread_id.startswith("named-")
    assert await h.call("active_runs") == 0
    assert await h.call("read_run", "no-such-run") is None


async def test_a_thread_takes_one_open_run_at_a_time(h: Any) -> None:
    worker = Worker(pipeline(), checkpointer=h.saver)
    thread = f"one-{uuid.uuid4()}"
    first = await submit(h, worker, {"done": []}, thread_id=thread)
    with pytest.raises(RunStateError, match="already has an open run"):
        await submit(h, worker, {"done": []}, thread_id=thread)
    assert [r.run_id for r in await h.call("list_runs") if r.thread_id == thread] == [first]
    if h.backend == "redis":  # one script checks and stores: no second way in to race
        return
    # The store refuses it too (two processes submitting at the same instant).
    insert = (
        "INSERT INTO resilience_runs (run_id, thread_id, status, created_at, updated_at) "
        "VALUES (?, ?, 'queued', 0, 0)"
    )
    with pytest.raises(Exception, match="resilience_runs"):
        sql(h.backend, h.target, insert, ("second", thread))
    sql(h.backend, h.target, insert.replace("'queued'", "'success'"), ("ended", thread))


async def test_a_submit_racing_another_gets_run_state_error(h: Any) -> None:
    """A second submit that passed the check before the first committed is refused by
    the store's unique index, and reported as `RunStateError`, not a driver error."""
    if h.backend == "redis":
        pytest.skip("Redis: the submit's check and store are one script (nothing to race)")
    worker = Worker(pipeline(), checkpointer=h.saver)
    thread = f"race-{uuid.uuid4()}"
    await h.call("list_runs")  # the tables exist (SQLite sets up on first use)
    insert = (
        "INSERT INTO resilience_runs (run_id, thread_id, status, created_at, updated_at) "
        "VALUES ('other', ?, 'queued', 0, 0)"
    )
    if h.backend == "sqlite":
        other: Any = sqlite3.connect(h.target, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        other.execute(insert, (thread,))
    else:
        other = psycopg.connect(h.target)  # a transaction, not committed yet
        other.execute(insert.replace("?", "%s"), (thread,))
    racing = asyncio.ensure_future(submit(h, worker, {"done": []}, thread_id=thread))
    await asyncio.sleep(0.3)  # the submit waits: on the index (Postgres), the lock (SQLite)
    other.commit()
    other.close()
    with pytest.raises(RunStateError, match="already has an open run") as refused:
        await racing
    if h.backend == "postgres":  # the check passed; the index refused the insert
        assert isinstance(refused.value.__cause__, psycopg.errors.UniqueViolation)
    assert [r.run_id for r in await h.call("list_runs") if r.thread_id == thread] == ["other"]


async def test_concurrent_submits_to_one_thread_make_one_run(h: Any) -> None:
    thread = f"many-{uuid.uuid4()}"
    barrier = threading.Barrier(4)

    def submit_alone() -> str:
        opened = h.sync_saver_class.from_conn_string(h.target)
        with opened as saver:
            worker = Worker(pipeline(), checkpointer=saver)
            barrier.wait()
            try:
                worker.submit({"done": []}, thread_id=thread)
            except RunStateError:
                return "refused"
            return "queued"

    outcomes = await asyncio.gather(*(asyncio.to_thread(submit_alone) for _ in range(4)))
    assert sorted(outcomes) == ["queued", "refused", "refused", "refused"]
    assert len([r for r in await h.call("list_runs") if r.thread_id == thread]) == 1


async def test_claims_bump_the_token_and_take_over_expired_leases(h: Any) -> None:
    worker = Worker(pipeline(), checkpointer=h.saver)
    run_id = await submit(h, worker, {"done": []})
    [mine] = await h.call("runs.claim", "worker-a", 5, 30.0)
    assert (mine.run_id, mine.fencing_token, mine.owner, mine.recoveries) == (
        run_id,
        1,
        "worker-a",
        0,
    )
    assert await h.call("runs.claim", "worker-b", 5, 30.0) == []  # held
    assert await h.call("runs.renew", "worker-a", [Fence(run_id=run_id, token=1)], 30.0) == [run_id]
    expire_lease(h.backend, h.target, run_id)
    [taken] = await h.call("runs.claim", "worker-b", 5, 5.0)
    assert (taken.fencing_token, taken.owner, taken.recoveries, taken.attempts) == (
        2,
        "worker-b",
        1,
        2,
    )
    # The old holder can neither renew nor finish it.
    assert await h.call("runs.renew", "worker-a", [Fence(run_id=run_id, token=1)], 5.0) == []
    assert await h.call("runs.finish", Fence(run_id=run_id, token=1), "success", None) is False
    assert (await h.call("read_run", run_id)).status == "running"
    assert await h.call("runs.finish", Fence(run_id=run_id, token=2), "success", None) is True


async def test_a_stale_token_cannot_write_anything(h: Any) -> None:
    """Every write of a run carries its fence; a taken-over worker's are refused whole."""
    worker = Worker(pipeline(), checkpointer=h.saver)
    run_id = await submit(h, worker, {"done": []})
    thread = (await h.call("read_run", run_id)).thread_id
    await h.call("runs.claim", "worker-a", 1, 30.0)
    expire_lease(h.backend, h.target, run_id)
    await h.call("runs.claim", "worker-b", 1, 5.0)
    stale = {
        "configurable": {
            "thread_id": thread,
            "checkpoint_ns": "",
            "__lgr_fence": Fence(run_id=run_id, token=1),
        }
    }
    fresh = {
        "configurable": {
            "thread_id": thread,
            "checkpoint_ns": "",
            "__lgr_fence": Fence(run_id=run_id, token=2),
        }
    }
    checkpoint = empty_checkpoint()
    meta = {"source": "input", "step": -1}
    with pytest.raises(LeaseLost, match="taken over"):
        await h.call("put", stale, checkpoint, meta, {})
    stored = await h.call("put", fresh, checkpoint, meta, {})
    with pytest.raises(LeaseLost):
        await h.call(
            "put_writes",
            {**stale, "configurable": {**stale["configurable"], **stored["configurable"]}},
            [("done", ["x"])],
            "task-1",
        )
    if h.backend == "redis":  # no effect or attempt ledger on Redis yet (docs/redis.md)
        from redis_servers import checkpoint_parents, write_count

        assert len(checkpoint_parents(h.target, thread)) == 1  # only the fresh holder's
        assert write_count(h.target, thread) == 0
        return
    intent = EffectRecord(idempotency_key="k", name="email", status="intent", intent_at=time.time())
    with pytest.raises(LeaseLost):
        await h.call("effects.claim", thread, intent, None, 30.0, Fence(run_id=run_id, token=1))
    attempt = AttemptRecord(
        attempt=1,
        node="a",
        kind="transient",
        error_type="E",
        reason="boom",
        finished_at=time.time(),
    )
    with pytest.raises(LeaseLost):
        await h.call(
            "attempts.record",
            (thread, "", checkpoint["id"], "t"),
            attempt,
            time.time(),
            Fence(run_id=run_id, token=1),
        )
    counts = sql(
        h.backend, h.target, "SELECT count(*) FROM checkpoints WHERE thread_id = ?", (thread,)
    )
    assert counts == [(1,)]  # only the fresh holder's checkpoint
    writes_table = "writes" if h.backend == "sqlite" else "checkpoint_writes"
    assert sql(
        h.backend, h.target, f"SELECT count(*) FROM {writes_table} WHERE thread_id = ?", (thread,)
    ) == [(0,)]
    assert sql(
        h.backend,
        h.target,
        "SELECT count(*) FROM resilience_effects WHERE thread_id = ?",
        (thread,),
    ) == [(0,)]


def steal(h: Any, run_id: str, until: float) -> None:
    """Another worker ('thief') takes the run over, its lease ending at ``until``."""
    if h.backend == "redis":
        from redis_servers import run_record

        found = run_record(h.target, run_id)
        assert found is not None
        token = int(found[1]["fencing_token"]) + 1  # type: ignore[call-overload]
        patch_run(h.target, run_id, fencing_token=token, owner="thief", lease_expires_at=until)
        return
    sql(
        h.backend,
        h.target,
        "UPDATE resilience_runs SET fencing_token = fencing_token + 1, owner = 'thief', "
        "lease_expires_at = ? WHERE run_id = ?",
        (until, run_id),
    )


def root_checkpoints(h: Any, thread: str) -> int:
    if h.backend == "redis":
        from redis_servers import checkpoint_parents

        return len(checkpoint_parents(h.target, thread))
    [(count,)] = sql(
        h.backend,
        h.target,
        "SELECT count(*) FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ''",
        (thread,),
    )
    return int(count)


async def test_a_run_whose_lease_is_taken_stops_and_writes_nothing_more(
    h: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """While node b runs, another worker takes the run over: the first worker's
    heartbeat notices, its writes are refused, and it reports nothing for the run."""
    ran: list[str] = []
    stolen = threading.Event()
    ids: list[str] = []

    def behaviour(name: str, state: Any) -> None:
        ran.append(name)
        if name == "b" and not stolen.is_set():
            # Another worker takes the run over (as after an expired lease).
            steal(h, ids[0], time.time() + 300)
            stolen.set()
            time.sleep(0.4)  # a heartbeat (every lease_ttl / 3) comes and fails

    worker = Worker(pipeline(behaviour), checkpointer=h.saver, lease_ttl=0.6)
    run_id = await submit(h, worker, {"done": []})
    ids.append(run_id)
    thread = (await h.call("read_run", run_id)).thread_id
    task = asyncio.ensure_future(run_worker(h, worker, until_idle=True))
    deadline = time.monotonic() + 10
    while "another worker took the lease over" not in caplog.text:  # the heartbeat
        assert time.monotonic() < deadline, "the worker never noticed the lost lease"
        await asyncio.sleep(0.02)
    worker.drain()  # the run is 'running' under the thief, so until_idle would wait on
    left = await asyncio.wait_for(task, 10)
    assert left == {}  # lost, not finished by this worker
    assert ran == ["a", "b"]
    record = await h.call("read_run", run_id)
    assert (record.status, record.owner, record.fencing_token) == ("running", "thief", 2)
    # b's writes were refused: the last checkpoint is the one after a.
    assert root_checkpoints(h, thread) == 3  # the input, after START, after a
    assert_no_fork(h.backend, h.target, thread)


async def test_a_run_that_keeps_killing_its_workers_ends_as_error(h: Any) -> None:
    worker = Worker(pipeline(), checkpointer=h.saver, lease_ttl=5, max_recoveries=1)
    run_id = await submit(h, worker, {"done": []})
    for n in range(2):  # two workers claim it and die (their leases expire)
        [claimed] = await h.call("runs.claim", f"dead-{n}", 1, 30.0)
        assert claimed.recoveries == n
        expire_lease(h.backend, h.target, run_id)
    assert await run_worker(h, worker) == {run_id: "error"}
    record = await h.call("read_run", run_id)
    assert record.status == "error" and record.recoveries == 2
    assert "max_recoveries=1" in outcome(h, record)["error"]


async def test_drain_finishes_the_step_releases_the_run_and_nothing_is_redone(
    h: Any,
) -> None:
    ran: list[str] = []
    holder: dict[str, Worker] = {}

    def behaviour(name: str, state: Any) -> None:
        ran.append(name)
        if name == "b" and len(ran) == 2:
            holder["w"].drain("test drain")  # as SIGTERM would

    worker = holder["w"] = Worker(pipeline(behaviour), checkpointer=h.saver, lease_ttl=5)
    run_id = await submit(h, worker, {"done": []})
    assert await run_worker(h, worker) == {run_id: "queued"}
    record = await h.call("read_run", run_id)
    assert (record.status, record.owner, record.recoveries) == ("queued", None, 0)
    again = Worker(pipeline(behaviour), checkpointer=h.saver, lease_ttl=5)
    assert await run_worker(h, again) == {run_id: "success"}
    assert ran == ["a", "b", "c"]  # b finished before the drain; nothing ran twice
    assert outcome(h, await h.call("read_run", run_id))["values"]["done"] == STEPS


def test_bad_worker_configuration_is_refused() -> None:
    with pytest.raises(ConfigError, match="resilient saver"):
        Worker(pipeline(), checkpointer=InMemorySaver())
    with pytest.raises(ConfigError, match="lease_ttl"):
        Worker(pipeline(), checkpointer=InMemorySaver(), lease_ttl=0)
    with pytest.raises(ConfigError, match="concurrency"):
        Worker(pipeline(), checkpointer=InMemorySaver(), concurrency=0)
    with pytest.raises(ConfigError, match="max_recoveries"):
        Worker(pipeline(), checkpointer=InMemorySaver(), max_recoveries=-1)
    for wrong in ("fast", "SYNC", True, 1):
        with pytest.raises(ConfigError, match="durability must be 'sync', 'async' or 'exit'"):
            Worker(pipeline(), checkpointer=InMemorySaver(), durability=wrong)  # type: ignore[arg-type]


class Plain(TypedDict, total=False):
    n: int
    seen: int


@pytest.mark.parametrize(("durability", "stored_before_b"), [("sync", 2), ("exit", 0)])
async def test_a_workers_durability_is_each_runs(
    h: Any, durability: str, stored_before_b: int
) -> None:
    # Before: a Worker ran a plain StateGraph parent (a supervisor's, an agent,
    # an entrypoint) on LangGraph's "async" with no way to ask for "sync".
    from langgraph.graph import END, START, StateGraph

    def a(state: Plain) -> dict[str, Any]:
        return {"n": 1}

    def loop_checkpoints(listed: list[Any]) -> int:
        return len([c for c in listed if (c.metadata or {}).get("source") == "loop"])

    def b(state: Plain, config: RunnableConfig) -> dict[str, Any]:
        where = {"configurable": {"thread_id": config["configurable"]["thread_id"]}}
        return {"seen": loop_checkpoints(list(h.saver.list(where)))}

    async def ab(state: Plain, config: RunnableConfig) -> dict[str, Any]:
        where = {"configurable": {"thread_id": config["configurable"]["thread_id"]}}
        return {"seen": loop_checkpoints([c async for c in h.saver.alist(where)])}

    g = StateGraph(Plain)
    g.add_node("a", a)
    g.add_node("b", ab if h.is_async else b)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    worker = Worker(g, checkpointer=h.saver, lease_ttl=5, durability=durability)  # type: ignore[arg-type]
    assert worker.durability == durability
    run_id = await submit(h, worker, {"n": 0})
    assert await run_worker(h, worker) == {run_id: "success"}
    # "sync": the checkpoints after START and after a were stored before b ran;
    # "exit": none is stored before the run ends.
    assert outcome(h, await h.call("read_run", run_id))["values"]["seen"] == stored_before_b


async def test_a_chat_thread_takes_one_run_per_turn_each_with_its_input(h: Any) -> None:
    """Worker.submit on a thread whose earlier runs ended starts a new run with the
    new input (a new turn), as invoke(input) does; before, it resumed the finished
    thread and ignored the input."""

    class Chat(ResilientState, total=False):
        question: str
        answers: Annotated[list[str], operator.add]

    def answer(state: Chat) -> dict[str, Any]:
        return {"answers": [f"re: {state['question']}"]}

    g = one_node(ResilientStateGraph(Chat), "answer", answer)
    worker = Worker(g, checkpointer=h.saver, lease_ttl=5)
    thread = f"chat-{uuid.uuid4()}"
    for turn, question in enumerate(["hello", "and then?", "thanks"], start=1):
        run_id = await submit(h, worker, {"question": question}, thread_id=thread)
        assert await run_worker(h, worker) == {run_id: "success"}
        values = outcome(h, await h.call("read_run", run_id))["values"]
        assert values["answers"][-1] == f"re: {question}"
        assert values["resilience"]["run"] == turn
    assert len(values["answers"]) == 3


async def test_a_human_approval_under_a_worker_gets_the_value_resumed_with(h: Any) -> None:
    from langgraph.types import interrupt

    class Approval(ResilientState, total=False):
        order: str
        decision: str

    seen: list[Any] = []

    def approve(state: Approval) -> dict[str, Any]:
        answer = interrupt({"question": f"approve {state['order']}?"})
        seen.append(answer)
        return {"decision": "shipped" if answer.get("approved") else "held"}

    g = one_node(ResilientStateGraph(Approval), "approve", approve, policy=NodePolicy(retry=None))
    worker = Worker(g, checkpointer=h.saver, lease_ttl=5)
    run_id = await submit(h, worker, {"order": "A-17"})
    assert await run_worker(h, worker) == {run_id: "paused"}
    if h.is_async:
        await worker.aresume(run_id, {"approved": True})
    else:
        await asyncio.to_thread(worker.resume, run_id, {"approved": True})
    assert await run_worker(h, worker) == {run_id: "success"}
    assert seen == [{"approved": True}]
    record = await h.call("read_run", run_id)
    assert outcome(h, record)["values"]["decision"] == "shipped"
    assert record.resume is None  # used up: a later pause waits for its own answer


async def test_cancel_ends_a_queued_a_paused_and_a_running_run(h: Any) -> None:
    from langgraph.types import interrupt

    async def cancel(worker: Worker, run_id: str) -> str:
        if h.is_async:
            return await worker.acancel(run_id, "the customer withdrew")
        return await asyncio.to_thread(worker.cancel, run_id, "the customer withdrew")

    # Queued: never runs; its thread takes a new submit at once.
    worker = Worker(pipeline(), checkpointer=h.saver, lease_ttl=5)
    thread = f"cancel-{uuid.uuid4()}"
    queued = await submit(h, worker, {"done": []}, thread_id=thread)
    assert await cancel(worker, queued) == "queued"
    record = await h.call("read_run", queued)
    assert record.status == "cancelled"
    assert outcome(h, record) == {"cancelled": "the customer withdrew"}
    again = await submit(h, worker, {"done": []}, thread_id=thread)
    assert await run_worker(h, worker) == {again: "success"}
    with pytest.raises(RunStateError, match="not open"):
        await cancel(worker, again)

    # Paused at a human's interrupt.
    def ask(name: str, state: Any) -> None:
        if name == "b":
            interrupt("approve?")

    worker = Worker(pipeline(ask), checkpointer=h.saver, lease_ttl=5)
    paused = await submit(h, worker, {"done": []})
    assert await run_worker(h, worker) == {paused: "paused"}
    assert await cancel(worker, paused) == "paused"
    assert (await h.call("read_run", paused)).status == "cancelled"

    # Running: fenced like a takeover, it stops at its next step.
    started, ran = threading.Event(), []

    def slow(name: str, state: Any) -> None:
        ran.append(name)
        if name == "b":
            started.set()
            time.sleep(0.6)

    worker = Worker(pipeline(slow), checkpointer=h.saver, lease_ttl=2)
    running = await submit(h, worker, {"done": []})
    work = asyncio.ensure_future(run_worker(h, worker))
    await asyncio.to_thread(started.wait, 10)
    assert await cancel(worker, running) == "running"
    await asyncio.wait_for(work, 20)
    assert (await h.call("read_run", running)).status == "cancelled"
    assert "c" not in ran  # nothing ran after the step in flight


async def resumed_by_hand(h: Any, ask: Any, answer: str) -> tuple[Worker, str, str, Any]:
    """A run of ``pipeline(ask)`` its worker leaves paused at ``ask``'s interrupt,
    then resumed by hand (not through the worker) with ``answer``: ``(worker,
    thread, the paused run, the state the resume returned)``."""
    from langgraph.types import Command

    builder = pipeline(ask)
    worker = Worker(builder, checkpointer=h.saver, lease_ttl=5)
    thread = f"by-hand-{uuid.uuid4()}"
    paused = await submit(h, worker, {"done": []}, thread_id=thread)
    assert await run_worker(h, worker) == {paused: "paused"}
    graph = builder.compile(checkpointer=h.saver)
    config = {"configurable": {"thread_id": thread}}
    return worker, thread, paused, await h.invoke(graph, Command(resume=answer), config)


@pytest.mark.parametrize("ends", ["success", "partial_complete"])
async def test_a_paused_run_resumed_by_hand_reads_how_it_ended_when_it_ends(
    h: Any, ends: str
) -> None:
    """Its record reads the thread's end at once, not at the thread's next submit."""
    from langgraph.types import interrupt

    def ask(name: str, state: Any) -> None:
        if name == "b" and interrupt("approve?") == "no" and ends == "partial_complete":
            raise ValueError("refused")

    _, thread, paused, out = await resumed_by_hand(h, ask, "no")
    assert out["resilience"]["status"] == ends
    record = await h.call("read_run", paused)
    assert record.status == ends
    assert (await h.call("history.run_row", thread, 1)).status == ends  # one status, two rows
    assert outcome(h, record)["resumed"] == "by hand"


async def test_a_paused_run_resumed_by_hand_ends_right_and_the_thread_takes_a_new_submit(
    h: Any,
) -> None:
    from langgraph.types import interrupt

    def ask(name: str, state: Any) -> None:
        if name == "b":
            interrupt("approve?")

    worker, thread, paused, out = await resumed_by_hand(h, ask, "yes")
    assert out["done"] == ["a", "b", "c"]
    # The thread takes a new submit; the paused record ended as its thread did.
    again = await submit(h, worker, {"done": []}, thread_id=thread)
    record = await h.call("read_run", paused)
    assert record.status == "success"
    assert outcome(h, record)["resumed"] == "by hand"
    # The new turn runs from its own input, and asks again at b.
    assert await run_worker(h, worker) == {again: "paused"}
