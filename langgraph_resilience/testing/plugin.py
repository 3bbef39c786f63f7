"""The pytest plugin of langgraph-resilience: a ``recovery_suite`` fixture.

Registered with pytest on install (the ``pytest11`` entry point), so a test
file needs no import::

    def test_my_graph_recovers(recovery_suite):
        recovery_suite(build_graph, {"query": "q"}, effects={"email": outbox}).assert_ok()

The fixture runs `langgraph_resilience.testing.recovery_suite` with the store in
the test's own temporary directory (unless ``checkpointer_factory=`` is given).

Loading this module costs nothing but pytest itself: pytest loads every
installed plugin in every project, so the suite (and LangGraph with it) is
imported only when a test asks for the fixture.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["recovery_suite"]


@pytest.fixture
def recovery_suite(tmp_path: Path) -> Callable[..., Any]:
    """`recovery_suite(build_graph, input, **options)` on a SQLite store in
    ``tmp_path``; returns the `RecoverySuiteReport` (call ``.assert_ok()``)."""
    # Imported here, not at the top: see the module docstring.
    testing = importlib.import_module("langgraph_resilience.testing")
    sqlite = importlib.import_module("langgraph_resilience.checkpoint.sqlite")
    store = str(tmp_path / "recovery.db")

    def run(build_graph: Callable[..., Any], input: Any, **options: Any) -> Any:
        options.setdefault(
            "checkpointer_factory", lambda: sqlite.ResilientSqliteSaver.from_conn_string(store)
        )
        return testing.recovery_suite(build_graph, input, **options)

    return run
