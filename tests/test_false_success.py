"""Never a false success (issue 24): a run a `Worker` stores as ``success`` really
ended, whatever the store did while it ran.

Six-step runs, each step calling a `side_effect`, under two `Worker`s, each on a
psycopg **pool** of its own, on a Postgres server of the tests' own
(`faults.PgServer`). While steps are in flight the store fails for real:

- the server is SIGKILLed (postmaster and backends, as the OOM killer would) and
  started again ~3 s later;
- the server is stopped with ``pg_ctl stop`` for ~3 s;
- worker A's pool is partitioned from the server (`faults.TcpProxy`, every
  reply held) right after one of its runs stored a step's intent, for ~3 s.

Whatever each step's effect check or write met meanwhile (`LeaseLost`, a
dropped connection), every run must end stored ``success`` with every step's
record (``done`` lists the six steps), every effect's outcome in the ledger and
``state["resilience"]["status"] == "success"``; a run of which a step or an
effect is missing is never stored ``success``.

``LGR_FAULT_RUNS`` sets the runs per fault (default: a bounded count for
``make test``, enough to show the defect: 16 under SIGKILL, 8 under a stop, 8
under a partition); ``make test-faults`` runs the issue's 100. Each trial is
marked ``faults``.

The same holes, in one process on every backend (no fault needed): a step that
raises `LeaseLost` is run again by the worker that takes the run over, whether
the node's own handler or a user's handler (one that re-raises what it was
handed) got it; and a Worker finds a step that failed unrecovered while its
graph went on (the checkpoints 0b1050e stored) before it would store ``success``, also when it
takes over a run whose worker died right after such a step (b's own handler
re-raised what it was handed, and LangGraph went on without b's writes).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import pytest
from faults import PgServer, TcpProxy
from graphs import DoneState as State
from graphs import appending, chain, failing, one_node
from helpers import append, in_thread, private_db, read_ledger, rest_of, sql, wait_until
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.errors import NodeError
from langgraph.graph import END, START
from langgraph.types import Command, interrupt
from psycopg_pool import ConnectionPool
from spawn import spawn
from unrecovered_worker import failing_graph

from langgraph_resilience import (
    LeaseLost,
    NodePolicy,
    ResilientStateGraph,
    Worker,
    side_effect,
)
from langgraph_resilience.checkpoint.ledger import _ledger
from langgraph_resilience.checkpoint.postgres import (
    BoundedConnection,
    PgTimeouts,
    ResilientPostgresSaver,
)
from langgraph_resilience.checkpoint.postgres._network import CONNECT_KWARGS
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.graph._lifecycle import unrecovered_steps
from langgraph_resilience.policy import Backoff

RUNS = os.environ.get("LGR_FAULT_RUNS")
STEPS = [f"s{i}" for i in range(1, 7)]
LEASE_TTL = 2.0
OUTAGE = 3.0
CONCURRENCY = 4  # runs each worker runs at once
BATCH = 2 * CONCURRENCY  # runs in flight when the fault hits (both workers full)


def runs_for(default: int) -> int:
    return int(RUNS) if RUNS else default


def report(line: str) -> None:
    print(f"\n[false success] {line}", end="")


# -- the pipeline ----------------------------------------------------------------------


def pipeline(calls: Path, in_step: Callable[[str, str], None] | None = None) -> Any:
    """s1 -> ... -> s6; each step sleeps a little (a step is in flight when the
    fault hits), calls its effect ``deliver`` (logged to ``calls``), and records
    itself in ``done``. ``in_step(thread, step)`` runs before the effect."""

    @side_effect(name="deliver")
    def deliver(thread: str, step: str, *, idempotency_key: str) -> str:
        append(calls, f"{thread} {step} {idempotency_key}")
        return f"receipt:{step}"

    def make(step: str) -> Any:
        def node(state: State, config: RunnableConfig) -> dict[str, Any]:
            thread = str(config["configurable"]["thread_id"])
            time.sleep(0.05)
            if in_step is not None:
                in_step(thread, step)
            deliver(thread, step)
            return {"done": [step]}

        return node

    policy = NodePolicy(retry=Backoff(max_attempts=3, initial_interval=0.05), critical=True)
    return chain(ResilientStateGraph(State), STEPS, make, lambda _: {"policy": policy})


# -- the store and its faults ------------------------------------------------------------


@pytest.fixture
def db(pg_server: PgServer) -> Iterator[str]:
    """A fresh, set-up database on the private server, ``synchronous_commit`` on:
    a SIGKILLed server otherwise loses commits it acknowledged (a ledger outcome,
    say), which no client can notice; that is not the fault under test."""
    yield from private_db(pg_server, "lgr_false", synchronous_commit=True)


def pooled_saver(stack: ExitStack, dsn: str) -> ResilientPostgresSaver:
    """A saver on a pool built as docs/savers.md says, with short bounds."""
    timeouts = PgTimeouts(connect=2, statement=2, read=3, lock=1, idle_in_transaction=2)
    pool: ConnectionPool[Any] = ConnectionPool(
        timeouts.conninfo(dsn),
        min_size=2,
        max_size=CONCURRENCY + 3,
        timeout=3,
        connection_class=BoundedConnection,
        kwargs=CONNECT_KWARGS,
        reconnect_timeout=60,
        open=True,
    )
    stack.callback(pool.close, 5)
    retry = Backoff(max_attempts=3, initial_interval=0.2, max_interval=1.0, jitter="none")
    return ResilientPostgresSaver(pool, timeouts=timeouts, store_retry=retry)


def postmaster_pids(server: PgServer) -> list[int]:
    """The postmaster and every process it started."""
    pid = int((server.data / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(entry.name))
    return [pid, *children]


def kill_server(server: PgServer) -> None:
    """SIGKILL the postmaster and its backends; return once they are gone."""
    pids = postmaster_pids(server)
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in pids):
        assert time.monotonic() < deadline, "the killed server's processes did not go"
        time.sleep(0.02)


# -- a trial ---------------------------------------------------------------------------------


def steps_done(calls: Path) -> int:
    return len(read_ledger(calls)) if calls.exists() else 0


def verdicts(dsn: str, run_ids: list[str], calls: Path) -> dict[str, str]:
    """Per run: "" when it is stored ``success`` and really ended, else what is
    wrong (a false success names what is missing; another end names its status)."""
    called: dict[str, set[str]] = {}
    for thread, step, _key in read_ledger(calls):
        called.setdefault(thread, set()).add(step)
    found: dict[str, str] = {}
    with ResilientPostgresSaver.from_conn_string(dsn) as saver:
        graph = pipeline(calls).compile(checkpointer=saver)
        for run_id in run_ids:
            record = saver.read_run(run_id)
            assert record is not None
            thread = record.thread_id
            state = graph.get_state({"configurable": {"thread_id": thread}}).values
            done = list(state.get("done") or [])
            outcomes = sql(
                "postgres",
                dsn,
                "SELECT count(*) FROM resilience_effects WHERE thread_id = ? AND status = 'done'",
                (thread,),
            )[0][0]
            status = (state.get("resilience") or {}).get("status")
            stored = saver.get_tuple({"configurable": {"thread_id": thread}})
            raw = stored.checkpoint["channel_values"].get("resilience") if stored else None
            missing = []
            if sorted(done) != STEPS:
                missing.append(f"steps recorded {done}")
            if int(outcomes) != len(STEPS):
                rows = sql(
                    "postgres",
                    dsn,
                    "SELECT idempotency_key, status, owner, fencing_token FROM resilience_effects "
                    "WHERE thread_id = ? AND status <> 'done'",
                    (thread,),
                )
                missing.append(f"{outcomes} effect outcomes (others: {rows})")
            if called.get(thread, set()) != set(STEPS):
                missing.append(f"effects called for {sorted(called.get(thread, set()))}")
            if status != "success":
                missing.append(f"state status {status!r}")
            if (raw or {}).get("status") != "success":
                missing.append(f"stored status {(raw or {}).get('status')!r}")
            if record.status == "success":
                found[run_id] = "FALSE SUCCESS: " + "; ".join(missing) if missing else ""
            else:
                outcome = saver.serde.loads_typed((record.outcome_type, record.outcome))
                found[run_id] = f"ended {record.status}: {outcome.get('error')!r}"
    return found


def trial(
    dsn: str,
    calls: Path,
    runs: int,
    fault: Callable[[], None],
    *,
    dsn_a: str | None = None,
    in_step: Callable[[str, str], None] | None = None,
    b_after: bool = False,
) -> dict[str, str]:
    """Submit ``runs`` runs to two workers, in batches of `BATCH` (both workers
    full); in each batch ``fault()`` is called once a few steps ran and must
    return once the store is back. Worker A's saver uses ``dsn_a``, its steps
    call ``in_step``; ``b_after``: worker B starts once the fault is over (so that
    A, not B, is the first to reach the store again). The verdict of each run
    (`verdicts`)."""
    run_ids: list[str] = []
    graph_a, graph_b = pipeline(calls, in_step), pipeline(calls)
    for start in range(0, runs, BATCH):
        with ExitStack() as stack:
            saver_a = pooled_saver(stack, dsn_a or dsn)
            saver_b = pooled_saver(stack, dsn)
            options = {"lease_ttl": LEASE_TTL, "poll_interval": 0.05, "concurrency": CONCURRENCY}
            worker_a = Worker(graph_a, checkpointer=saver_a, drain_timeout=5, **options)
            worker_b = Worker(graph_b, checkpointer=saver_b, drain_timeout=5, **options)
            batch = [
                worker_a.submit({"done": []}, thread_id=f"t-{uuid.uuid4().hex[:10]}")
                for _ in range(min(BATCH, runs - start))
            ]
            run_ids += batch
            before = steps_done(calls)
            a_thread, a_out = in_thread(worker_a.run)
            if not b_after:
                b_thread, b_out = in_thread(worker_b.run)
            # Every run has started (a step of each called) and some have more to do.
            started = min(len(batch), CONCURRENCY) if b_after else len(batch)
            wait_until(lambda n=started + before: steps_done(calls) >= n, 30, "runs to start")
            fault()
            if b_after:
                time.sleep(1.0)  # B is busy elsewhere: A reaches the store first
                b_thread, b_out = in_thread(worker_b.run)
            for thread in (a_thread, b_thread):
                thread.join(90)
                assert not thread.is_alive(), "a worker did not finish within 90 s"
            assert "error" not in a_out and "error" not in b_out, (a_out, b_out)
    return verdicts(dsn, run_ids, calls)


def check(label: str, found: dict[str, str]) -> None:
    false = {r: why for r, why in found.items() if why.startswith("FALSE")}
    other = {r: why for r, why in found.items() if why and not why.startswith("FALSE")}
    report(
        f"{label}: {len(found)} runs, {len(false)} false successes, {len(other)} other ends "
        f"{sorted(set(other.values()))[:3]}"
    )
    assert false == {}, f"{len(false)} of {len(found)} runs stored success falsely: {false}"
    assert other == {}, f"runs that did not end success: {other}"


# -- the trials ----------------------------------------------------------------------------


@pytest.mark.faults
@pytest.mark.timeout(600)
def test_server_sigkilled_mid_step_never_a_false_success(
    pg_server: PgServer, db: str, tmp_path: Path
) -> None:
    """The server SIGKILLed for ~3 s while steps run (issue: 24 of 96 runs stored
    ``success`` with the last step and its effect missing)."""
    calls = tmp_path / "calls.log"

    def fault() -> None:
        kill_server(pg_server)
        time.sleep(OUTAGE)
        pg_server.start()

    check("SIGKILL", trial(db, calls, runs_for(16), fault))


@pytest.mark.faults
@pytest.mark.timeout(600)
def test_server_stopped_mid_step_never_a_false_success(
    pg_server: PgServer, db: str, tmp_path: Path
) -> None:
    """``pg_ctl stop`` for ~3 s while steps run (issue: 10 of 48)."""
    calls = tmp_path / "calls.log"

    def fault() -> None:
        pg_server.stop()
        time.sleep(OUTAGE)
        pg_server.start()

    check("pg_ctl stop", trial(db, calls, runs_for(8), fault))


@pytest.mark.faults
@pytest.mark.timeout(600)
def test_partition_right_after_an_intent_never_a_false_success(
    pg_server: PgServer, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker A's pool is cut off (every reply held) right after one of its runs
    stored a step's intent, for ~3 s, longer than its lease; A is the first to
    reach the store once it heals, its lease run out by its own clocks (issue:
    1 of 8)."""
    calls = tmp_path / "calls.log"
    in_a = threading.local()  # set in the steps worker A runs (its saver is behind the proxy)
    armed = threading.Event()
    cut = threading.Event()
    proxy_box: dict[str, TcpProxy] = {}
    claim = _ledger.claim_intent

    def claim_then_cut(d: Any, thread_id: str, record: Any, *args: Any, **kw: Any) -> Any:
        gen = claim(d, thread_id, record, *args, **kw)
        if not (armed.is_set() and getattr(in_a, "yes", False)):
            return (yield from gen)
        stmt = next(gen)  # the intent's INSERT, queued with its COMMIT
        value = yield stmt
        if armed.is_set():
            armed.clear()
            proxy_box["proxy"].drop()  # the intent is stored; no reply comes back
            cut.set()
        return (yield from rest_of(gen, value))

    monkeypatch.setattr(_ledger, "claim_intent", claim_then_cut)

    def mark(local: threading.local) -> None:
        local.yes = True

    def fault() -> None:
        cut.clear()
        armed.set()
        assert cut.wait(30), "no intent was stored after arming"
        time.sleep(OUTAGE)
        proxy_box["proxy"].heal()

    with TcpProxy(pg_server.port) as proxy:
        proxy_box["proxy"] = proxy
        found = trial(
            db,
            calls,
            runs_for(8),
            fault,
            dsn_a=proxy.dsn(db),
            in_step=lambda *_: mark(in_a),
            b_after=True,
        )
    check("partition after an intent", found)


