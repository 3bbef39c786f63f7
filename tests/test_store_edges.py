"""The store's edge cases: values and ids one dialect cannot store, a full disk, a
caller's pool under a blackhole.

- Postgres cannot inline a NaN/±Infinity or a NUL in a top-level channel value
  (JSONB): the step fails once with a clear `ValueError`, and the thread resumes
  once the node is fixed (as on SQLite, which finishes the same graph).
- A thread id holding NUL: refused on both dialects with a `ConfigError`, so no
  thread is left that `delete_thread`/`prune` cannot delete.
- A full SQLite disk while an effect's outcome is written: a real tmpfs, not a mock.
- A pool the caller built, under a `TcpProxy` blackhole: every call ends with
  `StoreUnavailable` within a stated bound.
"""

from __future__ import annotations

import asyncio
import errno
import operator
import os
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Annotated, Any

import pytest
from conftest import IN_CI, Harness, harness
from faults import TcpProxy
from graphs import one_node
from helpers import sql
from langgraph.graph import END, START
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_resilience import Backoff, ResilientState, ResilientStateGraph, side_effect
from langgraph_resilience._util._process import executing, executor_alive, executor_id
from langgraph_resilience.checkpoint.postgres import PgTimeouts, ResilientPostgresSaver
from langgraph_resilience.checkpoint.postgres._network import CONNECT_KWARGS
from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.checkpoint.store._store_retry import retry_window
from langgraph_resilience.errors import ConfigError, StoreUnavailable


class Channels(ResilientState, total=False):
    value: Any
    total: Annotated[float, operator.add]
    done: list[str]


# -- Postgres: a value JSONB cannot hold -----------------------------------------------

UNSTORABLE = {
    "nan": ("value", float("nan"), r"'value' a float nan"),
    "infinity": ("total", float("-inf"), r"'total' a float -inf"),
    "nul": ("value", "ab\x00c", r"'value' a str holding a NUL character at index 2"),
}


def fixable_graph(channel: str, bad: Any, fixed: list[bool]) -> ResilientStateGraph:
    def start(state: Channels) -> dict[str, Any]:
        return {"done": ["start"]}

    def compute(state: Channels) -> dict[str, Any]:
        return {channel: (1.5 if channel == "total" else "ok") if fixed else bad}

    def finish(state: Channels) -> dict[str, Any]:
        return {"done": [*state["done"], "finish"]}

    g = ResilientStateGraph(Channels)
    g.add_node("start", start)
    g.add_node("compute", compute)
    g.add_node("finish", finish)
    g.add_edge(START, "start")
    g.add_edge("start", "compute")
    g.add_edge("compute", "finish")
    g.add_edge("finish", END)
    return g


