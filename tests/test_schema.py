"""One source for each table's columns, checked against the live schema of both dialects.

`copy_thread` copies the columns the table definitions name, and records are read
by the names of their fields: a column added by a migration (ours or LangGraph's)
that a definition misses would be dropped silently by a copy. These tests fail
first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import fields
from pathlib import Path

import pytest
from conftest import open_saver
from helpers import empty_store, sql

from langgraph_resilience.checkpoint import AttemptRecord, EffectRecord, RunRecord
from langgraph_resilience.checkpoint.saver._threads import copied_columns
from langgraph_resilience.checkpoint.store._schema import (
    ARCHIVE,
    ATTEMPTS,
    COUNTERS,
    EFFECTS,
    LIMIT_HOLDS,
    LIMIT_STARTS,
    LIMITS,
    MIGRATIONS,
    RECOVERIES,
    RECOVERY_PATHS,
    RUN_LOG,
    RUNS,
    SCHEMA_VERSION,
    STEPS,
    Migration,
    migrations,
)
from langgraph_resilience.checkpoint.store._store import POSTGRES, SQLITE, Column, Dialect, Table
from langgraph_resilience.errors import ConfigError

OURS = (RUNS, ATTEMPTS, EFFECTS, COUNTERS, RUN_LOG, STEPS)
ALL_TABLES = (*OURS, RECOVERIES, RECOVERY_PATHS, ARCHIVE, LIMITS, LIMIT_HOLDS, LIMIT_STARTS)


def live_columns(backend: str, target: str, table: str) -> list[str]:
    if backend == "sqlite":
        return [row[1] for row in sql(backend, target, f"PRAGMA table_info({table})")]
    return [
        row[0]
        for row in sql(
            backend,
            target,
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
            "AND table_schema = current_schema() ORDER BY ordinal_position",
            (table,),
        )
    ]


def dialect_of(backend: str) -> Dialect:
    return SQLITE if backend == "sqlite" else POSTGRES


@pytest.fixture
async def migrated(store: tuple[str, str]) -> tuple[str, str]:
    """A store set up by a saver (LangGraph's tables and ours)."""
    backend, target = store
    async with AsyncExitStack() as stack:
        saver = await open_saver(backend, False, target, stack)
        await asyncio.to_thread(saver.setup)
    return store


async def test_our_tables_match_their_definitions(migrated: tuple[str, str]) -> None:
    backend, target = migrated
    for table in OURS:
        assert live_columns(backend, target, table.name) == list(table.names), table.name


async def test_copy_thread_copies_every_column_of_langgraphs_tables(
    migrated: tuple[str, str],
) -> None:
    backend, target = migrated
    for table in dialect_of(backend).thread_tables:
        live = live_columns(backend, target, table.name)
        assert live, f"{table.name} does not exist"
        assert sorted(copied_columns(live)) == sorted(copied_columns(table.names, True)), table.name


def test_records_are_read_from_columns_of_their_table() -> None:
    assert [f.name for f in fields(RunRecord)] == list(RUNS.names)
    assert {f.name for f in fields(EffectRecord)} <= set(EFFECTS.names)
    assert {f.name for f in fields(AttemptRecord)} <= set(ATTEMPTS.names)


def test_a_column_added_later_comes_with_its_own_migration() -> None:
    table = Table("t", (Column("a", "TEXT", since=1), Column("b", "TEXT", since=9)), since=1)
    assert "b TEXT" not in table.create()
    assert table.added(9) == ("ALTER TABLE t ADD COLUMN b TEXT",)
    assert table.added(1) == ()  # the columns of the CREATE itself


def test_version_two_adds_columns_only() -> None:
    # 2: an effect's ``how``, a run's ``error`` and ``graph_version``; columns
    # only (a store of version 1 is brought up by ALTER TABLE, nothing rewritten).
    for stmt in (*migrations(SQLITE)[2], *migrations(POSTGRES)[2]):
        assert stmt.startswith("ALTER TABLE ") and " ADD COLUMN " in stmt
    assert {s.split()[5] for s in migrations(SQLITE)[2]} == {"how", "error", "graph_version"}


def test_version_three_adds_columns_only() -> None:
    # 3: the process driving a plain run and when it was last seen; columns only.
    for stmt in (*migrations(SQLITE)[3], *migrations(POSTGRES)[3]):
        assert stmt.startswith("ALTER TABLE resilience_run_log ADD COLUMN ")
    assert {s.split()[5] for s in migrations(SQLITE)[3]} == {"holder", "seen_at"}


def test_one_migration_list_for_both_dialects() -> None:
    assert len(MIGRATIONS) == SCHEMA_VERSION + 1
    assert len(migrations(SQLITE)) == len(migrations(POSTGRES)) == len(MIGRATIONS)
    assert all(isinstance(m, Migration) for m in MIGRATIONS)
    # One first schema (version 1): every table and index on both dialects; the
    # stored functions on Postgres only (SQLite checks in Python), one of each.
    assert SCHEMA_VERSION == 3
    sqlite, postgres = migrations(SQLITE)[1], migrations(POSTGRES)[1]
    functions = [s for s in postgres if s.lstrip().startswith("CREATE OR REPLACE FUNCTION")]
    names = [s.split("FUNCTION", 1)[1].split("(", 1)[0].strip() for s in functions]
    assert sorted(names) == [
        "resilience_check_fence",
        "resilience_limit_acquire",
        "resilience_refuse_fork",
    ]
    created = [s.split("EXISTS", 1)[1].split()[0] for s in sqlite if s.startswith("CREATE TABLE")]
    assert sorted(created) == sorted(t.name for t in ALL_TABLES)


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """An empty store: a SQLite file, or a Postgres database of its own."""
    yield from empty_store(request.param, tmp_path, "pre")


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_store_set_up_by_a_pre_release_build_is_refused_and_left_as_it_is(
    fresh_store: tuple[str, str], is_async: bool
) -> None:
    """A store whose resilience versions are in the pre-release table (before the
    migrations were squashed into one first schema) is not read, with an error
    that says so and what to do; nothing in it is changed."""
    backend, target = fresh_store
    sql(backend, target, "CREATE TABLE resilience_migrations (v INTEGER PRIMARY KEY)")
    sql(backend, target, "INSERT INTO resilience_migrations (v) VALUES (30)")
    async with AsyncExitStack() as stack:
        with pytest.raises(ConfigError, match="pre-release") as caught:
            saver = await open_saver(backend, is_async, target, stack)
            if is_async:
                await saver.setup()
            else:
                await asyncio.to_thread(saver.setup)
    assert "new database" in str(caught.value)
    assert sql(backend, target, "SELECT v FROM resilience_migrations") == [(30,)]
    exists = (
        "SELECT count(*) FROM sqlite_master WHERE name = 'resilience_schema'"
        if backend == "sqlite"
        else "SELECT count(*) FROM pg_tables WHERE tablename = 'resilience_schema' "
        "AND schemaname = current_schema()"
    )
    assert sql(backend, target, exists) == [(0,)]
