"""The demo, told on one SQLite file in a few seconds (or on the store ``--db``
names: a Postgres DSN, a ``redis://`` URL under a key prefix of its own).

1. A run of the research pipeline (`demo.pipeline`) is submitted to the store.
2. A worker process (``langgraph-resilience worker``) runs it: ``search``
   recovers from two dropped connections, ``extract``'s prose is rejected and
   asked again colder, ``enrich`` takes its fallback, ``draft`` writes the report,
   ``notify`` emails it — and while the mail server is slow to acknowledge, the
   worker is killed with SIGKILL.
3. A second worker process takes the run over once the first one's lease has run
   out: the finished steps are not run again; ``notify`` is, but the email is not
   sent again (the ledger's intent is reconciled with the outbox); ``publish`` is
   refused for good by the team wiki and the run ends with a partial result.
4. The fix: ``retry_failed(graph, config, update={"publish_to": ...})`` runs
   ``publish`` alone, and the run succeeds.

Then the demo prints what ran where, the run's steps and its outcome, and checks
its claims: it exits 1 if one does not hold (the email sent twice, a finished
step run again, a wrong outcome).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from rich.table import Table

from langgraph_resilience.cli._render import out_console
from langgraph_resilience.cli._reports import print_metrics
from langgraph_resilience.cli._store import (
    REDIS_SCHEMES,
    CliError,
    Store,
    is_postgres,
    open_store,
    thread_exists,
)
from langgraph_resilience.cli.demo.evidence import (
    ORDER,
    Runner,
    check,
    ran_by,
    read_evidence,
)
from langgraph_resilience.cli.demo.pipeline import (
    DIR_ENV,
    FIXED_TARGET,
    SLOW_ACK_ENV,
    TOPIC,
    builder,
    read_lines,
    steps_log,
)
from langgraph_resilience.graph._retry_failed import retry_failed
from langgraph_resilience.history._metrics import recovery_metrics
from langgraph_resilience.history._report import run_report
from langgraph_resilience.worker._worker import Worker

__all__ = ["run_demo"]

THREAD = "research-1"
GRAPH = "langgraph_resilience.cli.demo.pipeline:builder"
LEASE_TTL = 4.0  # seconds: how soon the second worker may take the run over (room for a busy CI)
SLOW_ACK = 60.0  # the mail server's ack in the first worker: the kill window
TIMEOUT = 40.0  # for each wait
LOGGER_MARK = " langgraph_resilience: "  # a line the library logged


class DemoFailed(Exception):
    """The demo could not run, or one of its claims did not hold."""


class Scene:
    """The demo's directory, its store, and how to talk to the reader."""

    def __init__(self, directory: Path, db: str | None = None) -> None:
        self.dir = directory
        self.db = db or str(directory / "research.db")
        if self.db.startswith(REDIS_SCHEMES) and "#" not in self.db:
            self.db += f"#lgr-demo-{uuid.uuid4().hex[:8]}"  # keys of the demo's own
        self.out = out_console()

    @contextmanager
    def store(self, *, setup: bool = False) -> Iterator[Store]:
        """The demo's store, opened as the command line opens it."""
        with open_store(self.db, setup=setup, redis_ok=True) as store:
            if setup and store.dialect == "redis":
                store.saver.setup()
            yield store

    @property
    def where(self) -> str:
        """The store, as the reader types it (a password masked)."""
        scheme, sep, rest = self.db.partition("://")
        user, at, host = rest.rpartition("@")
        if not sep or not at or ":" not in user:
            return self.db
        return f"{scheme}://{user.split(':', 1)[0]}:***@{host}"

    def say(self, text: str) -> None:
        self.out.print(text, soft_wrap=True)

    def env(self, slow_ack: float) -> dict[str, str]:
        return {**os.environ, DIR_ENV: str(self.dir), SLOW_ACK_ENV: str(slow_ack)}

    def logged(self, name: str) -> None:
        """What the library logged in a worker (its failed tries, fallbacks, ...)."""
        text = (self.dir / name).read_text(encoding="utf-8", errors="replace")
        for line in text.splitlines():
            if LOGGER_MARK in line:
                self.out.print(
                    "     " + line.split(LOGGER_MARK, 1)[1], soft_wrap=True, markup=False
                )

    def log_tail(self, name: str) -> str:
        try:
            text = (self.dir / name).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return "    (no output)"
        return "\n".join("    " + line for line in text.strip().splitlines()[-20:])


