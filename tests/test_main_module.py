"""``python -m langgraph_resilience`` is the ``langgraph-resilience`` command: its
output and its exit code, in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "langgraph_resilience", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_python_dash_m_runs_the_command_and_passes_its_exit_code(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    with ResilientSqliteSaver.from_conn_string(db) as saver:
        saver.setup()
    listed = _run("runs", "--db", db, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []

    unknown = _run("show", "no-such-thread", "--db", db, cwd=tmp_path)
    assert unknown.returncode == 2
    assert "no-such-thread" in unknown.stderr and len(unknown.stderr.strip().splitlines()) == 1
