"""Checkpoint integrity: a flipped bit in what the savers stored never lets a run go
on with a changed state.

The bit-flip trial (both dialects): a four-step graph with a fan-out stops when one
branch fails, leaving a checkpoint and the other branch's pending write. One bit is
flipped in the stored checkpoint (SQLite: the checkpoint bytes; Postgres: a
``checkpoint_blobs`` blob), in the checkpoint row (its metadata; Postgres: its
JSONB), or in the pending write; then the run resumes with the branch fixed. Every
case must end in `CheckpointCorrupt` naming the thread and the checkpoint, or (a
flip in bytes nothing reads) in the state an untouched run ends in.

The same trial for side-effect outcomes (`test_bit_flip_trial_effect_outcomes`):
a charge recorded, the node failing after it, one bit flipped in the stored
outcome (its bytes, its type or its status), the run resumed: each case must be
caught as `CheckpointCorrupt` naming the thread and the effect's key, never
replay a changed receipt nor call the charge again.

``LGR_FAULT_RUNS`` sets the cases per dialect (default 6, the issue's count: 30).
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import random
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langgraph.graph import END, START, StateGraph

from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.errors import CheckpointCorrupt

FAULT_RUNS = int(os.environ.get("LGR_FAULT_RUNS", "6"))
TARGETS = ("blob", "row", "write")


class Doc(TypedDict):
    log: Annotated[list[str], operator.add]
    notes: dict[str, str]
    count: int


def _graph(fail: dict[str, bool]) -> StateGraph:
    def first(state: Doc) -> dict[str, Any]:
        return {"log": ["first"], "notes": {"first": "a" * 40}, "count": 1}

    def left(state: Doc) -> dict[str, Any]:
        return {"log": ["left:" + "l" * 30]}

    def right(state: Doc) -> dict[str, Any]:
        if fail["right"]:
            raise RuntimeError("right is down")
        return {"log": ["right"]}

    def last(state: Doc) -> dict[str, Any]:
        return {"log": ["last"], "count": state["count"] + 1}

    g = StateGraph(Doc)
    for name, fn in (("first", first), ("left", left), ("right", right), ("last", last)):
        g.add_node(name, fn)
    g.add_edge(START, "first")
    g.add_edge("first", "left")
    g.add_edge("first", "right")
    g.add_edge(["left", "right"], "last")
    g.add_edge("last", END)
    return g


def _flip(data: bytes, rng: random.Random) -> bytes:
    i = rng.randrange(len(data) * 8)
    out = bytearray(data)
    out[i // 8] ^= 1 << (i % 8)
    return bytes(out)


def _flip_json(value: Any, rng: random.Random) -> str:
    """The JSON text of ``value`` with one bit flipped, still JSON Postgres takes."""
    text = json.dumps(value).encode()
    for _ in range(500):
        flipped = _flip(text, rng)
        try:
            decoded = json.loads(flipped.decode())
        except (ValueError, UnicodeDecodeError):
            continue
        if decoded != value and "\\u0000" not in flipped.decode():
            return flipped.decode()
    raise AssertionError("no bit flip of this JSON is still JSON")


def _corrupt_sqlite(path: str, thread_id: str, target: str, rng: random.Random) -> None:
    with sqlite3.connect(path) as conn:
        cid = conn.execute(
            "SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = ?", (thread_id,)
        ).fetchone()[0]
        if target == "write":
            rowid, value = conn.execute(
                "SELECT rowid, value FROM writes WHERE thread_id = ? AND checkpoint_id = ? "
                "AND channel = 'log'",
                (thread_id, cid),
            ).fetchone()
            conn.execute("UPDATE writes SET value = ? WHERE rowid = ?", (_flip(value, rng), rowid))
            return
        column = "checkpoint" if target == "blob" else "metadata"
        (value,) = conn.execute(
            f"SELECT {column} FROM checkpoints WHERE thread_id = ? AND checkpoint_id = ?",
            (thread_id, cid),
        ).fetchone()
        conn.execute(
            f"UPDATE checkpoints SET {column} = ? WHERE thread_id = ? AND checkpoint_id = ?",
            (_flip(bytes(value), rng), thread_id, cid),
        )


def _corrupt_pg(dsn: str, thread_id: str, target: str, rng: random.Random) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cid, checkpoint, metadata = conn.execute(
            "SELECT checkpoint_id, checkpoint, metadata FROM checkpoints WHERE thread_id = %s "
            "ORDER BY checkpoint_id DESC LIMIT 1",
            (thread_id,),
        ).fetchone()
        if target == "write":
            task_id, idx, blob = conn.execute(
                "SELECT task_id, idx, blob FROM checkpoint_writes WHERE thread_id = %s "
                "AND checkpoint_id = %s AND channel = 'log'",
                (thread_id, cid),
            ).fetchone()
            conn.execute(
                "UPDATE checkpoint_writes SET blob = %s WHERE thread_id = %s "
                "AND checkpoint_id = %s AND task_id = %s AND idx = %s",
                (_flip(blob, rng), thread_id, cid, task_id, idx),
            )
        elif target == "blob":
            blobs = conn.execute(
                "SELECT channel, version, blob FROM checkpoint_blobs WHERE thread_id = %s "
                "AND blob IS NOT NULL ORDER BY channel, version",
                (thread_id,),
            ).fetchall()
            versions = checkpoint["channel_versions"]
            blobs = [b for b in blobs if versions.get(b[0]) == b[1]]
            channel, version, blob = rng.choice(blobs)
            conn.execute(
                "UPDATE checkpoint_blobs SET blob = %s WHERE thread_id = %s AND channel = %s "
                "AND version = %s",
                (_flip(blob, rng), thread_id, channel, version),
            )
        else:
            column, value = rng.choice([("checkpoint", checkpoint), ("metadata", metadata)])
            conn.execute(
                f"UPDATE checkpoints SET {column} = %s::jsonb WHERE thread_id = %s "
                "AND checkpoint_id = %s",
                (_flip_json(value, rng), thread_id, cid),
            )


def _run(saver: Any, thread_id: str, corrupt: Any) -> tuple[str, Any]:
    """Stop the run at its fan-out, let ``corrupt`` flip a bit, resume: what happened."""
    fail = {"right": True}
    graph = _graph(fail).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread_id}}
    with pytest.raises(RuntimeError, match="right is down"):
        graph.invoke({"log": [], "notes": {}, "count": 0}, config, durability="sync")
    stopped_at = saver.get_tuple(config).checkpoint["id"]
    corrupt(thread_id)
    fail["right"] = False
    try:
        return "ended", graph.invoke(None, config, durability="sync")
    except CheckpointCorrupt as exc:
        assert thread_id in str(exc) and stopped_at in str(exc), str(exc)
        return "caught", exc
    except Exception as exc:  # neither the run nor the error the user can act on
        return "other", exc


def _trial(open_saver: Any, corrupt: Any, label: str) -> None:
    with open_saver() as saver:
        _, expected = _run(saver, f"{label}-clean", lambda t: None)
        assert expected["log"][-1] == "last"
        outcomes: dict[str, list[str]] = {"caught": [], "unchanged": [], "altered": [], "other": []}
        for i in range(FAULT_RUNS):
            target = TARGETS[i % len(TARGETS)]
            rng = random.Random(f"{label}-{i}")
            how, result = _run(
                saver, f"{label}-{i}", lambda t, target=target, rng=rng: corrupt(t, target, rng)
            )
            if how == "ended":
                how = "unchanged" if result == expected else "altered"
            outcomes[how].append(f"{target}#{i}: {str(result)[:160]}")
    counts = {k: len(v) for k, v in outcomes.items()}
    print(label, counts)
    assert not outcomes["altered"] and not outcomes["other"], (counts, outcomes)


@pytest.mark.faults
def test_bit_flip_trial_sqlite(tmp_path: Path) -> None:
    path = str(tmp_path / "flips.db")
    _trial(
        lambda: ResilientSqliteSaver.from_conn_string(path),
        lambda t, target, rng: _corrupt_sqlite(path, t, target, rng),
        "sqlite",
    )


@pytest.mark.faults
def test_bit_flip_trial_postgres(pg_dsn: str) -> None:
    def open_saver() -> Any:
        cm = ResilientPostgresSaver.from_conn_string(pg_dsn)
        return cm

    with ResilientPostgresSaver.from_conn_string(pg_dsn) as saver:
        saver.setup()
    _trial(open_saver, lambda t, target, rng: _corrupt_pg(pg_dsn, t, target, rng), "postgres")


def _stopped_thread(saver: Any, thread_id: str) -> str:
    """A thread stopped at its fan-out; the id of its latest checkpoint."""
    graph = _graph({"right": True}).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread_id}}
    with pytest.raises(RuntimeError):
        graph.invoke({"log": [], "notes": {}, "count": 0}, config, durability="sync")
    return str(saver.get_tuple(config).checkpoint["id"])


@pytest.fixture
def own_pg(pg_dsn: str) -> Any:
    """A Postgres database of this test alone (a whole-store check sees only it)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"lgr_sums_{os.getpid()}_{random.randrange(10**9)}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield make_conninfo("", **{**conninfo_to_dict(pg_dsn), "dbname": name})
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _stores(tmp_path: Path, pg_dsn: str) -> list[tuple[str, str, Any, Any]]:
    path = str(tmp_path / "check.db")
    return [
        ("sqlite", path, lambda: ResilientSqliteSaver.from_conn_string(path), _corrupt_sqlite),
        ("postgres", pg_dsn, lambda: ResilientPostgresSaver.from_conn_string(pg_dsn), _corrupt_pg),
    ]


