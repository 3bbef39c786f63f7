"""Network partitions under a `Worker` (issue 12, "Must show"), end to end on a
Postgres server of the tests' own (`faults.PgServer`) with a `faults.TcpProxy`
between worker A's saver (and its lease saver) and the server. Worker B talks to
the server directly. No mocks: the only instrumentation wraps a statement
generator of the library to fire the proxy's fault at an exact point of a
transaction (the fault itself is the proxy's).

1. A partition between a renewal's ``UPDATE`` and its ``COMMIT``: A's lease
   session stalls holding the run's row lock; the server ends it
   (``idle_in_transaction``) and B takes the run over within ``lease_ttl`` +
   `TAKEOVER_MARGIN`; the run ends ``success``, the thread has no fork.
2. A partition right after an intent: A's intent is committed on the server but
   the replies are held; B takes over and performs the effect; healed, A gets
   its reply late and must not call (the library's lease check before the
   call): the effect is performed exactly once.
3. A blackhole that never heals: a worker process gets SIGTERM and exits within
   ``drain_timeout`` + two bounded store calls; its run is left to its lease and
   another worker completes it.

``LGR_FAULT_TRIALS`` sets the trials of 1 and 2 (default 2) and of 3 (default 1).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults import PgServer, TcpProxy
from helpers import (
    append,
    assert_no_fork,
    in_thread,
    private_db,
    read_ledger,
    rest_of,
    sql,
    wait_until,
)
from partition_worker import (
    STEPS,
    call_bound,
    partition_bounds,
    partition_graph,
    worker_behind_proxy,
)
from spawn import spawn

from langgraph_resilience import LeaseLost, Worker, side_effect
from langgraph_resilience.checkpoint.ledger import _ledger, _runs
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver

TRIALS = int(os.environ.get("LGR_FAULT_TRIALS", "2"))
PROCESS_TRIALS = int(os.environ.get("LGR_FAULT_TRIALS", "1"))
LEASE_TTL = 2.0
POLL = 0.05
#: Takeover after a cut lands by ``lease_ttl`` + this: B's poll interval, its claim's
#: round trips and the thread scheduling of a loaded machine. The server ends the
#: stalled session after ``idle_in_transaction`` (1 s) < ``lease_ttl``, so the row
#: lock it held is gone before the lease runs out.
TAKEOVER_MARGIN = 1.0
HERE = Path(__file__).parent


@pytest.fixture
def db(pg_server: PgServer) -> Iterator[str]:
    """A fresh, set-up database on the private server (`helpers.private_db`)."""
    yield from private_db(pg_server, "lgr_part")


def report(line: str) -> None:
    print(f"\n[partitions] {line}", end="")


def run_row(dsn: str, run_id: str) -> tuple[str, str | None, int]:
    [(status, owner, token)] = sql(
        "postgres",
        dsn,
        "SELECT status, owner, fencing_token FROM resilience_runs WHERE run_id = ?",
        (run_id,),
    )
    return str(status), owner, int(token or 0)


def final_values(saver: Any, run_id: str) -> dict[str, Any]:
    record = saver.read_run(run_id)
    assert record.status == "success", record
    return dict(saver.serde.loads_typed((record.outcome_type, record.outcome))["values"])


def idle_in_transaction(dsn: str) -> int:
    dbname = dsn.rsplit("/", 1)[1]
    [(n,)] = sql(
        "postgres",
        dsn,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = ? "
        "AND state = 'idle in transaction' AND pid <> pg_backend_pid()",
        (dbname,),
    )
    return int(n)


def cut_after_first_statement(gen: Any, cut: Any) -> Any:
    """Delegate to the statement generator ``gen``, calling ``cut()`` once its first
    statement has been answered, before the next one (or the COMMIT) is sent."""
    value = yield next(gen)
    cut()
    return (yield from rest_of(gen, value))


# -- 1. a partition between a renewal's UPDATE and its COMMIT ------------------------------


@pytest.mark.timeout(120)
def test_partition_between_a_renewals_update_and_commit_does_not_block_takeover(
    pg_server: PgServer, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A's renewal gets its UPDATE's reply (the row is locked by A's session), then
    the proxy blackholes before the COMMIT: the session stalls idle in transaction.
    B must take the run over within lease_ttl + TAKEOVER_MARGIN of the cut."""
    state: dict[str, Any] = {"owner": None, "cut_at": None}
    armed = threading.Event()
    cut = threading.Event()
    proxy_box: dict[str, TcpProxy] = {}
    renew = _runs.renew_leases

    def renew_then_cut(d: Any, owner: str, fences: Any, lease_ttl: float) -> Any:
        gen = renew(d, owner, fences, lease_ttl)
        if not (fences and owner == state["owner"] and armed.is_set()):
            return (yield from gen)
        armed.clear()

        def blackhole() -> None:  # the UPDATE ran and answered; the COMMIT is not sent
            proxy_box["proxy"].blackhole()
            state["cut_at"] = time.monotonic()
            cut.set()

        return (yield from cut_after_first_statement(gen, blackhole))

    monkeypatch.setattr(_runs, "renew_leases", renew_then_cut)
    for trial in range(TRIALS):
        service = tmp_path / f"renew-{trial}"
        service.mkdir()
        armed.clear()
        cut.clear()
        entered = threading.Event()

        first_b = {"seen": False}

        def in_b(first_b: dict[str, bool] = first_b, entered: Any = entered) -> None:
            if not first_b["seen"]:  # A's b: a long node, the cut happens while it runs
                first_b["seen"] = True
                entered.set()
                cut.wait(10)

        graph = partition_graph(service, 0.0, in_b)
        with worker_behind_proxy(pg_server.port, db, graph, LEASE_TTL, POLL) as (
            proxy,
            direct,
            _saver_a,
            worker_a,
        ):
            proxy_box["proxy"] = proxy
            state["owner"] = worker_a.worker_id
            run_id = worker_a.submit({"done": []})
            a_thread, a_out = in_thread(worker_a.run)
            assert entered.wait(10), "worker A never reached step b"
            armed.set()  # A's next renewal (within lease_ttl / 3) is cut
            assert cut.wait(LEASE_TTL), "A did not renew while b ran"
            cut_at = state["cut_at"]
            time.sleep(0.2)
            stalled = idle_in_transaction(db)
            b_thread, b_out, taken_at = take_over(graph, direct, db, run_id)
            delay = taken_at - cut_at
            b_thread.join(15)
            assert not b_thread.is_alive(), "worker B did not finish"
            assert b_out == {"result": {run_id: "success"}}, b_out
            proxy.heal()
            worker_a.drain("test over")
            a_thread.join(20)
            assert not a_thread.is_alive(), "worker A did not stop once healed"
            assert "error" not in a_out, a_out
            assert run_id not in a_out.get("result", {}) or a_out["result"][run_id] != ("success")
            values = final_values(direct, run_id)
        report(
            f"renewal cut trial {trial}: stalled sessions {stalled}, takeover "
            f"{delay:.2f} s after the cut (bound {LEASE_TTL + TAKEOVER_MARGIN:.1f} s)"
        )
        assert stalled >= 1, "the cut did not leave A's session idle in transaction"
        assert delay <= LEASE_TTL + TAKEOVER_MARGIN, f"takeover took {delay:.2f} s"
        assert values["done"] == STEPS
        assert_no_fork("postgres", db, thread_of(db, run_id))


