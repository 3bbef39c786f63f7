"""With an encrypting ``serde``, no stored row holds the user's data in the clear.

A graph whose input, output, side-effect outcome and failure message carry a
secret string runs on each saver with LangGraph's ``EncryptedSerializer``
(AES-EAX), directly and as a Worker run; then every column of every table is
read raw and searched for the secret. On Postgres this goes beyond LangGraph's
own saver, which keeps primitive channel values in the clear in the
checkpoint's JSONB. A flipped bit in an encrypted row reads as
`CheckpointCorrupt`, whether our checksum or EAX's tag catches it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import SAVER_KINDS, saver_of_kind
from langgraph.graph import START

pytest.importorskip("Crypto", reason="pycryptodome (the dev extra) is not installed")

from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from langgraph_resilience import (
    Backoff,
    NodePolicy,
    ResilientState,
    ResilientStateGraph,
    TransientError,
    Worker,
    side_effect,
)
from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.errors import CheckpointCorrupt

#: The secret of this run of the tests (the module's Postgres database is shared).
SECRET = f"s3cr3t-Zebra-{uuid.uuid4().hex[:8]}"
KEY = b"0123456789abcdef0123456789abcdef"


class S(ResilientState, total=False):
    q: str
    a: str
    n: int


@side_effect
def deliver(text: str) -> str:
    return "delivered " + text


def graph_of(tries: list[int]) -> ResilientStateGraph:
    def answer(state: S) -> dict[str, Any]:
        tries.append(1)
        if len(tries) % 2:
            raise TransientError("upstream refused " + state["q"])
        return {"a": deliver(state["q"]), "n": 7}

    g = ResilientStateGraph(S)
    retry = Backoff(max_attempts=3, initial_interval=0.01)
    g.add_node("answer", answer, policy=NodePolicy(retry=retry))
    g.add_edge(START, "answer")
    return g


def encrypted() -> EncryptedSerializer:
    return EncryptedSerializer.from_pycryptodome_aes(key=KEY)


@pytest.fixture(params=SAVER_KINDS)
async def saver(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    target, opened = saver_of_kind(request, tmp_path, "enc.db")
    if request.param.endswith("async"):
        async with opened as s:
            s.serde = encrypted()
            await s.setup()
            s.target = target
            yield s
    else:
        with opened as s:
            s.serde = encrypted()
            s.setup()
            s.target = target
            yield s


def _is_async(saver: Any) -> bool:
    return isinstance(saver, AsyncResilientSqliteSaver | AsyncResilientPostgresSaver)


def raw_hits(saver: Any, secret: str) -> list[str]:
    """Every table.column of the store whose raw value holds ``secret``."""
    hits = set()
    needle = secret.encode()
    if isinstance(saver, ResilientSqliteSaver | AsyncResilientSqliteSaver):
        with sqlite3.connect(saver.target) as conn:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            for table in tables:
                columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
                for row in conn.execute(f"SELECT * FROM {table}"):
                    for column, value in zip(columns, row, strict=True):
                        raw = value if isinstance(value, bytes) else str(value).encode()
                        if needle in raw:
                            hits.add(f"{table}.{column}")
    else:
        with psycopg.connect(saver.target) as conn:
            tables = [
                r[0]
                for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname='public'")
            ]
            for table in tables:
                for row in conn.execute(f"SELECT * FROM {table}").fetchall():
                    for column, value in zip(
                        [
                            c.name
                            for c in conn.execute(f"SELECT * FROM {table} LIMIT 0").description
                            or []
                        ],
                        row,
                        strict=True,
                    ):
                        raw = (
                            bytes(value)
                            if isinstance(value, bytes | memoryview)
                            else str(value).encode()
                        )
                        if needle in raw:
                            hits.add(f"{table}.{column}")
    return sorted(hits)


async def test_no_stored_row_holds_the_secret(saver: Any) -> None:
    tries: list[int] = []
    graph = graph_of(tries).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": f"enc-{uuid.uuid4().hex[:6]}"}}
    worker = Worker(graph_of(tries), checkpointer=saver, lease_ttl=5)
    if _is_async(saver):
        out = await graph.ainvoke({"q": SECRET}, config)
        run_id = await worker.asubmit({"q": SECRET + "-by-worker"})
        left = await worker.arun()
        steps = await saver.astep_history(config["configurable"]["thread_id"])
    else:
        out = await asyncio.to_thread(graph.invoke, {"q": SECRET}, config)
        run_id = await asyncio.to_thread(worker.submit, {"q": SECRET + "-by-worker"})
        left = await asyncio.to_thread(worker.run)
        steps = await asyncio.to_thread(saver.step_history, config["configurable"]["thread_id"])
    assert out["a"] == "delivered " + SECRET and out["n"] == 7
    assert left[run_id] == "success"
    assert [s["status"] for s in steps] == ["completed"]
    assert raw_hits(saver, SECRET) == []
    # the same run without encryption does store it (the search finds what it looks for)
    plain = f"plain-{uuid.uuid4().hex[:6]}"
    saver.serde = type(saver.serde.serde)()  # the inner JsonPlusSerializer
    if _is_async(saver):
        await (
            graph_of([1])
            .compile(checkpointer=saver)
            .ainvoke({"q": plain}, {"configurable": {"thread_id": plain}})
        )
    else:
        await asyncio.to_thread(
            graph_of([1]).compile(checkpointer=saver).invoke,
            {"q": plain},
            {"configurable": {"thread_id": plain}},
        )
    assert raw_hits(saver, plain) != []


def _flip_a_blob_bit(saver: Any, thread_id: str, *, with_sum: bool) -> None:
    """Flip one bit of the thread's latest checkpoint's stored value (and, with
    ``with_sum``, store the checksum of the flipped bytes, as a writer that
    corrupted its buffer before summing would)."""
    if isinstance(saver, ResilientSqliteSaver | AsyncResilientSqliteSaver):
        with sqlite3.connect(saver.target) as conn:
            cp_id, blob = conn.execute(
                "SELECT checkpoint_id, checkpoint FROM checkpoints WHERE thread_id = ? "
                "ORDER BY checkpoint_id DESC LIMIT 1",
                (thread_id,),
            ).fetchone()
            flipped = bytearray(blob)
            flipped[len(flipped) // 2] ^= 0x04
            conn.execute(
                "UPDATE checkpoints SET checkpoint = ? WHERE thread_id = ? AND checkpoint_id = ?",
                (bytes(flipped), thread_id, cp_id),
            )
            if with_sum:
                conn.execute(
                    "UPDATE checkpoints SET resilience_sum = NULL WHERE thread_id = ?", (thread_id,)
                )
    else:
        with psycopg.connect(saver.target, autocommit=True) as conn:
            row = conn.execute(
                "SELECT channel, version, blob FROM checkpoint_blobs WHERE thread_id = %s "
                "AND channel = 'a'",
                [thread_id],
            ).fetchone()
            channel, version, blob = row
            flipped = bytearray(blob)
            flipped[len(flipped) // 2] ^= 0x04
            conn.execute(
                "UPDATE checkpoint_blobs SET blob = %s WHERE thread_id = %s AND channel = %s "
                "AND version = %s",
                [bytes(flipped), thread_id, channel, version],
            )
            if with_sum:
                conn.execute(
                    "UPDATE checkpoint_blobs SET resilience_sum = NULL WHERE thread_id = %s",
                    [thread_id],
                )


@pytest.mark.parametrize("with_sum", [False, True], ids=["checksum", "eax"])
async def test_a_flipped_bit_is_checkpoint_corrupt(saver: Any, with_sum: bool) -> None:
    thread_id = f"flip-{uuid.uuid4().hex[:6]}"
    config = {"configurable": {"thread_id": thread_id}}
    graph = graph_of([1]).compile(checkpointer=saver)
    if _is_async(saver):
        await graph.ainvoke({"q": SECRET}, config)
    else:
        await asyncio.to_thread(graph.invoke, {"q": SECRET}, config)
    _flip_a_blob_bit(saver, thread_id, with_sum=with_sum)
    with pytest.raises(CheckpointCorrupt):
        if _is_async(saver):
            await saver.aget_tuple(config)
        else:
            await asyncio.to_thread(saver.get_tuple, config)
