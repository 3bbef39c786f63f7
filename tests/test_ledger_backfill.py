"""A store written before the run ledger (release 581aad9, run in a subprocess)
opened with this one: the first history read backfills its threads' rows once,
and its metrics and reports stay what that release read from the writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from conftest import open_saver
from helpers import empty_store, package_at, sql

from langgraph_resilience import arecovery_metrics, recovery_metrics, run_report
from langgraph_resilience.history._report import arun_report

OLD = "581aad9"  # before the run ledger (schema version 17)
ROOT = Path(__file__).resolve().parent.parent
WRITER = str(Path(__file__).parent / "old_store_writer.py")
FIGURES = (
    "runs",
    "runs_ended",
    "runs_succeeded",
    "runs_partial",
    "runs_resumed",
    "runs_resumed_ended",
    "recoveries",
    "recoveries_by_kind",
    "steps_redone",
    "steps_redone_by_kind",
    "effects_replayed",
    "partial_completion_rate",
    "recovery_success_rate",
)


@pytest.fixture(scope="module")
def old_package(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The package as it was at `OLD`, in a folder for PYTHONPATH."""
    return package_at(ROOT, OLD, tmp_path_factory.mktemp("old"))


@pytest.fixture(params=["sqlite", "postgres"])
def old_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    yield from empty_store(request.param, tmp_path, "backfill")


def write_old(old_package: str, backend: str, target: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": old_package}
    done = subprocess.run(
        [sys.executable, WRITER, backend, target],
        capture_output=True,
        text=True,
        env=env,
        cwd=old_package,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_store_written_before_the_ledger_reads_as_before_once_backfilled(
    old_package: str, old_store: tuple[str, str], is_async: bool
) -> None:
    backend, target = old_store
    old = write_old(old_package, backend, target)
    assert sql(backend, target, "SELECT max(v) FROM resilience_migrations") == [(17,)]
    async with AsyncExitStack() as stack:
        saver = await open_saver(backend, is_async, target, stack)
        if is_async:
            m = (await arecovery_metrics(saver)).to_dict()
            report = (await arun_report(saver, "fixed")).to_dict()
        else:
            m = recovery_metrics(saver).to_dict()
            report = run_report(saver, "fixed").to_dict()
    # The figures that release read from the writes, now from the rows.
    assert {k: m[k] for k in FIGURES} == {k: old["metrics"][k] for k in FIGURES}
    assert m["recoveries_by_kind"] == {
        "crash": 1,
        "takeover": 0,
        "retry_failed": 1,
        "budget": 0,
        "human": 1,
    }
    assert m["effects_replayed"] == 1
    assert [r["redone_paths"] for r in report["recoveries"]] == [["b"]]
    assert [(e["name"], e["replayed"]) for e in report["effects"]] == [("send", True)]
    # Backfilled once: every thread has its runs as rows, nothing is left to read.
    assert sql(backend, target, "SELECT count(*) FROM resilience_backfill") == [(0,)]
    runs = sql(backend, target, "SELECT thread_id, run, status FROM resilience_run_log")
    assert sorted(runs) == sorted(
        [
            ("crash", 1, "success"),
            ("fixed", 1, "success"),
            ("human", 1, "success"),
            ("ok", 1, "success"),
            ("partial", 1, "partial_complete"),
            ("spent", 1, "paused"),
            ("turns", 1, "success"),
            ("turns", 2, "success"),
        ]
    )
    # A run paused by its budget keeps why: resumed now, the recovery is a budget one.
    why = "SELECT paused_for FROM resilience_run_log WHERE thread_id = 'spent'"
    assert sql(backend, target, why) == [("budget",)]
    # A second read (another process, say) finds nothing to do and the same figures.
    with_rows = sql(backend, target, "SELECT count(*) FROM resilience_steps")
    async with AsyncExitStack() as stack:
        saver = await open_saver(backend, False, target, stack)
        assert {k: v for k, v in recovery_metrics(saver).to_dict().items() if k in FIGURES} == {
            k: m[k] for k in FIGURES
        }
    assert sql(backend, target, "SELECT count(*) FROM resilience_steps") == with_rows
