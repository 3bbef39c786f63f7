"""Our async savers behind Agent Server's gRPC checkpointer servicer, in process.

Agent Server's production core (Go) reaches the Python checkpointer over gRPC:
``langgraph_api/grpc/servicers/checkpointer.py`` (``CheckpointerServicerImpl``)
takes the request protobufs and calls the checkpointer ``langgraph.json``'s
``checkpointer.path`` names, through ``langgraph_api._checkpointer``'s adapter.
No Go binary here: each test builds the request protobufs as the core sends
them (serialized to bytes and parsed back, as on the wire), calls the
servicer's method, and reads the reply, for every method it exposes, on
`AsyncResilientSqliteSaver` and `AsyncResilientPostgresSaver`. Then a graph
runs with LangGraph's gRPC client checkpointer (``GrpcCheckpointer``, what a
Python process on the core's side uses) whose stub is the servicer.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import grpc
import pytest
from conftest import require_postgres
from google.protobuf.empty_pb2 import Empty
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

pytest.importorskip("langgraph_api", reason="the server extra is not installed")
# langgraph_api reads its configuration at import; these are what `langgraph dev` sets
# for its in-memory server (nothing here reaches Redis or the server's database).
for _name, _value in {
    "REDIS_URI": "fake",
    "DATABASE_URI": ":memory:",
    "MIGRATIONS_PATH": "__inmem",
}.items():
    os.environ.setdefault(_name, _value)

from langgraph_api._checkpointer import _adapter  # noqa: E402
from langgraph_api.grpc.servicers.checkpointer import CheckpointerServicerImpl  # noqa: E402
from langgraph_grpc_common.checkpointer import GrpcCheckpointer  # noqa: E402
from langgraph_grpc_common.conversion import checkpoint as conv  # noqa: E402
from langgraph_grpc_common.proto import checkpointer_pb2  # noqa: E402

from langgraph_resilience import NodePolicy, ResilientState, ResilientStateGraph  # noqa: E402
from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver  # noqa: E402
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver  # noqa: E402
from langgraph_resilience.errors import TransientError  # noqa: E402
from langgraph_resilience.policy import Backoff  # noqa: E402


class Context:
    """What the servicer asks of grpc.aio's ServicerContext."""

    def __init__(self) -> None:
        self._code: grpc.StatusCode | None = None
        self.details = ""

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self.details = details


class Core:
    """The Go core's side: each request crosses as bytes, the reply too."""

    def __init__(self, servicer: CheckpointerServicerImpl) -> None:
        self.servicer = servicer
        self.last = Context()

    async def call(self, method: str, request: Any) -> Any:
        wire = type(request).FromString(request.SerializeToString())
        self.last = Context()
        reply = await getattr(self.servicer, method)(wire, self.last)
        return type(reply).FromString(reply.SerializeToString())

    def stub(self) -> Any:
        """A CheckpointerStub for GrpcCheckpointer: a failed call raises the
        AioRpcError the real channel would, with the servicer's status."""
        core = self

        class Stub:
            def __getattr__(self, method: str) -> Any:
                async def rpc(request: Any) -> Any:
                    try:
                        return await core.call(method, request)
                    except Exception as exc:
                        code = core.last.code() or grpc.StatusCode.UNKNOWN
                        raise grpc.aio.AioRpcError(
                            code, grpc.aio.Metadata(), grpc.aio.Metadata(), core.last.details
                        ) from exc

                return rpc

        return Stub()


