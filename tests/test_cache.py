"""`PostgresCache` behaves as LangGraph's own node caches do, on each connection kind.

Ported from LangGraph's tests of its caches (langchain-ai/langgraph):
``libs/checkpoint/tests/test_redis_cache.py`` (the backend's unit behaviour, the
one suite LangGraph runs on a cache backend directly), ``libs/checkpoint/tests/
test_cache.py`` (the ``pairs`` keyword), and the graph tests its ``cache`` fixture
runs on ``SqliteCache``/``InMemoryCache``/``RedisCache``: ``libs/langgraph/tests/
test_cache_clear.py``, ``test_delta_channel_node_cache.py`` (a hit is not cached
again, a failure is not cached), ``test_cache_callable_identity.py`` (two graphs
sharing a cache). Each runs on a sync connection, a sync pool, an async
connection and an async pool; then what is ours: keys SQLite's cache would merge,
TTLs by the server's clock across two caches, an unreachable server, setup.
"""

from __future__ import annotations

import asyncio
import inspect
import operator
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
import pytest
from graphs import one_node
from langgraph.cache.base import BaseCache, FullKey
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import CachePolicy
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from typing_extensions import TypedDict

from langgraph_resilience import ResilientState, ResilientStateGraph
from langgraph_resilience.cache.postgres import PostgresCache
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver
from langgraph_resilience.errors import ConfigError

KINDS = ["conn", "pool", "aconn", "apool"]


@dataclass
class Cache:
    """A cache of one connection kind, with calls that read the same sync and async."""

    kind: str
    cache: PostgresCache[Any]

    @property
    def is_async(self) -> bool:
        return self.kind.startswith("a")

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await getattr(self.cache, "a" + name)(*args, **kwargs)
        return await asyncio.to_thread(getattr(self.cache, name), *args, **kwargs)


@pytest.fixture
async def pg(request: pytest.FixtureRequest, pg_dsn: str) -> AsyncIterator[Cache]:
    kind = request.param
    if kind == "conn":
        conn = psycopg.connect(pg_dsn, autocommit=True)
        cache: PostgresCache[Any] = PostgresCache(conn)
        cache.setup()
        cache.clear()
        yield Cache(kind, cache)
        conn.close()
    elif kind == "pool":
        with ConnectionPool(pg_dsn, min_size=1, max_size=4, kwargs={"autocommit": True}) as pool:
            cache = PostgresCache(pool)
            cache.setup()
            cache.clear()
            yield Cache(kind, cache)
    elif kind == "aconn":
        aconn = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
        cache = PostgresCache(aconn)
        await cache.asetup()
        await cache.aclear()
        yield Cache(kind, cache)
        await aconn.close()
    else:
        async with AsyncConnectionPool(
            pg_dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False
        ) as apool:
            cache = PostgresCache(apool)
            await cache.asetup()
            await cache.aclear()
            yield Cache(kind, cache)


every_kind = pytest.mark.parametrize("pg", KINDS, indirect=True)


# -- LangGraph's backend tests (test_redis_cache.py, test_cache.py) ---------------------


@every_kind
async def test_basic_set_and_get(pg: Cache) -> None:
    keys: list[FullKey] = [(("graph", "node"), "key1")]
    await pg.call("set", {keys[0]: ({"result": 42}, None)})
    assert await pg.call("get", keys) == {keys[0]: {"result": 42}}


@every_kind
async def test_batch_operations(pg: Cache) -> None:
    keys: list[FullKey] = [
        (("graph", "node1"), "key1"),
        (("graph", "node2"), "key2"),
        (("other", "node"), "key3"),
    ]
    await pg.call(
        "set",
        {
            keys[0]: ({"result": 1}, None),
            keys[1]: ({"result": 2}, 60),
            keys[2]: ({"result": 3}, None),
        },
    )
    result = await pg.call("get", keys)
    assert result == {keys[0]: {"result": 1}, keys[1]: {"result": 2}, keys[2]: {"result": 3}}