@pytest.mark.parametrize("kind", list(UNSTORABLE))
@pytest.mark.parametrize("durability", ["sync", "async"])
@pytest.mark.parametrize("name", ["postgres", "postgres-async", "postgres-pool"])
async def test_a_value_postgres_cannot_store_fails_the_step_once_then_the_thread_resumes(
    name: str, durability: str, kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    channel, bad, named = UNSTORABLE[kind]
    fixed: list[bool] = []
    async with AsyncExitStack() as stack:
        h = await harness(name, request, tmp_path, stack)
        graph = fixable_graph(channel, bad, fixed).compile(checkpointer=h.saver)
        config = {"configurable": {"thread_id": f"jsonb-{uuid.uuid4().hex[:8]}"}}
        with pytest.raises(ValueError, match=named) as raised:
            await h.invoke(graph, {}, config, durability=durability)
        assert "cannot store" in str(raised.value)
        assert "resuming the thread runs the step again" in str(raised.value)
        fixed.append(True)  # the node is fixed: the same thread resumes and finishes
        final = await h.invoke(graph, None, config, durability=durability)
        assert final["done"] == ["start", "finish"]
        assert final[channel] in ("ok", 1.5)
        # What Postgres stores inline in other cases is LangGraph's own: nested
        # values (blobs) keep their NaN and NUL.
        nested = await h.invoke(
            fixable_graph("value", {"x": [float("nan"), "a\x00"]}, []).compile(
                checkpointer=h.saver
            ),
            {},
            {"configurable": {"thread_id": f"nested-{uuid.uuid4().hex[:8]}"}},
        )
        assert nested["value"]["x"][1] == "a\x00"


async def test_sqlite_stores_the_same_values(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async with AsyncExitStack() as stack:
        h = await harness("sqlite", request, tmp_path, stack)
        for channel, bad, _ in UNSTORABLE.values():
            graph = fixable_graph(channel, bad, []).compile(checkpointer=h.saver)
            config = {"configurable": {"thread_id": f"sqlite-{uuid.uuid4().hex[:8]}"}}
            final = await h.invoke(graph, {}, config)
            assert final["done"] == ["start", "finish"]


# -- thread ids: refused alike, deleted whole ------------------------------------------

HOSTILE_IDS = {
    "nul": ("job\x0042", "holds a NUL character at index 3"),
    "surrogate": ("job-\ud800", "is not valid Unicode"),
    "long": ("x" * 1_000_000, "1000000 bytes long .UTF-8., over the 1024 allowed"),
    "not-text": (1.5, "is a float: a thread id is text"),
}


def effect_graph() -> ResilientStateGraph:
    @side_effect(name="send")
    def send(text: str) -> str:
        return f"sent {text}"

    def step(name: str) -> Any:
        def node(state: Channels) -> dict[str, Any]:
            return {"done": [*state.get("done", []), send(name)]}

        return node

    g = ResilientStateGraph(Channels)
    g.add_node("a", step("a"))
    g.add_node("b", step("b"))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g


@pytest.mark.parametrize("hostile", list(HOSTILE_IDS))
async def test_a_thread_id_one_dialect_cannot_store_is_refused_on_both(
    checkpointer: Any, hostile: str
) -> None:
    h = checkpointer
    thread_id, problem = HOSTILE_IDS[hostile]
    graph = effect_graph().compile(checkpointer=h.saver)
    with pytest.raises(ConfigError, match=problem) as raised:
        await h.invoke(graph, {}, {"configurable": {"thread_id": thread_id}})
    assert "Postgres" not in str(raised.value)  # one rule, the same words, on every backend
    assert len(str(raised.value)) < 400  # a long id is shown cut short
    with pytest.raises(ConfigError, match=problem):
        await h.call("runs.submit", "run-hostile", thread_id, None, None)
    # Deleting such a thread is no error: there is nothing of it to delete.
    await h.call("delete_thread", thread_id)
    await h.call("prune", [thread_id], strategy="delete")


async def test_an_integer_thread_id_is_its_text_on_every_backend(checkpointer: Any) -> None:
    """``thread_id=42`` runs, reads back and deletes as the thread ``"42"`` (Postgres
    once ran it, then failed every read with ``text = smallint``)."""
    h = checkpointer
    number = 10_000 + uuid.uuid4().int % 10_000
    graph = effect_graph().compile(checkpointer=h.saver)
    await h.invoke(graph, {}, {"configurable": {"thread_id": number}})
    found = await h.call("get_tuple", {"configurable": {"thread_id": number}})
    same = await h.call("get_tuple", {"configurable": {"thread_id": str(number)}})
    assert found is not None and same is not None
    assert found.checkpoint["id"] == same.checkpoint["id"]
    assert len(await h.listed({"configurable": {"thread_id": number}})) >= 3
    await h.call("delete_thread", number)
    assert await h.call("get_tuple", {"configurable": {"thread_id": str(number)}}) is None


def thread_rows(target: str, thread_id: str) -> dict[str, int]:
    tables = [
        t
        for (t,) in sql("sqlite", target, "SELECT name FROM sqlite_master WHERE type = 'table'")
        if any(c[1] == "thread_id" for c in sql("sqlite", target, f"PRAGMA table_info({t})"))
    ]
    counts = {
        t: sql("sqlite", target, f"SELECT count(*) FROM {t} WHERE thread_id = ?", (thread_id,))[0][
            0
        ]
        for t in tables
    }
    return {t: n for t, n in counts.items() if n}


async def legacy_thread(h: Any, thread_id: str) -> dict[str, int]:
    """A thread stored under ``thread_id`` by a version that did not refuse it (the
    rows of a clean run, renamed in place): what delete must still remove."""
    clean = f"clean-{uuid.uuid4().hex[:8]}"
    graph = effect_graph().compile(checkpointer=h.saver)
    await h.invoke(graph, {}, {"configurable": {"thread_id": clean}})
    for table in thread_rows(h.target, clean):
        sql(
            "sqlite",
            h.target,
            f"UPDATE {table} SET thread_id = ? WHERE thread_id = ?",
            (thread_id, clean),
        )
    rows = thread_rows(h.target, thread_id)
    assert rows["checkpoints"] >= 3 and rows["writes"] >= 3 and rows["resilience_effects"] == 2
    return rows


@pytest.mark.parametrize("how", ["delete_thread", "prune", "prune_history"])
@pytest.mark.parametrize("name", ["sqlite", "sqlite-async"])
async def test_sqlite_deletes_a_thread_stored_under_a_nul_id_whole(
    name: str, how: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async with AsyncExitStack() as stack:
        h = await harness(name, request, tmp_path, stack)
        thread_id = "legacy\x00" + uuid.uuid4().hex[:6]
        bystander = "legacy"  # the id's text before its NUL: a thread of its own, kept
        kept = await legacy_thread(h, bystander)
        await legacy_thread(h, thread_id)
        if how == "delete_thread":
            await h.call("delete_thread", thread_id)
            assert thread_rows(h.target, thread_id) == {}
        elif how == "prune":
            await h.call("prune", [thread_id], strategy="delete")
            assert thread_rows(h.target, thread_id) == {}
        else:
            await h.call("prune_history", keep_last=1, thread_ids=[thread_id])
            left = thread_rows(h.target, thread_id)
            # The latest checkpoint stays with its own rows; the older ones go whole
            # (their writes and node attempts), the effects stay (the ledger).
            assert left["checkpoints"] == 1
            assert left.get("resilience_node_attempts", 0) <= 1
            assert sql(
                "sqlite",
                h.target,
                "SELECT count(*) FROM writes w WHERE thread_id = ? AND NOT EXISTS (SELECT 1 "
                "FROM checkpoints c WHERE c.thread_id = w.thread_id AND c.checkpoint_id = "
                "w.checkpoint_id)",
                (thread_id,),
            ) == [(0,)]
        assert thread_rows(h.target, bystander) == kept


# -- a full disk while an effect's outcome is written ----------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs of the test's own (a real file system that fills up), or a
    skip saying why one cannot be mounted here (mounting needs root)."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        reason = f"cannot mount a tmpfs to fill ({done.stderr.strip() or done.returncode})"
        if IN_CI:
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk``: the next write that needs a page fails."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


STORE_RETRY = Backoff(max_attempts=2, initial_interval=0.01, max_interval=0.01)


@pytest.mark.parametrize("on_unknown", ["raise", "reexecute"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_full_disk_while_an_outcome_is_written_stops_the_run_clearly_then_it_resumes(
    small_disk: Path, is_async: bool, on_unknown: str
) -> None:
    """The effect is called once; the run stops with `StoreUnavailable` (never a raw
    sqlite3 error, never this process's own claim taken for another executor's),
    and once space is back the same process resumes the thread, replaying the
    outcome it still holds."""
    calls: list[str] = []
    filler: list[Path] = []

    @side_effect(name="pay", on_unknown=on_unknown)  # type: ignore[arg-type]
    def pay(order: str) -> str:
        calls.append(order)
        filler.append(fill(small_disk))
        return f"paid {order} " + "x" * 50_000  # an outcome that needs new pages

    def charge(state: Channels) -> dict[str, Any]:
        return {"done": [pay("order-1")[:12]]}

    g = one_node(ResilientStateGraph(Channels), "charge", charge)
    path = str(small_disk / "store.db")
    config = {"configurable": {"thread_id": "full-disk"}}
    async with AsyncExitStack() as stack:
        if is_async:
            saver: Any = await stack.enter_async_context(
                AsyncResilientSqliteSaver.from_conn_string(path, store_retry=STORE_RETRY)
            )
        else:
            saver = stack.enter_context(
                ResilientSqliteSaver.from_conn_string(path, store_retry=STORE_RETRY)
            )
        h = Harness("sqlite", is_async, saver, path)
        graph = g.compile(checkpointer=saver)
        for value in ({}, None):  # the run, then a resume while the disk is still full
            with pytest.raises(StoreUnavailable, match="database or disk is full") as raised:
                await h.invoke(graph, value, config)
            assert "Free space on its file system" in str(raised.value)
            assert not isinstance(raised.value, sqlite3.Error)
        filler[0].unlink()  # space is back
        final = await h.invoke(graph, None, config)
        assert final["done"] == ["paid order-1"]
        assert final["resilience"]["status"] == "success"
        assert calls == ["order-1"]
        [effect] = await h.call("list_effects", "full-disk")
        assert effect.status == "done"


def test_this_process_claim_is_alive_while_its_call_runs_only() -> None:
    """The executor compare: an intent of this process whose call ended (its
    outcome lost) is gone, not "another executor" whose call may be in flight."""
    owner = executor_id("call-1")
    assert executor_alive(owner) is False
    with executing(owner):
        assert executor_alive(owner) is True  # another thread of ours runs the step
        assert executor_alive(executor_id("call-2")) is False
    assert executor_alive(owner) is False


# -- a pool the caller built, under a blackhole ----------------------------------------


@pytest.mark.faults
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_a_plain_pool_of_the_caller_gives_up_within_its_bound_under_a_blackhole(
    pg_server: Any, is_async: bool
) -> None:
    """A pool built the plain way (psycopg's own connection class, a DSN with no
    timeouts, a checkout wait longer than the whole bound): every saver call ends
    with `StoreUnavailable` within ``store_retry.max_attempts * (timeouts.checkout +
    timeouts.read) + retry window``, whatever the pool's own ``timeout``."""
    pg_server.ensure_running()
    dsn = pg_server.create_database(f"lgr_edges_{uuid.uuid4().hex[:8]}")
    with ResilientPostgresSaver.from_conn_string(dsn) as plain:
        plain.setup()
    timeouts = PgTimeouts(
        connect=2, statement=0.5, read=1.0, lock=0.4, idle_in_transaction=2, checkout=1.0
    )
    retry = Backoff(max_attempts=2, initial_interval=0.1, max_interval=0.1, jitter="none")
    pool_timeout = 120.0  # the caller's: the saver bounds each checkout itself
    bound = retry.max_attempts * (1.0 + 1.0) + retry_window(retry)
    with TcpProxy(pg_server.port) as proxy:
        target = proxy.dsn(dsn)
        async with AsyncExitStack() as stack:
            options = {"min_size": 1, "max_size": 2, "timeout": pool_timeout}
            if is_async:
                apool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                    target, kwargs=CONNECT_KWARGS, open=False, **options
                )
                await apool.open(wait=True)
                stack.push_async_callback(apool.close, 5)
                saver: Any = AsyncResilientPostgresSaver(
                    apool, store_retry=retry, timeouts=timeouts
                )
            else:
                pool: ConnectionPool[Any] = ConnectionPool(
                    target, kwargs=CONNECT_KWARGS, open=True, **options
                )
                pool.wait()
                stack.callback(pool.close, 5)
                saver = ResilientPostgresSaver(pool, store_retry=retry, timeouts=timeouts)
            h = Harness("postgres", is_async, saver, target, "pool")
            config = {"configurable": {"thread_id": f"blackhole-{uuid.uuid4().hex[:6]}"}}
            proxy.blackhole()
            try:
                for method, args in [
                    ("get_tuple", (config,)),
                    ("list_effects", (config["configurable"]["thread_id"],)),
                    ("delete_thread", (config["configurable"]["thread_id"],)),
                ]:
                    started = time.monotonic()
                    with pytest.raises(StoreUnavailable):
                        await asyncio.wait_for(h.call(method, *args), 60)
                    took = time.monotonic() - started
                    assert took <= bound + 0.5, f"{method} took {took:.2f} s (bound {bound:.1f} s)"
            finally:
                proxy.heal()