def take_over(graph: Any, direct: Any, db: str, run_id: str) -> tuple[Any, Any, float]:
    """Start worker B on ``direct``; once it has claimed the run again (it may be done
    by then): its thread, its result box, and when that was seen."""
    worker_b = Worker(graph, checkpointer=direct, lease_ttl=LEASE_TTL, poll_interval=POLL)
    b_thread, b_out = in_thread(worker_b.run)
    taken_at = wait_until(
        lambda: run_row(db, run_id)[2] >= 2, LEASE_TTL + 10, "B to take the run over"
    )
    return b_thread, b_out, taken_at


def thread_of(dsn: str, run_id: str) -> str:
    [(thread,)] = sql(
        "postgres", dsn, "SELECT thread_id FROM resilience_runs WHERE run_id = ?", (run_id,)
    )
    return str(thread)


# -- 2. a partition right after an intent ----------------------------------------------------


@pytest.mark.timeout(180)
def test_partition_right_after_an_intent_the_effect_is_performed_once(
    pg_server: PgServer,
    db: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stores b's intent (its pipelined transaction, COMMIT included, reaches the
    server) and the proxy drops every reply from that moment: A waits for the
    intent's reply while its lease runs out. B takes over and delivers; once B is
    done the proxy heals, A gets the intent's reply late and must not call."""
    armed = threading.Event()
    cut = threading.Event()
    proxy_box: dict[str, TcpProxy] = {}
    claim = _ledger.claim_intent
    state: dict[str, Any] = {}

    def claim_then_cut(d: Any, thread_id: str, record: Any, *args: Any, **kw: Any) -> Any:
        gen = claim(d, thread_id, record, *args, **kw)
        if not armed.is_set():
            return (yield from gen)
        armed.clear()
        state["intent_owner"] = record.owner
        stmt = next(gen)  # the intent's INSERT, queued in the write's pipeline
        proxy_box["proxy"].drop()  # requests pass (the COMMIT too); no reply comes back
        state["cut_at"] = time.monotonic()
        cut.set()
        value = yield stmt
        return (yield from rest_of(gen, value))

    monkeypatch.setattr(_ledger, "claim_intent", claim_then_cut)
    duplicated: dict[int, dict[str, int]] = {}
    refusals: dict[int, str] = {}
    for trial in range(TRIALS):
        service = tmp_path / f"intent-{trial}"
        service.mkdir()
        calls_log = service / "calls.log"
        armed.clear()
        cut.clear()

        def lookup(key: str, log: Path = calls_log) -> Any:
            known = any(parts[0] == key for parts in read_ledger(log))
            return f"receipt:{key}" if known else None

        @side_effect(name="deliver", reconcile=lookup)
        def deliver(*, idempotency_key: str, log: Path = calls_log) -> str:
            append(log, f"{idempotency_key} {threading.current_thread().name} {time.time()}")
            return f"receipt:{idempotency_key}"

        first_b = {"seen": False}

        def in_b(first_b: dict[str, bool] = first_b, trial: int = trial) -> None:
            if first_b["seen"]:
                deliver()  # B's
                return
            first_b["seen"] = True
            armed.set()  # A's intent for this effect is the one cut
            try:
                deliver()
            except LeaseLost as exc:  # observed, not changed: A's check refused the call
                refusals[trial] = str(exc)
                raise

        graph = partition_graph(service, 0.0, in_b)
        with worker_behind_proxy(
            # read > the partition: A's wait for the intent's reply outlasts the takeover.
            pg_server.port,
            db,
            graph,
            LEASE_TTL,
            POLL,
            read=8.0,
        ) as (proxy, direct, _saver_a, worker_a):
            proxy_box["proxy"] = proxy
            run_id = worker_a.submit({"done": []})
            thread = thread_of(db, run_id)
            a_thread, a_out = in_thread(worker_a.run)
            assert cut.wait(10), "A never stored b's intent"
            cut_at = state["cut_at"]
            # The intent is in the database, committed, A's (its reply is held).
            stored_at = wait_until(
                lambda thread=thread: (
                    sql(
                        "postgres",
                        db,
                        "SELECT count(*) FROM resilience_effects WHERE thread_id = ? "
                        "AND owner = ? AND status = 'intent'",
                        (thread, state["intent_owner"]),
                    )[0][0]
                    == 1
                ),
                5,
                "A's intent to be committed",
            )
            assert read_ledger(calls_log) == []  # A has not called: it awaits the reply
            b_thread, b_out, taken_at = take_over(graph, direct, db, run_id)
            b_thread.join(15)
            assert not b_thread.is_alive(), "worker B did not finish"
            healed_after = time.monotonic() - cut_at
            proxy.heal()  # A gets the intent's reply now, its lease long gone
            assert healed_after < 8.0, "healed after A's read timeout: scenario void"
            worker_a.drain("test over")
            a_thread.join(25)
            assert not a_thread.is_alive(), "worker A did not stop once healed"
            assert "error" not in a_out, a_out
            values = final_values(direct, run_id)
        counted = Counter(parts[0] for parts in read_ledger(calls_log))
        report(
            f"intent cut trial {trial}: intent committed {stored_at - cut_at:.2f} s after "
            f"the cut, takeover {taken_at - cut_at:.2f} s, healed {healed_after:.2f} s, "
            f"calls {len(counted)} key(s) x {sorted(counted.values())}, "
            f"A: {refusals.get(trial, 'no LeaseLost')[:60]}..."
        )
        assert b_out == {"result": {run_id: "success"}}, b_out
        assert values["done"] == STEPS
        assert_no_fork("postgres", db, thread)
        if len(counted) != 1 or any(n != 1 for n in counted.values()):
            duplicated[trial] = dict(counted)
    assert duplicated == {}, f"effect not performed exactly once: {duplicated}"
    # Each trial's A had its intent stored and answered ("new"), then its own lease
    # check refused the call: the exactly-once above is the library's check, not luck.
    assert sorted(refusals) == list(range(TRIALS)), refusals
    assert all("was not called" in why for why in refusals.values()), refusals