@pytest.fixture(params=["sqlite", "postgres"])
async def saver(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "postgres":
        require_postgres()
        dsn = request.getfixturevalue("pg_dsn")
        async with AsyncResilientPostgresSaver.from_conn_string(dsn) as pg:
            await pg.setup()
            yield pg
    else:
        async with AsyncResilientSqliteSaver.from_conn_string(str(tmp_path / "g.db")) as lite:
            await lite.setup()
            yield lite


@pytest.fixture
def core(saver: Any, monkeypatch: pytest.MonkeyPatch) -> Core:
    """The servicer serving ``saver`` as ``checkpointer.path`` would name it."""
    monkeypatch.setattr(_adapter, "CUSTOM_CHECKPOINTER", saver)
    monkeypatch.setattr(_adapter, "CHECKPOINTER_STACK", threading.local())
    monkeypatch.setattr(_adapter, "_CHECKPOINTER_CAPABILITIES", None)
    return Core(CheckpointerServicerImpl())


def _config(thread_id: str, checkpoint_id: str | None = None, ns: str = "") -> dict[str, Any]:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _checkpoint(n: int, value: Any) -> Checkpoint:
    cp = empty_checkpoint()
    cp["channel_values"] = {"value": value}
    cp["channel_versions"] = {"value": f"{n:032}.0"}
    return cp


async def _put(
    core: Core, thread_id: str, n: int, value: Any, *, parent: str | None = None, run: str = ""
) -> tuple[str, Any]:
    cp = _checkpoint(n, value)
    metadata: dict[str, Any] = {"source": "loop", "step": n, "parents": {}}
    if run:
        metadata["run_id"] = run
    request = checkpointer_pb2.PutRequest(
        config=conv.checkpoint_config_to_proto(_config(thread_id, parent)),
        checkpoint=conv.checkpoint_to_proto(cp),
        metadata=conv.checkpoint_metadata_to_proto(metadata),  # type: ignore[arg-type]
        new_versions={"value": f"{n:032}.0"},
    )
    reply = await core.call("Put", request)
    assert reply.HasField("next_config"), "Put answered no next_config"
    return cp["id"], reply.next_config


async def _get(core: Core, thread_id: str, checkpoint_id: str | None = None) -> Any:
    reply = await core.call(
        "GetTuple",
        checkpointer_pb2.GetTupleRequest(
            config=conv.checkpoint_config_to_proto(_config(thread_id, checkpoint_id))
        ),
    )
    if not reply.HasField("checkpoint_tuple"):
        return None
    return conv.checkpoint_tuple_from_proto(reply.checkpoint_tuple)


async def _ids(core: Core, thread_id: str, **kwargs: Any) -> list[str]:
    request = checkpointer_pb2.ListRequest(
        config=conv.checkpoint_config_to_proto(_config(thread_id)), **kwargs
    )
    reply = await core.call("List", request)
    return [t.checkpoint.id for t in reply.checkpoint_tuples]


def _tid() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


async def test_put_and_get_tuple(core: Core) -> None:
    thread = _tid()
    first, _ = await _put(core, thread, 1, "one")
    second, next_config = await _put(core, thread, 2, {"nested": [1, 2]}, parent=first)
    assert conv.config_from_proto(next_config)["configurable"]["checkpoint_id"] == second
    latest = await _get(core, thread)
    assert latest.checkpoint["id"] == second
    assert latest.checkpoint["channel_values"]["value"] == {"nested": [1, 2]}
    assert latest.parent_config["configurable"]["checkpoint_id"] == first
    assert latest.metadata["step"] == 2
    older = await _get(core, thread, first)
    assert older.checkpoint["channel_values"]["value"] == "one"
    assert await _get(core, _tid()) is None


async def test_put_writes_are_the_pending_writes_read_back(core: Core) -> None:
    thread = _tid()
    cp_id, _ = await _put(core, thread, 1, "v")
    request = checkpointer_pb2.PutWritesRequest(
        config=conv.checkpoint_config_to_proto(_config(thread, cp_id)),
        writes=conv.writes_to_proto([("value", "written"), ("other", {"k": 1})]),
        task_id="task-1",
        task_path="~__pregel_pull, node",
    )
    assert isinstance(await core.call("PutWrites", request), Empty)
    got = await _get(core, thread, cp_id)
    assert sorted(got.pending_writes) == [
        ("task-1", "other", {"k": 1}),
        ("task-1", "value", "written"),
    ]


async def test_list_with_filter_before_and_limit(core: Core) -> None:
    thread = _tid()
    ids = []
    parent = None
    for n in range(1, 5):
        parent, _ = await _put(core, thread, n, n, parent=parent)
        ids.append(parent)
    newest_first = ids[::-1]
    assert await _ids(core, thread) == newest_first
    assert await _ids(core, thread, limit=2) == newest_first[:2]
    before = conv.checkpoint_config_to_proto(_config(thread, ids[2]))
    assert await _ids(core, thread, before=before) == [ids[1], ids[0]]
    assert await _ids(core, thread, filter_json=b'{"step": 3}') == [ids[2]]


async def test_get_capabilities(core: Core) -> None:
    await _get(core, _tid())  # the adapter is made (and its capabilities read) on first use
    caps = await core.call("GetCapabilities", Empty())
    assert caps.supports_delete_thread
    assert caps.supports_prune and caps.supports_delete_for_runs and caps.supports_copy_thread
    assert _adapter.get_checkpointer_capabilities() == _adapter.CheckpointerCapabilities(
        has_aget_iter=False,
        has_adelete_thread=True,
        has_adelete_for_runs=True,
        has_acopy_thread=True,
        has_aprune=True,
    ), "our saver's own thread maintenance, not the adapter's fallbacks"


async def test_delete_thread(core: Core) -> None:
    kept, gone = _tid(), _tid()
    await _put(core, kept, 1, "k")
    await _put(core, gone, 1, "g")
    await core.call("DeleteThread", checkpointer_pb2.DeleteThreadRequest(thread_id=gone))
    assert await _get(core, gone) is None
    assert (await _get(core, kept)).checkpoint["channel_values"]["value"] == "k"


async def test_delete_for_runs(core: Core) -> None:
    thread = _tid()
    first, _ = await _put(core, thread, 1, "kept", run="run-a")
    await _put(core, thread, 2, "rolled back", parent=first, run="run-b")
    request = checkpointer_pb2.DeleteForRunsRequest(run_ids=["run-b"])
    await core.call("DeleteForRuns", request)
    assert await _ids(core, thread) == [first]


async def test_copy_thread(core: Core) -> None:
    source, target = _tid(), _tid()
    first, _ = await _put(core, source, 1, "a")
    await _put(core, source, 2, "b", parent=first)
    request = checkpointer_pb2.CopyThreadRequest(from_thread_id=source, to_thread_id=target)
    await core.call("CopyThread", request)
    assert await _ids(core, target) == await _ids(core, source)
    assert (await _get(core, target)).checkpoint["channel_values"]["value"] == "b"


async def test_prune_keep_latest_and_delete_all(core: Core) -> None:
    """The servicer names the strategies keep_latest and delete_all (LangGraph's
    savers say "delete"): both reach our saver."""
    kept, deleted = _tid(), _tid()
    parent = None
    for n in range(1, 4):
        parent, _ = await _put(core, kept, n, n, parent=parent)
    await _put(core, deleted, 1, "x")
    strategy = checkpointer_pb2.PruneRequest.PruneStrategy
    await core.call(
        "Prune", checkpointer_pb2.PruneRequest(thread_ids=[kept], strategy=strategy.KEEP_LATEST)
    )
    assert await _ids(core, kept) == [parent]
    await core.call(
        "Prune", checkpointer_pb2.PruneRequest(thread_ids=[deleted], strategy=strategy.DELETE_ALL)
    )
    assert await _get(core, deleted) is None
    assert await _get(core, kept) is not None


async def test_get_delta_channel_history_is_unimplemented(core: Core) -> None:
    """The servicer answers UNIMPLEMENTED whatever the saver (LangGraph's gRPC
    client then walks the parent chain with GetTuple)."""
    request = checkpointer_pb2.GetDeltaChannelHistoryRequest(
        thread_id=_tid(), checkpoint_ns="", checkpoint_id="", channels=["value"]
    )
    with pytest.raises(NotImplementedError):
        await core.call("GetDeltaChannelHistory", request)
    assert core.last.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_a_store_error_is_an_internal_status_with_our_message(core: Core) -> None:
    request = checkpointer_pb2.PruneRequest(thread_ids=[_tid()], strategy=99)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Unknown prune strategy"):
        await core.call("Prune", request)
    assert core.last.code() == grpc.StatusCode.INTERNAL


class Flaky(ResilientState):
    query: str
    answer: str


async def test_a_graph_through_the_grpc_client_and_servicer(core: Core, saver: Any) -> None:
    """A ResilientStateGraph whose checkpointer is LangGraph's gRPC client: its
    node fails once and is retried; every checkpoint and write crosses the
    servicer into our saver, which serves the state and history back, also read
    directly."""
    tries = []

    def answer(state: Flaky) -> dict[str, str]:
        tries.append(1)
        if len(tries) == 1:
            raise TransientError("first try fails")
        return {"answer": state["query"].upper()}

    g = ResilientStateGraph(Flaky)
    g.add_node(
        "answer", answer, policy=NodePolicy(retry=Backoff(max_attempts=3, initial_interval=0.01))
    )
    g.add_edge(START, "answer")

    async def stub() -> Any:
        return core.stub()

    client = GrpcCheckpointer(get_stub=stub)
    graph = g.compile(checkpointer=client)
    config = {"configurable": {"thread_id": _tid()}}
    out = await graph.ainvoke({"query": "grpc"}, config)
    assert out["answer"] == "GRPC"
    assert out["resilience"]["status"] == "success"
    assert len(tries) == 2
    state = await graph.aget_state(config)
    assert state.values["answer"] == "GRPC"
    history = [s async for s in graph.aget_state_history(config)]
    direct = [t async for t in saver.alist(config)]
    assert [s.config["configurable"]["checkpoint_id"] for s in history] == [
        t.config["configurable"]["checkpoint_id"] for t in direct
    ]
    assert (await saver.aget_tuple(config)).checkpoint["channel_values"]["answer"] == "GRPC"


def _append(current: list[str], writes: list[list[str]]) -> list[str]:
    return [*current, *(item for write in writes for item in write)]


class Log(TypedDict):
    log: Annotated[list[str], DeltaChannel(_append)]


async def test_a_delta_channel_history_is_walked_through_the_servicer(
    core: Core, saver: Any
) -> None:
    """GetDeltaChannelHistory is UNIMPLEMENTED: the gRPC client walks the parent
    chain with GetTuple instead, and finds what our saver's own fast path finds.

    (Not through a running graph: there the client forwards the graph's runtime
    in each GetTuple's config, the saver hands it back in the tuple's config, and
    the servicer cannot encode it back (``'dict' object has no attribute
    'context'``), with LangGraph's stock savers as with ours.)"""

    def add(state: Log) -> dict[str, list[str]]:
        return {"log": [f"step{len(state['log'])}"]}

    builder = StateGraph(Log)
    builder.add_node("add", add)
    builder.add_edge(START, "add")
    config = {"configurable": {"thread_id": _tid(), "checkpoint_ns": ""}}
    graph = builder.compile(checkpointer=saver)
    for _ in range(3):
        await graph.ainvoke({"log": []}, config)
    assert (await graph.aget_state(config)).values["log"] == ["step0", "step1", "step2"]

    async def stub() -> Any:
        return core.stub()

    client = GrpcCheckpointer(get_stub=stub)
    walked = await client.aget_delta_channel_history(config=config, channels=["log"])
    assert core.last.code() is None, "the walk's last call was a GetTuple that succeeded"
    direct = await saver.aget_delta_channel_history(config=config, channels=["log"])
    assert walked == direct
    assert walked["log"]["writes"], "the history holds the writes"
