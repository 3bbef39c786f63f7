"""The command line: help without a command, and the demo found from a clone."""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_resilience import cli


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_demo_is_found_in_a_clone() -> None:
    assert cli._demo_root() == Path(__file__).resolve().parents[1]


def test_demo_outside_a_clone_says_where_it_lives(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "DEMO_MODULE", "no_such_package.demo")
    assert cli.main(["demo"]) == 2
    assert "source repository" in capsys.readouterr().err
