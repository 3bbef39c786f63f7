"""The two decisions about a top-level run's end, as tables (pure functions):
how a checkpoint ends its run (`_run_log.put_end`: the plain parent's settle and
a resilient graph's end, one decision), and which row a call that raised ends
``error`` (`_run_log.failing`: by the run's number, never by clock)."""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_resilience.checkpoint.runlog._run_log import PutEnd, failing, put_end
from langgraph_resilience.checkpoint.runlog._scope import RunScope

RUNNING = {"run": 1, "status": "running"}
SUCCESS = {"run": 1, "status": "success"}
SHORT = {"run": 1, "status": "partial_complete"}


@pytest.mark.parametrize(
    ("source", "log", "changed", "nothing_left", "expected"),
    [
        # a plain parent (no run log of its own): its last loop checkpoint settles it
        ("loop", None, False, True, PutEnd("settle")),
        ("loop", None, False, False, None),
        ("update", None, False, True, None),  # update_state ends nothing
        # a run log still running: a conditional edge stopped it, checked
        ("loop", RUNNING, True, True, PutEnd("left", checked=True)),
        ("loop", RUNNING, True, False, None),
        # a step told the end: a success with nothing left is checked
        ("loop", SUCCESS, True, True, PutEnd("told", checked=True)),
        ("loop", SUCCESS, True, False, PutEnd("told")),  # other branches go on
        ("loop", SHORT, True, True, PutEnd("told")),  # ended short: as told
        ("update", SUCCESS, True, True, PutEnd("told", checked=True)),
        ("loop", SUCCESS, False, True, None),  # no step wrote it here
    ],
)
def test_how_a_checkpoint_ends_its_run(
    source: str, log: Any, changed: bool, nothing_left: bool, expected: PutEnd | None
) -> None:
    assert put_end(source, log, changed, nothing_left) == expected


@pytest.mark.parametrize(
    ("run", "ended", "continued", "expected"),
    [
        (3, False, False, "run"),  # the call's run, by number
        (3, False, True, "run"),
        (3, True, False, None),  # the saver stored its end: what raised came after
        (3, True, True, None),
        (None, False, False, None),  # a new input never stored: the earlier run stays
        (None, False, True, "latest"),  # a resume that raised before naming its run
    ],
)
def test_which_run_a_call_that_raised_ends(
    run: int | None, ended: bool, continued: bool, expected: str | None
) -> None:
    assert failing(run, ended, continued) == expected


def test_the_scope_names_the_run_its_saver_started_and_ended() -> None:
    scope = RunScope(fresh=True)
    assert scope.outcome() == (None, False)  # nothing stored yet
    scope.stored(4, None)  # its input checkpoint started run 4
    assert scope.outcome() == (4, False)
    scope.stored(None, 4)  # the checkpoint that left it nothing to run
    assert scope.outcome() == (4, True)
    resumed = RunScope(fresh=False)
    resumed.load(2, {}, {})  # a resume tallies the run it goes on with
    assert resumed.outcome() == (2, False)
    resumed.stored(None, 1)  # an end of another run is not this call's
    assert resumed.outcome() == (2, False)
