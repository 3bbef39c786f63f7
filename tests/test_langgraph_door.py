"""The door to LangGraph's private internals (`langgraph_resilience._langgraph`).

Every name the door spells is the installed LangGraph's: its private constants,
what a real graph writes and puts in a task's metadata, its private callables,
attributes and hooks, with the shape the door uses. And no other module of the
package names one: a scan of every module's syntax fails on any private
LangGraph name outside the door (string literals, docstrings aside: prose may
name them; imports; attribute chains on LangGraph's modules; private attributes
of LangGraph's classes, read, overridden or passed to ``getattr``), so an
upgrade has one module to check.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import operator
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph._internal import _config, _runnable
from langgraph._internal import _constants as lg
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.base import EXCLUDED_METADATA_KEYS
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde import types as serde_types
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.types import CachePolicy, Command, Send, interrupt

import langgraph_resilience
from langgraph_resilience import _langgraph as door

PACKAGE = Path(langgraph_resilience.__file__).parent
#: The modules that may name LangGraph's private internals. The issue allows the
#: savers' SQL module a place beside the door; it takes its names from the door too.
DOORS = {"_langgraph.py"}


# -- every name the door spells is the installed LangGraph's ----------------------------


def test_the_config_keys_are_langgraphs() -> None:
    assert door.CHECKPOINTER_KEY == lg.CONFIG_KEY_CHECKPOINTER
    assert door.RESUMING_KEY == lg.CONFIG_KEY_RESUMING
    assert door.RUNTIME_KEY == lg.CONFIG_KEY_RUNTIME
    assert door.DURABILITY_KEY == lg.CONFIG_KEY_DURABILITY
    assert door.TASK_ID_KEY == lg.CONFIG_KEY_TASK_ID
    assert door.SCRATCHPAD_KEY == lg.CONFIG_KEY_SCRATCHPAD
    assert door.CALL_KEY == lg.CONFIG_KEY_CALL
    # get_runtime() is the runtime under RUNTIME_KEY in the configurable section.
    assert lg.CONF == "configurable"


def test_the_channels_are_langgraphs() -> None:
    assert door.INTERRUPT_CHANNEL == lg.INTERRUPT == serde_types.INTERRUPT
    assert door.RESUME_CHANNEL == lg.RESUME == serde_types.RESUME
    assert door.ERROR_CHANNEL == lg.ERROR == serde_types.ERROR
    assert door.ERROR_SOURCE_CHANNEL == lg.ERROR_SOURCE_NODE
    assert door.TASKS_CHANNEL == lg.TASKS == serde_types.TASKS
    assert door.SEND_PATH == lg.PUSH
    assert door.NULL_TASK_ID == lg.NULL_TASK_ID
    assert (door.NS_SEP, door.NS_END) == (lg.NS_SEP, lg.NS_END)


def test_the_metadata_keys_are_langgraphs() -> None:
    assert {door.NODE_KEY, door.STEP_KEY, door.PATH_KEY} <= EXCLUDED_METADATA_KEYS


def test_the_private_callables_are_langgraphs() -> None:
    assert door.coerce_to_runnable is _runnable.coerce_to_runnable
    assert door.RunnableCallable is _runnable.RunnableCallable
    assert isinstance(door.coerce_to_runnable(len, name="len", trace=False), door.RunnableCallable)
    assert door.DeltaSnapshot is serde_types._DeltaSnapshot
    assert door.langgraph_config is _config.ensure_config
    seen = door.langgraph_config({"configurable": {"run_id": "r-1"}})
    assert seen["metadata"]["run_id"] == "r-1"  # what LangGraph's re-entry rule compares
    graph = StateGraph(_State)
    graph.add_node("a", lambda s: {})
    assert isinstance(graph.nodes["a"], door.StateNodeSpec)


def test_an_error_handler_is_the_node_the_door_names() -> None:
    def fail(state: _State) -> dict[str, Any]:
        raise ValueError("boom")

    g = StateGraph(_State)
    g.add_node("x", fail, error_handler=lambda s: {"done": ["handled"]})
    g.add_edge(START, "x")
    spec = g.nodes[f"{door.ERROR_HANDLER_PREFIX}x"]
    assert (
        spec.is_error_handler and g.nodes["x"].error_handler_node == f"{door.ERROR_HANDLER_PREFIX}x"
    )
    assert g.compile().invoke({}) == {"done": ["handled"]}


def test_a_held_node_writes_nothing_and_fires_no_edge() -> None:
    """`hold_writes`: a node whose output is the held marker writes nothing and
    fires neither its static nor its conditional edges; any other output is
    written as LangGraph writes it, and the drawing keeps every edge."""
    held = object()
    skip = [True]

    def a(state: _State) -> Any:
        return held if skip[0] else {"done": ["a"]}

    def chain(conditional: bool) -> Any:
        g = StateGraph(_State)
        g.add_node("a", a)
        g.add_node("b", lambda s: {"done": ["b"]})
        g.add_node("c", lambda s: {"done": ["c"]})
        g.add_edge(START, "a")
        g.add_edge("a", "b")  # the output's write and the edge's, merged by LangGraph
        if conditional:
            g.add_conditional_edges("a", lambda s: "c", ["c"])
        return g.compile()

    for conditional, after in ((False, ["a", "b"]), (True, ["a", "b", "c"])):
        skip[0] = True
        graph = chain(conditional)
        drawn = {(e.source, e.target) for e in graph.get_graph().edges}
        door.hold_writes(graph, ["a"], held)
        assert {(e.source, e.target) for e in graph.get_graph().edges} == drawn
        assert graph.invoke({"done": []}) == {"done": []}
        skip[0] = False
        assert sorted(graph.invoke({"done": []})["done"]) == after
    # The mark is the one LangGraph's register_writer sets on a conditional edge.
    assert any(hasattr(w, door.WRITER_MARK) for w in graph.nodes["a"].writers)


def test_a_builders_default_cache_policy_is_read_through_the_door() -> None:
    g = StateGraph(_State)
    assert door.default_cache_policy(g) is None
    policy = CachePolicy()
    g.set_node_defaults(cache_policy=policy)
    assert door.default_cache_policy(g) is policy


def test_the_defaults_hook_sees_what_a_run_starts_with() -> None:
    found: list[tuple[dict[str, Any], door.RunDefaults]] = []

    class Recording(door.DefaultsHook[Any, Any, Any, Any]):
        def _run_defaults(
            self, config: RunnableConfig, kwargs: Any, defaults: door.RunDefaults
        ) -> door.RunDefaults:
            found.append((dict(kwargs), defaults))
            return defaults

    g = StateGraph(_State)
    g.add_node("a", lambda s: {"done": ["a"]})
    g.add_edge(START, "a")
    saver, cache = InMemorySaver(), InMemoryCache()
    graph = g.compile(checkpointer=saver, cache=cache)
    graph.__class__ = Recording
    config: RunnableConfig = {"configurable": {"thread_id": "defaults"}}
    assert graph.invoke({}, config) == {"done": ["a"]}
    assert found[0][1] == door.RunDefaults(saver, None, cache, "async")  # LangGraph's default
    found.clear()
    graph.with_config(configurable={door.DURABILITY_KEY: "sync"}).invoke({}, config)
    assert found[0][1].durability == "sync"  # the key a compiled graph's default goes under
    found.clear()
    graph.invoke({}, config, durability="exit")
    assert found[0][0]["durability"] == "exit" == found[0][1].durability


def test_the_postgres_savers_hooks_are_langgraphs() -> None:
    postgres = pytest.importorskip("langgraph.checkpoint.postgres")
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.checkpoint.postgres.base import BasePostgresSaver

    from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
    from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver

    def params(fn: Any) -> list[str]:
        return list(inspect.signature(fn).parameters)

    assert params(BasePostgresSaver._dump_blobs)[1:] == params(door.dump_pg_blobs)[1:]
    assert params(BasePostgresSaver._dump_writes)[1:] == params(door.dump_pg_writes)[1:]
    for theirs, read, ours in (
        (postgres.PostgresSaver, "get_tuple", ResilientPostgresSaver),
        (AsyncPostgresSaver, "aget_tuple", AsyncResilientPostgresSaver),
    ):
        opened = ours.__dict__["_open_cursor"]
        assert params(getattr(theirs, door.CURSOR_HOOK)) == params(opened) == ["self", "pipeline"]
        # LangGraph's own queries open the hook, which is ours.
        assert f"self.{door.CURSOR_HOOK}(" in inspect.getsource(getattr(theirs, read))
        assert getattr(ours, door.CURSOR_HOOK) is opened


def test_a_task_namespace_is_split_as_the_door_says() -> None:
    seen: dict[str, RunnableConfig] = {}

    def inner(state: _State) -> dict[str, Any]:
        seen["inner"] = get_config()
        return {}

    sub = StateGraph(_State)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    g = StateGraph(_State)
    g.add_node("sub", sub.compile())
    g.add_edge(START, "sub")
    g.compile(checkpointer=InMemorySaver()).invoke({}, {"configurable": {"thread_id": "ns"}})
    configurable = seen["inner"]["configurable"]
    levels = [
        level.split(door.NS_END) for level in configurable["checkpoint_ns"].split(door.NS_SEP)
    ]
    assert [level[0] for level in levels] == ["sub", "inner"]
    assert levels[-1][1] == configurable[door.TASK_ID_KEY]


def test_a_checkpoint_save_sees_the_writes_the_loop_handed_before_it() -> None:
    """`handed_writes`, in a saver's put made by LangGraph's background save: the
    tasks whose writes the loop gave ``put_writes`` so far; None elsewhere."""
    ids: dict[str, str] = {}
    seen: list[frozenset[str] | None] = []

    class Saver(InMemorySaver):
        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            seen.append(door.handed_writes())
            return super().put(config, checkpoint, metadata, new_versions)

    def node(name: str) -> Any:
        def run(state: _State) -> dict[str, Any]:
            ids[name] = get_config()["configurable"][door.TASK_ID_KEY]
            return {}

        return run

    g = StateGraph(_State)
    g.add_node("a", node("a"))
    g.add_node("b", node("b"))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    graph = g.compile(checkpointer=Saver())
    graph.invoke({}, {"configurable": {"thread_id": "handed"}}, durability="sync")
    assert all(found is not None for found in seen)
    assert ids["a"] in seen[-2] and ids["b"] not in seen[-2]  # the save after a's step
    assert {ids["a"], ids["b"]} <= seen[-1]  # the save after b's step
    assert door.handed_writes() is None  # not inside a save
    seen.clear()
    graph.invoke({}, {"configurable": {"thread_id": "exit"}}, durability="exit")
    assert seen == [None]  # durability "exit": the writes go with the one save

    class AsyncSaver(InMemorySaver):
        async def aput(self, config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
            seen.append(door.handed_writes())
            return await super().aput(config, checkpoint, metadata, versions)

    seen.clear()
    agraph = g.compile(checkpointer=AsyncSaver())
    asyncio.run(agraph.ainvoke({}, {"configurable": {"thread_id": "a"}}, durability="sync"))
    assert {ids["a"], ids["b"]} <= (seen[-1] or set()) and ids["b"] not in (seen[-2] or {""})


def test_the_postgres_connection_types_are_langgraphs() -> None:
    internal = pytest.importorskip("langgraph.checkpoint.postgres._internal")
    ainternal = pytest.importorskip("langgraph.checkpoint.postgres._ainternal")
    from langgraph_resilience.checkpoint.postgres import _network

    assert _network.Conn == internal.Conn
    assert _network.AsyncConn == ainternal.Conn


class _State(TypedDict, total=False):
    items: list[str]
    done: Annotated[list[str], operator.add]


class _Recording(InMemorySaver):
    """An in-memory saver that notes the channel of every write it stores."""

    def __init__(self) -> None:
        super().__init__()
        self.channels: set[str] = set()

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.channels.update(c for c, _ in writes)
        super().put_writes(config, writes, task_id, task_path)


def test_a_real_graph_writes_and_reads_what_the_door_names() -> None:
    metadata: dict[str, dict[str, Any]] = {}

    def node(name: str) -> Any:
        def run(state: _State) -> dict[str, Any]:
            metadata[name] = dict(get_config()["metadata"])
            if name == "ask":
                interrupt("go on?")
            return {"done": [name]}

        return run

    g = StateGraph(_State)
    for name in ("top", "fan", "ask"):
        g.add_node(name, node(name))
    g.add_edge(START, "top")
    g.add_conditional_edges("top", lambda s: [Send("fan", {"items": ["x"]})])
    g.add_edge("fan", "ask")
    g.add_edge("ask", END)
    saver = _Recording()
    graph = g.compile(checkpointer=saver)
    assert f"{door.BRANCH_PREFIX}ask" in graph.channels

    config: RunnableConfig = {"configurable": {"thread_id": "door"}}
    graph.invoke({"items": []}, config)
    graph.invoke(Command(resume="yes"), config)
    assert {door.TASKS_CHANNEL, door.INTERRUPT_CHANNEL, door.RESUME_CHANNEL} <= saver.channels
    assert any(c.startswith(door.BRANCH_PREFIX) for c in saver.channels)
    assert metadata["top"][door.NODE_KEY] == "top"
    assert isinstance(metadata["top"][door.STEP_KEY], int)
    assert metadata["fan"][door.PATH_KEY][0] == door.SEND_PATH

    def fail(state: _State) -> dict[str, Any]:
        raise ValueError("boom")

    failing = StateGraph(_State)
    failing.add_node("fail", fail)
    failing.add_edge(START, "fail")
    saver = _Recording()
    with pytest.raises(ValueError):
        failing.compile(checkpointer=saver).invoke({}, config)
    assert door.ERROR_CHANNEL in saver.channels


# -- no other module names one ----------------------------------------------------------

#: Private LangGraph modules: a dotted path under ``langgraph`` with a ``_`` part.
_PRIVATE_MODULE = re.compile(r"\blanggraph(?:\.\w+)*\._\w")
#: The reserved channels and config keys (``__pregel_*``, ``__interrupt__``, ...),
#: from the installed LangGraph; and the prefix of its edge channels.
_RESERVED = sorted(
    {v for v in vars(lg).values() if isinstance(v, str) and v.startswith("__")}
    | {serde_types.SCHEDULED, lg.NULL_TASK_ID, "__pregel", "branch:to:", "__error_handler__"}
)
#: A task's metadata keys (spelled whole: ``langgraph_`` alone starts our own names).
_METADATA = {k for k in EXCLUDED_METADATA_KEYS if k.startswith("langgraph_")}


def _prose(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (or other bare strings)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


#: The NamedTuple API: underscored, but public.
_NAMED_TUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}


def _is_langgraph(module: str) -> bool:
    return module == "langgraph" or module.startswith("langgraph.")


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _imported(tree: ast.AST) -> dict[str, str]:
    """The LangGraph paths a module binds by import: {local name: dotted path}."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _is_langgraph(a.name):
                    bound[a.asname or "langgraph"] = a.name if a.asname else "langgraph"
        elif isinstance(node, ast.ImportFrom) and node.module and _is_langgraph(node.module):
            bound.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    return bound


