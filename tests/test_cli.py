"""The ``langgraph-resilience`` command, end to end in real processes, on SQLite,
Postgres and Redis: every subcommand, ``--json`` parsed, exit codes, and the three
errors an operator meets (unknown thread, unreachable store, store not set up)
as one line on stderr with exit code 2.

Most calls run in forked children (`spawn`: a real process whose imports are
already done); the console script itself runs once as a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cli_graph
import psycopg
import pytest
from conftest import require_postgres
from helpers import read_ledger
from redis_servers import REDIS_DOWN, REDIS_URL, flush_prefix
from spawn import spawn

from langgraph_resilience import ConfigError, Worker, cli
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

CLI = str(Path(cli.__file__))
GRAPH = "cli_graph:builder"
TESTS = Path(__file__).parent / "scripts"  # where cli_graph is: --graph cli_graph:builder


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def one_error_line(self, *words: str) -> None:
        """Exit code 2 and a single line on stderr, holding ``words``."""
        assert self.code == 2, (self.code, self.out, self.err)
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, self.err
        assert lines[0].startswith("langgraph-resilience: error: "), lines[0]
        for word in words:
            assert word in lines[0], (word, lines[0])


def run(*args: str, timeout: float = 60, fresh: bool = False) -> Result:
    """The command, in a forked child of this process (``fresh``: a new interpreter).

    A command that reaches an object store runs ``fresh``: once this process has
    used obstore (the archive tests), a forked child inherits its Rust runtime
    without the runtime's threads, and its first call waits forever.
    """
    if fresh:
        done = subprocess.run(
            [sys.executable, CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=TESTS
        )
        return Result(done.returncode, done.stdout, done.stderr)
    proc = spawn(CLI, *args)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode is not None
    return Result(proc.returncode, out, err)


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(backend, --db): a SQLite file path, this module's Postgres database, or the
    tests' Redis under a key prefix of the test's own (``redis://...#prefix``)."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "store.db")
    elif request.param == "postgres":
        require_postgres()
        yield "postgres", request.getfixturevalue("pg_dsn")
    else:
        if REDIS_DOWN:
            pytest.skip(REDIS_DOWN)
        prefix = f"cli{uuid.uuid4().hex[:8]}"
        yield "redis", f"{REDIS_URL}#{prefix}"
        flush_prefix(prefix)


@contextmanager
def saver_of(backend: str, db: str) -> Iterator[Any]:
    if backend == "redis":
        from langgraph_resilience.checkpoint.redis import ResilientRedisSaver

        url, _, prefix = db.partition("#")
        with ResilientRedisSaver.from_conn_string(url, prefix=prefix) as saver:
            yield saver
        return
    cls = ResilientSqliteSaver if backend == "sqlite" else ResilientPostgresSaver
    with cls.from_conn_string(db) as saver:
        yield saver


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where cli_graph's steps (in the children too) note ``<node> <pid>``."""
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("LGR_CLI_LEDGER", str(path))
    return path


def steps_in(ledger: Path, pid: int) -> list[str]:
    return [node for node, p in read_ledger(ledger) if int(p) == pid]


# -- every subcommand, both dialects ------------------------------------------------------


