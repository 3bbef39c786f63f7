"""Resilience events reach ``astream_events(version="v2")`` as ``on_custom_event``:
a UI that reads nothing else draws retries, a fallback and a partial result,
and every try that starts also ends (succeeded or failed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent / "scripts" / "ui_timeline.py"


def test_a_ui_draws_the_timeline_from_astream_events_alone(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "ui.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[-1] == "OK"
    assert lines[0] == "search: try 1 started"
    assert lines[1].startswith(
        "search: try 1 failed (transient: ConnectionError: search.example reset the "
        "connection); retrying in 0.0"
    )
    assert lines[2:4] == ["search: try 2 started", "search: try 2 succeeded"]
    assert "draft: try 1 failed (permanent: ValueError: the model refused); giving up" in lines
    assert "draft: falling back to draft_template" in lines
    assert (
        "publish: try 1 failed (permanent: PermissionError: 403 from cms.example); giving up"
        in lines
    )
    assert lines[-2] == "partial result: failed publish"
    tries = [ln.split(" started")[0] for ln in lines if ln.endswith(" started")]
    ended = [
        ln.split(" succeeded")[0].split(" failed (")[0]
        for ln in lines
        if ln.endswith(" succeeded") or " failed (" in ln
    ]
    started = tries
    assert started == ended  # every try that starts also ends