def _reserved_in(text: str) -> list[str]:
    hits = [r for r in _RESERVED if r in text] + _PRIVATE_MODULE.findall(text)
    return hits + ([text] if text in _METADATA else [])


def private_names(source: str, attributes: frozenset[str] = frozenset()) -> list[str]:
    """The private LangGraph names a module's code spells (``line: name``);
    ``attributes``: the private attributes of LangGraph's classes."""
    tree = ast.parse(source)
    prose = _prose(tree)
    bound = _imported(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            text = node.value
            hits = _reserved_in(text) + ([text] if text in attributes else [])
            found += [f"{node.lineno}: {hit}" for hit in hits]
        elif isinstance(node, ast.Import):
            found += [
                f"{node.lineno}: import {a.name}"
                for a in node.names
                if _is_langgraph(a.name) and _PRIVATE_MODULE.search(a.name)
            ]
        elif isinstance(node, ast.ImportFrom) and node.module and _is_langgraph(node.module):
            if _PRIVATE_MODULE.search(node.module):
                found.append(f"{node.lineno}: from {node.module}")
                continue
            for a in node.names:
                if a.name.startswith("_"):
                    found.append(f"{node.lineno}: from {node.module} import {a.name}")
                    continue
                # A public name for a private value: ``from ...serde.types import ERROR``.
                value = getattr(importlib.import_module(node.module), a.name, None)
                if isinstance(value, str) and _reserved_in(value):
                    found.append(f"{node.lineno}: from {node.module} import {a.name}")
        elif isinstance(node, ast.Attribute):
            chain = _dotted(node)
            head = chain.split(".")[0] if chain else ""
            if chain and head in bound and _PRIVATE_MODULE.search(bound[head] + chain[len(head) :]):
                found.append(f"{node.lineno}: {chain}")
            elif node.attr in attributes:
                found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in attributes:
            found.append(f"{node.lineno}: def {node.name}")  # overrides a private hook
    return found


def _private_attributes(sources: Sequence[str]) -> frozenset[str]:
    """The private attributes of the LangGraph classes the package imports, and of
    their LangGraph bases: what each class defines and what its methods set on
    ``self`` (read from LangGraph's source)."""
    classes = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module and _is_langgraph(node.module):
                module = importlib.import_module(node.module)
                for a in node.names:
                    if inspect.isclass(found := getattr(module, a.name, None)):
                        classes.update(k for k in found.__mro__ if _is_langgraph(k.__module__))
    names = set()
    for cls in classes:
        names.update(n for n in vars(cls) if n.startswith("_") and not n.endswith("__"))
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError):
            continue
        names.update(
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and node.attr.startswith("_")
            and not node.attr.endswith("__")
        )
    return frozenset(names - _NAMED_TUPLE_API)