def test_every_subcommand_end_to_end(store: tuple[str, str], ledger: Path) -> None:
    backend, db = store
    tag = uuid.uuid4().hex[:6]
    names = ("ok", "fail", "stop", "ask", "queue")
    t_ok, t_fail, t_stopped, t_ask, t_queued = (f"{tag}-{n}" for n in names)

    assert run("setup", "--db", db).code == 0
    with saver_of(backend, db) as saver:
        submitter = Worker(cli_graph.builder, checkpointer=saver)
        ok_run = submitter.submit({"fix": "ok"}, thread_id=t_ok)
        fail_run = submitter.submit({}, thread_id=t_fail)
        # A thread stopped before its last step, as a crash leaves it.
        graph = cli_graph.builder.compile(checkpointer=saver)
        graph.invoke({"fix": "ok"}, cfg(t_stopped), interrupt_before=["c"])
        graph.invoke({"fix": "ok", "ask": True}, cfg(t_ask))  # paused: c asks

    # worker: runs the queued runs to their end, --until-idle, --json.
    worked = run("worker", "--db", db, "--graph", GRAPH, "--until-idle", "--json")
    assert worked.code == 0, worked.err
    assert worked.json()["runs"] == {ok_run: "success", fail_run: "partial_complete"}

    # runs: newest first, filtered by status, as JSON and as a table.
    partial = run("runs", "--db", db, "--status", "partial_complete", "--json")
    assert partial.code == 0, partial.err
    mine = [r for r in partial.json() if r["thread_id"].startswith(tag)]
    assert [(r["thread_id"], r["run_id"], r["status"]) for r in mine] == [
        (t_fail, fail_run, "partial_complete")
    ]
    assert {"attempts", "recoveries", "owner", "updated"} <= set(mine[0])
    table = run("runs", "--db", db)
    assert table.code == 0 and t_ok in table.out and t_fail in table.out

    # resume: the stopped thread runs its last step only.
    resumed = run("resume", t_stopped, "--db", db, "--graph", GRAPH, "--json")
    assert resumed.code == 0, resumed.err
    assert resumed.json() == [{"thread_id": t_stopped, "status": "success", "detail": ""}]
    with saver_of(backend, db) as saver:
        graph = cli_graph.builder.compile(checkpointer=saver)
        assert graph.get_state(cfg(t_stopped)).values["done"] == ["a", "b", "c"]

    # resume --value: the paused thread's interrupt gets the answer.
    answered = run("resume", t_ask, "--db", db, "--graph", GRAPH, "--value", '"yes"', "--json")
    assert answered.code == 0, answered.err
    assert answered.json()[0]["status"] == "success"
    with saver_of(backend, db) as saver:
        graph = cli_graph.builder.compile(checkpointer=saver)
        assert graph.get_state(cfg(t_ask)).values["done"] == ["a", "b", "c:yes"]

    # retry without the fix: still a partial result, exit 1, the reason shown.
    again = run("retry", t_fail, "--db", db, "--graph", GRAPH, "--json")
    assert again.code == 1
    [acted] = again.json()
    assert acted["status"] == "partial_complete" and "fix='ok'" in acted["detail"]
    # retry with the fix: only b and c run, in that process.
    fixed = run("retry", t_fail, "--db", db, "--graph", GRAPH, "--update", '{"fix": "ok"}')
    assert fixed.code == 0, fixed.err
    assert "success" in fixed.out
    a_runs = [node for node, _ in read_ledger(ledger) if node == "a"]
    assert len(a_runs) == 4  # once per thread: never again on resume or retry
    # Threads with nothing to retry are skipped, saying why (exit 1); several
    # threads get a progress display on stderr.
    skipped = run("retry", t_ok, t_stopped, "--db", db, "--graph", GRAPH)
    assert skipped.code == 1
    assert "retrying" in skipped.err and "2/2" in skipped.err
    for thread in (t_ok, t_stopped):
        [row] = [line for line in skipped.out.splitlines() if thread in line]
        assert "skipped" in row and "no failed step" in row

    # show: the report of the retried run, as JSON (with its Mermaid) and as text.
    shown = run("show", t_fail, "--db", db, "--json")
    assert shown.code == 0, shown.err
    report = shown.json()
    assert (report["thread_id"], report["run_id"], report["status"]) == (
        t_fail,
        fail_run,
        "success",
    )
    assert [s["path"] for s in report["steps"]] == ["a", "b", "c"]
    assert "flowchart" in report["mermaid"]
    text = run("show", t_fail, "--db", db)
    assert text.code == 0 and t_fail in text.out
    drawn = run("show", t_fail, "--db", db, "--mermaid", "--graph", GRAPH)
    assert drawn.code == 0 and drawn.out.startswith("flowchart")
    run("show", "no-such-thread", "--db", db).one_error_line("no-such-thread")

    # metrics: the four figures and their counts.
    figures = run("metrics", "--db", db, "--since", "1h", "--json")
    assert figures.code == 0, figures.err
    m = figures.json()
    for name in (
        "partial_completion_rate",
        "checkpoint_save_success_rate",
        "recovery_success_rate",
        "steps_redone_per_recovery",
    ):
        assert m[name] is None or m[name] >= 0, (name, m)
    # Four runs ended, none short (t_fail's partial result was retried); recovered:
    # the stopped thread (a crash resume), the paused one (a human's answer), and
    # t_fail twice (two retry_failed).
    assert (m["runs_ended"], m["runs_partial"], m["partial_completion_rate"]) == (4, 0, 0.0)
    by_kind = m["recoveries_by_kind"]
    assert (by_kind["crash"], by_kind["human"], by_kind["retry_failed"]) == (1, 1, 2)
    assert "partial_completion_rate" in run("metrics", "--db", db).out
    run("metrics", "--db", db, "--since", "last tuesday").one_error_line("--since")

    # cancel: a queued run ends cancelled; a second cancel finds it ended (exit 2).
    with saver_of(backend, db) as saver:
        queued = Worker(cli_graph.builder, checkpointer=saver).submit({}, thread_id=t_queued)
    cancelled = run("cancel", queued, "--db", db, "--reason", "not needed", "--json")
    assert cancelled.code == 0, cancelled.err
    assert cancelled.json() == {
        "run_id": queued,
        "was": "queued",
        "status": "cancelled",
        "reason": "not needed",
    }
    run("cancel", queued, "--db", db).one_error_line(queued, "cancelled")
    with saver_of(backend, db) as saver:
        assert saver.read_run(queued).status == "cancelled"

    # An unknown thread: one line, exit 2, nothing done.
    run("resume", "no-such-thread", "--db", db, "--graph", GRAPH).one_error_line(
        "no thread 'no-such-thread'"
    )


