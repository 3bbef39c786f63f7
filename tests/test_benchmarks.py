"""The issue-25 (and 29: console_scale; 34: node_wrapper, SQLite in memory) benchmarks run, at
their smallest settings, on both dialects (their figures are read by hand; here only that each
script still works)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_postgres

ROOT = Path(__file__).parent.parent

SMALLEST = {
    "metrics_scale.py": ["--runs", "50", "--repeats", "1"],
    "console_scale.py": [
        "--runs",
        "50",
        "--repeats",
        "1",
        "--dialects",
        "sqlite,postgres",
        "--metrics",
    ],
    "run_length.py": ["--repeats", "1", "--lengths", "3", "--runs", "2", "--loop", "5"],
    "pg_round_trips.py": ["--steps", "2", "--warmup", "1", "--runs", "1"],
    "node_wrapper.py": ["--calls", "20", "--chunks", "2"],
    "redis_latency.py": ["--ops", "20", "--runs", "1"],
}


@pytest.mark.parametrize("script", sorted(SMALLEST))
def test_the_benchmark_runs_at_its_smallest_setting(script: str) -> None:
    require_postgres()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *SMALLEST[script]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    if script == "node_wrapper.py":  # one row (SQLite in memory): the figures, the calls
        assert lines[1].split() == ["min", "p10", "median", "calls"], done.stdout
        assert len(lines[2].split()) == 4, done.stdout
    elif script != "pg_round_trips.py":  # a row per dialect
        assert any(line.startswith("sqlite") for line in lines), done.stdout
        assert any(line.startswith("postgres") for line in lines), done.stdout
    else:
        assert [line.split()[0] for line in lines[2:4]] == ["stock", "ours"], done.stdout
    if script == "run_length.py":  # step_history listed every iteration of the loop
        assert all(line.endswith("all") for line in lines[-3:-1]), done.stdout