@every_kind
async def test_ttl_behavior(pg: Cache) -> None:
    key: FullKey = (("graph", "node"), "ttl_key")
    await pg.call("set", {key: ({"data": "expires_soon"}, 1)})
    assert await pg.call("get", [key]) == {key: {"data": "expires_soon"}}
    await asyncio.sleep(1.1)
    assert await pg.call("get", [key]) == {}


@every_kind
async def test_namespace_isolation(pg: Cache) -> None:
    key1: FullKey = (("graph1", "node"), "same_key")
    key2: FullKey = (("graph2", "node"), "same_key")
    await pg.call("set", {key1: ({"graph": 1}, None), key2: ({"graph": 2}, None)})
    assert await pg.call("get", [key1, key2]) == {key1: {"graph": 1}, key2: {"graph": 2}}


@every_kind
async def test_clear_all(pg: Cache) -> None:
    keys: list[FullKey] = [(("graph", "node1"), "key1"), (("graph", "node2"), "key2")]
    await pg.call("set", {keys[0]: ({"result": 1}, None), keys[1]: ({"result": 2}, None)})
    assert len(await pg.call("get", keys)) == 2
    await pg.call("clear")
    assert await pg.call("get", keys) == {}


@every_kind
async def test_clear_by_namespace(pg: Cache) -> None:
    keys: list[FullKey] = [
        (("graph1", "node"), "key1"),
        (("graph2", "node"), "key2"),
        (("graph1", "other"), "key3"),
    ]
    await pg.call("set", {k: ({"result": i}, None) for i, k in enumerate(keys, 1)})
    await pg.call("clear", [("graph1", "node"), ("graph1", "other")])
    assert await pg.call("get", keys) == {keys[1]: {"result": 2}}


@every_kind
async def test_empty_operations(pg: Cache) -> None:
    assert await pg.call("get", []) == {}
    await pg.call("set", {})


@every_kind
async def test_nonexistent_keys(pg: Cache) -> None:
    assert await pg.call("get", [(("graph", "node"), "nonexistent")]) == {}


@every_kind
async def test_key_parsing_edge_cases(pg: Cache) -> None:
    key1: FullKey = ((), "empty_ns")
    key2: FullKey = (("graph:with:colons", "node-with-dashes"), "key_with_underscores")
    await pg.call("set", {key1: ({"data": "empty_ns"}, None)})
    await pg.call("set", {key2: ({"data": "special_chars"}, None)})
    assert await pg.call("get", [key1, key2]) == {
        key1: {"data": "empty_ns"},
        key2: {"data": "special_chars"},
    }


@every_kind
async def test_large_data_serialization(pg: Cache) -> None:
    large = {"large_list": list(range(1000)), "nested": {"data": "x" * 1000}}
    key: FullKey = (("graph", "node"), "large_key")
    await pg.call("set", {key: (large, None)})
    assert await pg.call("get", [key]) == {key: large}


@every_kind
async def test_corrupted_data_handling(pg: Cache, pg_dsn: str) -> None:
    valid: FullKey = (("graph", "node"), "valid_key")
    corrupted: FullKey = (("graph", "node"), "corrupted_key")
    await pg.call("set", {valid: ({"data": "valid"}, None), corrupted: ({"data": "x"}, None)})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE resilience_node_cache SET val = '\\xc1c1c1'::bytea WHERE key = %s",
            ["corrupted_key"],
        )
    assert await pg.call("get", [valid, corrupted]) == {valid: {"data": "valid"}}
    # the miss is overwritten by the next result, as any miss is
    await pg.call("set", {corrupted: ({"data": "again"}, None)})
    assert await pg.call("get", [corrupted]) == {corrupted: {"data": "again"}}


def test_base_cache_signatures() -> None:
    for method in (PostgresCache.set, PostgresCache.aset):
        assert list(inspect.signature(method).parameters) == ["self", "pairs"]


@every_kind
async def test_keyword_args(pg: Cache) -> None:
    key: FullKey = (("ns",), "k1")
    await pg.call("set", pairs={key: ({"data": 123}, 60)})
    assert await pg.call("get", [key]) == {key: {"data": 123}}


# -- LangGraph's graph tests on its cache fixture -----------------------------------------


class Value(TypedDict):
    value: int


