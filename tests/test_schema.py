"""One source for each table's columns, checked against the live schema of both dialects.

`copy_thread` copies the columns the table definitions name, and records are read
by the names of their fields: a column added by a migration (ours or LangGraph's)
that a definition misses would be dropped silently by a copy. These tests fail
first.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from dataclasses import fields

import pytest
from conftest import open_saver
from helpers import sql

from langgraph_resilience.checkpoint import AttemptRecord, EffectRecord, RunRecord
from langgraph_resilience.checkpoint.saver._threads import copied_columns
from langgraph_resilience.checkpoint.store._schema import (
    ATTEMPTS,
    COUNTERS,
    EFFECTS,
    MIGRATIONS,
    RUN_LOG,
    RUNS,
    SCHEMA_VERSION,
    STEPS,
    Migration,
    migrations,
)
from langgraph_resilience.checkpoint.store._store import POSTGRES, SQLITE, Column, Dialect, Table

OURS = (RUNS, ATTEMPTS, EFFECTS, COUNTERS, RUN_LOG, STEPS)


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


def test_one_migration_list_for_both_dialects() -> None:
    assert len(MIGRATIONS) == SCHEMA_VERSION + 1
    assert len(migrations(SQLITE)) == len(migrations(POSTGRES)) == len(MIGRATIONS)
    assert all(isinstance(m, Migration) for m in MIGRATIONS)
    # Only the stored functions are Postgres-only; SQLite checks in Python.
    pg_only = [v for v, m in enumerate(MIGRATIONS) if m.postgres and not m.sqlite]
    assert pg_only == [5, 6, 14, 25, 29]
