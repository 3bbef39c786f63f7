"""A ``create_agent`` agent's recoveries recorded as a graph's: one SIGKILLed in
its model call and resumed in another process counts a crash recovery and a
resumed run (tests/scripts/agent_worker.py, SQLite and Postgres)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("langchain.agents")

from agent_worker import lines
from conftest import open_saver
from spawn import spawn

from langgraph_resilience import recovery_metrics

WORKER = str(Path(__file__).parent / "scripts" / "agent_worker.py")


async def _metrics(store: tuple[str, str]) -> tuple[int, int, int]:
    from contextlib import AsyncExitStack

    async with AsyncExitStack() as stack:
        saver = await open_saver(store[0], False, store[1], stack)
        got = recovery_metrics(saver)
        return got.recoveries_by_kind["crash"], got.runs_resumed, got.runs_resumed_succeeded


THREAD = "agent-killed-in-its-model-call"


@pytest.mark.crash
async def test_an_agent_killed_in_its_model_call_and_resumed_is_a_crash_recovery(
    store: tuple[str, str], tmp_path: Path
) -> None:
    # Before: it resumed right (search not called again) but crash=0, runs_resumed=0.
    first = spawn(WORKER, store[0], store[1], str(tmp_path), THREAD, "model")
    assert first.wait(30) == -9
    assert len(lines(tmp_path / "search.log")) == 1
    before = await _metrics(store)
    second = spawn(WORKER, store[0], store[1], str(tmp_path), THREAD, "resume")
    out, err = second.communicate(timeout=30)
    assert second.returncode == 0, err
    assert json.loads(out) == {"answer": "Report sent.", "status": "success"}
    assert len(lines(tmp_path / "search.log")) == 1  # not called again
    crashes, resumed, resumed_ok = await _metrics(store)
    assert crashes == before[0] + 1 == 1
    assert (resumed, resumed_ok) == (before[1] + 1, before[2] + 1)  # resumed, and ended well
