"""Deploying a new graph version over threads in flight: versions, renames,
migrations, no silent drop, and `check_deploy` before the deploy.

The case LangGraph drops in silence (measured with its stock saver): a thread
paused at ``review`` (an interrupt), the graph redeployed with ``review``
renamed ``approve``: ``get_state().next == ()`` and a resume returns the old
state, ``publish`` never running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import Harness
from graphs import DoneState
from langgraph.graph import END, START
from langgraph.types import Command, interrupt
from typing_extensions import Required

from langgraph_resilience import (
    ConfigError,
    DeployBlocked,
    NodePolicy,
    PermanentError,
    ResilientState,
    ResilientStateGraph,
    acheck_deploy,
    check_deploy,
    side_effect,
)
from langgraph_resilience.graph._versions import MIGRATED_KEY, VERSION_KEY


class State(DoneState, total=False):
    priority: str
    owner: str


SENT: list[str] = []


@side_effect
def notify(text: str, *, idempotency_key: str) -> str:
    SENT.append(idempotency_key)
    return "sent"


def prep(state: State) -> dict[str, Any]:
    return {"done": ["prep"]}


def review(state: State) -> dict[str, Any]:
    notify("asked for a review")  # before the pause: recorded, never sent twice
    answer = interrupt("approve?")
    return {"done": [f"review:{answer}"]}


def publish(state: State) -> dict[str, Any]:
    return {"done": [f"publish:{state.get('priority', 'MISSING')}"]}


def build(
    name: str = "review", *, node: Any = review, state: Any = State, **versions: Any
) -> ResilientStateGraph[Any]:
    g = ResilientStateGraph(state, **versions)
    g.add_node("prep", prep)
    g.add_node(name, node)
    g.add_node("publish", publish)
    g.add_edge(START, "prep")
    g.add_edge("prep", name)
    g.add_edge(name, "publish")
    g.add_edge("publish", END)
    return g


def cfg(checkpointer: Harness, name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{name}-{checkpointer.id}"}}


async def _check(checkpointer: Harness, builder: Any) -> Any:
    if checkpointer.is_async:
        return await acheck_deploy(checkpointer.saver, builder)
    return check_deploy(checkpointer.saver, builder)


def _of(report: Any, thread: str) -> list[str]:
    """The verdicts of one thread (the Postgres database holds other tests' threads)."""
    return [t.verdict for t in report.threads if t.thread_id == thread]


def _one(report: Any, thread: str) -> Any:
    [found] = [t for t in report.threads if t.thread_id == thread]
    return found


async def _count(checkpointer: Harness, config: dict[str, Any]) -> int:
    return len(await checkpointer.listed(config))


async def test_a_renamed_paused_node_blocks_then_resumes_once_mapped(
    checkpointer: Harness,
) -> None:
    SENT.clear()
    config = cfg(checkpointer, "rename")
    v1 = build(version=1).compile(checkpointer=checkpointer.saver)
    await checkpointer.invoke(v1, {"done": []}, config)
    assert len(SENT) == 1
    stored = await _count(checkpointer, config)

    # v2 renames review without saying so: blocked, before and at the resume
    bare = build("approve", version=2)
    report = await _check(checkpointer, bare)
    assert [t.thread_id for t in report.blocked] == [config["configurable"]["thread_id"]]
    assert "'review'" in report.blocked[0].reasons[0]
    assert report.ok == [] and report.migrates == []
    with pytest.raises(DeployBlocked, match="'review'") as caught:
        await checkpointer.invoke(bare.compile(checkpointer=checkpointer.saver), None, config)
    assert caught.value.stored_version == 1 and caught.value.version == 2
    assert await _count(checkpointer, config) == stored  # nothing stored

    # with the rename and a migration for the new required field: ok, and it runs
    calls: list[dict[str, Any]] = []

    def add_priority(state: dict[str, Any]) -> dict[str, Any]:
        calls.append(state)
        return {**state, "priority": "high"}

    mapped = build(
        "approve", version=2, renames={"review": "approve"}, migrations={2: add_priority}
    )
    report = await _check(checkpointer, mapped)
    assert report.blocked == [] and len(report.migrates) == 1
    assert report.migrates[0].migrations == (2,)
    assert report.migrates[0].renamed == {"review": "approve"}
    assert calls == []  # check_deploy runs nothing
    v2 = mapped.compile(checkpointer=checkpointer.saver)
    out = await checkpointer.invoke(v2, Command(resume="yes"), config)
    assert out["done"] == ["prep", "review:yes", "publish:high"]
    assert out["resilience"]["status"] == "success"
    assert len(calls) == 1
    assert len(SENT) == 1  # the renamed node kept its effect's key: not sent again
    listed = await checkpointer.listed(config)
    migrated = [c.metadata[MIGRATED_KEY] for c in listed if MIGRATED_KEY in c.metadata]
    assert migrated == [{"from": 1, "to": 2, "ran": [2], "renamed": {"review": "approve"}}]
    assert listed[0].metadata[VERSION_KEY] == 2
    assert (await _check(checkpointer, mapped)).threads == ()  # nothing left in flight


async def test_a_migration_chain_runs_once_in_version_order(checkpointer: Harness) -> None:
    config = cfg(checkpointer, "chain")
    v1 = build(version=1).compile(checkpointer=checkpointer.saver)
    await checkpointer.invoke(v1, {"done": []}, config)
    ran: list[int] = []

    def to2(state: dict[str, Any]) -> dict[str, Any]:
        ran.append(2)
        return {**state, "priority": "low"}

    def to3(state: dict[str, Any]) -> dict[str, Any]:
        ran.append(3)
        assert state["priority"] == "low"  # 2 ran first
        return {**state, "priority": "normal", "owner": "ops"}

    v3 = build(version=3, migrations={3: to3, 2: to2}).compile(checkpointer=checkpointer.saver)
    snap_before = await checkpointer.call("get_tuple", config)
    assert snap_before.metadata[VERSION_KEY] == 1
    out = await checkpointer.invoke(v3, Command(resume="ok"), config)
    assert ran == [2, 3]
    assert out["done"][-1] == "publish:normal" and out["owner"] == "ops"
    # a second read, and another run on the thread, run nothing again
    await checkpointer.invoke(v3, None, config)
    await checkpointer.invoke(v3, {"done": []}, config)
    assert ran == [2, 3]


async def test_a_migration_that_raises_leaves_the_thread_as_it_was(
    checkpointer: Harness,
) -> None:
    config = cfg(checkpointer, "raises")
    await checkpointer.invoke(
        build(version=1).compile(checkpointer=checkpointer.saver), {"done": []}, config
    )
    stored = await _count(checkpointer, config)

    def broken(state: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("priority")

    v2 = build(version=2, migrations={2: broken}).compile(checkpointer=checkpointer.saver)
    with pytest.raises(ConfigError, match="migration to version 2 raised KeyError"):
        await checkpointer.invoke(v2, Command(resume="x"), config)
    assert await _count(checkpointer, config) == stored
    head = await checkpointer.call("get_tuple", config)
    assert head.metadata[VERSION_KEY] == 1


def test_versions_are_checked_when_the_graph_is_built() -> None:
    with pytest.raises(ConfigError, match="give the graph a version"):
        ResilientStateGraph(State, renames={"a": "b"})
    with pytest.raises(ConfigError, match="int or a str"):
        ResilientStateGraph(State, version=1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="leads past"):
        ResilientStateGraph(State, version=2, migrations={3: dict})
    with pytest.raises(ConfigError, match="version type"):
        ResilientStateGraph(State, version=2, migrations={"2": dict})
    with pytest.raises(ConfigError, match="cycle"):
        ResilientStateGraph(State, version=2, renames={"a": "b", "b": "a"})


def test_an_unversioned_graph_stamps_nothing(tmp_path: Path) -> None:
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "plain.db")) as saver:
        graph = build().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "plain"}}
        graph.invoke({"done": []}, config)
        assert all(VERSION_KEY not in c.metadata for c in saver.list(config))
        # a later versioned graph takes the unversioned thread: every migration is due
        v2 = build(version=2, migrations={2: lambda s: {**s, "priority": "p"}})
        report = check_deploy(saver, v2)
        assert [t.migrations for t in report.migrates] == [(2,)]
        assert report.migrates[0].stored_version is None


