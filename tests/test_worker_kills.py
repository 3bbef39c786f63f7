"""SIGKILLs under 8 workers (issue 24): eight `Worker` processes on one store, a
random one SIGKILLed every few tenths of a second while the runs go on (and a
fresh one started in its place), until every run has ended.

The workers are ``tests/scripts/lease_worker.py`` (five steps, one side effect per step
against a fake service that logs every call; it reconciles by looking there).
Whatever the kills hit (a step, an effect's intent, a checkpoint, a claim, a
run's end), every run must end ``success`` with each of its five steps' effects
called exactly once, its five outcomes in the ledger and its five receipts in
its state: no run stored ``success`` with a step or an effect missing, and no
effect called twice.

``LGR_FAULT_RUNS`` sets the runs per store (default 16 for ``make test``; the
kills are half as many); each trial is marked ``faults``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import read_ledger, sql
from lease_worker import STEPS, build
from spawn import Process, spawn

from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

SCRIPT = str(Path(__file__).parent / "scripts" / "lease_worker.py")
RUNS = int(os.environ.get("LGR_FAULT_RUNS") or 16)
WORKERS = 8
LEASE_TTL = 3.0


def report(line: str) -> None:
    print(f"\n[8 workers] {line}", end="")


def start(store: tuple[str, str], service: Path, *args: str) -> Process:
    return spawn(SCRIPT, *store, str(service), *args)


def open_runs(store: tuple[str, str], prefix: str) -> int:
    rows = sql(
        *store,
        "SELECT count(*) FROM resilience_runs WHERE thread_id LIKE ? "
        "AND status IN ('queued', 'running')",
        (f"{prefix}-%",),
    )
    return int(rows[0][0])


def verdicts(store: tuple[str, str], service: Path, prefix: str) -> dict[str, str]:
    """Per thread: "" when it is stored ``success`` and really ended; else what is
    wrong ("FALSE SUCCESS: ..." when it is stored ``success`` anyway)."""
    called = Counter(parts[0] for parts in read_ledger(service / "calls.log"))
    effects: dict[str, list[tuple[str, str]]] = {}
    for thread, key, status in sql(
        *store,
        "SELECT thread_id, idempotency_key, status FROM resilience_effects WHERE thread_id LIKE ?",
        (f"{prefix}-%",),
    ):
        effects.setdefault(thread, []).append((key, status))
    ended = [(t, s) for t, s, what, *_ in read_ledger(service / "steps.log") if what == "end"]
    cls: Any = ResilientSqliteSaver if store[0] == "sqlite" else ResilientPostgresSaver
    found: dict[str, str] = {}
    with cls.from_conn_string(store[1]) as saver:
        graph = build(service, 0, None).compile(checkpointer=saver)
        for thread, status in sql(
            *store,
            "SELECT thread_id, status FROM resilience_runs WHERE thread_id LIKE ?",
            (f"{prefix}-%",),
        ):
            values = graph.get_state({"configurable": {"thread_id": thread}}).values
            keys = {k for k, s in effects.get(thread, []) if s == "done"}
            wrong = []
            if len(keys) != len(STEPS):
                wrong.append(f"{len(keys)} effect outcomes ({effects.get(thread)})")
            if missing := sorted(k for k in keys if called[k] != 1):
                wrong.append(f"effects called {[called[k] for k in missing]} times: {missing}")
            if sorted(values.get("receipts") or []) != sorted(f"receipt:{k}" for k in keys):
                wrong.append(f"receipts {values.get('receipts')}")
            if {s for t, s in ended if t == thread} != set(STEPS):
                wrong.append("a step never ended")
            if status == "success":
                found[thread] = "FALSE SUCCESS: " + "; ".join(wrong) if wrong else ""
            else:
                found[thread] = f"ended {status}: {'; '.join(wrong)}"
    return found


@pytest.mark.faults
@pytest.mark.crash
@pytest.mark.timeout(900)
def test_sigkills_under_8_workers_never_a_false_success_nor_an_effect_twice(
    store: tuple[str, str], tmp_path: Path
) -> None:
    backend, target = store
    cls: Any = ResilientSqliteSaver if backend == "sqlite" else ResilientPostgresSaver
    with cls.from_conn_string(target) as saver:
        saver.setup()
    if backend == "postgres":
        sql(*store, "DELETE FROM resilience_runs")
    prefix = f"kills-{uuid.uuid4().hex[:8]}"
    proc = start(store, tmp_path, "submit", str(RUNS), "--prefix", prefix)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert len(json.loads(out)) == RUNS

    options = ("--lease-ttl", str(LEASE_TTL), "--poll", "0.1", "--step-sleep", "0.3")
    options += ("--concurrency", "1", "--max-recoveries", "1000")

    def worker() -> Process:
        return start(store, tmp_path, "work", *options)

    rng = random.Random(f"kills-{backend}")
    live = [worker() for _ in range(WORKERS)]
    done: list[Process] = []
    kills, deadline = 0, time.monotonic() + 600
    started = time.monotonic()
    while kills < RUNS // 2 and open_runs(store, prefix):
        assert time.monotonic() < deadline, "the runs did not end within 600 s"
        time.sleep(rng.uniform(0.05, 0.35))
        done += [w for w in live if w.poll() is not None]
        live = [w for w in live if w.returncode is None]
        for w in done:
            assert w.returncode == 0, w.communicate()
        if not live:
            live = [worker()]
        victim = rng.choice(live)
        victim.kill()
        victim.wait()
        kills += 1
        live = [w for w in live if w is not victim] + [worker()]
    for w in live + done:
        if w.returncode == -signal.SIGKILL:
            continue
        _, err = w.communicate(timeout=300)
        assert w.returncode == 0, f"a worker failed (rc={w.returncode}):\n{err}"
    seconds = time.monotonic() - started

    found = verdicts(store, tmp_path, prefix)
    taken = sql(
        *store,
        "SELECT count(*), coalesce(sum(recoveries), 0) FROM resilience_runs "
        "WHERE thread_id LIKE ? AND recoveries > 0",
        (f"{prefix}-%",),
    )[0]
    twice = {k: n for k, n in Counter(p[0] for p in read_ledger(tmp_path / "calls.log")).items()}
    twice = {k: n for k, n in twice.items() if n > 1}
    false = {t: why for t, why in found.items() if why.startswith("FALSE")}
    other = {t: why for t, why in found.items() if why and not why.startswith("FALSE")}
    report(
        f"{backend}: {len(found)} runs, {kills} SIGKILLs, {taken[0]} runs taken over "
        f"({taken[1]} takeovers), {len(false)} false successes, {len(twice)} effects twice, "
        f"{len(other)} other ends, {seconds:.1f} s"
    )
    assert len(found) == RUNS
    assert false == {}, false
    assert twice == {}, twice
    assert other == {}, other
