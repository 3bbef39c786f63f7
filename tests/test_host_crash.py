"""One host's crash: the Postgres server and the process SIGKILLed together right
after a side effect returned to its node. The outcome must survive (a durable
commit), or the default ``on_unknown="reexecute"`` calls the effect a second time.

A private server of the test's own (`faults.PgServer`, ``durable=True``: ``fsync``
and ``synchronous_commit`` on, as in production). ``LGR_FAULT_RUNS`` sets the
trials (default 3; ``make test-faults``: 30, the issue's count).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import IN_CI
from helpers import private_db, read_ledger
from test_false_success import kill_server

TRIALS = min(int(os.environ.get("LGR_FAULT_RUNS", "3")), 30)
SCRIPT = Path(__file__).parent / "scripts" / "outcome_worker.py"


@pytest.fixture(scope="module")
def durable_server() -> Iterator[Any]:
    from faults import PgServer, PgUnavailable

    try:
        server = PgServer.create(durable=True)
    except PgUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI=true but {exc}")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.destroy()


def _run(dsn: str, calls: Path, thread: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), dsn, str(calls), thread, mode],
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.faults
@pytest.mark.timeout(60 + 15 * TRIALS)  # a trial: two processes started, a server restarted
def test_an_outcome_survives_the_server_and_the_process_killed_together(
    durable_server: Any, tmp_path: Path
) -> None:
    dsn = next(private_db(durable_server, "lgr_host"))
    twice = []
    for trial in range(TRIALS):
        thread, calls = f"host-{trial}-{uuid.uuid4().hex[:6]}", tmp_path / f"calls-{trial}.log"
        first = _run(dsn, calls, thread, "first")
        try:
            assert first.stdout is not None
            assert first.stdout.readline().strip() == "returned", "the effect did not return"
            first.kill()  # the host dies: the process and the server at once
            kill_server(durable_server)
        finally:
            first.kill()
            first.wait(10)
        durable_server.start()
        again = _run(dsn, calls, thread, "again")
        assert again.wait(120) == 0, "the run did not finish after the crash"
        if len(read_ledger(calls)) != 1:
            twice.append(thread)
    assert twice == [], f"{len(twice)} of {TRIALS} effects were called twice"