def _one_cached_node(calls: list[int], cache: BaseCache[Any], ttl: int | None = None) -> Any:
    def cached_node(state: Value) -> Value:
        calls.append(state["value"])
        return {"value": state["value"] + 1}

    builder = one_node(
        StateGraph(Value), "cached_node", cached_node, cache_policy=CachePolicy(ttl=ttl)
    )
    return builder.compile(cache=cache)


async def _invoke(pg: Cache, graph: Any, *args: Any, **kwargs: Any) -> Any:
    if pg.is_async:
        return await graph.ainvoke(*args, **kwargs)
    return await asyncio.to_thread(graph.invoke, *args, **kwargs)


async def _clear_cache_with_empty_nodes(pg: Cache, cache: BaseCache[Any]) -> list[int]:
    calls: list[int] = []
    graph = _one_cached_node(calls, cache)
    await _invoke(pg, graph, {"value": 1})
    await _invoke(pg, graph, {"value": 1})
    assert calls == [1]
    if pg.is_async:
        await graph.aclear_cache([])
    else:
        await asyncio.to_thread(graph.clear_cache, [])
    await _invoke(pg, graph, {"value": 1})
    return calls


@every_kind
async def test_clear_cache_with_empty_nodes_as_in_memory_cache(pg: Cache) -> None:
    """LangGraph's test_cache_clear.py expects ``clear_cache([])`` to clear nothing;
    the installed LangGraph (1.2.24) takes ``[]`` for every node (``nodes or
    self.nodes``) and clears them, InMemoryCache's too. Ours does what
    InMemoryCache does there; the cache's own ``clear([])`` deletes nothing."""
    ours = await _clear_cache_with_empty_nodes(pg, pg.cache)
    assert ours == await _clear_cache_with_empty_nodes(pg, InMemoryCache())
    key: FullKey = (("kept",), "k")
    await pg.call("set", {key: (1, None)})
    await pg.call("clear", [])
    assert await pg.call("get", [key]) == {key: 1}


@every_kind
async def test_clear_cache_of_a_node_runs_it_again(pg: Cache) -> None:
    calls: list[int] = []
    graph = _one_cached_node(calls, pg.cache)
    assert await _invoke(pg, graph, {"value": 1}) == {"value": 2}
    assert await _invoke(pg, graph, {"value": 1}) == {"value": 2}
    if pg.is_async:
        await graph.aclear_cache(["cached_node"])
    else:
        await asyncio.to_thread(graph.clear_cache, ["cached_node"])
    await _invoke(pg, graph, {"value": 1})
    assert calls == [1, 1]


@every_kind
async def test_a_node_cache_policy_ttl_expires(pg: Cache) -> None:
    calls: list[int] = []
    graph = _one_cached_node(calls, pg.cache, ttl=1)
    await _invoke(pg, graph, {"value": 1})
    updates = await _invoke(pg, graph, {"value": 1}, stream_mode="updates")
    assert updates == [{"cached_node": {"value": 2}, "__metadata__": {"cached": True}}]
    await asyncio.sleep(1.1)
    await _invoke(pg, graph, {"value": 1})
    assert calls == [1, 1]


class Logged(TypedDict):
    log: Annotated[list[str], operator.add]


class _CountsSets(PostgresCache[Any]):
    sets = 0

    def set(self, pairs: Any) -> None:
        self.sets += 1
        super().set(pairs)

    async def aset(self, pairs: Any) -> None:
        self.sets += 1
        await super().aset(pairs)


@every_kind
async def test_a_cache_hit_saves_its_writes_without_caching_them_again(pg: Cache) -> None:
    runs: list[str] = []
    cache = _CountsSets(pg.cache.conn)

    def node(name: str) -> Any:
        def run(state: Logged) -> Logged:
            runs.append(name)
            return {"log": [name]}

        return run

    builder = StateGraph(Logged)
    builder.add_node("a", node("a"))
    builder.add_node("b", node("b"), cache_policy=CachePolicy())
    builder.add_node("c", node("c"))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    graph = builder.compile(checkpointer=InMemorySaver(), cache=cache)
    await _invoke(pg, graph, {"log": []}, {"configurable": {"thread_id": "1"}})
    config = {"configurable": {"thread_id": "2"}}
    assert await _invoke(pg, graph, {"log": []}, config) == {"log": ["a", "b", "c"]}
    assert runs == ["a", "b", "c", "a", "c"]
    assert cache.sets == 1, "the cache hit was written back to the cache"


