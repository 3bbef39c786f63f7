"""The run ledger's rows as Redis will keep them (`checkpoint.redis._runlog_rows`):
a thread's rows, kept as encoded JSON and loaded into the snapshot, give the SQL
savers' own readers what the SQLite store gives them, and the ledger's writes
run on the snapshot change the rows as they change the SQLite store's."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint
from redis.crc import key_slot
from test_report import CONFIG, every_fate

from langgraph_resilience import retry_failed
from langgraph_resilience._langgraph import INTERRUPT_CHANNEL
from langgraph_resilience.checkpoint.redis import _runlog_store
from langgraph_resilience.checkpoint.redis._runlog_rows import (
    LEDGER_TABLES,
    LedgerSnapshot,
    decode_row,
    encode_row,
    row_field,
)
from langgraph_resilience.checkpoint.redis._tier import Archived
from langgraph_resilience.checkpoint.runlog import _run_log
from langgraph_resilience.checkpoint.runlog._run_metrics import read_metrics
from langgraph_resilience.checkpoint.runlog._run_summaries import (
    list_summaries,
    read_thread_ledger,
)
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.store._schema import RUN_LOG, RUNS, STEPS
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


# -- on Redis (`_runlog_store`) ----------------------------------------------------------


def _redis_saver(prefix: str) -> Any:
    import warnings

    from redis_servers import REDIS_URL

    from langgraph_resilience.checkpoint.redis import ResilientRedisSaver

    cm = ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix)
    saver = cm.__enter__()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        saver.setup()
    return cm, saver


@pytest.fixture
def on_redis() -> Iterator[Any]:
    from redis_servers import REDIS_DOWN, flush_prefix

    if REDIS_DOWN is not None:
        pytest.skip(REDIS_DOWN)
    prefix = f"rl{uuid.uuid4().hex[:12]}"
    cm, saver = _redis_saver(prefix)
    yield saver
    cm.__exit__(None, None, None)
    flush_prefix(prefix)


def test_a_run_row_stored_on_redis_is_the_row_sqlite_stores(on_redis: Any, tmp_path: Path) -> None:
    saver, snap = on_redis, LedgerSnapshot()
    conn = sqlite3.connect(str(tmp_path / "twin.db"))
    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "twin.db")) as twin:
        twin.setup()
    writes = [
        lambda: _run_log.close_run(SQLITE, "t1", 1, "running", None, started_at=100.0),
        lambda: _run_log.close_run(SQLITE, "t1", 1, "success", {"tokens": 7.0}),
        lambda: _run_log.close_run(SQLITE, "t1", 2, "paused", None, started_at=200.0),
    ]
    for write in writes:
        saver._run(_runlog_store.apply(saver.place, snap, "t1", write))
        execute(conn.cursor(), write())
    conn.commit()
    version, held = saver._run(_runlog_store.read_ledger(saver.place, "t1"))
    assert version == "3"  # one version a write
    sql_rows = {row_field(RUN_LOG, r): r for r in _rows(conn, RUN_LOG)}
    redis_rows = {f: decode_row(raw) for f, raw in held[RUN_LOG.name].items()}
    assert set(redis_rows) == set(sql_rows) == {"1", "2"}
    for field, row in redis_rows.items():
        want = sql_rows[field]
        named = dict(zip(RUN_LOG.names, row, strict=True))
        wanted = dict(zip(RUN_LOG.names, want, strict=True))
        for clock in ("ended_at", "updated_at"):  # each store's own now
            assert (named.pop(clock) is None) == (wanted.pop(clock) is None)
        assert named == wanted
    keys = saver.place.keys("t1")
    assert len({key_slot(k.encode()) for k in keys}) == 1  # one slot: Redis Cluster works
    client = redis.Redis.from_url(__import__("redis_servers").REDIS_URL)
    assert 0 < client.pttl(keys.rl) <= saver.place.ttl_ms  # the thread's TTL, renewed


def test_a_ledger_write_raced_by_another_decides_again_and_loses_neither(on_redis: Any) -> None:
    saver, snap = on_redis, LedgerSnapshot()
    place = saver.place
    first = _runlog_store.apply(
        place, snap, "t2", lambda: _run_log.close_run(SQLITE, "t2", 1, "running", None, 1.0)
    )
    read = _pipe(saver.conn, next(first))  # it read the ledger (no version yet) ...
    # ... another writer stores run 2 in between ...
    saver._run(
        _runlog_store.apply(
            place, snap, "t2", lambda: _run_log.close_run(SQLITE, "t2", 2, "running", None, 2.0)
        )
    )
    store = first.send(read)  # its compare-and-set, on the stale version
    refused = _pipe(saver.conn, store)
    assert refused == [0]
    batch = first.send(refused)  # it reads again, decides again, stores
    while True:
        try:
            batch = first.send(_pipe(saver.conn, batch))
        except StopIteration:
            break
    _, held = saver._run(_runlog_store.read_ledger(place, "t2"))
    assert set(held[RUN_LOG.name]) == {"1", "2"}


def _pipe(conn: Any, batch: list[Any]) -> list[Any]:
    pipe = conn.pipeline(transaction=False)
    for command in batch:
        pipe.execute_command(*command)
    return list(pipe.execute())


def test_a_ledger_write_on_a_thread_in_the_cold_tier_is_refused(on_redis: Any) -> None:
    saver, snap = on_redis, LedgerSnapshot()
    keys = saver.place.keys("t3")
    saver.conn.set(keys.archived, "somewhere")
    with pytest.raises(Archived):
        saver._run(
            _runlog_store.apply(
                saver.place, snap, "t3", lambda: _run_log.close_run(SQLITE, "t3", 1, "running")
            )
        )
    assert not saver.conn.exists(keys.rl)


def test_the_ledger_rows_go_to_the_cold_tier_and_back_and_are_copied_and_deleted_with_the_thread(
    tmp_path: Path,
) -> None:
    from redis_servers import REDIS_DOWN, REDIS_URL, flush_prefix

    from langgraph_resilience import Archive
    from langgraph_resilience.checkpoint.redis import ResilientRedisSaver

    if REDIS_DOWN is not None:
        pytest.skip(REDIS_DOWN)
    prefix, snap = f"rl{uuid.uuid4().hex[:12]}", LedgerSnapshot()
    archive = Archive(f"file://{tmp_path}/cold")
    try:
        with ResilientRedisSaver.from_conn_string(
            REDIS_URL, prefix=prefix, archive=archive
        ) as saver:
            config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            saver.put(config, empty_checkpoint(), {}, {})
            write = lambda: _run_log.close_run(SQLITE, "t", 1, "success", None, 1.0)  # noqa: E731
            saver._run(_runlog_store.apply(saver.place, snap, "t", write))
            rows = saver._run(_runlog_store.read_ledger(saver.place, "t"))
            assert saver.archive_idle(thread_ids=["t"]).archived == ["t"]
            assert not saver.conn.exists(saver.place.keys("t").rl)  # demoted with the thread
            with pytest.raises(Archived):
                saver._run(_runlog_store.read_ledger(saver.place, "t"))
            assert saver.restore_thread("t")
            assert saver._run(_runlog_store.read_ledger(saver.place, "t")) == rows
            saver.copy_thread("t", "u")
            _, copied = saver._run(_runlog_store.read_ledger(saver.place, "u"))
            assert set(copied[RUN_LOG.name]) == {"1"}
            # A write on the copy decides on rows of the copy: its run 1 goes on there.
            again = lambda: _run_log.close_run(SQLITE, "u", 1, "paused", None)  # noqa: E731
            saver._run(_runlog_store.apply(saver.place, snap, "u", again))
            _, copied = saver._run(_runlog_store.read_ledger(saver.place, "u"))
            (row,) = (decode_row(r) for r in copied[RUN_LOG.name].values())
            assert (row[0], row[1], row[2], row[6]) == ("u", 1, "paused", 1.0)  # its start kept
            saver.delete_thread("t")
            assert not saver.conn.exists(saver.place.keys("t").rl)
    finally:
        flush_prefix(prefix)


def test_a_thread_read_on_redis_gives_the_report_rows_sqlite_gives(
    on_redis: Any, tmp_path: Path
) -> None:
    from langgraph_resilience.checkpoint.runlog._run_log_reads import read_run_row

    db = str(tmp_path / "ledger.db")
    fixed = {"e": False}
    with ResilientSqliteSaver.from_conn_string(db) as twin:
        graph = every_fate(twin, fixed)
        graph.invoke({"done": []}, CONFIG)
        fixed["e"] = True
        retry_failed(graph, CONFIG)
    conn, saver = sqlite3.connect(db), on_redis
    keys = saver.place.keys("fates")
    for table, key in ((LEDGER_TABLES[0], keys.rl), (LEDGER_TABLES[1], keys.rc)):
        for row in _rows(conn, table):
            saver.conn.hset(key, row_field(table, row), encode_row(row))
    for row in _rows(conn, LEDGER_TABLES[2]):
        saver.conn.hset(keys.rp, row_field(LEDGER_TABLES[2], row), encode_row(row))
    for row in _rows(conn, STEPS):
        named = dict(zip(STEPS.names, row, strict=True))
        saver.conn.hset(keys.st, row_field(STEPS, row), json.dumps(named))
    snap = LedgerSnapshot()
    for reads in (
        lambda: read_thread_ledger(SQLITE, "fates"),
        lambda: read_run_row(SQLITE, "fates", 1),
    ):
        want = execute(conn.cursor(), reads())
        assert saver._run(_runlog_store.read_thread(saver.place, snap, "fates", reads)) == want
    ledger = saver._run(
        _runlog_store.read_thread(
            saver.place, snap, "fates", lambda: read_thread_ledger(SQLITE, "fates")
        )
    )
    assert {s["path"] for s in ledger.steps} >= {"a", "b", "e"}
    assert [r.kind for r in ledger.recoveries] == ["retry_failed"]
