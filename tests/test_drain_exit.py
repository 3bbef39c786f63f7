"""SIGTERM to a worker process whose Postgres is partitioned (issue 35): the
process exits within its drain timeout, and its run is given back or taken over.

The worker is the command line, started as users start it (``python -m
langgraph_resilience worker --graph drain_graph:builder --db DSN``, a real
interpreter: not a fork, so that its exit is the real one, atexit joins
included), on a Postgres server of the tests' own through a `faults.TcpProxy`.
It is mid-run (in step ``b``, a 30 s call) when the proxy blackholes (packets
held, no RST); then SIGTERM.

1. The partition lasts: the process exits within ``drain_timeout`` + `SLACK`
   (code 75: it did not wait for its hung step and store call), its run left
   ``running`` (the store could not take it back); a second worker takes it over
   after its lease (fenced: token 2), it ends ``success`` and its effect was
   called once. On main before this change it exited after 170-193 s.
2. The partition heals during the drain: the run is given back ``queued``
   within the same bound, and a second worker runs it at once to ``success``,
   its effect called once.

``LGR_FAULT_RUNS`` sets the trials of each (default 1). Each prints its exit time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults import PgServer, TcpProxy
from helpers import assert_no_fork, in_thread, private_db, read_ledger, sql, wait_until

from langgraph_resilience import Worker
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver

RUNS = int(os.environ.get("LGR_FAULT_RUNS", "1"))
HERE = Path(__file__).parent
ROOT = HERE.parent
DRAIN_TIMEOUT = 2.0
#: Past ``drain_timeout``: the loop's poll, one store call begun just before the
#: drain's end (`ANSWER_GRACE`, 1 s), the process's teardown, a loaded machine.
SLACK = 2.5
LEFT_BEHIND = 75  # the command's exit code when it exits without a hung step
STEPS = ["a", "b", "c"]


@pytest.fixture
def db(pg_server: PgServer) -> Iterator[str]:
    yield from private_db(pg_server, "lgr_drain")


def report(line: str) -> None:
    print(f"\n[drain-exit] {line}", end="")


def cli(service: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(
        os.environ,
        LGR_DRAIN_DIR=str(service),
        PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE / "scripts")]),
    )
    command = [sys.executable, "-m", "langgraph_resilience", "worker"]
    command += ["--graph", "drain_graph:builder", "--poll-interval", "0.05", "--json", *args]
    return subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def row(dsn: str, run_id: str) -> tuple[str, int, int]:
    [(status, token, recoveries)] = sql(
        "postgres",
        dsn,
        "SELECT status, fencing_token, recoveries FROM resilience_runs WHERE run_id = ?",
        (run_id,),
    )
    return str(status), int(token), int(recoveries)


def left_of(out: str) -> dict[str, str]:
    return dict(json.loads(out)["runs"])


def submit(dsn: str, service: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    monkeypatch.setenv("LGR_DRAIN_DIR", str(service))
    sys.path.insert(0, str(HERE / "scripts"))
    import drain_graph

    with ResilientPostgresSaver.from_conn_string(dsn) as saver:
        run_id = Worker(drain_graph.builder, checkpointer=saver).submit({"done": []})
        record = saver.read_run(run_id)
        assert record is not None
        return run_id, record.thread_id


def sigterm_mid_run(
    proxy: TcpProxy, child: subprocess.Popen[str], service: Path, heal_after: float | None
) -> tuple[float, str, str]:
    """Once the worker is in step b: blackhole, SIGTERM (heal ``heal_after`` s
    later, if given); the seconds from SIGTERM to the process's exit, its output."""
    try:
        wait_until(lambda: (service / "slow-b").exists(), 60, "the worker to reach step b")
        proxy.blackhole()
        time.sleep(0.3)
        sent = time.monotonic()
        child.send_signal(signal.SIGTERM)
        if heal_after is not None:
            time.sleep(heal_after)
            proxy.heal()
        out, err = child.communicate(timeout=DRAIN_TIMEOUT + SLACK + 60)
        return time.monotonic() - sent, out, err
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def partitioned_drain(
    pg_server: PgServer,
    db: str,
    service: Path,
    monkeypatch: pytest.MonkeyPatch,
    lease: str,
    heal_after: float | None,
) -> tuple[str, str, subprocess.Popen[str], tuple[float, str, str], tuple[str, int, int]]:
    """A run submitted, then a worker process (the command line, ``lease`` s leases)
    behind a proxy, partitioned and SIGTERMed mid-run (`sigterm_mid_run`): the run,
    its thread, the process, what `sigterm_mid_run` says, and the run's row read
    past the proxy as the block ends (the partition goes on unless healed)."""
    run_id, thread = submit(db, service, monkeypatch)
    with TcpProxy(pg_server.port) as proxy:
        child = cli(
            service,
            "--db", proxy.dsn(db), "--lease-ttl", lease, "--drain-timeout", str(DRAIN_TIMEOUT),
        )  # fmt: skip
        ended = sigterm_mid_run(proxy, child, service, heal_after)
        return run_id, thread, child, ended, row(db, run_id)


