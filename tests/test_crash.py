"""Crash tests with real processes (SIGKILL), on SQLite and Postgres.

- killed inside a checkpoint write: the previous checkpoint stays readable and
  the run resumes, with no completed step run again;
- killed while a step is in flight: the resume redoes only that step;
- two processes resuming one thread at once: one continues, the other gets
  `CheckpointConflict`, and the history has no fork; with a side effect in the
  step, repeated (``LGR_RACE_REPEATS``, default 25 sync + 25 async per
  dialect): the effect happens once.

``LGR_CRASH_CASES`` (default 3) sets how many kill points each test tries.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import CRASH_CASES
from crash_worker import STEPS
from helpers import assert_no_fork, read_ledger, sql
from spawn import Process, spawn

from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

pytestmark = pytest.mark.crash
WORKER = str(Path(__file__).parent / "scripts" / "crash_worker.py")
ROOT = str(Path(__file__).parent.parent)


def worker(store: tuple[str, str], thread: str, ledger: Path, *options: str) -> Process:
    backend, target = store
    return spawn(WORKER, backend, target, thread, str(ledger), *options)


def finish(proc: Process, timeout: float = 60) -> tuple[int, dict[str, Any]]:
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines or proc.returncode < 0, f"worker printed nothing (rc={proc.returncode}):\n{err}"
    return proc.returncode, json.loads(lines[-1]) if lines else {}


def runs_by_pid(ledger: Path) -> dict[str, list[int]]:
    ran: dict[str, list[int]] = {}
    for node, pid in read_ledger(ledger):
        ran.setdefault(node, []).append(int(pid))
    return ran


def checkpoint_count(store: tuple[str, str], thread: str) -> int:
    return int(sql(*store, "SELECT count(*) FROM checkpoints WHERE thread_id = ?", (thread,))[0][0])


def cases(options: list[Any]) -> list[Any]:
    return options[: max(1, CRASH_CASES)] if len(options) > CRASH_CASES else options


@pytest.mark.parametrize("kill_at", cases([3, 5, 2, 4, 6, 7]))
def test_killed_inside_a_checkpoint_write(
    store: tuple[str, str], tmp_path: Path, kill_at: int
) -> None:
    thread, ledger = f"put-kill-{kill_at}", tmp_path / "ledger.txt"
    first = worker(store, thread, ledger, "--kill-in-put", str(kill_at))
    rc, _ = finish(first)
    assert rc == -signal.SIGKILL
    # The write in flight left nothing behind; the one before it is intact.
    assert checkpoint_count(store, thread) == kill_at - 1
    saver_cls = ResilientSqliteSaver if store[0] == "sqlite" else ResilientPostgresSaver
    with saver_cls.from_conn_string(store[1]) as saver:
        latest = saver.get_tuple({"configurable": {"thread_id": thread}})
    assert latest is not None and latest.metadata["step"] == kill_at - 3
    before_resume = runs_by_pid(ledger)

    rc, result = finish(worker(store, thread, ledger, "--resume"))
    assert (rc, result["done"]) == (0, STEPS)
    ran = runs_by_pid(ledger)
    redone = {node for node, pids in ran.items() if len(pids) > 1}
    # A step whose writes were saved is not run again; at most the step whose
    # checkpoint was being written, if its writes had not landed yet.
    assert len(redone) <= 1, ran
    assert all(
        len(pids) == 1 for node, pids in ran.items() if node in before_resume and node not in redone
    )
    assert sorted(ran) == sorted(STEPS)
    assert_no_fork(*store, thread)


@pytest.mark.parametrize("victim", cases(["c", "b", "d", "e", "a"]))
def test_killed_while_a_step_is_in_flight(
    store: tuple[str, str], tmp_path: Path, victim: str
) -> None:
    thread, ledger = f"step-kill-{victim}", tmp_path / "ledger.txt"
    first = worker(store, thread, ledger, "--node-seconds", "0.5")
    deadline = time.monotonic() + 60
    while victim not in runs_by_pid(ledger):
        assert first.poll() is None, f"worker ended before {victim} started: {first.communicate()}"
        assert time.monotonic() < deadline, "worker never reached the victim step"
        time.sleep(0.005)
    os.kill(first.pid, signal.SIGKILL)
    assert finish(first)[0] == -signal.SIGKILL

    second = worker(store, thread, ledger, "--resume")
    rc, result = finish(second)
    assert (rc, result["done"]) == (0, STEPS)
    ran = runs_by_pid(ledger)
    position = STEPS.index(victim)
    for node in STEPS[:position]:
        assert ran[node] == [first.pid], f"{node} ran again: {ran}"
    assert ran[victim] == [first.pid, second.pid]
    for node in STEPS[position + 1 :]:
        assert ran[node] == [second.pid], ran
    assert_no_fork(*store, thread)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_two_processes_resuming_one_thread(
    store: tuple[str, str], tmp_path: Path, is_async: bool
) -> None:
    thread, ledger = f"race-{is_async}", tmp_path / "ledger.txt"
    mode = ["--async"] if is_async else []
    rc, result = finish(worker(store, thread, ledger, "--fail-once", "b", *mode))
    assert rc == 4, result
    both = [worker(store, thread, ledger, "--resume", "--barrier", "b:3", *mode) for _ in range(2)]
    outcomes = sorted(finish(p) for p in both)
    codes = [code for code, _ in outcomes]
    assert codes == [0, 3], outcomes
    assert outcomes[0][1]["done"] == STEPS
    assert "moved past checkpoint" in outcomes[1][1]["error"]
    assert_no_fork(*store, thread)
    ran = Counter(node for node, pids in runs_by_pid(ledger).items() for _ in pids)
    # b: the failed try and one per resumer (the loser's result is refused);
    # everything after b ran only in the winner.
    assert ran == {"a": 1, "b": 3, "c": 1, "d": 1, "e": 1}


RACE_WORKER = str(Path(__file__).parent / "scripts" / "race_worker.py")
RACE_REPEATS = int(os.environ.get("LGR_RACE_REPEATS", "25"))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_two_processes_resuming_one_head_perform_its_effect_once(
    store: tuple[str, str], tmp_path: Path, is_async: bool
) -> None:
    """No Worker, no fence: the step lease on the effect and the fork check are
    all that stand between two resumers and a double charge."""
    prefix = f"race-{os.getpid()}-{int(time.time() * 1000)}-{int(is_async)}"
    n = str(RACE_REPEATS)
    prep = spawn(RACE_WORKER, *store, prefix, n, str(tmp_path), "--prepare")
    _, err = prep.communicate(timeout=120)
    assert prep.returncode == 0, err
    mode = ["--async"] if is_async else []
    racers = [spawn(RACE_WORKER, *store, prefix, n, str(tmp_path), *mode) for _ in range(2)]
    for racer in racers:
        _, err = racer.communicate(timeout=500)
        assert racer.returncode == 0, err
    threads = [f"{prefix}-{i}" for i in range(RACE_REPEATS)]
    calls = Counter(thread for thread, _, _ in read_ledger(tmp_path / "calls.log"))
    assert calls == dict.fromkeys(threads, 1), "an effect ran twice (or never)"
    outcomes: dict[str, list[tuple[str, bool]]] = {}
    for thread, _, outcome, ran in read_ledger(tmp_path / "outcomes.log"):
        outcomes.setdefault(thread, []).append((outcome, ran == "1"))
    both_ran = 0
    for thread in threads:
        assert_no_fork(*store, thread)
        results = sorted(outcomes[thread])
        # One proceeds; the other was refused (its view went stale, or the
        # effect was claimed), or came after the first had finished (no step ran).
        assert [o for o, _ in results].count("completed") >= 1, results
        proceeded = [o for o, ran in results if o == "completed" and ran]
        assert len(proceeded) <= 1, results
        other = [r for r in results if r[0] != "completed" or not r[1]]
        assert all(o in ("CheckpointConflict", "EffectInFlight") or not ran for o, ran in other)
        both_ran += all(ran for _, ran in results)
        final = sql(*store, "SELECT count(*) FROM checkpoints WHERE thread_id = ?", (thread,))
        assert final[0][0] >= 4
    # The race is real: in most repeats both processes were inside the step.
    assert both_ran >= RACE_REPEATS // 2, both_ran


BACKOFF_WORKER = str(Path(__file__).parent / "scripts" / "backoff_worker.py")


def stored_attempts(store: tuple[str, str], thread: str) -> int:
    try:
        query = "SELECT count(*) FROM resilience_node_attempts WHERE thread_id = ?"
        return int(sql(*store, query, (thread,))[0][0])
    except Exception:  # the worker has not created the tables yet
        return 0


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_killed_during_retry_backoff_resumes_at_the_next_attempt(
    store: tuple[str, str], tmp_path: Path, is_async: bool
) -> None:
    """A crash during the wait before attempt 3 must not reset the count to 1."""
    thread, ledger = f"backoff-{is_async}", tmp_path / "attempts.txt"
    mode = ["--async"] if is_async else []

    def start(*extra: str) -> Process:
        return spawn(BACKOFF_WORKER, *store, thread, str(ledger), *extra, *mode)

    first = start()
    stored = 0
    deadline = time.monotonic() + 60
    while stored < 2:  # attempt 2 failed and was stored: the 10 s wait has begun
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "attempt 2 was never stored"
        time.sleep(0.02)
        stored = stored_attempts(store, thread)
    os.kill(first.pid, signal.SIGKILL)
    assert finish(first)[0] == -signal.SIGKILL

    second = start("--resume")
    rc, result = finish(second)
    assert rc == 0, result
    attempts = read_ledger(ledger)
    assert attempts == [["1", str(first.pid)], ["2", str(first.pid)], ["3", str(second.pid)]]
    assert result["status"] == "partial_complete"
    assert result["failed_step"]["attempts"] == 3  # max_attempts held across the crash


# -- side effects ------------------------------------------------------------------------

EFFECT_WORKER = str(Path(__file__).parent / "scripts" / "effect_worker.py")
CHAOS_RUNS = int(os.environ.get("LGR_CHAOS_RUNS", "20"))


def effect_worker(store: tuple[str, str], service: Path, threads: str, *extra: str) -> Process:
    return spawn(EFFECT_WORKER, *store, str(service), threads, *extra)


def service_calls(service: Path) -> list[tuple[str, int, float]]:
    from effect_worker import calls

    return calls(service)


@pytest.mark.parametrize("point", ["before-call", "after-call", "after-return", "after-outcome"])
def test_effect_killed_at_each_point_happens_once(
    store: tuple[str, str], tmp_path: Path, point: str
) -> None:
    thread = f"effect-{point}"
    first = effect_worker(store, tmp_path, thread, "--kill", point)
    assert finish(first)[0] == -signal.SIGKILL
    before = service_calls(tmp_path)
    second = effect_worker(store, tmp_path, thread)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    after = service_calls(tmp_path)
    keys = [k for k, _, _ in after]
    assert len(keys) == len(set(keys)) == 3  # reserve, charge, notify: each once
    first_key = next(k for k in keys if "|reserve|" in k)
    asked = tmp_path / "reconcile.log"
    reconciled = asked.read_text() if asked.exists() else ""
    if point == "before-call":
        assert before == []
        assert [p for k, p, _ in after if k == first_key] == [second.pid]
    elif point == "after-call":  # the outcome was never stored
        assert [p for k, p, _ in before] == [first.pid]
        assert first_key in reconciled and str(second.pid) in reconciled  # reconcile decided
    else:  # stored as the call returned (after-return), or with the failed try
        assert [p for k, p, _ in before] == [first.pid]
        assert not (tmp_path / "reconcile.log").exists()  # the outcome was simply replayed


SEND_WORKER = str(Path(__file__).parent / "scripts" / "send_worker.py")


@pytest.mark.parametrize("defer", [False, True], ids=["stored", "deferred"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_killed_while_the_node_works_on_after_a_plain_effect_returned(
    store: tuple[str, str], tmp_path: Path, is_async: bool, defer: bool
) -> None:
    """A node sends an email through a plain @side_effect (no reconcile, a service
    that ignores keys), then works on and is SIGKILLed: the resumed run replays the
    stored outcome and sends once. With ``defer_outcome=True`` the outcome waited
    for the node's writes, so the resumed run sends again, as documented."""
    thread = f"send-{is_async}-{defer}"
    options = [*(["--async"] if is_async else []), *(["--defer"] if defer else [])]
    first = spawn(SEND_WORKER, *store, str(tmp_path), thread, *options, "--work", "60")
    deadline = time.monotonic() + 30
    while not (tmp_path / "working").exists():
        assert first.poll() is None, first.communicate()[1]
        assert time.monotonic() < deadline, "the node never got past its effect"
        time.sleep(0.005)
    first.kill()
    assert first.wait(timeout=30) == -signal.SIGKILL
    second = spawn(SEND_WORKER, *store, str(tmp_path), thread, *options)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    sends = read_ledger(tmp_path / "sends.log")
    assert len({key for key, _ in sends}) == 1  # one effect, one idempotency key
    assert [int(pid) for _, pid in sends] == ([first.pid, second.pid] if defer else [first.pid])


