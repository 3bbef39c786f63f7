"""The recovery test kit: `FaultPlan` injects what it says, where it says, and
leaves the store as a kill would; `recovery_suite` passes a sound pipeline and
catches broken ones (an unrecorded email sent twice, steps lost under
``durability="exit"``)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from conftest import require_postgres
from graphs import DoneState as State
from helpers import sql
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langgraph_resilience import (
    Backoff,
    ConfigError,
    NodePolicy,
    PermanentError,
    ResilientStateGraph,
    TransientError,
    side_effect,
)
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.errors import (
    StoreUnavailable,
)
from langgraph_resilience.testing import (
    FaultPlan,
    RecoveryFailed,
    SimulatedCrash,
    Tracker,
    arecovery_suite,
    recovery_suite,
)
from langgraph_resilience.testing._cases import pick
from langgraph_resilience.testing.plugin import suite_runner

pytest_plugins = ["pytester"]

STEPS = ["a", "b", "c", "d"]
FAST = NodePolicy(retry=Backoff(max_attempts=3, initial_interval=0.01))


class Mailer:
    """An outside mail service: ``sent`` lists every delivered mail's key."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, key: str) -> str:
        self.sent.append(key)
        return f"mail-{len(self.sent)}"

    def lookup(self, key: str) -> str | None:
        return f"mail-{self.sent.index(key) + 1}" if key in self.sent else None


def pipeline(
    mailer: Mailer,
    *,
    recorded: bool = True,
    reconcile: bool = True,
    defer: bool = False,
    builder: type[StateGraph] = ResilientStateGraph,
    on_b: Callable[[], None] | None = None,
) -> Callable[[Any], Any]:
    """``build_graph`` of a four-step pipeline whose step c emails (through
    `side_effect` unless ``recorded=False``; ``defer``: its ``defer_outcome``)."""

    @side_effect(name="email", reconcile=mailer.lookup if reconcile else None, defer_outcome=defer)
    def email(*, idempotency_key: str) -> str:
        return mailer.send(idempotency_key)

    def make(name: str) -> Any:
        def node(state: State) -> dict[str, Any]:
            if name == "b" and on_b is not None:
                on_b()
            if name == "c":
                email() if recorded else mailer.send(f"raw-{len(mailer.sent)}")
            return {"done": [name]}

        return node

    def build(saver: Any) -> Any:
        g = builder(State)
        if isinstance(g, ResilientStateGraph):
            g.set_node_defaults(policy=FAST)
        for name in STEPS:
            g.add_node(name, make(name))
        g.add_edge(START, STEPS[0])
        for a, b in itertools.pairwise(STEPS):
            g.add_edge(a, b)
        g.add_edge(STEPS[-1], END)
        return g.compile(checkpointer=saver)

    return build


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


# -- FaultPlan ------------------------------------------------------------------------


def test_the_kits_names_are_exported_sorted() -> None:
    import langgraph_resilience.testing as testing

    assert sorted(testing.__all__) == list(testing.__all__)
    assert all(hasattr(testing, name) for name in testing.__all__)
    assert {"FaultPlan", "recovery_suite", "arecovery_suite"} <= set(testing.__all__)


def test_cases_are_spread_over_the_run_first_and_last_kept() -> None:
    assert pick(list("abcdefgh"), 4) == (["a", "c", "f", "h"], ["b", "d", "e", "g"])
    assert pick(list("abc"), 4) == (["a", "b", "c"], [])
    assert pick(list("abc"), 0) == (["a", "b", "c"], [])


