"""The pytest plugin of langgraph-resilience, registered on install (``pytest11``).

It gives every test the ``recovery_suite`` fixture::

    def test_my_graph_recovers(recovery_suite):
        recovery_suite(build_graph, {"query": "q"}, effects={"email": outbox}).assert_ok()

pytest loads installed plugins in every project at every start, so this module
lives outside the package and imports nothing but pytest: the package (and
LangGraph with it) is imported only when a test asks for the fixture. The
fixture itself is `langgraph_resilience.testing.plugin.suite_runner`.
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
    """`langgraph_resilience.testing.recovery_suite` with its store in ``tmp_path``."""
    plugin = importlib.import_module("langgraph_resilience.testing.plugin")
    runner: Callable[..., Any] = plugin.suite_runner(tmp_path)
    return runner
