"""The demo (`make demo`, `langgraph-resilience demo`): it tells its story and
checks itself, and its checks catch a broken claim. With ``LGR_WHEEL_TEST=1``,
the package is built as a wheel, installed into a fresh venv, and the demo run
from there (about a minute; run before a release).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from langgraph_resilience.cli.demo.evidence import Evidence, Runner, check, expected_runs

ROOT = Path(__file__).resolve().parents[1]
FIRST, SECOND, FIXER = (Runner(name=n, pid=p) for n, p in (("w1", 11), ("w2", 22), ("me", 33)))


def good_evidence(**changes: object) -> Evidence:
    starts = [
        (step, pid) for step, pids in expected_runs(FIRST, SECOND, FIXER).items() for pid in pids
    ]
    fields: dict[str, object] = {
        "starts": starts,
        "emails": [("msg-1", FIRST.pid)],
        "run": {"status": "partial_complete", "recoveries": 1},
        "final": {
            "resilience": {"status": "success"},
            "published": "reports-archive/tides-report",
            "email": "msg-1",
            "facts": ["x [1]", "y [2]", "z [3]"],
        },
        "metrics": {
            "recoveries_by_kind": {"takeover": 1, "retry_failed": 1},
            "steps_redone_by_kind": {"takeover": 1, "retry_failed": 1},
            "recovery_success_rate": 1.0,
        },
    }
    fields.update(changes)
    return Evidence(**fields)  # type: ignore[arg-type]


def test_the_checks_pass_on_the_story_and_catch_each_broken_claim() -> None:
    assert check(good_evidence(), FIRST, SECOND, FIXER) == []
    twice = good_evidence(emails=[("msg-1", FIRST.pid), ("msg-2", SECOND.pid)])
    assert any("sent 2 times" in p for p in check(twice, FIRST, SECOND, FIXER))
    redone = good_evidence(starts=[*good_evidence().starts, ("draft", SECOND.pid)])
    assert any(p.startswith("draft ran in") for p in check(redone, FIRST, SECOND, FIXER))
    unfinished = good_evidence(run={"status": "error", "recoveries": 1})
    assert any("'partial_complete'" in p for p in check(unfinished, FIRST, SECOND, FIXER))
    wasteful = good_evidence(metrics={**good_evidence().metrics, "steps_redone_by_kind": {}})
    assert any("takeover" in p for p in check(wasteful, FIRST, SECOND, FIXER))


def _demo(tmp_path: Path, *db: str) -> subprocess.CompletedProcess[str]:
    tmp_path.mkdir(exist_ok=True)
    work = tmp_path / "demo"
    return subprocess.run(
        [sys.executable, "-m", "langgraph_resilience.cli", "demo", "--dir", str(work), *db],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # not the clone: the demo ships in the package
    )


def _told(done: subprocess.CompletedProcess[str], tmp_path: Path) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK:" in done.stdout
    assert len((tmp_path / "demo" / "outbox.log").read_text().splitlines()) == 1


@pytest.mark.crash
def test_demo_tells_the_story_and_checks_itself(tmp_path: Path) -> None:
    done = _demo(tmp_path)
    _told(done, tmp_path)
    assert "on SQLite" in done.stdout


@pytest.mark.crash
def test_demo_on_postgres_and_refuses_a_database_it_already_used(tmp_path: Path) -> None:
    from helpers import empty_store

    store = empty_store("postgres", tmp_path, "demo")
    _, dsn = next(store)
    try:
        done = _demo(tmp_path, "--db", dsn)
        _told(done, tmp_path)
        assert "on Postgres" in done.stdout and f"--db '{dsn}'" in done.stdout
        again = _demo(tmp_path / "again", "--db", dsn)
        assert again.returncode == 2, again.stdout + again.stderr
        assert "already holds a thread 'research-1'" in again.stderr
    finally:
        store.close()


@pytest.mark.crash
def test_demo_on_redis_under_a_prefix_of_its_own(tmp_path: Path) -> None:
    from redis_servers import REDIS_DOWN, REDIS_URL, flush_prefix

    if REDIS_DOWN is not None:
        pytest.skip(REDIS_DOWN)
    prefix = f"demo{os.getpid()}"
    try:
        done = _demo(tmp_path, "--db", f"{REDIS_URL}#{prefix}")
        _told(done, tmp_path)
        assert "on Redis" in done.stdout and f"--db '{REDIS_URL}#{prefix}'" in done.stdout
    finally:
        flush_prefix(prefix)


@pytest.mark.skipif(not os.environ.get("LGR_WHEEL_TEST"), reason="set LGR_WHEEL_TEST=1 (~1 min)")
def test_demo_runs_from_the_installed_wheel(tmp_path: Path) -> None:
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(wheels), str(ROOT)], check=True, timeout=300
    )
    [wheel] = wheels.glob("langgraph_resilience-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    constraints = ["-c", str(ROOT / "constraints.txt")]
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", *constraints, str(wheel)],
        check=True,
        timeout=600,
    )
    done = subprocess.run(
        [str(venv / "bin" / "langgraph-resilience"), "demo", "--dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK:" in done.stdout
