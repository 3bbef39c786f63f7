"""LangGraph's checkpointer conformance suite (langgraph-checkpoint-conformance).

Our async savers must pass all eight capabilities (LangGraph's own pass fewer:
how many is upstream's business, not asserted here).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver

ALL = sorted(c.value for c in ALL_CAPABILITIES)


def _passed(report: Any) -> list[str]:
    return sorted(name for name, r in report.results.items() if r.passed)


def _failures(report: Any) -> dict[str, list[str]]:
    return {name: r.failures for name, r in report.results.items() if r.failures}


def _sqlite(cls: Any, tmp_path: Path) -> Any:
    counter = iter(range(100))

    @checkpointer_test(name=cls.__name__)
    async def factory() -> AsyncIterator[Any]:
        async with cls.from_conn_string(str(tmp_path / f"conf{next(counter)}.db")) as saver:
            await saver.setup()
            yield saver

    return factory


def _postgres(cls: Any, dsn: str) -> Any:
    @checkpointer_test(name=cls.__name__)
    async def factory() -> AsyncIterator[Any]:
        async with cls.from_conn_string(dsn) as saver:
            await saver.setup()
            yield saver

    return factory


async def test_sqlite_passes_all_eight(tmp_path: Path) -> None:
    report = await validate(_sqlite(AsyncResilientSqliteSaver, tmp_path))
    assert _failures(report) == {}
    assert _passed(report) == ALL


async def test_postgres_passes_all_eight(pg_dsn: str) -> None:
    report = await validate(_postgres(AsyncResilientPostgresSaver, pg_dsn))
    assert _failures(report) == {}
    assert _passed(report) == ALL