def test_plan_is_validated_with_messages_that_say_what_to_do() -> None:
    with pytest.raises(ConfigError, match="try numbers >= 1"):
        FaultPlan().fail("a", ValueError, tries=0)
    with pytest.raises(ConfigError, match="exactly one of them"):
        FaultPlan(faults=()).crash("a").faults[0].__class__(path="a", effect="email")
    with pytest.raises(ConfigError, match="exception class"):
        FaultPlan().fail("a", "boom")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'before' or 'after'"):
        FaultPlan().crash("a", when="during")  # type: ignore[arg-type]
    plan = FaultPlan().fail("a", ValueError).crash("b").fail_checkpoint_write(at=2)
    assert len(plan.faults) == 3 and FaultPlan().faults == ()  # builders return new plans
    assert plan.node_fault("a", 1) is not None and plan.node_fault("a", 2) is None
    assert plan.crash_at("b", "after") is not None and plan.crash_at("b", "before") is None
    assert FaultPlan().crash("review*").crash_at("review#3", "after") is not None


def test_a_transient_error_at_a_step_is_retried_by_its_policy(tmp_path: Path) -> None:
    mailer = Mailer()
    plan = FaultPlan().fail("b", TransientError("rate limited"), tries=(1, 2))
    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "s.db")) as saver:
        out = plan.apply(pipeline(mailer)(saver)).invoke({"done": []}, config("t"))
        steps = {s["path"]: s for s in saver.step_history("t")}
    assert out["done"] == STEPS and out["resilience"]["status"] == "success"
    assert steps["b"]["attempts"] == 3 and steps["a"]["attempts"] == 1


def test_a_permanent_error_routes_as_the_nodes_own(tmp_path: Path) -> None:
    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "s.db")) as saver:
        graph = FaultPlan().fail("b", PermanentError).apply(pipeline(Mailer())(saver))
        out = graph.invoke({"done": []}, config("t"))
    assert out["done"] == ["a"] and out["resilience"]["status"] == "partial_complete"
    assert out["resilience"]["failed_step"]["error_type"] == "PermanentError"


def test_a_plain_graphs_node_raises_the_error(tmp_path: Path) -> None:
    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "s.db")) as saver:
        graph = pipeline(Mailer(), builder=StateGraph)(saver)
        with pytest.raises(KeyError):
            FaultPlan().fail("c", KeyError("x")).apply(graph).invoke({"done": []}, config("t"))


def test_a_crash_before_a_step_stops_the_run_before_its_body(tmp_path: Path) -> None:
    mailer, path = Mailer(), str(tmp_path / "s.db")
    build = pipeline(mailer, recorded=False)  # even an unrecorded email is sent once
    plan = FaultPlan().crash("c", when="before")
    with ResilientSqliteSaver.from_conn_string(path) as saver:
        graph = plan.apply(build(saver))
        with pytest.raises(SimulatedCrash, match="before step 'c'"):
            graph.invoke({"done": []}, config("t"))
    assert mailer.sent == []
    with ResilientSqliteSaver.from_conn_string(path) as saver:
        assert build(saver).invoke(None, config("t"))["done"] == STEPS
    assert len(mailer.sent) == 1


def test_a_crashed_saver_says_a_new_saver_is_needed_and_following_it_works(
    tmp_path: Path,
) -> None:
    mailer, path = Mailer(), str(tmp_path / "s.db")
    build = pipeline(mailer)
    with ResilientSqliteSaver.from_conn_string(path) as saver:
        with pytest.raises(SimulatedCrash):
            FaultPlan().crash("c", when="before").apply(build(saver)).invoke(
                {"done": []}, config("t")
            )
        with pytest.raises(SimulatedCrash, match="Open a new saver on the same store"):
            build(saver).invoke({"done": []}, config("other"))  # a second graph on it
    with ResilientSqliteSaver.from_conn_string(path) as saver:  # as the error says
        assert build(saver).invoke(None, config("t"))["done"] == STEPS


def test_a_failed_checkpoint_write_stops_the_run_and_the_resume_redoes_nothing(
    tmp_path: Path,
) -> None:
    path, tracker = str(tmp_path / "s.db"), Tracker()
    with ResilientSqliteSaver.from_conn_string(path) as saver:
        graph = (
            FaultPlan()
            .fail_checkpoint_write(at=3)
            .apply(pipeline(Mailer())(saver), tracker=tracker)
        )
        with pytest.raises(StoreUnavailable, match="injected by FaultPlan"):
            graph.invoke({"done": []}, config("t"))
    with ResilientSqliteSaver.from_conn_string(path) as saver:
        graph = FaultPlan().apply(pipeline(Mailer())(saver), tracker=tracker)
        assert graph.invoke(None, config("t"))["done"] == STEPS
    assert [e.path for e in tracker.executions] == STEPS  # every step ran once


