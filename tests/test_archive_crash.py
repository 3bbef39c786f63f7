"""SIGKILL during archival: before the puts, between two puts, after every put and
before the hot delete. Nothing is lost, nothing is duplicated, and running the
archival again finishes the job."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from archive_worker import CLAIM_TTL
from test_archive import Calls, build

from langgraph_resilience import Archive
from langgraph_resilience.checkpoint.archive._codec import thread_prefix
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

WORKER = str(Path(__file__).parent / "scripts" / "archive_worker.py")
pytestmark = pytest.mark.crash
STAGES = ["before_put", "mid_put", "after_put"]
# Each case starts a fresh interpreter (~3 s): every stage on SQLite, the last one
# (before the hot delete) on Postgres; LGR_ALL_SAVERS=1 runs every stage on both.
CASES = [("sqlite", s) for s in STAGES] + [
    ("postgres", s) for s in (STAGES if os.environ.get("LGR_ALL_SAVERS") else STAGES[-1:])
]


@pytest.mark.parametrize(("backend", "stage"), CASES)
def test_sigkill_during_archival_loses_and_duplicates_nothing(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, stage: str
) -> None:
    if backend == "postgres":
        target = request.getfixturevalue("pg_dsn")
    else:
        target = str(tmp_path / "store.db")
    cls: Any = ResilientSqliteSaver if backend == "sqlite" else ResilientPostgresSaver
    url = f"file://{tmp_path}/archive"
    archive = Archive(url)
    thread_id = f"killed-{stage}-{uuid.uuid4().hex[:6]}"
    config = {"configurable": {"thread_id": thread_id}}
    calls = Calls()
    calls.fail_once = False
    with cls.from_conn_string(target, archive=archive) as saver:
        saver.setup()
        if backend == "postgres":  # the module's database holds other tests' threads
            saver.archive_idle(0)
        graph = build(type("H", (), {"saver": saver})(), calls)
        graph.invoke({"done": []}, config)
        history = [(t.checkpoint, t.metadata, t.pending_writes) for t in saver.list(config)]
        steps = saver.step_history(thread_id)

    # A real interpreter, not a fork of this one: obstore's runtime threads do not
    # survive a fork.
    child = subprocess.run(
        [sys.executable, WORKER, backend, target, url, stage],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -9, child.stderr

    prefix = thread_prefix(thread_id)
    with cls.from_conn_string(target, archive=archive) as saver:
        # nothing lost: the hot rows are all there until the archive is confirmed
        hot = [(t.checkpoint, t.metadata, t.pending_writes) for t in saver.list(config)]
        assert hot == history
        put = {"before_put": 0, "mid_put": 2, "after_put": len(history)}[stage]
        assert len(archive.keys(prefix)) == put
        time.sleep(CLAIM_TTL + 0.1)  # the dead archiver's claim runs out

        report = saver.archive_idle(0)  # run it again: it finishes the job

        assert thread_id in report.archived, report
        assert len(archive.keys(prefix)) == len(history)  # one object per checkpoint
        restored = [(t.checkpoint, t.metadata, t.pending_writes) for t in saver.list(config)]
        assert restored == history
        assert saver.step_history(thread_id) == steps
        assert archive.keys(prefix) == []