def test_check_deploy_command_exits_1_when_a_thread_is_blocked(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    module = tmp_path / "deploy_graphs.py"
    module.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from test_deploy import build
            v1 = build(version=1)
            bare = build("approve", version=2)
            mapped = build("approve", version=2, renames={{"review": "approve"}})
            """
        )
    )
    from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver

    with ResilientSqliteSaver.from_conn_string(db) as saver:
        build(version=1).compile(checkpointer=saver).invoke(
            {"done": []}, {"configurable": {"thread_id": "paused-1"}}
        )

    def run(attr: str, *given: str) -> subprocess.CompletedProcess[str]:
        command = ["check-deploy", "--db", db, "--json", "--graph", f"deploy_graphs:{attr}"]
        return subprocess.run(
            [sys.executable, "-m", "langgraph_resilience", *(given or command)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
        )

    blocked = run("bare")
    assert blocked.returncode == 1, blocked.stderr
    found = json.loads(blocked.stdout)["threads"]
    assert [(t["thread_id"], t["verdict"]) for t in found] == [("paused-1", "blocked")]
    assert "review" in found[0]["reasons"][0]
    ok = run("mapped")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["threads"][0]["verdict"] == "migrates"
    shown = run("", "show", "paused-1", "--db", db)
    assert shown.returncode == 0, shown.stderr
    assert "graph v1" in shown.stdout.splitlines()[0]  # the version the run ran on


async def test_a_paused_worker_run_is_refused_and_kept_then_finishes_once_mapped(
    checkpointer: Harness,
) -> None:
    import asyncio

    from langgraph_resilience import Worker

    if checkpointer.backend == "postgres":
        from helpers import sql

        sql(checkpointer.backend, checkpointer.target, "DELETE FROM resilience_runs")
    SENT.clear()

    async def call(method: Any, *args: Any) -> Any:
        if checkpointer.is_async:
            return await getattr(method.__self__, "a" + method.__name__)(*args)
        return await asyncio.to_thread(method, *args)

    old = Worker(build(version=1), checkpointer=checkpointer.saver, lease_ttl=5)
    run_id = await call(old.submit, {"done": []})
    assert await call(old.run) == {run_id: "paused"}
    assert len(SENT) == 1

    bare = Worker(build("approve", version=2), checkpointer=checkpointer.saver, lease_ttl=5)
    await call(bare.resume, run_id, "yes")
    assert await call(bare.run) == {run_id: "paused"}  # refused, kept as it was
    record = await checkpointer.call("read_run", run_id)
    kept = checkpointer.saver.serde.loads_typed((record.outcome_type, record.outcome))
    assert kept["paused"] == "deploy_blocked" and "'review'" in kept["blocked"]

    mapped = build("approve", version=2, renames={"review": "approve"})
    worker = Worker(mapped, checkpointer=checkpointer.saver, lease_ttl=5)
    await call(worker.resume, run_id, "yes")
    assert await call(worker.run) == {run_id: "success"}
    record = await checkpointer.call("read_run", run_id)
    done = checkpointer.saver.serde.loads_typed((record.outcome_type, record.outcome))
    assert done["values"]["done"] == ["prep", "review:yes", "publish:MISSING"]
    assert len(SENT) == 1  # its effect, once


async def test_each_run_records_the_graph_version_it_ran_on(checkpointer: Harness) -> None:
    from langgraph_resilience import arun_report, run_report

    config = cfg(checkpointer, "runs-on")
    thread = config["configurable"]["thread_id"]
    v1 = build(version=1).compile(checkpointer=checkpointer.saver)
    await checkpointer.invoke(v1, {"done": []}, config)
    await checkpointer.invoke(v1, Command(resume="yes"), config)
    v2 = build(version=2).compile(checkpointer=checkpointer.saver)
    await checkpointer.invoke(v2, {"done": []}, config)  # a new run, on the new version
    rows = await checkpointer.call("history.run_rows", thread)
    assert [(r.run, r.graph_version) for r in rows] == [(2, "2"), (1, "1")]
    if checkpointer.is_async:
        first = await arun_report(checkpointer.saver, thread, run=1)
        latest = await arun_report(checkpointer.saver, thread)
    else:
        first = run_report(checkpointer.saver, thread, run=1)
        latest = run_report(checkpointer.saver, thread)
    assert first.graph_version == "1" and latest.graph_version == "2"
    assert "graph v2" in latest.to_text().splitlines()[0]
    assert latest.to_dict()["graph_version"] == "2"
    # an unversioned graph records none
    plain = cfg(checkpointer, "runs-on-plain")
    await checkpointer.invoke(build().compile(checkpointer=checkpointer.saver), {"done": []}, plain)
    [row] = await checkpointer.call("history.run_rows", plain["configurable"]["thread_id"])
    assert row.graph_version is None


class Ticketed(State):  # version 2 requires a field version 1 never wrote
    ticket: Required[str]


async def test_a_required_field_without_a_migration_blocks_the_thread(
    checkpointer: Harness,
) -> None:
    config = cfg(checkpointer, "required")
    thread = config["configurable"]["thread_id"]
    v1 = build(version=1).compile(checkpointer=checkpointer.saver)
    await checkpointer.invoke(v1, {"done": []}, config)
    stored = await _count(checkpointer, config)

    def v2(**versions: Any) -> Any:
        return build(state=Ticketed, version=2, **versions)

    bare = v2()
    report = await _check(checkpointer, bare)
    assert _of(report, thread) == ["blocked"]
    assert (
        "'ticket'" in _one(report, thread).reasons[0]
        and "migration" in _one(report, thread).reasons[0]
    )
    with pytest.raises(DeployBlocked, match="'ticket'"):
        await checkpointer.invoke(bare.compile(checkpointer=checkpointer.saver), None, config)
    assert await _count(checkpointer, config) == stored  # nothing stored

    # a migration that forgets it: check_deploy trusts it, the resume does not
    forgets = v2(migrations={2: lambda s: {**s, "priority": "p"}})
    assert _of(await _check(checkpointer, forgets), thread) == ["migrates"]
    with pytest.raises(DeployBlocked, match="'ticket' after the migrations"):
        await checkpointer.invoke(forgets.compile(checkpointer=checkpointer.saver), None, config)
    assert await _count(checkpointer, config) == stored

    gives = v2(migrations={2: lambda s: {**s, "priority": "urgent", "ticket": "T-1"}})
    out = await checkpointer.invoke(
        gives.compile(checkpointer=checkpointer.saver), Command(resume="y"), config
    )
    assert out["ticket"] == "T-1" and out["resilience"]["status"] == "success"
    # a new run on a finished thread is not checked: its input may give the field
    fresh = cfg(checkpointer, "required-fresh")
    await checkpointer.invoke(v1, {"done": []}, fresh)
    await checkpointer.invoke(v1, Command(resume="y"), fresh)
    out = await checkpointer.invoke(
        bare.compile(checkpointer=checkpointer.saver), {"done": [], "ticket": "T-2"}, fresh
    )
    assert out["ticket"] == "T-2"


def enrich(state: State) -> dict[str, Any]:
    raise PermanentError("the enrichment service said no")


def build_enriched(*, critical: bool, **versions: Any) -> ResilientStateGraph[Any]:
    g = ResilientStateGraph(State, **versions)
    g.add_node("prep", prep)
    g.add_node("enrich", enrich, policy=NodePolicy(retry=None, critical=critical))
    g.add_node("review", review)
    g.add_node("publish", publish)
    g.add_edge(START, "prep")
    g.add_edge("prep", "enrich")
    g.add_edge("enrich", "review")
    g.add_edge("review", "publish")
    g.add_edge("publish", END)
    return g


async def test_a_degraded_step_of_a_node_made_critical_blocks_the_thread(
    checkpointer: Harness,
) -> None:
    config = cfg(checkpointer, "critical")
    thread = config["configurable"]["thread_id"]
    v1 = build_enriched(critical=False, version=1).compile(checkpointer=checkpointer.saver)
    out = await checkpointer.invoke(v1, {"done": []}, config)
    assert out["resilience"]["degraded_steps"] == ["enrich"]  # went on past it, then paused

    strict = build_enriched(critical=True, version=2)
    report = await _check(checkpointer, strict)
    assert _of(report, thread) == ["blocked"]
    assert (
        "'enrich'" in _one(report, thread).reasons[0]
        and "critical" in _one(report, thread).reasons[0]
    )
    lenient = build_enriched(critical=False, version=2)
    assert _of(await _check(checkpointer, lenient), thread) == ["ok"]
    out = await checkpointer.invoke(
        lenient.compile(checkpointer=checkpointer.saver), Command(resume="y"), config
    )
    assert out["done"][-1] == "publish:MISSING"


def enrich_cache(state: State) -> dict[str, Any]:
    return {"done": ["enrich_cache"]}


async def test_a_step_replaced_by_its_fallback_is_no_degraded_step(checkpointer: Harness) -> None:
    def build_fallback(**versions: Any) -> ResilientStateGraph[Any]:
        g = ResilientStateGraph(State, **versions)
        g.add_node("enrich", enrich, policy=NodePolicy(retry=None, fallback="enrich_cache"))
        g.add_node("enrich_cache", enrich_cache)
        g.add_node("review", review)
        g.add_edge(START, "enrich")
        g.add_edge("enrich", "review")
        g.add_edge("enrich_cache", "review")
        g.add_edge("review", END)
        return g

    config = cfg(checkpointer, "fallback")
    thread = config["configurable"]["thread_id"]
    v1 = build_fallback(version=1).compile(checkpointer=checkpointer.saver)
    out = await checkpointer.invoke(v1, {"done": []}, config)
    assert out["resilience"]["degraded_steps"] == ["enrich"]  # replaced, the node critical
    v2 = build_fallback(version=2)
    assert _of(await _check(checkpointer, v2), thread) == ["ok"]
    out = await checkpointer.invoke(
        v2.compile(checkpointer=checkpointer.saver), Command(resume="y"), config
    )
    assert out["resilience"]["status"] == "success"


def _asking(effect: Any) -> Any:
    def review(state: State) -> dict[str, Any]:
        effect("asked for a review")
        return {"done": [f"review:{interrupt('approve?')}"]}

    return review


async def test_a_renamed_side_effect_of_a_paused_task_blocks_the_thread(
    checkpointer: Harness,
) -> None:
    from langgraph_resilience.graph import _versions
    from langgraph_resilience.graph._versions import defined_effects

    config = cfg(checkpointer, "effect")
    thread = config["configurable"]["thread_id"]
    calls: list[str] = []

    def v1_run() -> Any:  # the old code: gone after the deploy
        @side_effect
        def ask_reviewer_v1(text: str) -> str:
            calls.append("v1")
            return "asked"

        return build(node=_asking(ask_reviewer_v1), version=1).compile(
            checkpointer=checkpointer.saver
        )

    await checkpointer.invoke(v1_run(), {"done": []}, config)
    # The deployed process never imports the old code: its effect is not defined there.
    _versions._DEFINED.pop("ask_reviewer_v1", None)
    assert calls == ["v1"] and "ask_reviewer_v1" not in defined_effects()

    @side_effect
    def ask_reviewer(text: str) -> str:  # renamed: its key would change
        calls.append("renamed")
        return "asked"

    renamed = build(node=_asking(ask_reviewer), version=2)
    report = await _check(checkpointer, renamed)
    assert _of(report, thread) == ["blocked"]
    assert "'ask_reviewer_v1'" in _one(report, thread).reasons[0]

    @side_effect(name="ask_reviewer_v1")  # keeps its key
    def ask_reviewer_kept(text: str) -> str:
        calls.append("kept")
        return "asked"

    kept = build(node=_asking(ask_reviewer_kept), version=2)
    assert _of(await _check(checkpointer, kept), thread) == ["ok"]
    out = await checkpointer.invoke(
        kept.compile(checkpointer=checkpointer.saver), Command(resume="y"), config
    )
    assert out["resilience"]["status"] == "success"
    assert calls == ["v1"]  # replayed by its key, not called again


def test_the_fields_a_state_schema_requires() -> None:
    import dataclasses

    import pydantic

    from langgraph_resilience.graph._versions import required_fields

    class Total(ResilientState):  # total=True: LangGraph still takes it partial
        query: str

    @dataclasses.dataclass
    class Data:
        ticket: str
        note: str = ""

    class Model(pydantic.BaseModel):
        ticket: str
        note: str = ""

    assert required_fields(Ticketed) == {"ticket"}
    assert required_fields(Total) == frozenset() and required_fields(State) == frozenset()
    assert required_fields(Data) == {"ticket"} and required_fields(Model) == {"ticket"}


def test_an_effect_name_stays_defined_while_one_of_its_definitions_lives() -> None:
    # Before: the registry kept one function per name, so a second definition of
    # 'notify' (another graph, another test) dying forgot the first, still alive:
    # check_deploy then blocked threads on a "renamed" effect that was not.
    import gc

    from langgraph_resilience import side_effect
    from langgraph_resilience.graph._versions import defined_effects

    @side_effect(name="registry-probe")
    def first(to: str) -> str:
        return to

    @side_effect(name="registry-probe")
    def second(to: str) -> str:
        return to

    del second
    gc.collect()
    assert "registry-probe" in defined_effects()
    del first
    gc.collect()
    assert "registry-probe" not in defined_effects()