@pytest.mark.faults
@pytest.mark.timeout(300)
def test_an_outcome_a_killed_server_lost_is_stored_again(
    pg_server: PgServer, db: str, tmp_path: Path
) -> None:
    """An effect's outcome is committed without waiting for the disk; the server
    SIGKILLed right after (its WAL writer slowed to 10 s, so the commit is still in
    its memory) loses it while the node runs on. CI saw it: 1 of 16 runs stored
    ``success`` with the outcome of a step's effect missing, the intent left open.
    The node's own writes, stored once the server is back, store it again."""
    calls = tmp_path / "calls.log"

    @side_effect(name="deliver")
    def deliver(thread: str, *, idempotency_key: str) -> str:
        append(calls, f"{thread} notify {idempotency_key}")
        return "receipt"

    def notify(state: State, config: RunnableConfig) -> dict[str, Any]:
        deliver(str(config["configurable"]["thread_id"]))
        kill_server(pg_server)  # the outcome's commit is acknowledged, not on disk
        pg_server.start()
        return {"done": ["notify"]}

    def slow_wal_writer(delay: str) -> None:
        sql("postgres", pg_server.dsn(), f"ALTER SYSTEM SET wal_writer_delay = '{delay}'")
        sql("postgres", pg_server.dsn(), "SELECT pg_reload_conf()")

    builder = one_node(
        ResilientStateGraph(State), "notify", notify, policy=NodePolicy(retry=None, critical=True)
    )
    slow_wal_writer("10s")
    try:
        with ExitStack() as stack:
            graph = builder.compile(checkpointer=pooled_saver(stack, db))
            config: RunnableConfig = {"configurable": {"thread_id": "lost-outcome"}}
            out = graph.invoke({"done": []}, config)
    finally:
        slow_wal_writer("200ms")
    assert out["resilience"]["status"] == "success"
    assert [step for _, step, _ in read_ledger(calls)] == ["notify"]
    rows = sql(
        "postgres",
        db,
        "SELECT status, outcome IS NOT NULL FROM resilience_effects WHERE thread_id = ?",
        ("lost-outcome",),
    )
    assert [tuple(r) for r in rows] == [("done", True)]


