"""Workers as real processes, on SQLite and Postgres: a worker SIGKILLed mid-run
is taken over, a SIGSTOPped one (a zombie) can no longer write when it wakes,
SIGTERM drains a worker at a step boundary, and a run that kills every worker
that takes it ends as ``error`` after ``max_recoveries``.

The worker is ``tests/scripts/lease_worker.py``: a five-step pipeline, one side effect
per step against a fake service that logs every call.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_no_fork, emptied, expire_lease, read_ledger, sql
from lease_worker import STEPS
from spawn import Process, spawn

pytestmark = pytest.mark.crash
SCRIPT = str(Path(__file__).parent / "scripts" / "lease_worker.py")
ROOT = str(Path(__file__).parent.parent)
TTL = 1.0
POLL = 0.1
# A drain does not wait on any lease: a long one keeps a stalled process (a loaded
# machine: 0.7 s without a renewal was seen) from losing its run mid-step.
STEADY_TTL = "5"


@pytest.fixture
def fresh(store: tuple[str, str]) -> tuple[str, str]:
    """The store with no runs left by an earlier test (a worker waits on every open one)."""
    return emptied(store)


def start(store: tuple[str, str], service: Path, *args: str) -> Process:
    backend, target = store
    return spawn(SCRIPT, backend, target, str(service), *args)


def submit(store: tuple[str, str], service: Path, n: int, prefix: str) -> list[str]:
    proc = start(store, service, "submit", str(n), "--prefix", prefix)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return list(json.loads(out))


def work(store: tuple[str, str], service: Path, *options: str) -> Process:
    return start(store, service, "work", "--lease-ttl", str(TTL), "--poll", str(POLL), *options)


def finished_nothing(proc: Process) -> str:
    """Wait for a worker woken from SIGSTOP: it exits 0 having finished no run (its
    last line of output, ``{}``). Its stderr, which says why."""
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {}  # it finished nothing
    return err


def result(proc: Process, timeout: float = 90) -> dict[str, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker failed (rc={proc.returncode}):\n{err}"
    return dict(json.loads(out.strip().splitlines()[-1]))


def wait_for(check: Callable[[], Any], timeout: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def steps(service: Path) -> list[tuple[str, str, str, int, float]]:
    return [
        (t, s, what, int(p), float(at)) for t, s, what, p, at in read_ledger(service / "steps.log")
    ]


def calls(service: Path) -> list[str]:
    return [parts[0] for parts in read_ledger(service / "calls.log")]


def statuses(store: tuple[str, str], prefix: str) -> dict[str, str]:
    rows = sql(
        *store,
        "SELECT thread_id, status FROM resilience_runs WHERE thread_id LIKE ?",
        (f"{prefix}-%",),
    )
    return dict(rows)


def assert_each_effect_once(service: Path, threads: list[str]) -> None:
    counted = Counter(calls(service))
    assert all(n == 1 for n in counted.values()), {k: n for k, n in counted.items() if n > 1}
    assert len(counted) == len(threads) * len(STEPS)  # every step's effect delivered


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_killed_workers_runs_are_taken_over_after_its_lease(
    fresh: tuple[str, str], tmp_path: Path, mode: str
) -> None:
    runs = 4
    prefix = f"takeover-{uuid.uuid4().hex[:8]}"  # Postgres keeps earlier tests' threads
    submit(fresh, tmp_path, runs, prefix)
    extra = ["--async"] if mode == "async" else []
    workers = [
        work(fresh, tmp_path, "--concurrency", "2", "--step-sleep", "0.15", *extra)
        for _ in range(3)
    ]
    # Kill the first worker that is inside a step, not between runs.
    victim_pid = wait_for(
        lambda: next(
            (p for _, s, what, p, _ in steps(tmp_path) if what == "start" and s == "s2"), None
        ),
        what="a worker to reach s2",
    )
    victim = next(w for w in workers if w.pid == victim_pid)
    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.time()
    victim.wait()
    survivors = [w for w in workers if w is not victim]
    left: dict[str, str] = {}
    for w in survivors:
        left.update(result(w))
    threads = [f"{prefix}-{i}" for i in range(runs)]
    assert statuses(fresh, prefix) == dict.fromkeys(threads, "success")
    assert set(left.values()) == {"success"} and len(left) >= 1
    taken = sql(*fresh, "SELECT thread_id, attempts FROM resilience_runs WHERE recoveries > 0")
    assert taken, "no run of the killed worker was taken over"
    log = steps(tmp_path)
    for thread, attempts in taken:
        resumed = min(at for t, _, _, p, at in log if t == thread and p != victim_pid)
        # Within the lease plus a poll (and a second of slack for a loaded machine).
        assert resumed - killed_at < TTL + POLL + 1.0, resumed - killed_at
        # Steps the victim completed are not run again, but for the one in flight
        # (it may have logged its end and died before its writes were stored).
        by_victim = {
            s for t, s, what, p, _ in log if t == thread and what == "end" and p == victim_pid
        }
        by_others = [
            s for t, s, what, p, _ in log if t == thread and what == "end" and p != victim_pid
        ]
        assert len(by_victim & set(by_others)) <= 1
        # Nor are the survivors' steps, but for one per claim after the takeover's: a
        # survivor that could not store a step's writes in time (SQLite's one writer,
        # six runs in three processes) releases the run, or loses its lease, and the
        # run's next claim does that step again (seen once in a full run: s5 twice).
        redone = len(by_others) - len(set(by_others))
        assert redone <= attempts - 2, (thread, attempts, log)
        assert by_victim | set(by_others) == set(STEPS)
    assert_each_effect_once(tmp_path, threads)
    for thread in threads:
        assert_no_fork(*fresh, thread)


def _expire_while_stopped(store: tuple[str, str], run_id: str, pid: int) -> None:
    """`expire_lease` on a store whose worker ``pid`` is SIGSTOPped: stopped inside a
    SQLite write (its effect's outcome, a lease renewal) it holds the store's lock,
    and the update waits for it in vain ("database is locked"); it is then let on
    until that write is done, and stopped again."""
    for _ in range(20):
        try:
            expire_lease(*store, run_id)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)
            os.kill(pid, signal.SIGSTOP)
    raise AssertionError(f"the store stayed locked by the stopped worker {pid}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_zombie_worker_cannot_write_after_its_run_was_taken_over(
    fresh: tuple[str, str], tmp_path: Path, mode: str
) -> None:
    extra = ["--async"] if mode == "async" else []
    prefix = f"zombie-{uuid.uuid4().hex[:8]}"
    [run_id] = submit(fresh, tmp_path, 1, prefix)
    thread = f"{prefix}-0"
    zombie = work(fresh, tmp_path, "--slow", "s2:3", *extra)
    wait_for(
        lambda: any(s == "s2" for _, s, *_ in steps(tmp_path)) and len(calls(tmp_path)) >= 2,
        what="the zombie to call s2's effect",
    )
    os.kill(zombie.pid, signal.SIGSTOP)
    try:
        _expire_while_stopped(fresh, run_id, zombie.pid)  # while it sleeps, its lease runs out
        rescuer = work(fresh, tmp_path, *extra)
        assert result(rescuer) == {run_id: "success"}
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    err = finished_nothing(zombie)
    # It says it lost the run (how it learnt it depends on when it woke: its lease's
    # renewal refused, or its step's effect check or write refused).
    assert "lost by this worker" in err or "LeaseLost" in err, err
    by_step: dict[str, list[int]] = {}
    for _, s, what, p, _ in steps(tmp_path):
        if what == "end":
            by_step.setdefault(s, []).append(p)
    # s2 ended by the rescuer; the zombie, woken, finishes its own try of s2 (whose
    # writes are refused) or, stopped inside its effect's call, stops there: the
    # outcome's fenced write at the call's return is refused (LeaseLost). Never twice.
    assert rescuer.pid in by_step["s2"] and by_step["s2"].count(zombie.pid) <= 1
    assert set(by_step["s2"]) <= {zombie.pid, rescuer.pid}
    assert all(by_step[s] == [rescuer.pid] for s in STEPS[2:])
    record = sql(
        *fresh,
        "SELECT status, fencing_token, recoveries FROM resilience_runs WHERE run_id = ?",
        (run_id,),
    )
    assert record == [("success", 2, 1)]
    assert_each_effect_once(tmp_path, [thread])
    assert_no_fork(*fresh, thread)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigterm_drains_the_worker_at_a_step_boundary(
    fresh: tuple[str, str], tmp_path: Path, mode: str
) -> None:
    extra = ["--async"] if mode == "async" else []
    prefix = f"drain-{uuid.uuid4().hex[:8]}"
    [run_id] = submit(fresh, tmp_path, 1, prefix)
    first = work(fresh, tmp_path, "--step-sleep", "0.4", "--lease-ttl", STEADY_TTL, *extra)
    wait_for(lambda: any(s == "s2" for _, s, *_ in steps(tmp_path)), what="s2 to start")
    os.kill(first.pid, signal.SIGTERM)
    assert result(first) == {run_id: "queued"}  # released, not abandoned
    done_by_first = [s for _, s, what, p, _ in steps(tmp_path) if what == "end"]
    assert done_by_first == ["s1", "s2"]  # the step in flight finished
    record = sql(
        *fresh, "SELECT status, owner, recoveries FROM resilience_runs WHERE run_id = ?", (run_id,)
    )
    assert record == [("queued", None, 0)]
    second = work(fresh, tmp_path, "--lease-ttl", STEADY_TTL, *extra)
    assert result(second) == {run_id: "success"}
    started = [s for _, s, what, _, _ in steps(tmp_path) if what == "start"]
    assert started == list(STEPS)  # nothing ran twice
    assert_each_effect_once(tmp_path, [f"{prefix}-0"])


@pytest.mark.timeout(300)
def test_a_run_that_kills_every_worker_ends_as_error_after_max_recoveries(
    fresh: tuple[str, str], tmp_path: Path
) -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    prefix = f"poison-{uuid.uuid4().hex[:8]}"
    [run_id] = submit(fresh, tmp_path, 1, prefix)
    poison = ("--die-at", "s3", "--max-recoveries", "1")
    killed = []
    for _ in range(2):  # the first claim and one takeover: each dies in s3
        proc = work(fresh, tmp_path, *poison)
        proc.communicate(timeout=90)
        killed.append(proc.returncode)
    assert killed == [-signal.SIGKILL, -signal.SIGKILL]
    last = work(fresh, tmp_path, *poison)
    assert result(last) == {run_id: "error"}  # given up, not run a third time
    [(status, recoveries, kind, blob)] = sql(
        *fresh,
        "SELECT status, recoveries, outcome_type, outcome FROM resilience_runs WHERE run_id = ?",
        (run_id,),
    )
    assert (status, recoveries) == ("error", 2)
    outcome = JsonPlusSerializer().loads_typed((kind, bytes(blob)))
    assert "max_recoveries=1" in outcome["error"]
    assert len(outcome["values"]["receipts"]) == 2  # the partial result: s1 and s2
    assert [s for _, s, what, _, _ in steps(tmp_path) if what == "start"].count("s3") == 2
    assert_each_effect_once_so_far(tmp_path)


def assert_each_effect_once_so_far(service: Path) -> None:
    counted = Counter(calls(service))
    assert counted and all(n == 1 for n in counted.values()), counted