@every_kind
async def test_a_node_that_fails_is_not_cached(pg: Cache) -> None:
    runs: list[str] = []

    def fail(state: Logged) -> Logged:
        runs.append("b")
        raise ValueError("b failed")

    builder = StateGraph(Logged)
    builder.add_node("b", fail, cache_policy=CachePolicy())
    builder.add_edge(START, "b")
    graph = builder.compile(checkpointer=InMemorySaver(), cache=pg.cache)
    for thread in ("1", "2"):
        with pytest.raises(ValueError, match="b failed"):
            await _invoke(pg, graph, {"log": []}, {"configurable": {"thread_id": thread}})
    assert runs == ["b", "b"]


class Out(TypedDict):
    out: str


def _named_a(_: Out) -> Out:
    return {"out": "A"}


def _named_b(_: Out) -> Out:
    return {"out": "B"}


@every_kind
async def test_cache_keeps_distinct_named_functions_separate(pg: Cache) -> None:
    graphs = []
    for node in (_named_a, _named_b):
        builder = StateGraph(Out)
        builder.add_node("process", node, cache_policy=CachePolicy())
        builder.add_edge(START, "process")
        graphs.append(builder.compile(cache=pg.cache))
    assert await _invoke(pg, graphs[0], {"out": "input"}) == {"out": "A"}
    assert await _invoke(pg, graphs[1], {"out": "input"}) == {"out": "B"}


# -- ours ---------------------------------------------------------------------------------


@pytest.mark.parametrize("pg", ["conn", "aconn"], indirect=True)
async def test_a_resilient_graph_on_our_saver_is_served_from_the_cache(
    pg: Cache, pg_dsn: str
) -> None:
    """A ResilientStateGraph on a Postgres saver, its node cached in the same
    database: the second thread's node is served from the cache and its state is
    the same."""
    runs: list[str] = []

    class S(ResilientState):
        query: str
        answer: str

    def search(state: S) -> dict[str, str]:
        runs.append(state["query"])
        return {"answer": state["query"].upper()}

    g = ResilientStateGraph(S)
    g.add_node("search", search, cache_policy=CachePolicy(ttl=60))
    g.add_edge(START, "search")
    configs = [{"configurable": {"thread_id": f"cached-{pg.kind}-{i}"}} for i in range(2)]
    if pg.is_async:
        async with AsyncResilientPostgresSaver.from_conn_string(pg_dsn) as saver:
            await saver.setup()
            graph = g.compile(checkpointer=saver, cache=pg.cache)
            first = await graph.ainvoke({"query": "q"}, configs[0])
            updates = [u async for u in graph.astream({"query": "q"}, configs[1])]
            second = (await graph.aget_state(configs[1])).values
    else:
        with ResilientPostgresSaver.from_conn_string(pg_dsn) as saver:
            saver.setup()
            graph = g.compile(checkpointer=saver, cache=pg.cache)
            first = await asyncio.to_thread(graph.invoke, {"query": "q"}, configs[0])
            updates = await asyncio.to_thread(
                lambda: list(graph.stream({"query": "q"}, configs[1]))
            )
            second = graph.get_state(configs[1]).values
    assert runs == ["q"]
    assert [u.get("__metadata__") for u in updates if "search" in u] == [{"cached": True}]
    assert first["answer"] == second["answer"] == "Q"
    assert second["resilience"]["status"] == "success"


def test_namespaces_sqlite_would_merge_stay_apart(pg_dsn: str) -> None:
    """SqliteCache joins a namespace with ",": ("a,b",) and ("a", "b") are one
    there; here they are two, and clearing one leaves the other."""
    with PostgresCache.from_conn_string(pg_dsn) as cache:
        cache.setup()
        one: FullKey = (("a,b",), "k")
        two: FullKey = (("a", "b"), "k")
        cache.set({one: (1, None), two: (2, None)})
        assert cache.get([one, two]) == {one: 1, two: 2}
        cache.clear([("a", "b")])
        assert cache.get([one, two]) == {one: 1}
        cache.clear()