def ended_elsewhere_once(
    db: str, service: Path, run_id: str, thread: str, lease: str, first_pid: int, trial: int
) -> None:
    """A second worker ends the run ``success``, the effect called once, by it."""
    finished, done = finish_elsewhere(db, service, run_id, lease)
    report(f"trial {trial}: the second worker ended it in {finished:.2f} s (lease {lease} s)")
    assert done == {run_id: "success"}
    assert_effect_once(service, first_pid)
    assert_no_fork("postgres", db, thread)


def finish_elsewhere(
    dsn: str, service: Path, run_id: str, lease: str
) -> tuple[float, dict[str, Any]]:
    """A second worker (the command line, straight to the server) until idle."""
    started = time.monotonic()
    second = cli(service, "--db", dsn, "--lease-ttl", lease, "--until-idle")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    return time.monotonic() - started, left_of(out)


def assert_effect_once(service: Path, first_pid: int) -> None:
    called = read_ledger(service / "calls.log")
    assert len(called) == 1, called  # the run's one effect, called once
    assert int(called[0][1]) != first_pid  # by the second worker, never the stale one


@pytest.mark.faults
@pytest.mark.crash
@pytest.mark.timeout(300)
@pytest.mark.parametrize("trial", range(RUNS))
def test_a_partitioned_worker_exits_within_its_drain_timeout_and_its_run_is_taken_over(
    pg_server: PgServer, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trial: int
) -> None:
    lease = "2"
    run_id, thread, child, (took, out, err), left_status = partitioned_drain(
        pg_server, db, tmp_path, monkeypatch, lease, heal_after=None
    )
    report(f"trial {trial}: exit {took:.2f} s after SIGTERM (rc {child.returncode}), drain "
           f"timeout {DRAIN_TIMEOUT:g} s, bound {DRAIN_TIMEOUT + SLACK:g} s")  # fmt: skip
    assert child.returncode == LEFT_BEHIND, err[-2000:]
    assert took <= DRAIN_TIMEOUT + SLACK, f"exited {took:.2f} s after SIGTERM\n{err[-2000:]}"
    assert left_of(out) == {run_id: "running"}  # the store could not take it back
    assert left_status == ("running", 1, 0)  # left to its lease
    ended_elsewhere_once(db, tmp_path, run_id, thread, lease, child.pid, trial)
    assert row(db, run_id) == ("success", 2, 1)  # taken over, fenced: a new token


@pytest.mark.faults
@pytest.mark.crash
@pytest.mark.timeout(300)
@pytest.mark.parametrize("trial", range(RUNS))
def test_a_partition_that_heals_during_the_drain_gives_the_run_back_queued(
    pg_server: PgServer, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trial: int
) -> None:
    lease = "6"  # the lease outlives the partition: the run is given back, not expired
    run_id, thread, child, (took, out, err), _ = partitioned_drain(
        pg_server, db, tmp_path, monkeypatch, lease, heal_after=DRAIN_TIMEOUT / 2
    )
    report(f"trial {trial}: healed {DRAIN_TIMEOUT / 2:g} s into the drain; exit {took:.2f} s "
           f"after SIGTERM (rc {child.returncode})")  # fmt: skip
    assert child.returncode == LEFT_BEHIND, err[-2000:]  # its step b still slept
    assert took <= DRAIN_TIMEOUT + SLACK, f"exited {took:.2f} s after SIGTERM\n{err[-2000:]}"
    assert left_of(out) == {run_id: "queued"}, err[-2000:]
    status, token, recoveries = row(db, run_id)
    assert (status, recoveries) == ("queued", 0)  # given back: for another worker at once
    ended_elsewhere_once(db, tmp_path, run_id, thread, lease, child.pid, trial)
    assert row(db, run_id)[:2] == ("success", token + 1)


# -- 3. a Worker embedded in a program: a bounded return ---------------------------------------