# -- the acts ----------------------------------------------------------------------------


def submit(scene: Scene) -> str:
    with scene.store(setup=True) as store:
        if thread_exists(store.saver, THREAD):
            raise CliError(
                f"{scene.where} already holds a thread {THREAD!r} (an earlier demo?): "
                "give the demo an empty database, or leave --db out for a new SQLite file"
            )
        worker = Worker(builder, checkpointer=store.saver)
        return worker.submit({"topic": TOPIC, "publish_to": "team-wiki"}, thread_id=THREAD)


def start_worker(scene: Scene, name: str, *, slow_ack: float) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "langgraph_resilience.cli", "worker"]
    args += ["--db", scene.db, "--graph", GRAPH, "--worker-id", name]
    args += ["--lease-ttl", str(LEASE_TTL), "--until-idle"]
    with (scene.dir / f"{name}.log").open("wb") as log:
        return subprocess.Popen(
            args, cwd=scene.dir, env=scene.env(slow_ack), stdout=log, stderr=subprocess.STDOUT
        )


def kill_once_emailed(scene: Scene, proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the first worker once it has sent the email, before the ack."""
    deadline = time.monotonic() + TIMEOUT
    while ["notify-sent", str(proc.pid), "0"] not in read_lines(steps_log()):
        if proc.poll() is not None:
            raise DemoFailed(
                f"worker-1 exited with code {proc.returncode} before it sent the email; "
                f"its output:\n{scene.log_tail('worker-1.log')}"
            )
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise DemoFailed(f"worker-1 did not send the email within {TIMEOUT:.0f} s")
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    if proc.wait(timeout=TIMEOUT) != -signal.SIGKILL:
        raise DemoFailed(f"worker-1 ended with code {proc.returncode} before it was killed")


def wait_for(scene: Scene, name: str, proc: subprocess.Popen[bytes]) -> None:
    try:
        code = proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise DemoFailed(f"{name} did not finish within {TIMEOUT:.0f} s") from None
    if code != 0:
        raise DemoFailed(
            f"{name} failed with exit code {code}; its output:\n{scene.log_tail(name + '.log')}"
        )


def run_record(scene: Scene, run_id: str) -> dict[str, Any]:
    with scene.store() as store:
        record = store.saver.read_run(run_id)
    if record is None:
        raise DemoFailed(f"run {run_id} is not in the store")
    return {"status": record.status, "recoveries": record.recoveries, "owner": record.owner}


def fix(scene: Scene) -> dict[str, Any]:
    """The operator's fix: publish elsewhere, re-running only the failed step."""
    with scene.store() as store:
        graph = builder.compile(checkpointer=store.saver)
        config: RunnableConfig = {"configurable": {"thread_id": THREAD}}
        retry_failed(graph, config, update={"publish_to": FIXED_TARGET})
        return dict(graph.get_state(config).values)


# -- what it shows -----------------------------------------------------------------------


def who_ran_what(scene: Scene, runners: list[Runner], evidence: Any) -> None:
    table = Table(title="which process started which step (one mark per try)")
    table.add_column("step")
    for runner in runners:
        table.add_column(f"{runner.name}\n(pid {runner.pid})")
    for step in ORDER:
        pids = ran_by(evidence, step)
        table.add_row(step, *[_marks(pids.count(r.pid)) for r in runners])
    scene.out.print(table)
    emails = ", ".join(f"{m} by pid {p}" for m, p in evidence.emails) or "none"
    scene.say(f"emails sent: {len(evidence.emails)} ({emails})")


def _marks(count: int) -> str:
    return "-" if count == 0 else " ".join(["ran"] * count)


def closing(scene: Scene) -> dict[str, Any]:
    """The run report, the graph coloured by what happened, the four metrics;
    returns the metrics (for the checks)."""
    with scene.store() as store:
        saver = store.saver
        graph = builder.compile(checkpointer=saver)
        report = run_report(saver, THREAD)
        scene.say("\n[bold]the run report[/bold] (langgraph-resilience show research-1):")
        print(report.to_text())
        scene.say("\n[bold]the graph, each node coloured by what happened to it[/bold] (Mermaid):")
        print("```mermaid")
        print(report.to_mermaid(graph))
        print("```")
        scene.say("")
        print_metrics(store, None, None, as_json=False)
        return recovery_metrics(saver).to_dict()


def tell(scene: Scene) -> int:
    scene.say(f"[bold]langgraph-resilience demo[/bold]: a research pipeline on {_named(scene)}")
    run_id = submit(scene)
    scene.say(f"1. submitted run {run_id} on thread {THREAD!r}: {TOPIC!r}")
    first_proc = start_worker(scene, "worker-1", slow_ack=SLOW_ACK)
    first = Runner(name="worker-1", pid=first_proc.pid)
    scene.say(f"2. worker-1 (pid {first.pid}) runs it")
    kill_once_emailed(scene, first_proc)
    scene.say("   its log until it emailed the draft:")
    scene.logged("worker-1.log")
    scene.say(
        "3. the mail server is slow to acknowledge the email: worker-1 gets [red]SIGKILL[/red]"
    )
    second_proc = start_worker(scene, "worker-2", slow_ack=0.0)
    second = Runner(name="worker-2", pid=second_proc.pid)
    scene.say(
        f"4. worker-2 (pid {second.pid}) takes the run over once worker-1's lease "
        f"({LEASE_TTL:g} s) has run out; its log:"
    )
    wait_for(scene, "worker-2", second_proc)
    scene.logged("worker-2.log")
    run = run_record(scene, run_id)
    final = fix(scene)
    fixer = Runner(name="retry_failed", pid=os.getpid())
    scene.say(
        f"5. the fix: retry_failed(graph, config, update={{'publish_to': {FIXED_TARGET!r}}}) "
        f"-> {(final.get('resilience') or {}).get('status')}"
    )
    scene.say("")
    evidence = read_evidence(scene.dir, run, final)
    who_ran_what(scene, [first, second, fixer], evidence)
    evidence = replace(evidence, metrics=closing(scene))
    problems = check(evidence, first, second, fixer)
    if problems:
        raise DemoFailed("claims that did not hold:\n" + "\n".join(f"  - {p}" for p in problems))
    scene.say(
        "[green]OK[/green]: every step before the kill ran once, in worker-1 (search 3 tries, "
        "extract 2); notify, in flight when worker-1 died, ran again in worker-2 but the email "
        "went out once (reconciled with the outbox); publish failed for good in worker-2 and "
        "succeeded alone after retry_failed; the takeover and the retry each redid one step."
    )
    scene.say(
        f"look around: langgraph-resilience runs --db '{scene.where}'  |  "
        f"langgraph-resilience show {THREAD} --db '{scene.where}'"
    )
    return 0


def _named(scene: Scene) -> str:
    if scene.db.startswith(REDIS_SCHEMES):
        return f"Redis ({scene.where})"
    if is_postgres(scene.db):
        return f"Postgres ({scene.where})"
    return f"SQLite ({scene.db})"


def run_demo(workdir: str | None = None, db: str | None = None) -> int:
    """Run the demo in ``workdir`` (default: a new temporary directory, kept) on
    the store ``db`` names (default: a SQLite file in ``workdir``; a Postgres
    DSN; a ``redis://host:port/db`` URL, under a key prefix of the demo's own
    unless the URL names one after ``#``); returns the exit code (1: a claim
    did not hold, or the demo could not run; 2: a store it cannot use).

    Example:
        >>> from langgraph_resilience.cli.demo import run_demo
        >>> run_demo()  # doctest: +SKIP
        0
    """
    directory = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="lgr-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        print(f"demo: {directory} is not empty; give an empty or new directory", file=sys.stderr)
        return 2
    os.environ[DIR_ENV] = str(directory)  # this process's steps (the fix) log there too
    scene = Scene(directory.resolve(), db)
    try:
        return tell(scene)
    except CliError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    except DemoFailed as exc:
        print(f"\ndemo failed: {exc}", file=sys.stderr)
        return 1