def _store_left(backend: str, target: str, thread: str) -> dict[str, Any]:
    """What a store holds of a thread, without ids: checkpoints, writes, effects."""

    def column(query: str) -> list[Any]:
        return sorted(row[0] for row in sql(backend, target, query, (thread,)))

    return {
        "checkpoints": column("SELECT count(*) FROM checkpoints WHERE thread_id = ?"),
        "writes": column("SELECT channel FROM checkpoint_writes WHERE thread_id = ?")
        if backend == "postgres"
        else column("SELECT channel FROM writes WHERE thread_id = ?"),
        "effects": column("SELECT status FROM resilience_effects WHERE thread_id = ?"),
    }


@contextmanager
def _sync_saver(backend: str, target: str) -> Iterator[Any]:
    if backend == "sqlite":
        with ResilientSqliteSaver.from_conn_string(target) as saver:
            yield saver
    else:
        with _opened(ResilientPostgresSaver.from_conn_string(target)) as saver:
            yield saver


def test_an_in_process_crash_leaves_the_store_as_sigkill_does(store: tuple[str, str]) -> None:
    """The same crash point, once as SIGKILL of a real (forked) process, once in
    process: the two threads hold the same rows; both resume to the end."""
    backend, target = store
    mailer = Mailer()
    with _sync_saver(backend, target):  # set the store up before forking
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: runs until the plan kills it
        try:
            with _sync_saver(backend, target) as saver:
                plan = FaultPlan().crash_after_effect("email", kill=True)
                plan.apply(pipeline(mailer)(saver)).invoke({"done": []}, config("killed"))
        finally:
            os._exit(3)  # not killed: the test fails below
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    with _sync_saver(backend, target) as saver:
        plan = FaultPlan().crash_after_effect("email")
        with pytest.raises(SimulatedCrash):
            plan.apply(pipeline(mailer)(saver)).invoke({"done": []}, config("simulated"))
    left = _store_left(backend, target, "killed")
    assert _store_left(backend, target, "simulated") == left
    assert left["effects"] == ["intent"]  # the call returned, its outcome was lost
    for thread in ("killed", "simulated"):
        with _sync_saver(backend, target) as saver:
            assert pipeline(mailer)(saver).invoke(None, config(thread))["done"] == STEPS
    assert len(mailer.sent) == 2  # one per thread: reconcile found each email


def test_a_crash_after_an_effects_step_repeats_it_only_deferred_without_reconcile(
    tmp_path: Path,
) -> None:
    """The outcome is stored as the call returns: a crash later in the step
    replays it; with ``defer_outcome=True`` it was not stored yet, and only
    ``reconcile`` keeps the resumed run from calling again."""
    cases = [(True, False, 1), (False, False, 1), (True, True, 1), (False, True, 2)]
    for reconcile, defer, calls in cases:
        mailer, path = Mailer(), str(tmp_path / f"{reconcile}-{defer}.db")
        with ResilientSqliteSaver.from_conn_string(path) as saver:
            build = pipeline(mailer, reconcile=reconcile, defer=defer)
            with pytest.raises(SimulatedCrash):
                FaultPlan().crash("c").apply(build(saver)).invoke({"done": []}, config("t"))
            with pytest.raises(SimulatedCrash, match="writes nothing more"):
                saver.put_writes(config("t"), [("done", ["x"])], "task")  # the process is dead
        with ResilientSqliteSaver.from_conn_string(path) as saver:  # a new process
            assert build(saver).invoke(None, config("t"))["done"] == STEPS
        assert len(mailer.sent) == calls


# -- recovery_suite -------------------------------------------------------------------


