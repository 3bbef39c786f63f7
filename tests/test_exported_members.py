"""Keep ``__all__`` honest: every public name is exported and importable, the top
level is the documented API (DESIGN.md section 2), and the error tree drawn in
``langgraph_resilience.errors`` is the package's exceptions, parent by parent."""

from __future__ import annotations

import builtins
import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import langgraph_resilience
from langgraph_resilience import errors

MODULES = [
    "langgraph_resilience",
    "langgraph_resilience.errors",
    "langgraph_resilience.policy",
    "langgraph_resilience.classify",
    "langgraph_resilience.state",
    "langgraph_resilience.graph",
    "langgraph_resilience.graph._builder",
    "langgraph_resilience.worker._worker",
    "langgraph_resilience.effects._side_effect",
    "langgraph_resilience.checkpoint",
    "langgraph_resilience.checkpoint.sqlite",
    "langgraph_resilience.checkpoint.sqlite.aio",
    "langgraph_resilience.checkpoint.postgres",
    "langgraph_resilience.checkpoint.postgres.aio",
    "langgraph_resilience.checkpoint.archive",
    "langgraph_resilience.cache.postgres",
    "langgraph_resilience.history",
    "langgraph_resilience.limits",
    "langgraph_resilience.testing",
]

#: The top level: DESIGN.md section 2's names (the async twins beside theirs).
TOP_LEVEL = {
    "Archive",
    "Attempt",
    "Backoff",
    "Budget",
    "Classification",
    "Classifier",
    "FailureKind",
    "Limit",
    "NodePolicy",
    "RecoveryMetrics",
    "ResilientState",
    "ResilientStateGraph",
    "RunOutcome",
    "FailedStep",
    "RunReport",
    "DeployReport",
    "check_deploy",
    "acheck_deploy",
    "Worker",
    "arecovery_metrics",
    "aretry_failed",
    "arun_report",
    "asettle_effect",
    "classify",
    "current_attempt",
    "recovery_metrics",
    "report_usage",
    "retry_failed",
    "run_report",
    "settle_effect",
    "side_effect",
    # the kinds node code raises
    "BudgetExhausted",
    "ContextOverflow",
    "DegradableError",
    "PermanentError",
    "TransientError",
    "ValidationFailed",
    # the library's own errors callers catch
    "CheckpointConflict",
    "ConfigError",
    "DeployBlocked",
    "EffectOutcomeUnknown",
    "LeaseLost",
    "ResilienceError",
}


@pytest.mark.parametrize("name", MODULES)
def test_all_names_exist_and_are_sorted(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == list(module.__all__)
    for member in module.__all__:
        assert hasattr(module, member), f"{name}.{member}"


def test_top_level_is_the_documented_api() -> None:
    assert set(langgraph_resilience.__all__) == TOP_LEVEL


def _modules() -> list[ModuleType]:
    found = [langgraph_resilience]
    for info in pkgutil.walk_packages(langgraph_resilience.__path__, "langgraph_resilience."):
        found.append(importlib.import_module(info.name))
    return found


def _exceptions() -> dict[str, type[BaseException]]:
    """Every exception class the package defines, by name."""
    found: dict[str, type[BaseException]] = {}
    for module in _modules():
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("langgraph_resilience")
            ):
                found[name] = value
    return found


#: A drawn class: at the block's left edge (a root) or after a branch; a line
#: with only ``│`` and spaces before its text goes on describing the one above.
_NAME = re.compile(r"^(?P<lead>(?:[│ ]   )*(?:[├└]── )?)(?P<name>[A-Z]\w+)(?:\s|$)")


def _drawn() -> list[tuple[str, str | None]]:
    """(name, parent) for every class drawn in the errors docstring's blocks."""
    drawn: list[tuple[str, str | None]] = []
    for text in (errors.__doc__ or "").split("::\n")[1:]:
        parents: list[str] = []  # by depth
        for line in text.splitlines():
            if line and not line.startswith("    "):
                break  # the prose after the block
            match = _NAME.match(line[4:])
            if match is None or (match.group("lead") and "──" not in match.group("lead")):
                continue
            depth = len(match.group("lead")) // 4
            del parents[depth:]
            drawn.append((match.group("name"), parents[-1] if parents else None))
            parents.append(match.group("name"))
    return drawn


def test_error_tree_draws_every_exception_of_the_package() -> None:
    package = _exceptions()
    drawn = _drawn()
    builtin = {name for name, _ in drawn if name not in package}
    assert all(isinstance(getattr(builtins, n, None), type) for n in builtin), builtin
    assert {name for name, _ in drawn} - builtin == set(package)
    assert len(drawn) == len({name for name, _ in drawn}), "a class drawn twice"
    for name, parent in drawn:
        if parent is not None:
            cls = package.get(name) or getattr(builtins, name)
            assert issubclass(cls, package.get(parent) or getattr(builtins, parent)), (
                f"{name} is drawn under {parent}"
            )


def test_errors_module_holds_every_public_exception() -> None:
    """The errors a user may meet are defined in ``errors`` and listed in its
    ``__all__``; no public module exports another (the package's own signals,
    drawn last, are exported nowhere)."""
    public = set(errors.__all__)
    defined = {n for n, c in _exceptions().items() if c.__module__ == errors.__name__}
    assert public == defined
    for module in _modules():
        if any(part.startswith("_") for part in module.__name__.split(".")):
            continue
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if inspect.isclass(value) and issubclass(value, BaseException):
                assert name in public, f"{module.__name__} exports {name}"


def test_top_level_errors_come_from_errors() -> None:
    for name in langgraph_resilience.__all__:
        value = getattr(langgraph_resilience, name)
        if inspect.isclass(value) and issubclass(value, BaseException):
            assert name in errors.__all__
            assert issubclass(value, (errors.ResilienceError, errors.NodeFailure))
