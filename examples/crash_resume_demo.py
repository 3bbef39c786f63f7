"""Crash-and-resume demo: kill a LangGraph run mid-step, resume it, lose nothing.

Run it from the repository root with ``make demo`` (or
``.venv/bin/python -m examples.crash_resume_demo``). It shows, on SQLite, that:

1. A five-step pipeline (fetch -> parse -> analyze -> summarize -> publish) compiled
   with `ResilientSqliteSaver` and invoked with ``durability="sync"`` saves a
   checkpoint after every step.
2. A worker process running it is killed with SIGKILL while step 3 is in flight.
3. A second worker resumes the thread with ``graph.invoke(None, config)``: the
   steps that had finished are not run again, the step that was in flight is run
   again, and the remaining steps run once.

Every node appends ``<node> <pid>`` to a plain-text ledger (fsynced) when it
starts, so the demo can show which process ran which step, and then verifies
the claim: it exits non-zero if a finished step ran twice, a step was skipped,
or the final state does not hold all five steps in order.
"""

from __future__ import annotations

import argparse
import operator
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

STEPS = ("fetch", "parse", "analyze", "summarize", "publish")
KILL_AT = 3  # kill the first worker once step 3 has started
STEP_SECONDS = 0.3  # how long each step "works": the kill window
TIMEOUT = 30.0  # seconds for each wait
THREAD_ID = "demo-thread"
ROOT = Path(__file__).resolve().parents[1]  # so `-m examples...` works from any cwd


class Failure(Exception):
    """The demo could not run, or its claim did not hold."""


# -- the pipeline (runs in the worker processes) -------------------------------


class PipelineState(TypedDict):
    done: Annotated[list[str], operator.add]


def make_step(name: str, ledger: Path) -> Any:
    def step(state: PipelineState) -> dict[str, list[str]]:
        # Record the start durably before doing any work.
        with ledger.open("a", encoding="utf-8") as f:
            f.write(f"{name} {os.getpid()}\n")
            f.flush()
            os.fsync(f.fileno())
        time.sleep(STEP_SECONDS)  # the step's "work"
        return {"done": [name]}

    return step


def build_graph(saver: ResilientSqliteSaver, ledger: Path) -> CompiledStateGraph[Any]:
    builder = StateGraph(PipelineState)
    for name in STEPS:
        builder.add_node(name, make_step(name, ledger))
    for a, b in zip((START, *STEPS), (*STEPS, END), strict=True):
        builder.add_edge(a, b)
    return builder.compile(checkpointer=saver)


def thread_config(thread_id: str) -> RunnableConfig:
    # config metadata is stored in each checkpoint's metadata: who wrote it.
    return {"configurable": {"thread_id": thread_id}, "metadata": {"pid": os.getpid()}}


def worker(db: str, ledger: str, thread_id: str, resume: bool) -> int:
    with ResilientSqliteSaver.from_conn_string(db) as saver:
        graph = build_graph(saver, Path(ledger))
        config = thread_config(thread_id)
        if resume:
            graph.invoke(None, config, durability="sync")
        else:
            graph.invoke({"done": []}, config, durability="sync")
    return 0


# -- the demo (parent process) -------------------------------------------------


def read_ledger(ledger: Path) -> list[tuple[str, int]]:
    """Complete ``(node, pid)`` lines, in order."""
    try:
        text = ledger.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    entries = []
    for line in text.splitlines(keepends=True):
        parts = line.split()
        if line.endswith("\n") and len(parts) == 2 and parts[1].isdigit():
            entries.append((parts[0], int(parts[1])))
    return entries


def start_worker(workdir: Path, db: Path, ledger: Path, *, resume: bool) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "examples.crash_resume_demo", "--worker"]
    args += [str(db), str(ledger), THREAD_ID] + (["--resume"] if resume else [])
    log = (workdir / ("worker2.log" if resume else "worker1.log")).open("wb")
    with log:
        return subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def log_tail(workdir: Path, name: str) -> str:
    text = (workdir / name).read_text(encoding="utf-8", errors="replace").strip()
    return "\n".join("    " + line for line in text.splitlines()[-15:]) or "    (empty)"


def run_and_kill(workdir: Path, db: Path, ledger: Path) -> int:
    """Start worker 1, SIGKILL it once step KILL_AT has started; return its pid."""
    proc = start_worker(workdir, db, ledger, resume=False)
    target = STEPS[KILL_AT - 1]
    deadline = time.monotonic() + TIMEOUT
    while (target, proc.pid) not in read_ledger(ledger):
        if proc.poll() is not None:
            raise Failure(
                f"worker 1 (pid {proc.pid}) exited with code {proc.returncode} before step "
                f"{KILL_AT} ({target}) started; its output:\n{log_tail(workdir, 'worker1.log')}"
            )
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise Failure(f"timed out after {TIMEOUT:.0f}s waiting for step {KILL_AT} to start")
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    try:
        code = proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Failure(f"worker 1 (pid {proc.pid}) did not die within {TIMEOUT:.0f}s") from None
    if code != -signal.SIGKILL:
        raise Failure(
            f"worker 1 (pid {proc.pid}) finished (exit code {code}) before it could be "
            "killed, so there was nothing to resume; run the demo again"
        )
    started = [name for name, pid in read_ledger(ledger) if pid == proc.pid]
    step = f"step {len(started)} ({started[-1]})"
    print(f"killed worker 1 (pid {proc.pid}) with SIGKILL while {step} was in flight")
    return proc.pid