# -- the same holes in one process, on every backend --------------------------------------


async def run_worker(h: Any, worker: Worker) -> dict[str, str]:
    if h.is_async:
        return await worker.arun()
    return await asyncio.to_thread(worker.run)


async def submit(h: Any, worker: Worker, value: Any) -> str:
    if h.is_async:
        return await worker.asubmit(value)
    return await asyncio.to_thread(worker.submit, value)


def three_steps(raise_in_b: Callable[[], None], *, handler: Any = None, policy: Any = True) -> Any:
    """a -> b -> c; b calls ``raise_in_b()`` first (``handler``: b's own error
    handler, for a node with ``policy=None``)."""

    def make(step: str) -> Any:
        def node(state: State) -> dict[str, Any]:
            if step == "b":
                raise_in_b()
            return {"done": [step]}

        return node

    def options(step: str) -> dict[str, Any]:
        if step != "b" or policy is True:
            return {"policy": NodePolicy(retry=None, critical=True)}
        return {"policy": None, "error_handler": handler}

    return chain(ResilientStateGraph(State), ["a", "b", "c"], make, options)


def reraise(state: Any, error: NodeError) -> Any:
    """A user's error handler that re-raises what it was handed."""
    raise error.error


@pytest.mark.parametrize("own_handler", [True, False], ids=["node-handler", "user-handler"])
async def test_a_step_that_loses_its_lease_is_run_by_whoever_takes_the_run_over(
    checkpointer: Any, own_handler: bool
) -> None:
    """b raises `LeaseLost` once (its worker could not prove its lease). The run
    must end ``success`` with every step, b run again, never ``success`` without c
    (before the fix: stored ``success`` with ``done == ["a"]``)."""
    h = checkpointer
    if h.backend == "postgres":
        sql(h.backend, h.target, "DELETE FROM resilience_runs")
    tries: list[str] = []

    def in_b() -> None:
        tries.append("b")
        if len(tries) == 1:
            raise LeaseLost("this worker cannot prove it still holds the run (test)")

    graph = three_steps(in_b, handler=reraise, policy=True if own_handler else None)
    worker = Worker(graph, checkpointer=h.saver, lease_ttl=1.0, poll_interval=0.05)
    run_id = await submit(h, worker, {"done": []})
    await run_worker(h, worker)
    record = await h.call("read_run", run_id)
    values = h.saver.serde.loads_typed((record.outcome_type, record.outcome))["values"]
    assert (record.status, values["done"]) == ("success", ["a", "b", "c"]), (record, values)
    assert tries == ["b", "b"] and record.recoveries >= 1