def _unsum(backend: str, target: str, thread_id: str) -> None:
    """Make the thread's rows look written before the checksums (migration 15)."""
    tables = (
        ("checkpoints", "writes")
        if backend == "sqlite"
        else ("checkpoints", "checkpoint_writes", "checkpoint_blobs")
    )
    if backend == "sqlite":
        with sqlite3.connect(target) as conn:
            for t in tables:
                conn.execute(
                    f"UPDATE {t} SET resilience_sum = NULL WHERE thread_id = ?", (thread_id,)
                )
        return
    with psycopg.connect(target, autocommit=True) as conn:
        for t in tables:
            conn.execute(f"UPDATE {t} SET resilience_sum = NULL WHERE thread_id = %s", (thread_id,))


def test_check_reports_damaged_rows_and_rows_written_before(
    tmp_path: Path, own_pg: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph_resilience.cli import main

    for backend, target, open_saver, corrupt in _stores(tmp_path, own_pg):
        with open_saver() as saver:
            saver.setup()
            bad = _stopped_thread(saver, f"chk-bad-{backend}")
            _stopped_thread(saver, f"chk-old-{backend}")
        capsys.readouterr()
        assert main(["check", "--db", target, "--json"]) == 0, capsys.readouterr()
        clean = json.loads(capsys.readouterr().out)
        assert clean["ok"] and clean["checked"]["checkpoint"] >= 2 and not clean["failures"]
        if backend == "sqlite":
            assert clean["quick_check"] == ["ok"]

        _unsum(backend, target, f"chk-old-{backend}")
        corrupt(target, f"chk-bad-{backend}", "write", random.Random(1))
        assert main(["check", "--db", target, "--json"]) == 1
        found = json.loads(capsys.readouterr().out)
        assert [(f["thread_id"], f["checkpoint_id"], f["kind"]) for f in found["failures"]] == [
            (f"chk-bad-{backend}", bad, "write")
        ]
        assert found["unverified"]["checkpoint"] >= 2 and found["unverified"]["write"] >= 1
        assert main(["check", "--db", target]) == 1
        assert f"chk-bad-{backend}" in capsys.readouterr().out

        with open_saver() as saver:  # rows with no checksum are read as before
            config = {"configurable": {"thread_id": f"chk-old-{backend}"}}
            graph = _graph({"right": False}).compile(checkpointer=saver)
            assert graph.invoke(None, config, durability="sync")["log"][-1] == "last"


def test_archived_and_copied_threads_stay_verified(tmp_path: Path, pg_dsn: str) -> None:
    from langgraph_resilience.checkpoint.archive import Archive

    for backend, target, open_saver, corrupt in _stores(tmp_path, pg_dsn):
        archive = Archive(f"file://{tmp_path}/cold-{backend}")
        with open_saver() as plain:
            plain.setup()
        saver_cm = (
            ResilientSqliteSaver.from_conn_string(target, archive=archive)
            if backend == "sqlite"
            else ResilientPostgresSaver.from_conn_string(target, archive=archive)
        )
        with saver_cm as saver:
            thread_id = f"cold-{backend}"
            cid = _stopped_thread(saver, thread_id)
            assert thread_id in saver.archive_idle(0).archived
            assert saver.restore_thread(thread_id)
            saver.copy_thread(thread_id, f"{thread_id}-copy")
            for t in (thread_id, f"{thread_id}-copy"):
                corrupt(target, t, "write", random.Random(2))
                with pytest.raises(CheckpointCorrupt, match=cid):
                    saver.get_tuple({"configurable": {"thread_id": t}})


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_special_write_written_again_by_its_task_still_verifies(
    backend: str, tmp_path: Path, own_pg: str
) -> None:
    """LangGraph's own suite (test_strict_resume) writes an interrupt again to the
    task that wrote it, from outside the run: Postgres's upsert replaces the value
    and keeps the first row's task path; the write must read back, not as corrupt."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.types import Interrupt

    opener = (
        ResilientSqliteSaver.from_conn_string(str(tmp_path / "again.db"))
        if backend == "sqlite"
        else ResilientPostgresSaver.from_conn_string(own_pg)
    )
    with opener as saver:
        saver.setup()
        config = {"configurable": {"thread_id": "again", "checkpoint_ns": ""}}
        stored = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        first = [("__interrupt__", (Interrupt(value="first?", id="card"),))]
        saver.put_writes(stored, first, "task-1", task_path="~__pregel_pull, ask")
        again = [("__interrupt__", (Interrupt(value="second?", id="card"),))]
        saver.put_writes(stored, again, "task-1")
        (write,) = saver.get_tuple(stored).pending_writes or []
        assert write[2][0].value == "second?"


# -- effect outcomes -----------------------------------------------------------------


def _effect_graph(saver: Any, calls: list[str], fail: list[bool], **options: Any) -> Any:
    """One node charges once, then fails while ``fail`` says so: a resume replays
    the charge's recorded outcome to it (``options``: the effect's; with
    ``on_unknown="raise"`` its outcome is stored at once, else with the next write)."""
    from langgraph_resilience import ResilientState, ResilientStateGraph, side_effect

    class Order(ResilientState, total=False):
        receipt: str

    @side_effect(name="charge", **options)
    def charge(amount: int, *, idempotency_key: str) -> str:
        calls.append(idempotency_key)
        return f"receipt-{amount:04d}-{len(calls):04d}"

    def pay(state: Order) -> dict[str, Any]:
        receipt = charge(42)
        if fail[0]:
            raise ValueError("the mail server is down, after the charge")
        return {"receipt": receipt}

    g = ResilientStateGraph(Order)
    g.add_node("pay", pay, policy=None)  # the failure stops the run, to be resumed
    g.add_edge(START, "pay")
    g.add_edge("pay", END)
    return g.compile(checkpointer=saver)


def _flip_outcome(backend: str, target: str, thread_id: str) -> str:
    """Flip the lowest bit of the stored outcome's last byte (the receipt's last
    digit: the value still decodes, changed); the effect's idempotency key."""
    from helpers import sql

    ((key, outcome),) = sql(
        backend,
        target,
        "SELECT idempotency_key, outcome FROM resilience_effects WHERE thread_id = ?",
        (thread_id,),
    )
    flipped = bytearray(bytes(outcome))
    flipped[-1] ^= 1
    sql(
        backend,
        target,
        "UPDATE resilience_effects SET outcome = ? WHERE thread_id = ? AND idempotency_key = ?",
        (bytes(flipped), thread_id, key),
    )
    return str(key)