def _package() -> dict[str, str]:
    return {
        str(path.relative_to(PACKAGE)): path.read_text() for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_the_scan_finds_what_it_looks_for() -> None:
    source = '''
"""A docstring may name ``__pregel_send`` and ``branch:to:``."""
from langgraph._internal._constants import PUSH
from langgraph.checkpoint.postgres import _internal
import langgraph.pregel._algo
from langgraph.graph import StateGraph
from langgraph_resilience._langgraph import PUSH as SEND
from langgraph.checkpoint.serde.types import ERROR
import langgraph
import langgraph.graph as lgg

def f(c):
    """And so may a function's ``__interrupt__``."""
    sql = f"SELECT 1 WHERE channel = '__error__' OR substr(channel, 1, 10) = 'branch:to:'"
    return c == "__pregel_tasks", c == "langgraph_node", c == "langgraph_resilience"

class G(StateGraph):
    def _defaults(self):
        return langgraph._internal._constants.TASKS, lgg._node.StateNodeSpec, self._nodes

    def policy(self):
        return getattr(self, "_node_defaults"), f"__error_handler__{self.name}"
'''
    attributes = frozenset({"_defaults", "_nodes", "_node_defaults"})
    found = {f.split(": ", 1)[1] for f in private_names(source, attributes)}
    assert found == {
        "from langgraph._internal._constants",
        "from langgraph.checkpoint.postgres import _internal",
        "import langgraph.pregel._algo",
        "from langgraph.checkpoint.serde.types import ERROR",
        "__error__",
        "branch:to:",
        "__pregel",
        "__pregel_tasks",
        "langgraph_node",
        "def _defaults",
        "langgraph._internal",
        "langgraph._internal._constants",
        "langgraph._internal._constants.TASKS",
        "lgg._node",
        "lgg._node.StateNodeSpec",
        "._nodes",
        "_node_defaults",
        "__error_handler__",
    }


def test_the_private_attributes_are_read_from_langgraphs_classes() -> None:
    attributes = _private_attributes(list(_package().values()))
    # Pregel's, a builder's (set in its __init__), the Postgres saver's (if installed).
    assert {"_defaults", "_node_defaults"} <= attributes
    assert not attributes & _NAMED_TUPLE_API


def test_no_module_but_the_door_names_a_private_langgraph_name() -> None:
    modules = _package()
    attributes = _private_attributes(list(modules.values()))
    naming = {
        name: found
        for name, source in modules.items()
        if name not in DOORS and (found := private_names(source, attributes))
    }
    assert naming == {}


def test_the_door_names_them() -> None:
    # The scan finds the door's own names: it is looking in the right place.
    modules = _package()
    attributes = _private_attributes(list(modules.values()))
    found = " ".join(private_names(modules["_langgraph.py"], attributes))
    for kind in (
        "from langgraph._internal",
        "langgraph_node",
        "__error_handler__",
        "def _defaults",
    ):
        assert kind in found, kind
    for kind in ("._node_defaults", "._dump_blobs", "_cursor"):
        assert kind in found or "_dump_blobs" not in attributes, kind