def stored(checkpoint_id: str, parent: str | None, source: str, writes: list[Any]) -> Any:
    """A stored checkpoint as a saver's ``list`` returns it (only what is read)."""
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": ""}}
    config["configurable"]["checkpoint_id"] = checkpoint_id
    parent_config = None
    if parent is not None:
        parent_config = {"configurable": {"thread_id": "t", "checkpoint_id": parent}}
    return CheckpointTuple(config, {}, {"source": source}, parent_config, writes)  # type: ignore[arg-type]


def test_a_step_that_failed_unrecovered_is_found_in_the_runs_checkpoints() -> None:
    """What a Worker reads before it stores ``success`` (`unrecovered_steps`): the
    shape 0b1050e stored after a lost lease (b's error handed to its handler,
    the handler's own error, and the run went on to a checkpoint with nothing
    left) is a step that failed unrecovered; an error handed to its handler,
    an error next to the task's own writes (a retry that completed) and a
    handler that completed are not."""
    lost = "LeaseLost(\"side effect 'deliver' was not called\")"
    broken = [
        stored("c1", None, "loop", [("tb", "__error__", lost), ("tb", "__error_source_node__", "b"),
                                    ("th", "__error__", lost)]),
        stored("c2", "c1", "loop", []),
    ]  # fmt: skip
    [found] = unrecovered_steps(broken)
    assert found.startswith("'b' (its error handler failed") and "LeaseLost" in found
    writes = [
        ("tb", "__error__", "ValueError('bad')"),
        ("tb", "__error_source_node__", "b"),
        ("th", "resilience", {}),
        ("tc", "__error__", "X()"),
        ("tc", "done", ["c"]),
    ]
    fine = [stored("c1", None, "loop", writes), stored("c2", "c1", "loop", [])]
    assert unrecovered_steps(fine) == []
    head_only = [stored("c1", None, "loop", [("tb", "__error__", "ValueError('x')")])]
    assert unrecovered_steps(head_only) == []  # the run did not go on from it: resumed there


