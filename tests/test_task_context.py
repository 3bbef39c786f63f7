"""`TaskContext` against the installed LangGraph: what a node sees through it in a
real graph (a subgraph node, `Send` branches, a resumed task). The private config
keys it reads are pinned with the door's (``tests/test_langgraph_door.py``).

If an upgrade renames one of LangGraph's keys, or lets the config and the
runtime's ``execution_info`` disagree about a task, these tests fail loudly
instead of idempotency keys changing silently.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from graphs import one_node
from langgraph._internal import _constants as lg
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import ExecutionInfo, get_runtime
from langgraph.types import Command, Send, interrupt

from langgraph_resilience import Budget, ResilientState, ResilientStateGraph, side_effect
from langgraph_resilience import _keys as keys
from langgraph_resilience._keys import EFFECT_SCOPE_KEY, FENCE_KEY
from langgraph_resilience.checkpoint import Fence
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.graph._task import TaskContext


class State(ResilientState, total=False):
    items: list[str]
    done: Annotated[list[str], operator.add]


class Seen:
    """What each node saw: its TaskContext, LangGraph's execution_info, its config."""

    def __init__(self) -> None:
        self.by_node: dict[str, list[tuple[TaskContext, ExecutionInfo, dict[str, Any]]]] = {}

    def node(self, name: str) -> Any:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            config = get_config()
            info = get_runtime().execution_info
            assert info is not None
            self.by_node.setdefault(name, []).append((TaskContext(config=config), info, config))
            return {"done": [name]}

        return run


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[ResilientSqliteSaver]:
    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "task.db")) as found:
        yield found


# -- the keys ------------------------------------------------------------------------


def test_execution_info_has_every_field_the_context_reads() -> None:
    names = {f.name for f in dataclasses.fields(ExecutionInfo)}
    assert {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "node_attempt"} <= names


def test_our_keys_are_in_one_module_and_do_not_clash_with_langgraphs() -> None:
    theirs = {v for k, v in vars(lg).items() if k.startswith("CONFIG_KEY_")}
    ours = {getattr(keys, name) for name in keys.__all__}
    assert len(ours) == len(keys.__all__)  # no two of ours the same
    assert not ours & theirs
    # No module of the package spells one of our keys but the keys' module.
    package = Path(keys.__file__).parent
    spelt = [
        f"{path.relative_to(package)}: {key}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "_keys.py"
        for key in ours - {keys.BUDGET_KEY}  # "budget" is also a plain word
        if f'"{key}"' in path.read_text()
    ]
    assert spelt == []


# -- what a node sees ----------------------------------------------------------------


def _graph(seen: Seen, saver: ResilientSqliteSaver) -> Any:
    inner = one_node(StateGraph(State), "inner", seen.node("inner"))

    g = ResilientStateGraph(State)
    g.add_node("top", seen.node("top"))
    g.add_node("fan", seen.node("fan"))
    g.add_node("sub", inner.compile())
    g.add_edge(START, "top")
    g.add_conditional_edges("top", lambda s: [Send("fan", {"items": [i]}) for i in s["items"]])
    g.add_edge("fan", "sub")
    g.add_edge("sub", END)
    return g.compile(checkpointer=saver, budget=Budget(max_steps=100))


def test_a_node_sees_its_task_as_langgraph_does(saver: ResilientSqliteSaver) -> None:
    seen = Seen()
    config = {"configurable": {"thread_id": "t-context"}}
    _graph(seen, saver).invoke({"items": ["a", "b"]}, config)
    assert {n: len(v) for n, v in seen.by_node.items()} == {"top": 1, "fan": 2, "inner": 1}
    for name, calls in seen.by_node.items():
        for task, info, node_config in calls:
            configurable = node_config["configurable"]
            assert task.node == name == node_config["metadata"]["langgraph_node"]
            assert task.step == node_config["metadata"]["langgraph_step"]
            assert task.thread_id == "t-context" == info.thread_id
            assert task.checkpoint_ns == info.checkpoint_ns == configurable["checkpoint_ns"]
            assert task.task_id == info.task_id == configurable[lg.CONFIG_KEY_TASK_ID]
            assert task.checkpoint_id == info.checkpoint_id and task.checkpoint_id
            assert task.node_attempt == info.node_attempt == 1
            assert task.attempt_key == (
                "t-context",
                info.checkpoint_ns,
                info.checkpoint_id,
                info.task_id,
            )
            assert task.task_scope == f"{info.checkpoint_ns}|{info.task_id}"
            assert task.effect_scope == task.task_scope
            assert not task.resuming and not task.retrying
            assert task.saver is saver and task.async_saver is None  # a sync saver
            assert task.fence is None
            assert task.budget == Budget(max_steps=100)
    fan_ids = {task.task_id for task, _, _ in seen.by_node["fan"]}
    assert len(fan_ids) == 2  # each Send branch is a task of its own
    ((inner, _, _),) = seen.by_node["inner"]
    sub, inner_node = inner.checkpoint_ns.split("|")
    assert sub.startswith("sub:") and inner_node == f"inner:{inner.task_id}"