def test_two_caches_share_entries_and_their_expiry(pg_dsn: str) -> None:
    """Two processes' caches on one database: an entry one writes is a hit for the
    other, and expires for both at the server's time."""
    with (
        PostgresCache.from_conn_string(pg_dsn) as writer,
        PostgresCache.from_conn_string(pg_dsn) as reader,
    ):
        writer.setup()
        key: FullKey = (("shared",), "k")
        writer.set({key: ("v", 1)})
        assert reader.get([key]) == {key: "v"}
        time.sleep(1.1)
        assert reader.get([key]) == {}
        with psycopg.connect(pg_dsn) as conn:
            left = conn.execute(
                "SELECT count(*) FROM resilience_node_cache WHERE ns = '[\"shared\"]'"
            )
            assert left.fetchone() == (0,), "the expired entry read was not deleted"


def test_purge_expired_deletes_entries_never_asked_for_again(pg_dsn: str) -> None:
    with PostgresCache.from_conn_string(pg_dsn) as cache:
        cache.setup()
        cache.clear()
        cache.set({(("p",), str(i)): (i, 1 if i % 2 else None) for i in range(6)})
        time.sleep(1.1)
        assert cache.purge_expired() == 3
        assert cache.get([(("p",), str(i)) for i in range(6)]) == {
            (("p",), "0"): 0,
            (("p",), "2"): 2,
            (("p",), "4"): 4,
        }


@pytest.mark.parametrize("pg", ["conn", "aconn"], indirect=True)
async def test_an_unreachable_store_is_a_miss_and_the_node_runs(
    pg: Cache, caplog: pytest.LogCaptureFixture
) -> None:
    """The cache's connection is killed by the server: the graph still runs (a
    read is a miss, a write is skipped, each logged); clear, asked for, raises."""
    calls: list[int] = []
    graph = _one_cached_node(calls, pg.cache)
    await _invoke(pg, graph, {"value": 1})
    conn = pg.cache.conn
    assert isinstance(conn, psycopg.Connection | psycopg.AsyncConnection)
    with psycopg.connect(conn.info.dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
    assert await _invoke(pg, graph, {"value": 1}) == {"value": 2}
    assert calls == [1, 1]
    assert "node cache read skipped, the store is unavailable" in caplog.text
    assert "node cache write skipped" in caplog.text
    with pytest.raises(psycopg.OperationalError):
        await pg.call("clear")


def test_a_missing_table_says_to_call_setup(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS resilience_node_cache")
        cache: PostgresCache[Any] = PostgresCache(conn)
        with pytest.raises(ConfigError, match=r"call PostgresCache.setup\(\)"):
            cache.get([(("n",), "k")])
        cache.setup()
        assert cache.get([(("n",), "k")]) == {}


def test_setup_is_idempotent_and_safe_when_run_at_once(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS resilience_node_cache")
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def set_up() -> None:
        try:
            with PostgresCache.from_conn_string(pg_dsn) as cache:
                barrier.wait()
                cache.setup()
                cache.setup()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=set_up) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_bad_input_is_refused_with_what_would_be_right(pg_dsn: str) -> None:
    with PostgresCache.from_conn_string(pg_dsn) as cache:
        cache.setup()
        with pytest.raises(ValueError, match="TTL is a number of seconds"):
            cache.set({(("n",), "k"): (1, -5)})
        with pytest.raises(TypeError, match="namespace is a tuple of str"):
            cache.get([(["n"], "k")])  # type: ignore[list-item]
        with pytest.raises(ValueError, match="NUL"):
            cache.set({(("n",), "a\x00b"): (1, None)})
        assert cache.get([(("n",), "k")]) == {}
    with pytest.raises(ConfigError, match="psycopg Connection"):
        PostgresCache("postgresql://nowhere")  # type: ignore[arg-type]
