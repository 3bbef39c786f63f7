"""The door to LangGraph's private internals (`langgraph_resilience._langgraph`).

Every name the door spells is the installed LangGraph's: its private constants,
what a real graph writes and puts in a task's metadata, its private callables.
And no other module of the package names one: a scan of every module's string
literals (docstrings aside: prose may name them) and imports fails on any private
LangGraph name outside the door, so an upgrade has one module to check.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph._internal import _constants as lg
from langgraph._internal import _runnable
from langgraph.checkpoint.base import EXCLUDED_METADATA_KEYS
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde import types as serde_types
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

import langgraph_resilience
from langgraph_resilience import _langgraph as door
from langgraph_resilience.checkpoint._events import RUN_LOG_CHANNELS

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
    # The run log reads the error channels' values: an error and its handler's marker.
    assert {lg.ERROR, lg.ERROR_SOURCE_NODE} <= set(RUN_LOG_CHANNELS)


def test_the_metadata_keys_are_langgraphs() -> None:
    assert {door.NODE_KEY, door.STEP_KEY, door.PATH_KEY} <= EXCLUDED_METADATA_KEYS


def test_the_private_callables_are_langgraphs() -> None:
    assert door.coerce_to_runnable is _runnable.coerce_to_runnable
    assert door.RunnableCallable is _runnable.RunnableCallable
    assert isinstance(door.coerce_to_runnable(len, name="len", trace=False), door.RunnableCallable)
    assert door.DeltaSnapshot is serde_types._DeltaSnapshot
    graph = StateGraph(_State)
    graph.add_node("a", lambda s: {})
    assert isinstance(graph.nodes["a"], door.StateNodeSpec)


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
    | {serde_types.SCHEDULED, lg.NULL_TASK_ID, "__pregel", "branch:to:"}
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


def _is_langgraph(module: str) -> bool:
    return module == "langgraph" or module.startswith("langgraph.")


def private_names(source: str) -> list[str]:
    """The private LangGraph names a module's code spells (``line: name``)."""
    tree = ast.parse(source)
    prose = _prose(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            text = node.value
            hits = [r for r in _RESERVED if r in text] + _PRIVATE_MODULE.findall(text)
            hits += [text] if text in _METADATA else []
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
            found += [
                f"{node.lineno}: from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_")
            ]
    return found


def test_the_scan_finds_what_it_looks_for() -> None:
    source = '''
"""A docstring may name ``__pregel_send`` and ``branch:to:``."""
from langgraph._internal._constants import PUSH
from langgraph.checkpoint.postgres import _internal
import langgraph.pregel._algo
from langgraph.graph import StateGraph
from langgraph_resilience._langgraph import PUSH as SEND

def f(c):
    """And so may a function's ``__interrupt__``."""
    sql = f"SELECT 1 WHERE channel = '__error__' OR substr(channel, 1, 10) = 'branch:to:'"
    return c == "__pregel_tasks", c == "langgraph_node", c == "langgraph_resilience"
'''
    found = {f.split(": ", 1)[1] for f in private_names(source)}
    assert found == {
        "from langgraph._internal._constants",
        "from langgraph.checkpoint.postgres import _internal",
        "import langgraph.pregel._algo",
        "__error__",
        "branch:to:",
        "__pregel",
        "__pregel_tasks",
        "langgraph_node",
    }


def test_no_module_but_the_door_names_a_private_langgraph_name() -> None:
    naming = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in DOORS
        and (found := private_names(path.read_text()))
    }
    assert naming == {}


def test_the_door_names_them() -> None:
    # The scan would find the door's own names: it is looking in the right place.
    assert private_names((PACKAGE / "_langgraph.py").read_text())