def test_a_run_taken_over_after_a_step_failed_unrecovered_is_stored_error(
    store: tuple[str, str],
) -> None:
    """End to end, through Workers: b fails and its handler re-raises, so LangGraph
    goes on to a checkpoint with nothing left to run; the worker is SIGKILLed
    right then, before it stores the run's end. The peer that takes the run over
    resumes it, finds nothing to run, and must store ``error`` naming b, never
    ``success`` (c never ran). Without `unrecovered_steps` the run is stored
    ``success`` with ``done == ["a"]``."""
    backend, target = store
    cls: Any = ResilientPostgresSaver if backend == "postgres" else ResilientSqliteSaver
    with cls.from_conn_string(target) as saver:
        saver.setup()
        if backend == "postgres":
            sql(backend, target, "DELETE FROM resilience_runs")
        worker = Worker(failing_graph(), checkpointer=saver, lease_ttl=30, poll_interval=0.05)
        run_id = worker.submit({"done": []})
        dying = spawn("tests/scripts/unrecovered_worker.py", backend, target)
        assert dying.wait(60) == -signal.SIGKILL, dying.communicate()
        assert saver.read_run(run_id).status == "running"  # its end was never stored

        started = time.monotonic()
        assert worker.run() == {run_id: "error"}
        assert time.monotonic() - started < 10  # its holder is known dead: no lease wait
        record = saver.read_run(run_id)
        outcome = saver.serde.loads_typed((record.outcome_type, record.outcome))
        assert record.recoveries == 1, record
        assert "'b' (its error handler failed: ValueError('b broke'))" in outcome["error"]
        assert outcome["values"]["done"] == ["a"]