# -- the three errors, and the store from LGR_DB -------------------------------------------


def test_sqlite_store_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = str(tmp_path / "typo.db")
    run("cancel", "r1", "--db", missing).one_error_line("no SQLite database", "typo.db")
    assert not Path(missing).exists()  # a read never creates a store
    blank = tmp_path / "blank.db"
    sqlite3.connect(blank).execute("CREATE TABLE unrelated (x)").connection.close()
    monkeypatch.setenv("LGR_DB", str(blank))  # the store from the environment
    run("cancel", "r1").one_error_line("no resilience tables", "langgraph-resilience setup")
    (tmp_path / "notes.txt").write_text("not a database, but long enough to be read as one\n" * 9)
    run("runs", "--db", str(tmp_path / "notes.txt")).one_error_line("not a SQLite database")
    monkeypatch.delenv("LGR_DB")
    run("cancel", "r1").one_error_line("--db", "LGR_DB")


def test_postgres_store_errors(pg_dsn: str) -> None:
    down = "postgresql://postgres@127.0.0.1:1/postgres"
    run("cancel", "r1", "--db", down).one_error_line("cannot connect", "port=1")
    # A schema of its own, never set up: the store a fresh database would be.
    blank = f"blank_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{blank}"')
    failed = run("cancel", "r1", "--db", f"{pg_dsn} password=s3cret options=-csearch_path={blank}")
    failed.one_error_line("no resilience tables", "langgraph-resilience setup")
    assert "s3cret" not in failed.err


def test_a_graph_that_cannot_be_loaded_is_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    assert run("setup", "--db", db).code == 0
    with ResilientSqliteSaver.from_conn_string(db) as saver:
        cli_graph.builder.compile(checkpointer=saver).invoke({"fix": "ok"}, cfg("t"))
    run("retry", "t", "--db", db, "--graph", "cli_graph").one_error_line("module:attribute")
    run("retry", "t", "--db", db, "--graph", "nope_mod:g").one_error_line("cannot import")
    run("retry", "t", "--db", db, "--graph", "cli_graph:not_a_graph").one_error_line("not a graph")


# -- the worker drains on SIGTERM -----------------------------------------------------------


def test_worker_drains_on_sigterm_and_releases_its_run(tmp_path: Path, ledger: Path) -> None:
    db = str(tmp_path / "runs.db")
    with ResilientSqliteSaver.from_conn_string(db) as saver:
        run_id = Worker(cli_graph.builder, checkpointer=saver).submit({"fix": "ok", "slow": 1.0})
    proc = spawn(CLI, "worker", "--db", db, "--graph", GRAPH, "--lease-ttl", "10", "--json")
    deadline = time.monotonic() + 30
    while not steps_in(ledger, proc.pid):  # step a has started: 1 s of work
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert json.loads(out)["runs"] == {run_id: "queued"}  # released, not lost
    assert steps_in(ledger, proc.pid) == ["a"]  # a finished; b never started
    with ResilientSqliteSaver.from_conn_string(db) as saver:
        record = saver.read_run(run_id)
        assert record is not None and record.status == "queued"