def test_the_suite_passes_a_sound_pipeline_and_reports_each_case() -> None:
    mailer = Mailer()
    report = recovery_suite(pipeline(mailer), {"done": []}, effects={"email": mailer.sent})
    report.assert_ok()
    assert report.reference_steps == tuple(STEPS) and report.reference_effects == {"email": 1}
    families = {c.family for c in report.cases}
    assert families == {"step_crash", "checkpoint_write", "double_recovery", "effect_replay"}
    for case in report.family("step_crash"):  # only the step in flight runs again
        assert len(case.steps_redone) == 1 and case.completed_redone == ()
    assert any("effect 'email'" in c.name for c in report.family("effect_replay"))
    text = str(report)
    assert text.startswith("recovery suite passed") and "crash after step 'c'" in text


def test_the_suite_reports_an_email_sent_without_side_effect_as_duplicated() -> None:
    mailer = Mailer()
    report = recovery_suite(
        pipeline(mailer, recorded=False), {"done": []}, effects={"email": mailer.sent}
    )
    assert not report.ok and report.effects_duplicated == {"email": 1}
    caught = [c for c in report.family("effect_replay") if c.effects_duplicated]
    assert [c.name for c in caught] == ["crash after step 'c', which calls email"]
    assert any("called 2 times, 1 in the reference" in line for line in caught[0].evidence)
    with pytest.raises(RecoveryFailed, match=r"effect 'email' called 2 times.*called in: c"):
        report.assert_ok()
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ok"] is False and data["reference_effects"] == {"email": 1}
    duplicating = [c for c in data["cases"] if c["effects_duplicated"]]
    assert {c["family"] for c in duplicating} >= {"step_crash", "effect_replay"}
    assert all(c["effects_duplicated"] == {"email": 1} for c in duplicating)


def test_the_suite_reports_steps_lost_without_durability_sync() -> None:
    mailer = Mailer()
    report = recovery_suite(
        pipeline(mailer), {"done": []}, effects={"email": mailer.sent}, durability="exit"
    )
    assert not report.ok
    crash_d = next(c for c in report.family("step_crash") if c.name == "crash after step 'd'")
    assert crash_d.completed_redone == ("a", "b", "c")
    assert crash_d.effects_duplicated == {"email": 1}
    assert any("durability='sync'" in line for line in crash_d.evidence)
    assert report.completed_redone == ("a", "b", "c")


def test_the_suite_reports_a_stock_graph_on_langgraphs_default_durability() -> None:
    """A plain StateGraph on LangGraph's InMemorySaver (one instance shared by the
    runs): under the default durability ("async") the steps after a failed
    checkpoint write are not stored and run again; under "sync" nothing is lost."""
    saver = InMemorySaver()
    options: dict[str, Any] = {
        "checkpointer_factory": lambda: contextlib.nullcontext(saver),
        "max_cases": 0,
    }
    build = pipeline(Mailer(), recorded=False, builder=StateGraph)
    report = recovery_suite(build, {"done": []}, **options)
    lost = [c for c in report.family("checkpoint_write") if c.completed_redone]
    assert lost and not report.ok
    write_3 = next(c for c in lost if c.name == "checkpoint write 3 of 6 fails")
    assert write_3.completed_redone == ("b", "c", "d")
    clean = pipeline(Mailer(), builder=StateGraph, recorded=False)
    report = recovery_suite(clean, {"done": []}, durability="sync", **options)
    assert not any(c.completed_redone for c in report.cases)
    assert len(report.family("double_recovery")) == 3 and not report.not_run  # max_cases=0: all


def test_the_suite_counts_mocks_and_functions_and_refuses_other_counters() -> None:
    sent = mock.Mock()
    report = recovery_suite(
        pipeline(Mailer(), on_b=sent),
        {"done": []},
        effects={"b-mock": sent, "b-count": lambda: sent.call_count},
        max_cases=1,
    )
    assert report.reference_effects == {"b-mock": 1, "b-count": 1}
    # b calls the mock outside side_effect: a crash after b calls it again
    assert report.effects_duplicated == {"b-mock": 1, "b-count": 1}
    assert report.not_run  # one case per family
    with pytest.raises(ConfigError, match="how many times the effect happened"):
        recovery_suite(pipeline(Mailer()), {"done": []}, effects={"x": 3})
    with pytest.raises(ConfigError, match="compile the graph with the checkpointer"):
        recovery_suite(lambda saver: pipeline(Mailer())(None), {"done": []})