async def test_a_run_whose_step_failed_unrecovered_never_reads_success(checkpointer: Any) -> None:
    """Without a Worker: b's handler re-raises, LangGraph stores a checkpoint with
    nothing left and ``invoke`` raises. The thread must not read ``success``
    afterwards, from ``get_state`` nor from a resume's output (before: both read
    ``success`` with ``done == ["a"]``): both read the status its ledger row
    stores, ``error``, as the report does (issue 37; before: ``running`` while the
    row said ``error``). A run that ended reads it as before."""
    h = checkpointer
    graph = failing_graph().compile(checkpointer=h.saver)
    config = {"configurable": {"thread_id": f"unrec-{uuid.uuid4().hex[:8]}"}}

    async def state() -> Any:
        if h.is_async:
            return (await graph.aget_state(config)).values
        return await asyncio.to_thread(lambda: graph.get_state(config).values)

    with pytest.raises(ValueError, match="b broke"):
        await h.invoke(graph, {"done": []}, config)
    assert ((await state())["done"], (await state())["resilience"]["status"]) == (["a"], "error")
    out = await h.invoke(graph, None, config)
    assert out["resilience"]["status"] == "error"
    row = await h.call("history.run_row", config["configurable"]["thread_id"], 1)
    assert row.status == "error"

    loop = ResilientStateGraph(State)  # a graph that ends by a conditional edge
    loop.add_node("n", lambda s: {"done": ["n"]})
    loop.add_edge(START, "n")
    loop.add_conditional_edges("n", lambda s: END if len(s["done"]) >= 2 else "n")
    config = {"configurable": {"thread_id": f"loop-{uuid.uuid4().hex[:8]}"}}
    graph = loop.compile(checkpointer=h.saver)
    assert (await h.invoke(graph, {"done": []}, config))["resilience"]["status"] == "success"
    assert (await state())["resilience"]["status"] == "success"


def asking_graph() -> Any:
    """ask (an interrupt) -> b -> c; b raises and its handler re-raises."""

    def ask(state: State) -> dict[str, Any]:
        return {"done": [f"ask:{interrupt('go on?')}"]}

    make = appending(failing("b", lambda: ValueError("b broke")))
    g = ResilientStateGraph(State)
    g.add_node("ask", ask)
    g.add_node("b", make("b"), policy=None, error_handler=reraise)
    g.add_node("c", make("c"))
    g.add_edge(START, "ask")
    g.add_edge("ask", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g


async def test_a_paused_run_resumed_by_hand_whose_step_failed_unrecovered_is_error(
    checkpointer: Any,
) -> None:
    """A Worker's run pauses at an interrupt and is resumed by hand; b then fails
    unrecovered (its handler re-raises) and nothing is left to run. When the
    thread is submitted again, the paused run is settled ``error`` with what b
    raised, as its run's ledger row stores it (its driver wrote it), not
    ``success`` (before: ``success``), and the new run is taken."""
    h = checkpointer
    if h.backend == "postgres":
        sql(h.backend, h.target, "DELETE FROM resilience_runs")
    worker = Worker(asking_graph(), checkpointer=h.saver, lease_ttl=5, poll_interval=0.05)
    thread = f"by-hand-{uuid.uuid4().hex[:8]}"
    if h.is_async:
        run_id = await worker.asubmit({"done": []}, thread_id=thread)
    else:
        run_id = await asyncio.to_thread(worker.submit, {"done": []}, thread_id=thread)
    assert (await run_worker(h, worker)) == {run_id: "paused"}
    with pytest.raises(ValueError, match="b broke"):
        await h.invoke(worker.graph, Command(resume="yes"), {"configurable": {"thread_id": thread}})
    if h.is_async:
        again = await worker.asubmit({"done": []}, thread_id=thread)
    else:
        again = await asyncio.to_thread(worker.submit, {"done": []}, thread_id=thread)
    record = await h.call("read_run", run_id)
    outcome = h.saver.serde.loads_typed((record.outcome_type, record.outcome))
    assert record.status == "error", (record, outcome)
    assert "ValueError: b broke" in outcome["error"] and outcome["resumed"] == "by hand"
    assert (await h.call("history.run_row", thread, 1)).status == "error"  # the same status
    assert (await h.call("read_run", again)).status == "queued"
