"""Keep ``__all__`` honest: every public name is exported and importable."""

from __future__ import annotations

import importlib

import pytest

import langgraph_resilience

MODULES = [
    "langgraph_resilience",
    "langgraph_resilience.errors",
    "langgraph_resilience.policy",
    "langgraph_resilience.classify",
    "langgraph_resilience.state",
    "langgraph_resilience.graph._builder",
    "langgraph_resilience.worker._worker",
    "langgraph_resilience.effects._side_effect",
    "langgraph_resilience.checkpoint",
    "langgraph_resilience.checkpoint.sqlite",
    "langgraph_resilience.checkpoint.sqlite.aio",
    "langgraph_resilience.checkpoint.postgres",
    "langgraph_resilience.checkpoint.postgres.aio",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_names_exist_and_are_sorted(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == list(module.__all__)
    for member in module.__all__:
        assert hasattr(module, member), f"{name}.{member}"


def test_top_level_exports_every_error() -> None:
    from langgraph_resilience import errors

    assert set(errors.__all__) <= set(langgraph_resilience.__all__)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), (errors.ResilienceError, errors.NodeFailure))