@pytest.mark.faults
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_embedded_worker_returns_within_its_drain_timeout_while_partitioned(
    pg_server: PgServer, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """`run` / `arun` (the library: no ``os._exit``) return within ``drain_timeout``
    + `SLACK` of `drain` while the store is blackholed, say what they left behind,
    and leave the run to its lease; healed, another worker ends it, effect once."""
    import asyncio

    from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver

    monkeypatch.setenv("LGR_DRAIN_SLOW", "6")  # the stale step ends soon after the test
    run_id, thread = submit(db, tmp_path, monkeypatch)
    import drain_graph

    lease = 2.0
    with TcpProxy(pg_server.port) as proxy:
        left: dict[str, str] = {}
        behind: tuple[str, ...] = ()

        def drain_when_in_b(worker: Worker) -> float:
            wait_until(lambda: (tmp_path / "slow-b").exists(), 60, "the worker to reach step b")
            proxy.blackhole()
            time.sleep(0.3)
            worker.drain("test: SIGTERM")
            return time.monotonic()

        if mode == "sync":
            with ResilientPostgresSaver.from_conn_string(proxy.dsn(db)) as saver:
                worker = Worker(
                    drain_graph.builder, checkpointer=saver, lease_ttl=lease,
                    drain_timeout=DRAIN_TIMEOUT, poll_interval=0.05,
                )  # fmt: skip
                drainer, asked = in_thread(drain_when_in_b, worker)
                left = worker.run()
                drainer.join(5)
                took = time.monotonic() - asked["result"]
                assert took <= DRAIN_TIMEOUT + SLACK, f"run returned {took:.2f} s after drain()"
                behind = worker.left_behind
                proxy.heal()  # the saver's close flushes through it
        else:

            async def main() -> float:
                nonlocal left, behind
                async with AsyncResilientPostgresSaver.from_conn_string(proxy.dsn(db)) as saver:
                    worker = Worker(
                        drain_graph.builder, checkpointer=saver, lease_ttl=lease,
                        drain_timeout=DRAIN_TIMEOUT, poll_interval=0.05,
                    )  # fmt: skip
                    asked = asyncio.get_running_loop().run_in_executor(
                        None, drain_when_in_b, worker
                    )
                    left = await worker.arun()
                    took = time.monotonic() - await asked
                    assert took <= DRAIN_TIMEOUT + SLACK, (
                        f"arun returned {took:.2f} s after drain()"
                    )
                    behind = worker.left_behind
                    proxy.heal()
                    return took

            took = asyncio.run(main())
        report(f"{mode}: run returned {took:.2f} s after drain(), left behind {behind}")
        assert took <= DRAIN_TIMEOUT + SLACK, took
        assert left == {run_id: "running"}
        assert f"run {run_id}" in behind
        assert row(db, run_id)[:2] == ("running", 1)
    with ResilientPostgresSaver.from_conn_string(db) as direct:
        second = Worker(
            drain_graph.builder, checkpointer=direct, lease_ttl=lease, poll_interval=0.05
        )
        assert second.run() == {run_id: "success"}
    assert row(db, run_id) == ("success", 2, 1)
    assert len(read_ledger(tmp_path / "calls.log")) == 1
    assert_no_fork("postgres", db, thread)


# -- the pure parts ----------------------------------------------------------------------------


def test_the_loop_stops_waiting_for_a_store_call_at_the_drains_end_after_a_grace() -> None:
    from langgraph_resilience.worker._steps import ANSWER_GRACE, STORE_SLICE, store_wait

    assert store_wait(100.0, 0.0, None) == STORE_SLICE  # no drain: wait on
    assert store_wait(10.0, 0.0, 10.5) == STORE_SLICE
    assert store_wait(10.45, 0.0, 10.5) == pytest.approx(0.05)
    assert store_wait(10.5, 0.0, 10.5) is None  # the drain's end: stop waiting
    # begun just before the drain's end: still given ANSWER_GRACE to answer
    assert store_wait(10.5, 10.4, 10.5) == STORE_SLICE
    assert store_wait(10.4 + ANSWER_GRACE, 10.4, 10.5) is None


def test_exit_bound_is_the_drain_timeout_a_poll_and_one_store_call(db: str) -> None:
    from langgraph_resilience.checkpoint.postgres import PgTimeouts
    from langgraph_resilience.policy import Backoff

    sys.path.insert(0, str(HERE / "scripts"))
    import drain_graph

    timeouts = PgTimeouts(connect=2, statement=0.5, read=1.0)
    retry = Backoff(max_attempts=2, initial_interval=0.1, max_interval=0.1, jitter="none")
    with ResilientPostgresSaver.from_conn_string(db, timeouts=timeouts, store_retry=retry) as s:
        worker = Worker(
            drain_graph.builder, checkpointer=s, drain_timeout=2, poll_interval=0.5
        )  # 2 + 0.5 + two tries of (5 s checkout or 2 s connect, + 1 s read), 0.1 s apart
        assert worker.exit_bound == pytest.approx(2 + 0.5 + 2 * (5 + 1) + 0.1)


def test_the_watchdog_ends_a_process_still_running_past_its_exit_bound(tmp_path: Path) -> None:
    """The ``worker`` command's last resort: past ``exit_bound`` + `GRACE` after a
    drain was asked for, its process exits with code 75, whatever it waits for."""
    script = tmp_path / "stuck.py"
    script.write_text(
        "import threading, time\n"
        "from langgraph_resilience.cli._exit import watchdog\n"
        "class Stuck:\n"
        "    worker_id = 'stuck'\n"
        "    exit_bound = 0.5\n"
        "    def wait_for_drain(self, timeout=None):\n"
        "        return True\n"
        "threading.Thread(target=time.sleep, args=(60,)).start()  # joined at exit\n"
        "with watchdog(Stuck()):\n"
        "    time.sleep(60)\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert done.returncode == LEFT_BEHIND, done.stderr
    assert took < 30, took  # not the 60 s it waited for (the interpreter's start included)