# -- 3. a blackhole that never heals: SIGTERM drains ------------------------------------------


@pytest.mark.crash
@pytest.mark.timeout(180)
def test_blackholed_worker_drains_on_sigterm_and_its_run_is_taken_over(
    pg_server: PgServer, db: str, tmp_path: Path
) -> None:
    """A worker process whose saver goes through the proxy is in step b (30 s) when
    the proxy blackholes for good; SIGTERM: it exits within drain_timeout + two
    bounded store calls (the loop's call in flight, and the release it tries),
    leaving its run to its lease; a worker on a direct connection completes it."""
    drain_timeout = 1.0
    timeouts, retry = partition_bounds()
    bound = drain_timeout + 2 * call_bound(timeouts, retry) + 1.0
    for trial in range(PROCESS_TRIALS):
        service = tmp_path / f"drain-{trial}"
        service.mkdir()
        graph = partition_graph(service, 30.0)
        with (
            TcpProxy(pg_server.port) as proxy,
            ResilientPostgresSaver.from_conn_string(db) as direct,
        ):
            submitter = Worker(graph, checkpointer=direct, lease_ttl=LEASE_TTL)
            run_id = submitter.submit({"done": []})
            thread = thread_of(db, run_id)
            child = spawn(
                str(HERE / "scripts" / "partition_worker.py"),
                proxy.dsn(db),
                str(service),
                str(LEASE_TTL),
                str(drain_timeout),
            )
            try:
                wait_until(
                    lambda log=service / "steps.log": any(p[1] == "b" for p in read_ledger(log)),
                    20,
                    "the worker to reach step b",
                )
                owner = run_row(db, run_id)[1]
                proxy.blackhole()  # never healed while the worker lives
                time.sleep(0.3)
                sent = time.monotonic()
                os.kill(child.pid, signal.SIGTERM)
                out, err = child.communicate(timeout=bound + 10)
                took = time.monotonic() - sent
            finally:
                child.kill()
            status, owner_after, token = run_row(db, run_id)
            worker_b = Worker(graph, checkpointer=direct, lease_ttl=LEASE_TTL, poll_interval=POLL)
            started = time.monotonic()
            left = worker_b.run()
            finished = time.monotonic() - started
            values = final_values(direct, run_id)
        report(
            f"drain trial {trial}: exit {took:.2f} s after SIGTERM (bound {bound:.1f} s), "
            f"left {out.strip().splitlines()[-1:] or err[-300:]}, run then {status} "
            f"(token {token}); B completed it in {finished:.2f} s"
        )
        assert child.returncode == 0, err
        assert took <= bound, f"the worker took {took:.2f} s to exit (bound {bound:.1f} s)"
        assert json.loads(out.strip().splitlines()[-1]) == {run_id: "running"}
        assert (status, owner_after, token) == ("running", owner, 1)  # left to its lease
        assert left == {run_id: "success"}
        assert values["done"] == STEPS
        assert_no_fork("postgres", db, thread)
