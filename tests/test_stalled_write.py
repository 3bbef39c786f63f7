"""A live worker's stalled fenced write never blocks the takeover past its lease
(issue 24), on a Postgres server of the tests' own (`faults.PgServer`) with a
`faults.TcpProxy` between worker A's savers and the server; worker B talks to the
server directly.

A's effect stores its intent in one pipelined transaction: the fence check (which
holds the run's row ``FOR SHARE`` until the commit) and the ``INSERT`` reach the
server, then the proxy blackholes before the pipeline's ``Sync``. The server waits
for the rest of the pipeline in state ``active``: no ``statement_timeout`` (re-armed
per statement) nor ``idle_in_transaction_session_timeout`` (not idle: no Sync yet)
ends it, and the proxy's end of the TCP connection answers every keepalive. Without
a bound the row stays locked and every claim skips it (``SKIP LOCKED``) for as long
as the partition lasts. B must take the run over within ``lease_ttl`` +
`TAKEOVER_MARGIN` of the cut and finish it; A's fenced writes are refused after
(`LeaseLost`), and the effect is performed once (by B: A's intent never answered).

``LGR_FAULT_RUNS`` sets the trials (default 1).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults import PgServer
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
from partition_worker import STEPS, partition_graph, worker_behind_proxy

from langgraph_resilience import LeaseLost, Worker, side_effect
from langgraph_resilience.checkpoint import EffectRecord, Fence
from langgraph_resilience.checkpoint.ledger import _ledger

TRIALS = int(os.environ.get("LGR_FAULT_RUNS", "1"))
LEASE_TTL = 3.0
POLL = 0.05
#: B's poll interval (twice: the claim that ends the stalled session may find the
#: row still held while that session exits), its claim's round trips and the thread
#: scheduling of a loaded machine.
TAKEOVER_MARGIN = 1.5


@pytest.fixture
def db(pg_server: PgServer) -> Iterator[str]:
    """A fresh, set-up database on the private server (`helpers.private_db`)."""
    yield from private_db(pg_server, "lgr_stall")


def token_of(dsn: str, run_id: str) -> int:
    [(token,)] = sql(
        "postgres", dsn, "SELECT fencing_token FROM resilience_runs WHERE run_id = ?", (run_id,)
    )
    return int(token or 0)


def stalled_inserts(dsn: str) -> int:
    """Sessions of the database executing an intent's INSERT (waiting for its Sync)."""
    [(n,)] = sql(
        "postgres",
        dsn,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = ? AND state = 'active' "
        "AND query LIKE 'INSERT INTO resilience_effects%%' AND pid <> pg_backend_pid()",
        (dsn.rsplit("/", 1)[1],),
    )
    return int(n)


@pytest.mark.faults
@pytest.mark.timeout(120)
def test_a_stalled_intent_insert_of_a_live_worker_does_not_block_the_takeover(
    pg_server: PgServer, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    armed = threading.Event()
    cut = threading.Event()
    box: dict[str, Any] = {}
    claim = _ledger.claim_intent

    def claim_then_stall(d: Any, thread_id: str, record: Any, *args: Any, **kw: Any) -> Any:
        gen = claim(d, thread_id, record, *args, **kw)
        if not armed.is_set():
            return (yield from gen)
        armed.clear()
        value = yield next(gen)  # the INSERT, sent in the pipeline after the fence check
        # Both statements are on the server (active, holding the run's row); the
        # pipeline's Sync, and its COMMIT with it, never gets there.
        box["stalled"] = wait_until(lambda: stalled_inserts(db) == 1, 5, "A's INSERT")
        box["proxy"].blackhole()
        box["cut_at"] = time.monotonic()
        cut.set()
        return (yield from rest_of(gen, value))

    monkeypatch.setattr(_ledger, "claim_intent", claim_then_stall)
    for trial in range(TRIALS):
        service = tmp_path / f"stall-{trial}"
        service.mkdir()
        calls_log = service / "calls.log"
        armed.clear()
        cut.clear()

        @side_effect(name="deliver")
        def deliver(*, idempotency_key: str, log: Path = calls_log) -> str:
            append(log, f"{idempotency_key} {threading.current_thread().name} {time.time()}")
            return f"receipt:{idempotency_key}"

        first_b = {"seen": False}

        def in_b(first_b: dict[str, bool] = first_b) -> None:
            if not first_b["seen"]:
                first_b["seen"] = True
                armed.set()  # A's intent for this effect is the one stalled
            deliver()

        graph = partition_graph(service, 0.0, in_b)
        with worker_behind_proxy(pg_server.port, db, graph, LEASE_TTL, POLL, read=2.0) as (
            proxy,
            direct,
            saver_a,
            worker_a,
        ):
            box["proxy"] = proxy
            run_id = worker_a.submit({"done": []})
            a_thread, _a_out = in_thread(worker_a.run)
            assert cut.wait(15), "A never stored b's intent"
            cut_at = box["cut_at"]
            time.sleep(0.2)
            still = stalled_inserts(db)
            worker_b = Worker(graph, checkpointer=direct, lease_ttl=LEASE_TTL, poll_interval=POLL)
            b_thread, b_out = in_thread(worker_b.run)
            try:
                taken_at = wait_until(
                    lambda run_id=run_id: token_of(db, run_id) >= 2,
                    LEASE_TTL + 8,
                    "B to take the run over",
                )
            finally:
                delay = time.monotonic() - cut_at
                print(
                    f"\n[stall] trial {trial}: INSERT stalled on the server "
                    f"(sessions {still}); takeover after {delay:.2f} s "
                    f"(bound {LEASE_TTL + TAKEOVER_MARGIN:g} s)",
                    end="",
                )
            delay = taken_at - cut_at
            b_thread.join(20)
            assert not b_thread.is_alive(), "worker B did not finish"
            proxy.heal()
            # A's fenced writes are refused now: B holds the run (token 2).
            thread = sql(
                "postgres", db, "SELECT thread_id FROM resilience_runs WHERE run_id = ?",
                (run_id,),
            )[0][0]  # fmt: skip
            intent = EffectRecord(
                idempotency_key=f"late-{trial}", name="deliver", status="intent",
                intent_at=time.time(),
            )  # fmt: skip
            with pytest.raises(LeaseLost, match="taken over"):
                saver_a.effects.claim(thread, intent, None, 30.0, Fence(run_id=run_id, token=1))
            worker_a.drain("test over")
            a_thread.join(30)
            assert not a_thread.is_alive(), "worker A did not stop once healed"
            record = direct.read_run(run_id)
            values = direct.serde.loads_typed((record.outcome_type, record.outcome))["values"]
        assert still == 1, "the cut did not leave A's INSERT active on the server"
        assert delay <= LEASE_TTL + TAKEOVER_MARGIN, f"takeover took {delay:.2f} s"
        assert b_out == {"result": {run_id: "success"}}, b_out
        assert record.status == "success", record
        assert values["done"] == STEPS
        assert_no_fork("postgres", db, str(thread))
        counted = Counter(parts[0] for parts in read_ledger(calls_log))
        assert len(counted) == 1 and set(counted.values()) == {1}, counted
