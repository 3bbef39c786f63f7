"""A plain run (a user's ``graph.invoke``, no `Worker`) whose process was
SIGKILLed reads ``stale`` in `list_runs`, the ``runs`` command and the console's
runs list, while a live one does not; a resume in another process holds it
again. The run's row names its process (``holder``) and when it was last seen
(``seen_at``, schema version 3): SQLite and Postgres, sync and async."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import read_ledger, wait_until
from langgraph.types import Command, interrupt
from plain_run import graph_of
from spawn import spawn
from starlette.testclient import TestClient

from langgraph_resilience._util._process import process_id
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.runlog._liveness import STALE_AFTER, plain_run_stale
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.history import list_runs
from langgraph_resilience.server import console_app

SCRIPT = str(Path(__file__).parent / "scripts" / "plain_run.py")


@pytest.fixture(params=["sqlite", "sqlite-async", "postgres", "postgres-async"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, bool, str]]:
    backend, _, mode = request.param.partition("-")
    if backend == "postgres":
        target = request.getfixturevalue("pg_dsn")
    else:
        target = str(tmp_path / "runs.db")
    with _cls(backend).from_conn_string(target) as saver:
        saver.setup()
    yield backend, mode == "async", target


def _cls(backend: str) -> Any:
    return ResilientSqliteSaver if backend == "sqlite" else ResilientPostgresSaver


def _listed(saver: Any, thread: str) -> Any:
    [found] = [r for r in list_runs(saver) if r.thread_id == thread]
    return found


def _console_marks(saver: Any, thread: str) -> set[str]:
    with TestClient(console_app(saver)) as client:
        page = client.get("/runs").text
    for row in re.findall(r'<tr class="run"[^>]*data-marks="([^"]*)">(.*?)</tr>', page, re.S):
        if f">{thread}</a>" in row[1]:
            return set(row[0].split())
    raise AssertionError(f"{thread} not in the runs list")


def test_a_plain_run_whose_process_was_killed_is_stale(
    store: tuple[str, bool, str], tmp_path: Path
) -> None:
    backend, is_async, target = store
    ledger = tmp_path / "ledger.txt"
    thread = f"killed-{backend}-{int(is_async)}"
    flags = ["--async"] if is_async else []
    child = spawn(SCRIPT, backend, target, thread, str(ledger), *flags)
    try:
        wait_until(
            lambda: any(w[0] == "slow" for w in read_ledger(ledger)), 60, "the slow node to start"
        )
        with _cls(backend).from_conn_string(target) as saver:
            live = _listed(saver, thread)
            assert (live.status, live.stale) == ("running", False)  # its process runs
            assert "stale" not in _console_marks(saver, thread)
            row = saver.history.run_row(thread, 1)
            assert row.holder is not None and row.holder.split("|")[1] == str(child.pid)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.communicate(timeout=15)
    with _cls(backend).from_conn_string(target) as saver:
        dead = _listed(saver, thread)
        assert (dead.status, dead.stale) == ("running", True)
        assert "stale" in _console_marks(saver, thread)
        out, err = _runs_command(target)
        assert re.search(rf"{thread} .*running \(stale\)", out), (out, err)
        # Resumed in this process: held by it, no longer stale while it runs.
        seen: list[Any] = []

        def watching(name: str) -> None:
            if name == "slow":
                seen.append(_listed(saver, thread))

        graph = graph_of(watching).compile(checkpointer=saver)
        out = graph.invoke(None, {"configurable": {"thread_id": thread}})
        assert out["done"] == ["fast", "slow"]
        assert [(s.status, s.stale) for s in seen] == [("running", False)]
        assert saver.history.run_row(thread, 1).holder == process_id()
        assert _listed(saver, thread).stale is False


def test_a_paused_run_resumed_in_another_process_is_held_by_it(
    store: tuple[str, bool, str], tmp_path: Path
) -> None:
    """Its first process paused it and exited; resumed here, it is this process's."""
    backend, is_async, target = store
    thread = f"asked-{backend}-{int(is_async)}"
    flags = ["--async"] if is_async else []
    child = spawn(SCRIPT, backend, target, thread, str(tmp_path / "ledger.txt"), "--ask", *flags)
    assert child.wait(timeout=60) == 0, child.communicate()
    with _cls(backend).from_conn_string(target) as saver:
        assert _listed(saver, thread).status == "paused"
        seen: list[Any] = []

        def watching(name: str) -> None:
            if name == "slow":
                interrupt("go on?")
                seen.append(_listed(saver, thread))

        graph = graph_of(watching).compile(checkpointer=saver)
        out = graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": thread}})
        assert out["done"] == ["fast", "slow"]
        assert [(s.status, s.stale) for s in seen] == [("running", False)]


def _runs_command(target: str) -> tuple[str, str]:
    """``langgraph-resilience runs --db TARGET``'s output (run in this process)."""
    import contextlib
    import io

    from langgraph_resilience import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        cli.main(["runs", "--db", target])
    return out.getvalue(), err.getvalue()


def test_a_holder_on_another_machine_is_stale_only_when_not_seen_for_long() -> None:
    other = "elsewhere~boot~ns|123|456|"
    never = lambda h: None  # noqa: E731 (another machine: this one cannot tell)
    seen = (1000.0, None)
    assert not plain_run_stale("running", other, seen, 1000.0 + STALE_AFTER - 1, never)
    assert plain_run_stale("running", other, seen, 1000.0 + STALE_AFTER + 1, never)
    assert not plain_run_stale("success", other, seen, 10**9, never)
    assert not plain_run_stale("running", None, seen, 10**9, never)  # no holder: a Worker's
    # This host, another boot: gone whatever the time.
    here = "myhost~boot-now~ns"
    rebooted = "myhost~boot-before~ns|123|456|"
    assert plain_run_stale("running", rebooted, seen, 1001.0, never, here=here)
    assert not plain_run_stale("running", "myhost~boot-now~other|1|2|", seen, 1001.0, never, here)
    assert not plain_run_stale("running", "myhost~|1|2|", seen, 1001.0, never, here)  # not Linux
    # This machine: the process's own verdict wins.
    assert plain_run_stale("running", other, seen, 1001.0, lambda h: False)
    assert not plain_run_stale("running", other, seen, 10**9, lambda h: True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