def test_side_effect_keys_use_the_tasks_scope(saver: ResilientSqliteSaver) -> None:
    contexts: list[TaskContext] = []

    @side_effect
    def notify(to: str) -> str:
        return f"sent to {to}"

    def inner_node(state: dict[str, Any]) -> dict[str, Any]:
        contexts.append(TaskContext(config=get_config()))
        return {"done": [notify("ops")]}

    inner = one_node(StateGraph(State), "inner", inner_node)
    g = one_node(ResilientStateGraph(State), "sub", inner.compile())
    g.compile(checkpointer=saver).invoke({}, {"configurable": {"thread_id": "t-effect"}})
    ((task,),) = [contexts]
    (record,) = saver.list_effects("t-effect")
    assert record.idempotency_key == f"{task.checkpoint_ns}|{task.task_id}|notify|1"
    assert (record.checkpoint_ns, record.checkpoint_id, record.task_id) == (
        task.checkpoint_ns,
        task.checkpoint_id,
        task.task_id,
    )


def test_a_resumed_task_knows_it_resumes(saver: ResilientSqliteSaver) -> None:
    contexts: list[TaskContext] = []

    def ask(state: dict[str, Any]) -> dict[str, Any]:
        contexts.append(TaskContext(config=get_config()))
        return {"done": [interrupt("proceed?")]}

    g = one_node(ResilientStateGraph(State), "ask", ask)
    graph = g.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "t-resume"}}
    graph.invoke({}, config)
    assert graph.invoke(Command(resume="yes"), config)["done"] == ["yes"]
    first, resumed = contexts
    assert not first.resuming and resumed.resuming
    assert resumed.task_id == first.task_id  # the same task, run again


# -- facts a config carries ----------------------------------------------------------------


def test_the_retried_steps_scope_replaces_the_tasks_own_for_that_node_only() -> None:
    retried = {"node": "send", "task": "send:old|old"}
    for node, scope in [("send", "send:old|old"), ("other", "|")]:
        task = TaskContext(
            config={
                "configurable": {EFFECT_SCOPE_KEY: retried},
                "metadata": {"langgraph_node": node},
            }
        )
        assert task.retrying and task.effect_scope == scope and task.task_scope == "|"


def test_outside_a_graph_the_context_is_empty() -> None:
    assert TaskContext.current() is None
    task = TaskContext(config={})
    assert (task.node, task.step, task.resuming, task.thread_id) == (None, None, False, None)
    assert (task.attempt_key, task.saver, task.async_saver, task.budget) == (None,) * 4
    assert task.fence is None and not task.retrying


def test_fence_and_budget_come_from_the_config() -> None:
    fence = Fence(run_id="r", token=3)
    task = TaskContext(config={"configurable": {FENCE_KEY: fence, "budget": {"max_steps": 2}}})
    assert task.fence == fence and task.budget == Budget(max_steps=2)


async def test_an_async_saver_serves_both_twins(tmp_path: Path) -> None:
    contexts: list[TaskContext] = []

    async def node(state: dict[str, Any]) -> dict[str, Any]:
        contexts.append(TaskContext(config=get_config()))
        return {"done": ["node"]}

    g = one_node(ResilientStateGraph(State), "node", node)
    async with AsyncResilientSqliteSaver.from_conn_string(str(tmp_path / "a.db")) as saver:
        await g.compile(checkpointer=saver).ainvoke({}, {"configurable": {"thread_id": "t"}})
    ((task,),) = [contexts]
    assert task.async_saver is saver and task.saver is saver  # sync methods bridged
    assert task.thread_id == "t" and task.node == "node"
