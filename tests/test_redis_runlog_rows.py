"""The run ledger's rows as Redis will keep them (`checkpoint.redis._runlog_rows`):
a thread's rows, kept as encoded JSON and loaded into the snapshot, give the SQL
savers' own readers what the SQLite store gives them, and the ledger's writes
run on the snapshot change the rows as they change the SQLite store's."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from test_report import CONFIG, every_fate

from langgraph_resilience import retry_failed
from langgraph_resilience._langgraph import INTERRUPT_CHANNEL
from langgraph_resilience.checkpoint.redis._runlog_rows import (
    LEDGER_TABLES,
    LedgerSnapshot,
    decode_row,
    encode_row,
    row_field,
)
from langgraph_resilience.checkpoint.runlog import _run_log
from langgraph_resilience.checkpoint.runlog._run_metrics import read_metrics
from langgraph_resilience.checkpoint.runlog._run_summaries import (
    list_summaries,
    read_thread_ledger,
)
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.store._schema import RUNS, STEPS
from langgraph_resilience.checkpoint.store._store import SQLITE, Statements, Stmt, Table, execute


def _rows(conn: sqlite3.Connection, table: Table) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute(f"SELECT {', '.join(table.names)} FROM {table.name}")]


def _replay(statements: list[Stmt]) -> Statements[None]:
    for stmt in statements:  # noqa: UP028 (a list takes no send)
        yield stmt


def _kept(conn: sqlite3.Connection, snap: LedgerSnapshot) -> dict[str, dict[str, str]]:
    """Copy the store's ledger rows into the snapshot through their Redis form."""
    held: dict[str, dict[str, str]] = {}
    for table in (*LEDGER_TABLES, STEPS, RUNS):
        encoded = {row_field(table, r): encode_row(r) for r in _rows(conn, table)}
        snap.load(table, [decode_row(raw) for raw in encoded.values()])
        held[table.name] = encoded
    tasks = conn.execute(
        "SELECT checkpoint_id, task_id FROM writes WHERE checkpoint_ns = '' AND channel = ?",
        (INTERRUPT_CHANNEL,),
    ).fetchall()
    snap.load_interrupts("fates", [(str(c), str(t)) for c, t in tasks])
    return held


def test_the_sql_readers_read_the_same_runs_from_the_kept_rows(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.db")
    fixed = {"e": False}
    with ResilientSqliteSaver.from_conn_string(db) as saver:
        graph = every_fate(saver, fixed)
        graph.invoke({"done": []}, CONFIG)
        fixed["e"] = True
        retry_failed(graph, CONFIG)
    conn = sqlite3.connect(db)
    snap = LedgerSnapshot()
    with snap.lock:
        _kept(conn, snap)
        for reads in (
            lambda: read_thread_ledger(SQLITE, "fates"),
            lambda: list_summaries(SQLITE, None, 100),
            lambda: list_summaries(SQLITE, ("success",), 100),
            lambda: read_metrics(SQLITE, None, None),
            lambda: read_metrics(SQLITE, 0.0, ["e"]),
        ):
            want = execute(conn.cursor(), reads())
            assert snap.run(reads()) == want
        ledger = snap.run(read_thread_ledger(SQLITE, "fates"))
    assert [r.status for r in ledger.runs] == ["success"]
    assert [r.kind for r in ledger.recoveries] == ["retry_failed"]
    assert ledger.paths  # the path retry_failed re-ran, by its key


def test_a_ledger_write_on_the_snapshot_changes_the_row_as_on_sqlite(tmp_path: Path) -> None:
    db = str(tmp_path / "ledger.db")
    with ResilientSqliteSaver.from_conn_string(db) as saver:
        every_fate(saver, {"e": False}).invoke({"done": []}, CONFIG)
    conn = sqlite3.connect(db)
    snap = LedgerSnapshot()
    with snap.lock:
        held = _kept(conn, snap)
        assert snap.changes(held, "fates") == {}  # nothing written: nothing to store back
        # One write, one time: the same statements' rows on both.
        statements = list(_run_log.reopen_run(SQLITE, "fates", 1, "cp-fork", ["e"]))
        execute(conn.cursor(), _replay(statements))
        snap.run(_replay(statements))
        changed = snap.changes(held, "fates")
        snap.clear()
    for table in LEDGER_TABLES:
        now = {row_field(table, r): encode_row(r) for r in _rows(conn, table)}
        moved = {f: raw for f, raw in now.items() if held[table.name].get(f) != raw}
        assert changed.get(table.name, {}) == moved
    reopened = decode_row(changed["resilience_run_log"]["1"])
    assert reopened[2] == "running"  # the run goes on, its failed step cleared
    assert set(changed) == {
        "resilience_run_log",
        "resilience_recoveries",
        "resilience_recovery_paths",
    }
