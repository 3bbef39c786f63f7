"""Finished branches lost to a crash: a `Send` fan-out SIGKILLed mid-way, then resumed.

What it measures: a 20-branch fan-out whose branch ``i`` takes ``i * 1.6 / 19``
seconds (0 to 1.6 s), run in a process of its own that is SIGKILLed 1.3 s after
the first branch started, then resumed to the end in another. Per trial: how
many branches had finished before the kill, how many of them 0.2 s or more
before it (their writes had time to reach the store), and how many of those ran
again on resume. Ours is a `ResilientStateGraph` on the resilient saver (its
defaults: durability ``"sync"``); stock is a plain `StateGraph` on LangGraph's
own saver (its defaults: durability ``"async"``); sync (``invoke``) and async
(``ainvoke``), SQLite and Postgres. The worker is ``tests/scripts/fanout_worker.py``, a
fresh interpreter per run. Target: ours re-runs none of the branches that
finished 0.2 s before the kill.

Run it from the repository root::

    .venv/bin/python benchmarks/branch_loss.py [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from _pg import postgres_db, server_dsn

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "scripts")]

from fanout_worker import Trial, crash_and_resume  # noqa: E402  (the crash test's worker)

WORKER = str(ROOT / "tests" / "scripts" / "fanout_worker.py")
BRANCHES = 20
STEP = 1.6 / (BRANCHES - 1)
KILL_AFTER = 1.3
MARGIN = 0.2


def one_trial(backend: str, target: str, stock: bool, is_async: bool, folder: str) -> Trial:
    ledger = os.path.join(folder, f"ledger-{uuid.uuid4().hex[:8]}")
    thread = f"bench-{uuid.uuid4().hex[:8]}"
    flags = [*(["--stock"] if stock else []), *(["--async"] if is_async else [])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def start(extra: list[str]) -> Any:
        args = [backend, target, thread, ledger, "--step", str(STEP), *flags, *extra]
        return subprocess.Popen(
            [sys.executable, WORKER, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    return crash_and_resume(start, ledger, KILL_AFTER)


def row(trials: list[Trial]) -> dict[str, Any]:
    early = [t.finished_before(MARGIN) for t in trials]
    return {
        "finished": [len(t.finished) for t in trials],
        "finished_0.2s_before": [len(e) for e in early],
        "of_those_ran_again": [len(e & t.ran_again) for e, t in zip(early, trials, strict=True)],
        "finished_ran_again": [len(set(t.finished) & t.ran_again) for t in trials],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sqlite-only", action="store_true")
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as folder:
        stores: list[tuple[str, Any]] = [("sqlite", None)]
        if not args.sqlite_only:
            stores.append(("postgres", server_dsn()))
        for backend, server in stores:
            for stock in (False, True):
                for is_async in (False, True):
                    trials = []
                    for _ in range(args.repeats):
                        if server is None:
                            target = os.path.join(folder, f"{uuid.uuid4().hex[:8]}.db")
                            trials.append(one_trial(backend, target, stock, is_async, folder))
                            continue
                        with postgres_db(server) as target:
                            trials.append(one_trial(backend, target, stock, is_async, folder))
                    kind = f"{'stock' if stock else 'ours'} {'async' if is_async else 'sync'}"
                    results[f"{backend} {kind}"] = row(trials)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"{BRANCHES}-branch fan-out, branches 0 to 1.6 s, SIGKILL {KILL_AFTER} s in, "
        f"{args.repeats} trials (median [each])"
    )
    header = ("saver", "finished", f"finished >= {MARGIN} s before", "of those ran again")
    print(f"{header[0]:<24} {header[1]:>16} {header[2]:>26} {header[3]:>22}")
    for name, r in results.items():
        cells = [
            f"{statistics.median(r[k]):g} {r[k]}"
            for k in ("finished", "finished_0.2s_before", "of_those_ran_again")
        ]
        print(f"{name:<24} {cells[0]:>16} {cells[1]:>26} {cells[2]:>22}")


if __name__ == "__main__":
    main()