def test_the_suite_runs_only_the_cases_named_and_refuses_a_name_it_does_not_have() -> None:
    mailer = Mailer()
    full = recovery_suite(
        pipeline(mailer, recorded=False), {"done": []}, effects={"email": mailer.sent}, max_cases=0
    )
    every = [c.name for c in full.cases]
    chosen = {"crash after step 'c'", "crash after step 'c', which calls email"}
    assert chosen < set(every) and not full.not_run
    mailer = Mailer()
    report = recovery_suite(
        pipeline(mailer, recorded=False),
        {"done": []},
        effects={"email": mailer.sent},
        cases=chosen,
        max_cases=1,  # the names are run whatever the limit picks
    )
    assert [(c.family, c.name) for c in report.cases] == [
        ("step_crash", "crash after step 'c'"),
        ("effect_replay", "crash after step 'c', which calls email"),
    ]
    # the verdicts are the whole suite's: email sent outside the ledger, found twice
    assert all(not c.passed and c.effects_duplicated == {"email": 1} for c in report.cases)
    assert sorted(report.not_run) == sorted(n for n in every if n not in chosen)
    assert "more cases not run" in str(report)
    unknown = r"names \"crash after step 'z'\".*its cases: \"crash after step 'a'\""
    with pytest.raises(ConfigError, match=unknown):
        recovery_suite(pipeline(Mailer()), {"done": []}, cases={"crash after step 'z'"})
    for bad in ("crash after step 'c'", set(), [1]):
        with pytest.raises(ConfigError, match="cases takes the names of the cases"):
            recovery_suite(pipeline(Mailer()), {"done": []}, cases=bad)  # type: ignore[arg-type]


@contextmanager
def _opened(cm: Any) -> Iterator[Any]:
    with cm as saver:
        saver.setup()
        yield saver


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_the_suite_runs_on_every_backend(store: tuple[str, str], is_async: bool) -> None:
    backend, target = store
    mailer = Mailer()
    if backend == "postgres":
        require_postgres()
        if is_async:
            factory: Any = lambda: AsyncResilientPostgresSaver.from_conn_string(target)  # noqa: E731
            async with AsyncResilientPostgresSaver.from_conn_string(target) as saver:
                await saver.setup()
        else:
            factory = lambda: _opened(ResilientPostgresSaver.from_conn_string(target))  # noqa: E731
    elif is_async:
        factory = lambda: AsyncResilientSqliteSaver.from_conn_string(target)  # noqa: E731
    else:
        factory = lambda: ResilientSqliteSaver.from_conn_string(target)  # noqa: E731
    options: dict[str, Any] = {
        "checkpointer_factory": factory,
        "effects": {"email": mailer.sent},
        "max_cases": 2,
    }
    if is_async:
        report = await arecovery_suite(pipeline(mailer), {"done": []}, **options)
    else:
        report = await asyncio.to_thread(recovery_suite, pipeline(mailer), {"done": []}, **options)
    report.assert_ok()
    assert len(report.cases) >= 7


# -- the pytest plugin ----------------------------------------------------------------


def test_the_fixture_makes_it_one_line(tmp_path: Path) -> None:
    recovery_suite_fixture = suite_runner(tmp_path)  # what the fixture gives a test
    mailer = Mailer()
    recovery_suite_fixture(
        pipeline(mailer), {"done": []}, effects={"email": mailer.sent}
    ).assert_ok()
    assert (tmp_path / "recovery.db").exists()