@pytest.mark.timeout(900)
def test_chaos_every_effect_delivered_once(store: tuple[str, str], tmp_path: Path) -> None:
    """Kill workers at random points while they run many pipelines; resume until done.

    Each worker is killed after a random number of new calls to the service and a
    random sliver of time more (so the kill lands anywhere: before an intent,
    during a call, before its outcome is stored, inside a checkpoint write),
    unless it finishes first. ``LGR_CHAOS_RUNS`` sets how many pipelines.
    """
    import random

    rng = random.Random(1234)
    threads = [f"chaos-{i}" for i in range(CHAOS_RUNS)]
    kills = 0
    done_log = tmp_path / "done.log"
    while True:
        done = set(done_log.read_text().split()) if done_log.exists() else set()
        todo = [t for t in threads if t not in done]
        if not todo:
            break
        target = len(service_calls(tmp_path)) + rng.randint(1, 6)
        worker = effect_worker(store, tmp_path, ",".join(todo))
        deadline = time.monotonic() + 60
        while worker.poll() is None and len(service_calls(tmp_path)) < target:
            assert time.monotonic() < deadline, "a worker made no progress for 60 s"
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.02))
        if worker.poll() is None:
            worker.kill()
            worker.wait()
            kills += 1
        else:
            assert worker.returncode == 0, worker.communicate()[1]
    assert kills >= 3, "the workers were never killed: the test proved nothing"
    calls = service_calls(tmp_path)
    delivered = {k for k, _, _ in calls}
    assert len(delivered) == 3 * CHAOS_RUNS  # every logical effect delivered
    # No call at all for an effect whose outcome had been recorded before it.
    backend, target = store
    query = (
        "SELECT idempotency_key, outcome_at FROM resilience_effects "
        "WHERE status = 'done' AND thread_id LIKE ?"
    )
    outcome_at = dict(sql(backend, target, query, ("chaos-%",)))
    assert len(outcome_at) == 3 * CHAOS_RUNS
    late = [(k, t) for k, _, t in calls if outcome_at[k] < t]
    assert late == []
    repeated = {k for k in delivered if sum(1 for c in calls if c[0] == k) > 1}
    # A repeat is only possible for an intent whose outcome was lost to a kill;
    # with reconcile it is never needed: every key was called once.
    assert repeated == set()
