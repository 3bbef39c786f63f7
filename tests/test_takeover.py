"""A dead worker's run is taken over at once where its death is known, and no
sooner than its lease elsewhere.

- A worker SIGKILLed on this machine, with the default ``lease_ttl=30`` and a
  peer already polling beside it: the peer takes the run over at its next poll
  (within 2 s), fenced as for an expired lease (the token grows, the dead
  holder's writes would be refused), on both dialects. The claim names its
  process (host, boot, PID namespace, pid, start time), as an effect's intent
  does.
- SQLite leases and a stepped wall clock: the clock SQLite reads (``julianday``
  on every connection the savers open) and the one `Instant.now` gives the
  workers' proofs step 60 s forward, or back (and set right again). A live run
  is not taken over; a run whose holder stopped renewing (alive, so only its
  lease tells) is taken over within one lease, not 60 s late.

The worker is ``tests/scripts/lease_worker.py``. ``LGR_FAULT_RUNS`` repeats the kill
trial (default 1 per dialect).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults import PgServer, TcpProxy
from graphs import ReceiptsState, chain
from helpers import read_ledger, sql
from partition_worker import call_bound, partition_bounds, partition_graph
from spawn import spawn
from test_partitions import db  # noqa: F401 (a fixture)
from test_worker_crash import (
    assert_each_effect_once,
    fresh,  # noqa: F401 (a fixture)
    result,
    start,
    steps,
    submit,
    wait_for,
)

from langgraph_resilience import NodePolicy, ResilientStateGraph, Worker
from langgraph_resilience.checkpoint import Fence
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.errors import StoreUnavailable
from langgraph_resilience.worker import _leases
from langgraph_resilience.worker._leases import Instant

RUNS = int(os.environ.get("LGR_FAULT_RUNS", "1"))
#: The takeover of a worker known dead must come at the peer's next poll (1 s by
#: default); 2 s is the promise, whatever the lease.
PROMPT = 2.0


def claim_of(store: tuple[str, str], run_id: str) -> tuple[int, int, str | None]:
    [(token, recoveries, owner)] = sql(
        *store,
        "SELECT fencing_token, recoveries, owner FROM resilience_runs WHERE run_id = ?",
        (run_id,),
    )
    return int(token), int(recoveries), owner


@pytest.mark.faults
@pytest.mark.crash
@pytest.mark.timeout(300)
@pytest.mark.parametrize("trial", range(RUNS))
def test_a_worker_killed_on_this_machine_is_taken_over_at_the_next_poll(
    fresh: tuple[str, str],  # noqa: F811
    tmp_path: Path,
    trial: int,
) -> None:
    prefix = f"prompt-{uuid.uuid4().hex[:8]}"
    [run_id] = submit(fresh, tmp_path, 1, prefix)
    # Worker's default lease; steps long enough that the run is mid-way at the kill.
    default = ("--lease-ttl", "30", "--step-sleep", "1.5")
    victim = start(fresh, tmp_path, "work", *default)
    wait_for(
        lambda: any(s == "s2" and what == "start" for _, s, what, *_ in steps(tmp_path)),
        what="the victim to reach s2",
    )
    go = tmp_path / "go"
    go.touch()
    peer = start(fresh, tmp_path, "work", *default, "--go", str(go))
    wait_for(lambda: (tmp_path / "ready.log").exists(), what="the peer to start")
    time.sleep(1.2)  # it polls once at least: it runs beside the victim
    assert claim_of(fresh, run_id)[0] == 1
    assert not any(s == "s5" for _, s, *_ in steps(tmp_path))  # mid-run
    os.kill(victim.pid, signal.SIGKILL)
    killed = time.monotonic()
    victim.wait()
    taken = wait_for(lambda: claim_of(fresh, run_id)[0] == 2, timeout=40, what="a takeover")
    latency = time.monotonic() - killed
    print(f"{fresh[0]}: taken over {latency:.2f} s after the SIGKILL (lease 30 s)")
    assert taken and latency < PROMPT, latency
    assert result(peer) == {run_id: "success"}
    token, recoveries, _ = claim_of(fresh, run_id)
    assert (token, recoveries) == (2, 1)
    by_peer = [s for _, s, what, p, _ in steps(tmp_path) if what == "start" and p == peer.pid]
    assert by_peer and by_peer[0] in ("s2", "s3")  # resumed, not started over
    assert_each_effect_once(tmp_path, [f"{prefix}-0"])


# -- a stepped wall clock, SQLite ------------------------------------------------------------


class WallStep:
    """The machine's wall clock as the savers' SQLite connections (``julianday``)
    and the workers' lease proofs (`Instant.now`) read it, ``seconds`` off."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wall(self) -> float:
        return time.time() + self.seconds

    def julianday(self, value: Any) -> float | None:
        if value != "now":
            raise ValueError("only julianday('now') is stepped here")
        return self.wall() / 86400.0 + 2440587.5


