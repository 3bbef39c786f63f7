"""LangGraph's checkpointer conformance suite (langgraph-checkpoint-conformance).

Our async savers must pass all eight capabilities (LangGraph's own pass fewer:
how many is upstream's business, not asserted here).
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from redis_servers import REDIS_DOWN, REDIS_URL, flush_prefix

from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver
from langgraph_resilience.checkpoint.redis.aio import AsyncResilientRedisSaver
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


async def test_redis_passes_all_eight() -> None:
    if REDIS_DOWN is not None:
        pytest.skip(REDIS_DOWN)
    prefix = f"conf{uuid.uuid4().hex[:8]}"

    @checkpointer_test(name="AsyncResilientRedisSaver")
    async def factory() -> AsyncIterator[Any]:
        async with AsyncResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as saver:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                await saver.setup()
            yield saver

    try:
        report = await validate(factory)
    finally:
        flush_prefix(prefix)
    assert _failures(report) == {}
    assert _passed(report) == ALL
