"""``setup()`` from several processes at once on a fresh Postgres database (two
Workers starting together on a new database): every one succeeds. LangGraph's own
migrations race on ``checkpoint_migrations`` (a ``UniqueViolation``) unless they
run one process at a time, under the saver's advisory lock."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from conftest import PG_URL, _with_db, require_postgres

SCRIPT = Path(__file__).parent / "scripts" / "setup_worker.py"
PROCESSES = 5
ROUNDS = 1  # a fresh database each (before the lock: 8 of 10 calls failed in 2 rounds)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_setup_from_several_processes_at_once_on_a_fresh_database(mode: str) -> None:
    require_postgres()
    failed = [f for _ in range(ROUNDS) for f in _one_round(mode)]
    assert failed == [], f"{len(failed)} of {ROUNDS * PROCESSES} setup() calls failed: {failed}"


def _one_round(mode: str) -> list[str]:
    name = f"lgr_setup_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        dsn = _with_db(PG_URL, name)
        procs = [
            subprocess.Popen(
                [sys.executable, str(SCRIPT), dsn, mode],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(PROCESSES)
        ]
        for p in procs:  # every one connected, waiting for the word
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        said = [p.communicate(timeout=120)[0].strip() for p in procs]
        return [s for p, s in zip(procs, said, strict=True) if p.returncode != 0]
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
