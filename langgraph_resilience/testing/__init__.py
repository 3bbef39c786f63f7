"""Test your own graph's recovery: inject failures (`FaultPlan`) and run the four
recovery tests on it (`recovery_suite`).

A pytest fixture of the same name makes it one line in a test file (the plugin
``langgraph_resilience.testing.plugin`` is registered with pytest on install).

Example:
    >>> from langgraph_resilience.testing import FaultPlan, recovery_suite
    >>> report = recovery_suite(build, {"q": "..."}, effects={"email": sent})  # doctest: +SKIP
    >>> report.assert_ok()  # doctest: +SKIP

The rooms: ``_faults`` (the faults, as data), ``_plan`` (`FaultPlan`),
``_taps`` and ``_saver_taps`` (where a plan goes into a graph and its saver),
``_cases`` (the four recovery tests, written once), ``_suite``
(`recovery_suite`), ``_report`` (what it found), ``plugin`` (the pytest fixture).
"""

from __future__ import annotations

from langgraph_resilience.errors import RecoveryFailed, SimulatedCrash
from langgraph_resilience.testing._plan import FaultPlan
from langgraph_resilience.testing._report import (
    FAMILIES,
    CaseResult,
    RecoverySuiteReport,
)
from langgraph_resilience.testing._suite import CASES_ENV, arecovery_suite, recovery_suite
from langgraph_resilience.testing._taps import Tracker

__all__ = [
    "CASES_ENV",
    "CaseResult",
    "FAMILIES",
    "FaultPlan",
    "RecoveryFailed",
    "RecoverySuiteReport",
    "SimulatedCrash",
    "Tracker",
    "arecovery_suite",
    "recovery_suite",
]