def test_the_registered_plugin_loads_nothing_heavy() -> None:
    code = (
        "import sys, pytest_langgraph_resilience; "
        "print([m for m in sys.modules if m.startswith(('langgraph', 'langchain'))])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_plugin_gives_a_users_test_file_the_fixture(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_user="""
        import operator
        from typing import Annotated
        from langgraph.graph import START, END
        from langgraph_resilience import ResilientState, ResilientStateGraph

        class S(ResilientState, total=False):
            done: Annotated[list[str], operator.add]

        def build(saver):
            g = ResilientStateGraph(S)
            g.add_node("a", lambda s: {"done": ["a"]})
            g.add_node("b", lambda s: {"done": ["b"]})
            g.add_edge(START, "a"); g.add_edge("a", "b"); g.add_edge("b", END)
            return g.compile(checkpointer=saver)

        def test_recovers(recovery_suite):
            recovery_suite(build, {"done": []}, max_cases=1).assert_ok()
        """
    )
    installed = any(
        e.value == "pytest_langgraph_resilience"
        for e in importlib.metadata.entry_points(group="pytest11")
    )
    loaded = installed and not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    args = ["-p", "no:cacheprovider"] + ([] if loaded else ["-p", "pytest_langgraph_resilience"])
    result = pytester.runpytest_inprocess(*args)
    result.assert_outcomes(passed=1)


def test_the_suite_tells_a_same_key_repeat_from_a_call_outside_the_ledger() -> None:
    """Three pipelines whose step c emails through a service that ignores keys:
    reconciled (passes), a side_effect without reconcile (re-called with the same
    key after a crash right after its call: safe only if the service
    deduplicates), an unwrapped call (no key: sent twice). Three reports apart."""
    kinds = {"reconciled": {}, "same key": {"reconcile": False}, "unwrapped": {"recorded": False}}
    reports = {}
    for kind, options in kinds.items():
        mailer = Mailer()
        build = pipeline(mailer, **options)  # type: ignore[arg-type]
        reports[kind] = recovery_suite(build, {"done": []}, effects={"email": mailer.sent})
    texts = {kind: str(report) for kind, report in reports.items()}
    again, outside = "called again with the same idempotency key", "outside the effect ledger"
    assert reports["reconciled"].ok
    assert again not in texts["reconciled"] and outside not in texts["reconciled"]

    same_key = reports["same key"]
    assert [c.name for c in same_key.failed] == ["crash right after effect 'email' call 1 returned"]
    case = same_key.failed[0]
    assert case.effects_same_key == {"email": 1} and case.effects_unkeyed == {}
    said = "\n".join(case.evidence)
    assert again in said and "safe only if its service deduplicates by that key" in said
    assert "dedupe_effects={'email'}" in said and "reconcile=" in said
    assert outside not in texts["same key"]

    unwrapped = reports["unwrapped"]
    assert not unwrapped.ok and unwrapped.failed
    assert all(c.effects_unkeyed == {"email": 1} for c in unwrapped.failed)
    assert all(c.effects_same_key == {} for c in unwrapped.failed)
    assert outside in texts["unwrapped"] and "sends it twice" in texts["unwrapped"]
    assert again not in texts["unwrapped"]


def test_a_service_declared_deduplicating_passes_its_same_key_repeats() -> None:
    mailer = Mailer()
    report = recovery_suite(
        pipeline(mailer, reconcile=False),
        {"done": []},
        effects={"email": mailer.sent},
        dedupe_effects={"email"},
    )
    report.assert_ok()
    [case] = [c for c in report.cases if c.effects_deduplicated]
    assert case.effects_deduplicated == {"email": 1} and case.effects_duplicated == {}
    assert "deduplicated by the service (dedupe_effects): email +1" in str(report)
    assert report.to_dict()["cases"][report.cases.index(case)]["effects_deduplicated"] == {
        "email": 1
    }
    # A call outside the ledger has no key to deduplicate by: nothing excuses it.
    with pytest.raises(ConfigError, match="never called as a side_effect"):
        recovery_suite(pipeline(Mailer(), recorded=False), {"done": []}, dedupe_effects={"email"})
    with pytest.raises(ConfigError, match="a set of str"):
        recovery_suite(pipeline(Mailer()), {"done": []}, dedupe_effects="email")