async def _async_reads_refuse(backend: str, target: str, thread_id: str, key: str) -> None:
    from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver
    from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver

    cls = AsyncResilientSqliteSaver if backend == "sqlite" else AsyncResilientPostgresSaver
    async with cls.from_conn_string(target) as saver:
        with pytest.raises(CheckpointCorrupt, match="charge"):
            await saver.alist_effects(thread_id)
        with pytest.raises(CheckpointCorrupt) as caught:
            await saver.effects.aread(thread_id, key)
        assert caught.value.idempotency_key == key


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_flipped_bit_in_an_effect_outcome_is_caught_not_replayed(
    backend: str, tmp_path: Path, own_pg: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resume replays an effect's recorded outcome instead of calling it again: a
    bit flipped in that outcome must stop the run with `CheckpointCorrupt` naming the
    thread and the effect's key, never hand the node a changed value nor call the
    effect again; ``check`` finds it, and reading the ledger refuses it too."""
    from langgraph_resilience.cli import main

    target = str(tmp_path / "effects.db") if backend == "sqlite" else own_pg
    opener = (
        (lambda: ResilientSqliteSaver.from_conn_string(target))
        if backend == "sqlite"
        else (lambda: ResilientPostgresSaver.from_conn_string(target))
    )
    thread_id = f"flip-outcome-{backend}"
    config = {"configurable": {"thread_id": thread_id}}
    calls: list[str] = []
    fail = [True]
    with opener() as saver:
        saver.setup()
        graph = _effect_graph(saver, calls, fail)
        with pytest.raises(ValueError, match="after the charge"):
            graph.invoke({}, config, durability="sync")
        assert len(calls) == 1
        (stored,) = saver.list_effects(thread_id)
        assert stored.status == "done"
    key = _flip_outcome(backend, target, thread_id)

    with opener() as saver:
        graph = _effect_graph(saver, calls, fail)
        fail[0] = False
        with pytest.raises(CheckpointCorrupt) as caught:
            graph.invoke(None, config, durability="sync")
        assert thread_id in str(caught.value) and key in str(caught.value), str(caught.value)
        assert caught.value.idempotency_key == key
        assert calls == [key], "the effect was called again"
        with pytest.raises(CheckpointCorrupt, match="charge"):
            saver.list_effects(thread_id)
        with pytest.raises(CheckpointCorrupt, match="charge"):
            saver.effects.read(thread_id, key)
    asyncio.run(_async_reads_refuse(backend, target, thread_id, key))

    capsys.readouterr()
    assert main(["check", "--db", target, "--json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert [(f["kind"], f["thread_id"]) for f in found["failures"]] == [("effect", thread_id)]
    assert key in found["failures"][0]["what"] and found["checked"]["effect"] == 1


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_effect_outcomes_copied_or_written_before_read_as_they_were(
    backend: str, tmp_path: Path, own_pg: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copied thread's outcomes keep their sums (a flip in the copy is caught);
    an outcome stored before the checksums (no sum) is replayed as before and
    counted by ``check`` as unverified. Outcomes stored at once (``on_unknown=
    "raise"``, as `settle_effect` stores) carry their sum as those written behind."""
    from helpers import sql

    from langgraph_resilience.cli import main

    target = str(tmp_path / "effects.db") if backend == "sqlite" else own_pg
    opener = (
        (lambda: ResilientSqliteSaver.from_conn_string(target))
        if backend == "sqlite"
        else (lambda: ResilientPostgresSaver.from_conn_string(target))
    )
    calls: list[str] = []
    fail = [True]
    with opener() as saver:
        saver.setup()
        graph = _effect_graph(saver, calls, fail, on_unknown="raise")
        for t in ("old", "src"):
            with pytest.raises(ValueError):
                graph.invoke({}, {"configurable": {"thread_id": t}}, durability="sync")
        saver.copy_thread("src", "copy")
        sql(
            backend,
            target,
            "UPDATE resilience_effects SET outcome_sum = NULL WHERE thread_id = ?",
            ("old",),
        )
        key = _flip_outcome(backend, target, "copy")
        with pytest.raises(CheckpointCorrupt, match=key):
            saver.list_effects("copy")
        capsys.readouterr()
        assert main(["check", "--db", target, "--json"]) == 1
        found = json.loads(capsys.readouterr().out)
        assert found["unverified"]["effect"] == 1 and found["checked"]["effect"] == 2
        assert [f["thread_id"] for f in found["failures"]] == ["copy"]
        fail[0] = False
        old = graph.invoke(None, {"configurable": {"thread_id": "old"}}, durability="sync")
        assert old["receipt"] == "receipt-0042-0001" and len(calls) == 2


# -- the bit-flip trial for effect outcomes -------------------------------------------

EFFECT_TARGETS = ("outcome", "outcome", "outcome_type", "status")


def _flip_text(text: str, rng: random.Random) -> str:
    """``text`` with one of the low five bits of one character flipped: still
    printable ASCII for ASCII text (a Postgres text column takes it)."""
    i = rng.randrange(len(text))
    return text[:i] + chr(ord(text[i]) ^ (1 << rng.randrange(5))) + text[i + 1 :]


def _flip_effect(backend: str, target: str, thread_id: str, column: str, rng: random.Random) -> str:
    """Flip one random bit of the thread's stored effect outcome (its bytes, its
    type or its status); what changed, as ``column: before -> after``."""
    from helpers import sql

    ((key, value),) = sql(
        backend,
        target,
        f"SELECT idempotency_key, {column} FROM resilience_effects WHERE thread_id = ?",
        (thread_id,),
    )
    flipped: Any = _flip(bytes(value), rng) if column == "outcome" else _flip_text(str(value), rng)
    sql(
        backend,
        target,
        f"UPDATE resilience_effects SET {column} = ? WHERE thread_id = ? AND idempotency_key = ?",
        (flipped, thread_id, key),
    )
    return f"{column}: {value!r} -> {flipped!r}"


def _effect_trial(backend: str, target: str, opener: Any) -> dict[str, list[str]]:
    """`FAULT_RUNS` runs: charge once, fail after; one bit flipped in the stored
    outcome; resume with the node fixed. Each case is caught (`CheckpointCorrupt`
    naming the thread and the effect's key), or ends with the receipt the call
    returned, the effect called once; never a changed receipt nor a second call."""
    outcomes: dict[str, list[str]] = {"caught": [], "unchanged": [], "altered": [], "other": []}
    with opener() as saver:
        saver.setup()
        for i in range(FAULT_RUNS):
            rng = random.Random(f"effect-{backend}-{i}")
            thread_id = f"flip-effect-{backend}-{i}-{random.randrange(10**9)}"
            config = {"configurable": {"thread_id": thread_id}}
            calls: list[str] = []
            fail = [True]
            graph = _effect_graph(saver, calls, fail)
            with pytest.raises(ValueError, match="after the charge"):
                graph.invoke({}, config, durability="sync")
            receipt = f"receipt-0042-{len(calls):04d}"
            what = _flip_effect(
                backend, target, thread_id, EFFECT_TARGETS[i % len(EFFECT_TARGETS)], rng
            )
            fail[0] = False
            try:
                out = graph.invoke(None, config, durability="sync")
            except CheckpointCorrupt as exc:
                named = thread_id in str(exc) and exc.idempotency_key == calls[0]
                outcomes["caught" if named else "other"].append(f"#{i} {what}: {exc}")
                continue
            except Exception as exc:
                outcomes["other"].append(f"#{i} {what}: {type(exc).__name__}: {exc}")
                continue
            same = out.get("receipt") == receipt and len(calls) == 1
            outcomes["unchanged" if same else "altered"].append(f"#{i} {what}: {out} {calls}")
    return outcomes


@pytest.mark.faults
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_bit_flip_trial_effect_outcomes(backend: str, tmp_path: Path, own_pg: str) -> None:
    """The issue's trial for ledger outcomes: 0 runs replay a changed outcome or
    call the effect again (``LGR_FAULT_RUNS`` cases per dialect)."""
    target = str(tmp_path / "effect-flips.db") if backend == "sqlite" else own_pg
    cls: Any = ResilientSqliteSaver if backend == "sqlite" else ResilientPostgresSaver
    outcomes = _effect_trial(backend, target, lambda: cls.from_conn_string(target))
    counts = {k: len(v) for k, v in outcomes.items()}
    print(f"effect outcomes {backend}", counts)
    assert not outcomes["altered"] and not outcomes["other"], (counts, outcomes)
    assert counts["caught"] + counts["unchanged"] == FAULT_RUNS


def test_the_sums_stay_those_already_stored() -> None:
    """Each sum's value is fixed by the rows stored so far (a different value would
    read them as corrupt): these were computed by the first, part-by-part sum."""
    from langgraph_resilience.checkpoint.store._sums import (
        blob_sum,
        checkpoint_sum,
        outcome_sum,
        write_sum,
    )

    assert checkpoint_sum("1ef-id", "msgpack", b"\x81\xa1a\x01", b'{"step": 1}') == 135510182
    error = memoryview(b"ValueError('x')")
    assert write_sum("1ef-id", "task-1", "~path", -1, "__error__", None, error) == 4222657979
    version = "00000000000000000000000000000002.0.5"
    assert blob_sum("trail", version, "msgpack", bytearray(b"\x92\xa1a\xa1b")) == 1916958288
    assert outcome_sum("k-1", "done", "msgpack", b"\xa7receipt", None) == 3407393678
