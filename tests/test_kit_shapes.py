"""The test kit (`recovery_suite`) on the shapes users compose with LangGraph's
own libraries: a ``langgraph-swarm`` handoff and a ``langgraph-supervisor``
(steps that hand off with ``Command(graph=Command.PARENT)``), an agent invoked
inside a node function, a ``deepagents`` subagent invoked inside its ``task``
tool. Handoffs are crashed where they happen, a safe graph passes
`assert_ok()`, an email sent outside the effect ledger by a nested agent is
found (and the crash point is the one a real SIGKILL leaves), a case whose
faults did not all fire is no pass, and every extra call says why. Fake chat
models with random (uuid) tool-call ids; SQLite and Postgres.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph_supervisor")
pytest.importorskip("langgraph_swarm")
pytest.importorskip("deepagents")

from deepagents import create_deep_agent
from langchain.agents import create_agent
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.func import entrypoint
from langgraph.graph import END, START, StateGraph
from langgraph_supervisor import create_supervisor
from langgraph_swarm import create_handoff_tool, create_swarm
from test_shapes import Chat, Fake

from langgraph_resilience import Backoff, NodePolicy, TransientError, side_effect
from langgraph_resilience.agents import ResilienceMiddleware
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.postgres.aio import AsyncResilientPostgresSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.graph import task
from langgraph_resilience.testing import (
    FaultPlan,
    RecoverySuiteReport,
    arecovery_suite,
    recovery_suite,
)


@contextmanager
def _opened(cm: Any) -> Iterator[Any]:
    with cm as saver:
        saver.setup()
        yield saver


def _factory(store: tuple[str, str]) -> Any:
    """Opens a saver on ``store``, set up once here (not at each of the suite's runs)."""
    backend, target = store
    if backend == "postgres":
        with _opened(ResilientPostgresSaver.from_conn_string(target)):
            pass
        return lambda: ResilientPostgresSaver.from_conn_string(target)
    return lambda: ResilientSqliteSaver.from_conn_string(target)


def messages(values: Any) -> Any:
    return [(m.type, m.content) for m in values["messages"]]


async def suite(store: tuple[str, str], build: Any, **options: Any) -> RecoverySuiteReport:
    options = {"compare": messages, "max_cases": 0, "durability": "sync", **options}
    return await asyncio.to_thread(
        recovery_suite,
        build,
        {"messages": [("user", "go")]},
        checkpointer_factory=_factory(store),
        **options,
    )


# -- handoffs ------------------------------------------------------------------------


def swarm() -> Any:
    """``build_graph`` of a swarm: the builder made once, compiled on each run's saver
    (what a process does at start; the agents and their fake models keep no state)."""
    alice = create_agent(
        Fake(steps=[("transfer_to_bob", {})]),
        tools=[create_handoff_tool(agent_name="bob")],
        middleware=[ResilienceMiddleware()],
        name="alice",
    )
    bob = create_agent(Fake(steps=[]), tools=[], middleware=[ResilienceMiddleware()], name="bob")
    builder = create_swarm([alice, bob], default_active_agent="alice")
    return lambda saver: builder.compile(checkpointer=saver)


# every case (max_cases=0) on a multi-agent graph: ~25-40 s on a quiet machine
@pytest.mark.timeout(360)
async def test_a_safe_swarm_passes_with_its_handoff_crashed_where_it_happens(
    store: tuple[str, str],
) -> None:
    # Before: "crash after step 'alice'" (her handoff) never fired, and a bogus
    # "which calls email" case was added for it: the suite could not pass.
    sent: list[str] = []
    report = await suite(store, swarm(), effects={"email": sent})
    names = [c.name for c in report.cases]
    assert not [c for c in report.cases if "which calls" in c.name], names
    handoff = [c for c in report.cases if c.name.startswith("crash after step 'alice'")]
    assert [c.name for c in handoff] == [
        "crash after step 'alice'",
        "crash after step 'alice' handed off, its handoff stored",
    ]
    for case in handoff:
        assert case.evidence[0] == "run 1: started, crashed", case
    # the body's handoff was lost: alice's turn runs again; once stored: bob's
    assert "alice" in handoff[0].steps_redone
    assert "alice" not in handoff[1].steps_redone
    report.assert_ok()


def supervisor(sent: list[str]) -> Any:
    @side_effect(name="email")
    def deliver(to: str) -> str:
        sent.append(to)
        return "ok"

    @tool
    def search(q: str) -> str:
        """Search the web."""
        return f"found {q}"

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        deliver(to)
        return f"sent to {to}"

    researcher = create_agent(
        Fake(steps=[("search", {"q": "x"})]),
        tools=[search],
        middleware=[ResilienceMiddleware()],
        name="researcher",
    )
    mailer = create_agent(
        Fake(steps=[("send_email", {"to": "boss"})]),
        tools=[send_email],
        middleware=[ResilienceMiddleware()],
        name="mailer",
    )
    boss = Fake(steps=[("transfer_to_researcher", {}), ("transfer_to_mailer", {})])
    # made once, compiled on each run's saver (as a process does at start)
    builder = create_supervisor([researcher, mailer], model=boss)
    return lambda saver: builder.compile(checkpointer=saver)


# every case (max_cases=0) on a multi-agent graph: ~25-40 s on a quiet machine
@pytest.mark.timeout(360)
async def test_a_safe_supervisor_passes_the_suite(store: tuple[str, str]) -> None:
    # Before: the supervisor's handoffs could not be crashed ("the fault never
    # fired"): a safe supervisor never passed assert_ok().
    sent: list[str] = []
    report = await suite(store, supervisor(sent), effects={"email": sent}, dedupe_effects={"email"})
    report.assert_ok()
    handoffs = [c for c in report.cases if "handed off" in c.name]
    assert {c.name for c in handoffs} == {
        "crash after step 'supervisor' handed off, its handoff stored",
        "crash after step 'supervisor#2' handed off, its handoff stored",
    }


class Route(TypedDict, total=False):
    done: list[str]


def detour(visited: set[str]) -> Any:
    """``a`` then ``b``; when ``a`` runs again on a thread (a resume), ``c``."""

    def build(saver: Any) -> Any:
        def a(state: Route, config: RunnableConfig) -> Route:
            thread = config["configurable"]["thread_id"]
            again = thread in visited
            visited.add(thread)
            return {"done": ["a", "again" if again else "first"]}

        def route(state: Route) -> str:
            return "c" if "again" in state["done"] else "b"

        g = StateGraph(Route)
        g.add_node("a", a)
        g.add_node("b", lambda s: {"done": [*s["done"], "b"]})
        g.add_node("c", lambda s: {"done": [*s["done"], "c"]})
        g.add_edge(START, "a")
        g.add_conditional_edges("a", route, ["b", "c"])
        g.add_edge("b", END)
        g.add_edge("c", END)
        return g.compile(checkpointer=saver)

    return build


def test_a_double_crash_case_that_fired_one_crash_is_no_pass(tmp_path: Path) -> None:
    # Before: "crash after 'a', then after 'b'" passed with the second crash
    # never fired (the resumed run took another path).
    report = recovery_suite(
        detour(set()),
        {"done": []},
        checkpointer_factory=lambda: ResilientSqliteSaver.from_conn_string(str(tmp_path / "s.db")),
        compare=lambda v: None,
        cases={"crash after 'a', then after 'b'"},
    )
    (case,) = report.family("double_recovery")
    assert not case.passed
    assert any(
        "only 1 of the 2 planned faults fired (the crash after step 'b' did not" in line
        for line in case.evidence
    ), case.evidence


# -- an agent inside a node or a tool, its email outside the ledger ------------------


def in_a_node(outbox: Path, *, is_async: bool = False) -> Any:
    """A plain node invoking a ``create_agent`` agent whose ``send_email``
    writes a line to ``outbox`` (the outside world), outside the effect ledger."""

    def build(saver: Any) -> Any:
        @tool
        def send_email(to: str) -> str:
            """Send an email."""
            with outbox.open("a") as f:
                f.write(f"{to}\n")
            return f"sent to {to}"

        mailer = create_agent(
            Fake(steps=[("send_email", {"to": "boss"})]),
            tools=[send_email],
            middleware=[ResilienceMiddleware()],
            name="mailer",
        )

        def work(state: Chat) -> Chat:
            out = mailer.invoke({"messages": state["messages"]})
            return {"messages": out["messages"][-1:]}

        async def awork(state: Chat) -> Chat:
            out = await mailer.ainvoke({"messages": state["messages"]})
            return {"messages": out["messages"][-1:]}

        g = StateGraph(Chat)
        g.add_node("work", awork if is_async else work)
        g.add_edge(START, "work")
        g.add_edge("work", END)
        return g.compile(checkpointer=saver)

    return build


#: The one case the nested-agent tests assert on (``recovery_suite(cases=)``).
TOOL_CRASH = "crash after step 'work/tools[0]'"


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


async def test_an_email_outside_the_ledger_in_an_agent_invoked_in_a_node_is_found(
    store: tuple[str, str], tmp_path: Path
) -> None:
    # Before: the agent was one opaque step: "passed: 15/15".
    outbox = tmp_path / "outbox"
    report = await suite(
        store, in_a_node(outbox), effects={"email": lambda: _lines(outbox)}, cases={TOOL_CRASH}
    )
    assert "work/tools[0]" in report.reference_steps
    (case,) = report.family("step_crash")
    assert case.name == TOOL_CRASH
    assert not case.passed
    assert case.effects_unkeyed == {"email": 1}
    assert any(
        "+1: called again outside the effect ledger after a resume ('work/tools[0]' ran again"
        in line
        for line in case.evidence
    ), case.evidence
    assert not report.ok


async def test_a_nested_steps_crash_lands_before_the_next_checkpoint_however_the_threads_run(
    store: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LangGraph stores a step's writes and the next checkpoint in background
    threads that race. Here every writes job starts late (0.1 s), so the
    checkpoint after the agent's tool step would be stored first; the kit
    holds that checkpoint until the step's writes are done with, so the crash
    after 'work/tools[0]' still leaves the tool's writes and everything after
    unstored, and the email is found sent twice."""
    # Before: "crash after step 'work/tools[0]'" passed (the resume started after the tool).
    from langgraph.pregel._executor import BackgroundExecutor

    submit = BackgroundExecutor.submit

    def late_writes(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if "put_writes" in getattr(fn, "__name__", ""):
            job = fn

            def fn(*a: Any, **k: Any) -> Any:
                time.sleep(0.1)
                return job(*a, **k)

        return submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(BackgroundExecutor, "submit", late_writes)
    outbox = tmp_path / "outbox"
    report = await suite(
        store, in_a_node(outbox), effects={"email": lambda: _lines(outbox)}, cases={TOOL_CRASH}
    )
    (case,) = report.family("step_crash")
    assert case.name == TOOL_CRASH
    assert not case.passed and case.effects_unkeyed == {"email": 1}, case
    assert "work/tools[0]" in case.steps_redone, case


@asynccontextmanager
async def _aopened(cm: Any) -> AsyncIterator[Any]:
    async with cm as saver:
        await saver.setup()
        yield saver


async def test_the_async_suite_finds_it_too(store: tuple[str, str], tmp_path: Path) -> None:
    backend, target = store
    if backend == "postgres":
        factory: Any = lambda: _aopened(AsyncResilientPostgresSaver.from_conn_string(target))  # noqa: E731
    else:
        factory = lambda: AsyncResilientSqliteSaver.from_conn_string(target)  # noqa: E731
    outbox = tmp_path / "outbox"
    report = await arecovery_suite(
        in_a_node(outbox, is_async=True),
        {"messages": [("user", "go")]},
        checkpointer_factory=factory,
        effects={"email": lambda: _lines(outbox)},
        compare=messages,
        durability="sync",
        cases={TOOL_CRASH},
    )
    (case,) = report.family("step_crash")
    assert case.name == TOOL_CRASH
    assert not case.passed and case.effects_unkeyed == {"email": 1}


def test_the_crash_point_in_a_nested_agent_is_what_a_sigkill_leaves(
    store: tuple[str, str], tmp_path: Path
) -> None:
    """A real SIGKILL at the suite's crash point (the agent's tool ran, its
    writes not stored), then a resume in this process: the email is sent twice,
    as the suite reports."""
    outbox = tmp_path / "outbox"
    factory = _factory(store)
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    with factory():  # set the store up before forking
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: runs until the plan kills it
        try:
            with factory() as saver:
                plan = FaultPlan().crash("work/tools[0]", kill=True)
                graph = plan.apply(in_a_node(outbox)(saver))
                graph.invoke({"messages": [("user", "go")]}, config, durability="sync")
        finally:
            os._exit(3)  # not killed: the test fails below
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert _lines(outbox) == 1  # the tool sent it, then the process died
    with factory() as saver:
        out = in_a_node(outbox)(saver).invoke(None, config, durability="sync")
    assert out["messages"][-1].content == "done"
    assert _lines(outbox) == 2


async def test_a_deepagents_subagents_email_outside_the_ledger_is_found(
    store: tuple[str, str], tmp_path: Path
) -> None:
    outbox = tmp_path / "outbox"

    def build(saver: Any) -> Any:
        @tool
        def send_email(to: str) -> str:
            """Send an email."""
            with outbox.open("a") as f:
                f.write(f"{to}\n")
            return f"sent to {to}"

        mailer = {
            "name": "mailer",
            "description": "Sends email.",
            "system_prompt": "Send the email you are asked to.",
            "tools": [send_email],
            "model": Fake(steps=[("send_email", {"to": "boss"})]),
        }
        boss = Fake(steps=[("task", {"description": "mail the boss", "subagent_type": "mailer"})])
        return create_deep_agent(
            model=boss,
            subagents=[mailer],
            middleware=[ResilienceMiddleware()],
            checkpointer=saver,
        )

    report = await suite(
        store,
        build,
        effects={"email": lambda: _lines(outbox)},
        cases={"crash after step 'tools[0]/tools[0]'"},
    )
    # the subagent's steps are steps of the run, under the main agent's tool call
    assert "tools[0]/tools[0]" in report.reference_steps
    (case,) = report.family("step_crash")
    assert not case.passed and case.effects_unkeyed == {"email": 1}
    assert any("('tools[0]/tools[0]' ran again" in line for line in case.evidence), case
    assert not report.ok


# -- every +1 says why -----------------------------------------------------------------


class Send(TypedDict, total=False):
    to: str
    sent: str


def mailing(sent: list[str], *, random_key: bool) -> Any:
    """``send`` calls its side effect under a key made of a fresh random id
    (``random_key``), else of its address."""

    @side_effect(name="email", key=lambda to, nonce: nonce if random_key else to)
    def deliver(to: str, nonce: str) -> str:
        sent.append(to)
        return "ok"

    def build(saver: Any) -> Any:
        g = StateGraph(Send)
        g.add_node("send", lambda s: {"sent": deliver(s["to"], uuid.uuid4().hex)})
        g.add_node("log", lambda s: {})
        g.add_edge(START, "send")
        g.add_edge("send", "log")
        g.add_edge("log", END)
        return g.compile(checkpointer=saver)

    return build


async def test_every_extra_call_says_why(store: tuple[str, str]) -> None:
    # Before: a +1 under a new idempotency key had no reason at all.
    async def run(random_key: bool) -> RecoverySuiteReport:
        sent: list[str] = []
        return await asyncio.to_thread(
            recovery_suite,
            mailing(sent, random_key=random_key),
            {"to": "boss"},
            checkpointer_factory=_factory(store),
            effects={"email": sent},
            compare=lambda v: v.get("to"),
            max_cases=0,
        )

    report = await run(random_key=True)
    (fresh,) = [c for c in report.family("step_crash") if c.name == "crash after step 'send'"]
    assert fresh.effects_new_key == {"email": 1}
    assert any(
        "+1: side effect 'email' was called again under a new idempotency key after a "
        "resume ('send' ran again and the key changed" in line
        for line in fresh.evidence
    ), fresh.evidence
    stable = await run(random_key=False)
    (same,) = [c for c in stable.family("effect_replay") if c.name.startswith("crash right after")]
    assert same.effects_same_key == {"email": 1}, same
    assert any(
        "+1: side effect 'email' was called again with the same idempotency key after a "
        "resume (reexecuted" in line
        for line in same.evidence
    ), same.evidence
    # every extra call of every case has a line saying why
    for case in (*report.cases, *stable.cases):
        for n in case.effects_duplicated.values():
            reasons = [line for line in case.evidence if line.startswith("  +")]
            assert sum(int(line.split(":")[0].strip()[1:]) for line in reasons) >= n, case


# -- the functional API: an entrypoint's tasks are steps ------------------------------


def pipeline(ran: Path, sent: list[str] | None = None) -> Any:
    """An ``@entrypoint`` calling ``fetch`` (flaky: every other call fails, and
    its `NodePolicy` retries), ``summarize``, then ``send``, which emails
    through the `side_effect` ``email`` (appended to ``sent``), or, without
    ``sent``, outside the effect ledger (a line in ``ran``'s outbox). Each task
    run appends its name to ``ran``."""
    outbox = ran.with_suffix(".outbox")

    @side_effect(name="email")
    def deliver(text: str) -> str:
        assert sent is not None
        sent.append(text)
        return "ok"

    def note(name: str) -> int:
        with ran.open("a") as f:
            f.write(f"{name}\n")
        return ran.read_text().splitlines().count(name)

    def build(saver: Any) -> Any:
        @task(policy=NodePolicy(retry=Backoff(max_attempts=3, initial_interval=0.001)))
        def fetch(q: str) -> str:
            if note("fetch") % 2:
                raise TransientError("the source is busy")
            return f"found {q}"

        @task
        def summarize(text: str) -> str:
            note("summarize")
            return text.upper()

        @task
        def send(text: str) -> str:
            note("send")
            if sent is not None:
                deliver(text)
            else:
                with outbox.open("a") as f:
                    f.write(f"{text}\n")
            return f"sent {text}"

        @entrypoint(checkpointer=saver)
        def flow(q: str) -> str:
            return send(summarize(fetch(q).result()).result()).result()

        return flow

    return build


async def test_an_entrypoints_tasks_are_steps_crashed_between(
    store: tuple[str, str], tmp_path: Path
) -> None:
    # Before: the entrypoint was one opaque step ('flow'): no crash landed
    # between its tasks.
    sent: list[str] = []
    report = await asyncio.to_thread(
        recovery_suite,
        pipeline(tmp_path / "ran", sent),
        "x",
        checkpointer_factory=_factory(store),
        effects={"email": sent},
        dedupe_effects={"email"},
        compare=lambda v: v,
        max_cases=0,
        durability="sync",
    )
    assert report.reference_steps == ("flow", "fetch", "summarize", "send")
    names = [c.name for c in report.family("step_crash")]
    for step in ("fetch", "summarize", "send"):
        assert f"crash after step {step!r}" in names, names
        assert f"crash after task {step!r}, its result stored" in names, names
    (between,) = [
        c for c in report.cases if c.name == "crash after task 'summarize', its result stored"
    ]
    assert between.evidence[0] == "run 1: started, crashed", between
    assert between.steps_redone == ("flow",)  # the entrypoint's body; no finished task
    assert [c.name for c in report.cases if not c.passed] == ["checkpoint write 1 of 2 fails"]
    # LangGraph runs an entrypoint's body while its input checkpoint is stored:
    # that write failing leaves nothing to resume, and the rerun is a new run.
    (first,) = [c for c in report.cases if not c.passed]
    assert first.effects_new_key == {"email": 1}
    assert any(
        "+1: side effect 'email' was called again under a new idempotency key after a "
        "resume: the run found no checkpoint to resume from and started again from its "
        "input, though 'send' had run" in line
        for line in first.evidence
    ), first.evidence


async def test_an_email_outside_the_ledger_in_a_task_says_why(
    store: tuple[str, str], tmp_path: Path
) -> None:
    outbox = (tmp_path / "ran").with_suffix(".outbox")
    report = await asyncio.to_thread(
        recovery_suite,
        pipeline(tmp_path / "ran"),
        "x",
        checkpointer_factory=_factory(store),
        effects={"email": lambda: _lines(outbox)},
        compare=lambda v: v,
        max_cases=0,
        durability="sync",
    )
    (case,) = [c for c in report.family("step_crash") if c.name == "crash after step 'send'"]
    assert not case.passed and case.effects_unkeyed == {"email": 1}, case
    assert any(
        "+1: called again outside the effect ledger after a resume ('send' ran again" in line
        for line in case.evidence
    ), case.evidence
    stored = [c for c in report.cases if c.name == "crash after task 'send', its result stored"]
    assert [c.passed for c in stored] == [True]
    assert not report.ok


def test_a_sigkill_between_tasks_is_the_crash_point_the_suite_names(
    store: tuple[str, str], tmp_path: Path
) -> None:
    """A real SIGKILL right after ``summarize``'s result was stored, then a
    resume in this process: the finished tasks are not run again."""
    ran, sent = tmp_path / "ran", []
    factory = _factory(store)
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    with factory():  # set the store up before forking
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: runs until the plan kills it
        try:
            with factory() as saver:
                plan = FaultPlan().crash("summarize", when="stored", kill=True)
                plan.apply(pipeline(ran, [])(saver)).invoke("x", config, durability="sync")
        finally:
            os._exit(3)  # not killed: the test fails below
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert ran.read_text().splitlines() == ["fetch", "fetch", "summarize"]
    with factory() as saver:
        out = pipeline(ran, sent)(saver).invoke(None, config, durability="sync")
    assert out == "sent FOUND X" and sent == ["FOUND X"]
    assert ran.read_text().splitlines() == ["fetch", "fetch", "summarize", "send"]