def resume(workdir: Path, db: Path, ledger: Path) -> int:
    """Run worker 2 to resume the thread; return its pid."""
    proc = start_worker(workdir, db, ledger, resume=True)
    print(f"started worker 2 (pid {proc.pid}) to resume the thread")
    try:
        code = proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise Failure(f"worker 2 (pid {proc.pid}) did not finish within {TIMEOUT:.0f}s") from None
    if code != 0:
        raise Failure(
            f"worker 2 (pid {proc.pid}) failed with exit code {code}; its output:\n"
            f"{log_tail(workdir, 'worker2.log')}"
        )
    return proc.pid


def report_and_verify(db: Path, ledger: Path, pid1: int, pid2: int) -> None:
    entries = read_ledger(ledger)
    ran = {name: [pid for step, pid in entries if step == name] for name in STEPS}
    pid1_steps = [name for name, pid in entries if pid == pid1]
    in_flight = pid1_steps[-1] if pid1_steps else None

    print(f"\nwhich process ran which step (ledger: {ledger}):")
    print(f"  {'step':<13}{f'worker 1 (pid {pid1})':<24}{f'worker 2 (pid {pid2})':<24}".rstrip())
    for i, name in enumerate(STEPS, 1):
        one = "ran" if pid1 in ran[name] else "-"
        two = "ran" if pid2 in ran[name] else "-"
        note = ""
        if name == in_flight:
            one, note = "started, killed", "<- in flight when killed (re-run)"
        print(f"  {i} {name:<11}{one:<24}{two:<24}{note}".rstrip())

    with ResilientSqliteSaver.from_conn_string(str(db)) as saver:
        graph = build_graph(saver, ledger)
        config = thread_config(THREAD_ID)
        labels: dict[object, str] = {pid1: "worker 1", pid2: "worker 2"}
        history = list(graph.get_state_history(config))[::-1]  # oldest first
        print(f"\ncheckpoints of thread {THREAD_ID!r} (oldest first):")
        print(f"  {'step':>4}  {'source':<7}{'written by':<12}next")
        for snap in history:
            meta = snap.metadata or {}
            who = labels.get(meta.get("pid"), "?")
            nxt = ", ".join(snap.next) or "(done)"
            print(f"  {meta.get('step', '?'):>4}  {meta.get('source', '?'):<7}{who:<12}{nxt}")
        final = graph.get_state(config)
        done = list(final.values.get("done", []))
        print(f"\nfinal state: done = {done}")
        print(f"next nodes: {list(final.next) or '(none: the run finished)'}")
        counters = saver.read_counters()
    print("saver counters: " + ", ".join(f"{k}={v}" for k, v in sorted(counters.items())))
    print(
        "  (each process stores its counts at most once a second and when it closes its\n"
        "  saver, so the killed worker's last second of counts is missing here)"
    )

    problems = []
    if in_flight is None:
        problems.append("worker 1 ran no step at all")
    else:
        k = STEPS.index(in_flight)
        for name in STEPS[:k]:
            if ran[name] != [pid1]:
                problems.append(f"{name} finished before the kill but ran in {ran[name]}")
        if ran[in_flight] != [pid1, pid2]:
            problems.append(
                f"{in_flight} was in flight when killed but ran in {ran[in_flight]}, "
                f"expected [{pid1}, {pid2}]"
            )
        for name in STEPS[k + 1 :]:
            if ran[name] != [pid2]:
                problems.append(f"{name} should run once in worker 2 but ran in {ran[name]}")
    if done != list(STEPS):
        problems.append(f"final done is {done}, expected {list(STEPS)}")
    if final.next:
        problems.append(f"the thread did not finish: next = {list(final.next)}")
    if problems:
        raise Failure("verification FAILED:\n" + "\n".join(f"  - {p}" for p in problems))
    k = STEPS.index(in_flight)
    print(
        f"\nOK: {', '.join(STEPS[:k]) or 'no step'} ran once (worker 1); {in_flight}, in flight "
        f"when killed, was re-run by worker 2; {', '.join(STEPS[k + 1 :]) or 'no step'} ran "
        "once (worker 2); the final state has all five steps in order."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--worker", nargs=3, metavar=("DB", "LEDGER", "THREAD_ID"))
    parser.add_argument("--resume", action="store_true", help="with --worker: resume")
    args = parser.parse_args(argv)
    if args.worker:
        db_arg, ledger_arg, thread_arg = args.worker
        return worker(db_arg, ledger_arg, thread_arg, resume=args.resume)

    workdir = Path(tempfile.mkdtemp(prefix="lgr-demo-"))
    db, ledger = workdir / "checkpoints.db", workdir / "ledger.txt"
    print(f"working dir: {workdir}")
    try:
        pid1 = run_and_kill(workdir, db, ledger)
        pid2 = resume(workdir, db, ledger)
        report_and_verify(db, ledger, pid1, pid2)
    except Failure as exc:
        print(f"\ndemo failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
