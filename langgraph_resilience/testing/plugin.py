"""The ``recovery_suite`` pytest fixture.

Installed, the package registers a light plugin with pytest
(``pytest_langgraph_resilience``, which imports this module only when a test
asks for the fixture), so a test file needs no import::

    def test_my_graph_recovers(recovery_suite):
        recovery_suite(build_graph, {"query": "q"}, effects={"email": outbox}).assert_ok()

Without the entry point (a copy of the package on ``sys.path``), load this
module instead: ``pytest -p langgraph_resilience.testing.plugin`` or
``pytest_plugins = ["langgraph_resilience.testing.plugin"]`` in a conftest.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.testing._report import RecoverySuiteReport
from langgraph_resilience.testing._suite import recovery_suite as run_suite

__all__ = ["recovery_suite", "suite_runner"]


def suite_runner(tmp_path: Path) -> Callable[..., RecoverySuiteReport]:
    """`recovery_suite(build_graph, input, **options)` whose default store is a
    SQLite file in ``tmp_path`` (a test's own temporary directory)."""
    store = str(tmp_path / "recovery.db")

    def run(build_graph: Callable[..., Any], input: Any, **options: Any) -> RecoverySuiteReport:
        options.setdefault(
            "checkpointer_factory", lambda: ResilientSqliteSaver.from_conn_string(store)
        )
        return run_suite(build_graph, input, **options)

    return run


@pytest.fixture
def recovery_suite(tmp_path: Path) -> Callable[..., RecoverySuiteReport]:
    """`recovery_suite` with its store in the test's ``tmp_path``; returns the
    `RecoverySuiteReport` (call ``.assert_ok()``).

    Example:
        >>> def test_recovers(recovery_suite):  # doctest: +SKIP
        ...     recovery_suite(build_graph, {"query": "q"}).assert_ok()
    """
    return suite_runner(tmp_path)