def test_worker_durability_sets_how_each_run_stores_its_steps(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    with ResilientSqliteSaver.from_conn_string(db) as saver:
        own = Worker(cli_graph.builder, checkpointer=saver).submit({"fix": "ok"}, thread_id="own")
    # Unset: the graph's own ("sync" for a ResilientStateGraph), a checkpoint per step.
    worked = run("worker", "--db", db, "--graph", GRAPH, "--until-idle", "--json")
    assert worked.code == 0 and worked.json()["runs"] == {own: "success"}, worked.err
    with ResilientSqliteSaver.from_conn_string(db) as saver:
        at_exit = Worker(cli_graph.builder, checkpointer=saver).submit(
            {"fix": "ok"}, thread_id="at-exit"
        )
    worked = run(
        "worker", "--db", db, "--graph", GRAPH, "--durability", "exit", "--until-idle", "--json"
    )
    assert worked.code == 0 and worked.json()["runs"] == {at_exit: "success"}, worked.err
    with ResilientSqliteSaver.from_conn_string(db) as saver:
        graph = cli_graph.builder.compile(checkpointer=saver)
        for thread in ("own", "at-exit"):
            assert graph.get_state(cfg(thread)).values["done"] == ["a", "b", "c"]
        per_step = len(list(saver.list(cfg("own"))))
        exit_only = len(list(saver.list(cfg("at-exit"))))
    assert per_step >= 4 and exit_only < per_step, (per_step, exit_only)
    bad = run("worker", "--db", db, "--graph", GRAPH, "--durability", "never")
    assert bad.code == 2 and "sync" in bad.err and "exit" in bad.err, bad.err


def test_retry_leaves_a_workers_run_alone(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    with ResilientSqliteSaver.from_conn_string(db) as saver:
        worker = Worker(cli_graph.builder, checkpointer=saver)
        graph = cli_graph.builder.compile(checkpointer=saver)
        for thread in ("taken", "queued"):
            graph.invoke({}, cfg(thread))  # a partial result, then a new turn for a worker
        taken = worker.submit({"fix": "ok"}, thread_id="taken")
        saver.runs.claim("dead-worker", 1, 0.01)  # claimed; its lease runs out at once
        queued = worker.submit({"fix": "ok"}, thread_id="queued")
    time.sleep(0.05)
    acted = run("retry", "taken", "queued", "--db", db, "--graph", GRAPH, "--json").json()
    assert [a["status"] for a in acted] == ["skipped", "skipped"]
    assert taken in acted[0]["detail"] and "lease ran out" in acted[0]["detail"]
    assert queued in acted[1]["detail"] and "is queued" in acted[1]["detail"]


# -- the console script, as installed ------------------------------------------------------


def test_console_script_runs_and_no_command_prints_help() -> None:
    script = Path(sys.executable).parent / "langgraph-resilience"
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=60, cwd=TESTS)
    assert done.returncode == 2
    for command in ("resume", "retry", "worker", "cancel", "demo", "setup"):
        assert command in done.stdout + done.stderr


# -- the checkpoint lifecycle ---------------------------------------------------------------


def test_archive_and_prune_from_the_command_line(tmp_path: Path, ledger: Path) -> None:
    db, cold = str(tmp_path / "runs.db"), f"file://{tmp_path}/cold"
    assert run("setup", "--db", db).code == 0
    with saver_of("sqlite", db) as saver:
        graph = cli_graph.builder.compile(checkpointer=saver)
        for _ in range(3):  # three runs on one thread: history to prune
            graph.invoke({"fix": "ok"}, cfg("long"))
        graph.invoke({"fix": "ok"}, cfg("idle"))
        kept = len(list(saver.list(cfg("long"))))

    # prune: refuses to guess; keeps each namespace's newest N.
    run("prune", "--db", db).one_error_line("say what to prune")
    pruned = run("prune", "--db", db, "--keep-last", "2", "--thread", "long", "--json")
    assert pruned.code == 0, pruned.err
    assert pruned.json() == {"checkpoints": kept - 2, "runs": 0}

    # archive: every idle thread goes to the cold tier; the store keeps none of it.
    run("archive", "--db", db, "--older-than", "soon", "--archive", cold).one_error_line(
        "--older-than takes a duration"
    )
    done = run("archive", "--db", db, "--older-than", "0s", "--archive", cold, "--json", fresh=True)
    assert done.code == 0, done.err
    assert sorted(done.json()["archived"]) == ["idle", "long"] and not done.json()["failed"]
    # Opened without the archive: refused, not taken for a new thread.
    with saver_of("sqlite", db) as saver, pytest.raises(ConfigError, match="archive"):
        saver.get_tuple(cfg("idle"))
    # show with LGR_ARCHIVE restores the thread first.
    shown = run_with_env({"LGR_ARCHIVE": cold}, "show", "idle", "--db", db, "--json", fresh=True)
    assert shown.code == 0, shown.err
    assert shown.json()["status"] == "success"


def run_with_env(env: dict[str, str], *args: str, fresh: bool = False) -> Result:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return run(*args, fresh=fresh)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