@pytest.fixture
def wall(monkeypatch: pytest.MonkeyPatch) -> Iterator[WallStep]:
    step = WallStep()
    connect = sqlite3.connect

    def stepped(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.create_function("julianday", 1, step.julianday)
        return conn

    monkeypatch.setattr(sqlite3, "connect", stepped)
    real_now = Instant.now

    def now() -> Instant:
        return Instant(real_now().monotonic, step.wall())

    monkeypatch.setattr(_leases.Instant, "now", staticmethod(now))
    yield step


LEASE = 2.0


def slow_graph(saver: ResilientSqliteSaver, started: threading.Event, seconds: float) -> Any:
    from langgraph_resilience import side_effect

    @side_effect(name="send")
    def send(step: str) -> str:
        return f"sent:{step}"

    def make(step: str) -> Any:
        def node(state: ReceiptsState) -> dict[str, Any]:
            if step == "s2":
                started.set()
                time.sleep(seconds)
            return {"receipts": [*state.get("receipts", []), send(step)]}

        return node

    policy = {"policy": NodePolicy()}
    graph = chain(ResilientStateGraph(ReceiptsState), ("s1", "s2", "s3"), make, lambda _: policy)
    return graph.compile(checkpointer=saver)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("moves", [(60.0,), (-60.0, 0.0)], ids=["forward", "back-then-corrected"])
def test_a_stepped_wall_clock_takes_no_live_sqlite_run_over(
    wall: WallStep, tmp_path: Path, moves: tuple[float, ...]
) -> None:
    """The clock steps while the run's long step goes on: 60 s forward; or 60 s
    back, renewals made meanwhile, then set right again (NTP correcting a bad step)."""
    path = str(tmp_path / "runs.db")
    started = threading.Event()
    with (
        ResilientSqliteSaver.from_conn_string(path) as saver,
        ResilientSqliteSaver.from_conn_string(path) as other,
    ):
        saver.setup()
        holder = Worker(slow_graph(saver, started, 3 * LEASE), checkpointer=saver, lease_ttl=LEASE)
        peer = Worker(slow_graph(other, threading.Event(), 0), checkpointer=other, lease_ttl=LEASE)
        run_id = holder.submit({"receipts": []})
        done: dict[str, dict[str, str]] = {}
        first = threading.Thread(target=lambda: done.update(holder=holder.run()))
        first.start()
        assert started.wait(30)
        second = threading.Thread(target=lambda: done.update(peer=peer.run()))
        for i, seconds in enumerate(moves):
            wall.seconds = seconds
            if i == 0:
                second.start()
            if i < len(moves) - 1:
                time.sleep(LEASE)  # a few renewals on the stepped clock
        first.join(60)
        second.join(60)
        record = saver.read_run(run_id)
        assert record is not None
        assert done["holder"] == {run_id: "success"}, done
        assert (record.status, record.fencing_token, record.recoveries) == ("success", 1, 0)
        assert done["peer"] == {}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seconds", [60.0, -60.0])
def test_a_stepped_wall_clock_delays_no_sqlite_takeover_past_one_lease(
    wall: WallStep, tmp_path: Path, seconds: float
) -> None:
    path = str(tmp_path / "runs.db")
    with ResilientSqliteSaver.from_conn_string(path) as saver:
        saver.setup()
        worker = Worker(
            slow_graph(saver, threading.Event(), 0), checkpointer=saver, lease_ttl=LEASE
        )
        run_id = worker.submit({"receipts": []})
        # Claimed by a holder that then stops renewing; its process (this one) lives,
        # so only the lease tells it is gone.
        [claimed] = saver.runs.claim("stalled", 1, LEASE)
        assert claimed.run_id == run_id
        claimed_at = time.monotonic()
        wall.seconds = seconds
        found: dict[str, str] = {}
        runner = threading.Thread(target=lambda: found.update(worker.run()))
        runner.start()
        runner.join(LEASE + 3.0)  # one lease, one poll, a loaded machine's slack
        waited = time.monotonic() - claimed_at
        if runner.is_alive():
            worker.drain()
            runner.join(30)
        print(f"sqlite, wall clock stepped {seconds:+.0f} s: taken over after {waited:.2f} s")
        assert found == {run_id: "success"}, f"not taken over within {waited:.1f} s"
        record = saver.read_run(run_id)
        assert record is not None and (record.fencing_token, record.recoveries) == (2, 1)


# -- SIGTERM while partitioned (Postgres, a blackhole) ----------------------------------------


@pytest.mark.faults
@pytest.mark.crash
@pytest.mark.timeout(180)
@pytest.mark.parametrize("trial", range(RUNS))
def test_sigterm_during_a_blackholed_renewal_returns_within_drain_timeout_and_one_call(
    pg_server: PgServer,
    db: str,  # noqa: F811
    tmp_path: Path,
    trial: int,
) -> None:
    """The worker's renewal is in flight into a blackhole when SIGTERM comes: the
    drain counts from the signal, so `run` returns within ``drain_timeout`` plus
    that one bounded store call (none is begun after), not after a second one.
    The call's bound is measured: a renewal through the same blackhole, with the
    worker's bounds, timed here (at most `call_bound`)."""
    drain_timeout, lease = 1.0, 2.0
    timeouts, retry = partition_bounds()
    service = tmp_path / "service"
    service.mkdir()
    with (
        TcpProxy(pg_server.port) as proxy,
        ResilientPostgresSaver.from_conn_string(db) as direct,
        ResilientPostgresSaver.from_conn_string(
            proxy.dsn(db), timeouts=timeouts, store_retry=retry
        ) as probe,
    ):
        probe.setup()
        run_id = Worker(partition_graph(service, 30.0), checkpointer=direct).submit({"done": []})
        child = spawn(
            str(Path(__file__).parent / "scripts" / "partition_worker.py"),
            proxy.dsn(db),
            str(service),
            str(lease),
            str(drain_timeout),
        )
        try:
            wait_for(
                lambda: any(p[1] == "b" for p in read_ledger(service / "steps.log")),
                timeout=20,
                what="the worker to reach step b",
            )
            proxy.blackhole()
            time.sleep(lease / 3 + 0.3)  # a renewal (every lease / 3) is in flight now
            sent = time.time()
            os.kill(child.pid, signal.SIGTERM)
            returned = wait_for(
                lambda: read_ledger(service / "exit.log"), timeout=60, what="run to return"
            )
            took = float(returned[0][1]) - sent
        finally:
            child.kill()
            child.communicate(timeout=30)
        began = time.monotonic()
        with pytest.raises(StoreUnavailable):
            probe.runs.renew("probe", [Fence(run_id=run_id, token=1)], lease)
        one_call = time.monotonic() - began
        assert one_call <= call_bound(timeouts, retry) + 0.5
        bound = drain_timeout + one_call + 0.5
        print(
            f"SIGTERM while blackholed: run returned after {took:.2f} s (drain_timeout "
            f"{drain_timeout} s + one store call {one_call:.2f} s + 0.5 s = {bound:.2f} s)"
        )
        assert took <= bound, f"run returned {took:.2f} s after SIGTERM (bound {bound:.1f} s)"
        assert sql("postgres", db, "SELECT status FROM resilience_runs WHERE run_id = ?", (run_id,))
