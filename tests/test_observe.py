"""Recovery seen from outside without new code in the app: log records, LangChain
callback runs per try, LangGraph's custom stream, OpenTelemetry spans and counters."""

from __future__ import annotations

import asyncio
import logging
import operator
import subprocess
import sys
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Annotated, Any

import pytest
from conftest import harness
from graphs import one_node
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableLambda
from langgraph.errors import NodeError
from langgraph.graph import END, START

import langgraph_resilience.telemetry._otel as otel
from langgraph_resilience import (
    Backoff,
    NodePolicy,
    PermanentError,
    ResilientState,
    ResilientStateGraph,
    side_effect,
)
from langgraph_resilience.checkpoint import RunRecord
from langgraph_resilience.graph._routes import PARTIAL_RESULT, error_handler, give_up_of
from langgraph_resilience.worker._leases import Instant, Proof
from langgraph_resilience.worker._steps import Held, Invoke, ThreadState, Where, run_steps

INNER = RunnableLambda(lambda query: query, name="inner")
FAST = Backoff(max_attempts=3, initial_interval=0.001, max_interval=0.002)


class State(ResilientState, total=False):
    trail: Annotated[list[str], operator.add]


def _node(is_async: bool, fn: Any) -> Any:
    if not is_async:
        return fn

    async def anode(state: Any) -> Any:
        return fn(state)

    anode.__name__ = fn.__name__
    return anode


def scenario(is_async: bool, sent: list[str]) -> ResilientStateGraph[Any, Any, Any, Any]:
    """plan fails twice then succeeds; notify sends an email (a side effect) and
    then fails once, so its retry replays the email; search fails for good and
    falls back to cache; enrich is degraded; final fails for good: a partial result."""
    tries: dict[str, int] = {}

    @side_effect
    def send_mail(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    def count(name: str) -> int:
        tries[name] = tries.get(name, 0) + 1
        return tries[name]

    def plan(state: Any) -> Any:
        INNER.invoke("look up")  # a runnable the node calls: traced under its try
        if count("plan") < 3:
            raise ConnectionError("planner unreachable")
        return {"trail": ["plan"]}

    @side_effect
    async def asend_mail(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    def notify(state: Any) -> Any:
        send_mail("ops@example.com")
        if count("notify") < 2:
            raise ConnectionError("socket closed after the send")
        return {"trail": ["notify"]}

    async def anotify(state: Any) -> Any:
        await asend_mail("ops@example.com")
        if count("notify") < 2:
            raise ConnectionError("socket closed after the send")
        return {"trail": ["notify"]}

    def search(state: Any) -> Any:
        raise PermanentError("index schema mismatch")

    def cache(state: Any) -> Any:
        return {"trail": ["cache"]}

    def enrich(state: Any) -> Any:
        raise PermanentError("enricher rejected the input")

    def final(state: Any) -> Any:
        raise PermanentError("report template missing")

    g = ResilientStateGraph(State)
    g.add_node("plan", _node(is_async, plan), policy=NodePolicy(retry=FAST))
    g.add_node("notify", anotify if is_async else notify, policy=NodePolicy(retry=FAST))
    g.add_node("search", _node(is_async, search), policy=NodePolicy(fallback="cache"))
    g.add_node("cache", _node(is_async, cache))
    g.add_node("enrich", _node(is_async, enrich), policy=NodePolicy(critical=False))
    g.add_node("final", _node(is_async, final), policy=NodePolicy(retry=None))
    for a, b in [
        (START, "plan"),
        ("plan", "notify"),
        ("notify", "search"),
        ("search", "enrich"),
        ("cache", "enrich"),
        ("enrich", "final"),
        ("final", END),
    ]:
        g.add_edge(a, b)
    return g


def cfg(label: str, **extra: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{label}-{uuid.uuid4().hex[:8]}"}, **extra}


@pytest.fixture(params=["sqlite", "sqlite-async"])
async def h(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    async with AsyncExitStack() as stack:
        yield await harness(request.param, request, tmp_path, stack)


# -- logging -------------------------------------------------------------------------


async def test_one_scenario_logs_every_recovery_with_structured_ids(
    checkpointer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[str] = []
    graph = scenario(checkpointer.is_async, sent).compile(checkpointer=checkpointer.saver)
    config = cfg("logs")
    thread = config["configurable"]["thread_id"]
    with caplog.at_level(logging.INFO, logger="langgraph_resilience"):
        out = await checkpointer.invoke(graph, {"trail": []}, config)
    assert out["resilience"]["status"] == "partial_complete"
    assert sent == ["ops@example.com"]  # the retry replayed it
    events = [r for r in caplog.records if hasattr(r, "event")]
    seen = [(r.event, getattr(r, "node", None), getattr(r, "attempt", None)) for r in events]
    assert seen == [
        ("try_failed", "plan", 1),
        ("try_failed", "plan", 2),
        ("try_failed", "notify", 1),
        ("effect_replayed", None, None),
        ("try_failed", "search", 1),
        ("fallback", "search", None),
        ("try_failed", "enrich", 1),
        ("degraded", "enrich", None),
        ("try_failed", "final", 1),
        ("partial_result", None, None),
    ]
    levels = {r.event: r.levelname for r in events}
    assert levels == {
        "try_failed": "ERROR",  # the last one: the run ends with a partial result
        "effect_replayed": "INFO",
        "fallback": "WARNING",
        "degraded": "WARNING",
        "partial_result": "ERROR",
    }
    assert [r.levelname for r in events[:2]] == ["WARNING", "WARNING"]
    assert all(r.thread_id == thread for r in events)
    plan = events[0]
    assert (plan.path, plan.kind, plan.action, plan.run, plan.graph) == (
        "plan",
        "transient",
        "retry",
        1,
        "LangGraph",
    )
    assert plan.wait > 0 and "ConnectionError: planner unreachable" in plan.error
    assert events[5].fallback == "cache" and events[5].kind == "permanent"
    assert events[3].effect.endswith("send_mail") and events[3].key
    assert events[-1].failed_paths == ["final"]
    assert "partial result" in events[-1].getMessage()


# -- LangChain callbacks -------------------------------------------------------------


class Recorder(BaseCallbackHandler):
    """Records chain runs as a tracer (LangSmith) sees them."""

    def __init__(self) -> None:
        self.runs: dict[Any, dict[str, Any]] = {}

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: Any, parent_run_id: Any = None, **kw: Any
    ) -> None:
        self.runs[run_id] = {"name": kw.get("name"), "parent": parent_run_id, "error": None}

    def on_chain_end(self, outputs: Any, *, run_id: Any, **kw: Any) -> None:
        self.runs[run_id]["ended"] = True

    def on_chain_error(self, error: BaseException, *, run_id: Any, **kw: Any) -> None:
        self.runs[run_id].update(ended=True, error=error)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.runs.values() if r["name"] == name]


async def test_each_try_is_a_callback_run_and_no_routing_signal_is_an_error(h: Any) -> None:
    rec = Recorder()
    graph = scenario(h.is_async, []).compile(checkpointer=h.saver)
    out = await h.invoke(graph, {"trail": []}, cfg("callbacks", callbacks=[rec]))
    assert out["resilience"]["status"] == "partial_complete"
    [plan] = rec.named("plan")
    tries = [rec.named(f"plan (try {n})") for n in (1, 2, 3)]
    assert all(len(t) == 1 for t in tries)
    assert [t[0]["parent"] for t in tries] == [plan_id(rec, plan)] * 3
    assert [type(t[0]["error"]).__name__ for t in tries] == [
        "ConnectionError",
        "ConnectionError",
        "NoneType",
    ]
    assert all(t[0].get("ended") for t in tries) and plan["error"] is None
    # What a try calls nests under it, from the second try on (the first try's
    # run is reported only once it has failed).
    inner_parents = [rec.runs[r["parent"]]["name"] for r in rec.named("inner")]
    assert inner_parents == ["plan", "plan (try 2)", "plan (try 3)"]
    errors = [r["error"] for r in rec.runs.values() if r["error"] is not None]
    assert errors and not any(
        "ResilienceRoute" in repr(e) or "lgr_route" in repr(e) for e in errors
    )
    # The step that failed for good errs with its own error, on itself only.
    [final] = rec.named("final")
    assert isinstance(final["error"], PermanentError)
    # Node runs that err: the steps that failed for good (search fell back, final
    # ended the run); the degraded step (enrich) and the handlers do not.
    failed_nodes = [
        r["name"] for r in rec.runs.values() if r["error"] is not None and "(try" not in r["name"]
    ]
    assert failed_nodes == ["search", "final"]


async def test_a_runnable_node_runs_each_later_try_inside_its_try_run(h: Any) -> None:
    rec = Recorder()
    tries: list[int] = []

    def draft(state: Any) -> Any:
        tries.append(1)
        INNER.invoke("look up")
        if len(tries) < 2:
            raise ConnectionError("model overloaded")
        return {"trail": ["draft"]}

    async def adraft(state: Any) -> Any:
        return draft(state)

    g = ResilientStateGraph(State)
    runnable = RunnableLambda(draft, afunc=adraft, name="draft")
    g.add_node("draft", runnable, policy=NodePolicy(retry=FAST))
    g.add_edge(START, "draft")
    g.add_edge("draft", END)
    graph = g.compile(checkpointer=h.saver)
    await h.invoke(graph, {"trail": []}, cfg("runnable", callbacks=[rec]))
    [second] = rec.named("draft (try 2)")
    assert rec.named("draft (try 1)")[0]["error"] is not None and second["error"] is None
    # What the second try runs (the runnable, and what it calls) nests under it.
    assert "draft (try 2)" in {rec.runs[p]["name"] for p in _ancestors(rec, "inner")}


def _ancestors(rec: Recorder, name: str) -> set[Any]:
    found: set[Any] = set()
    for run in rec.named(name):
        parent = run["parent"]
        while parent is not None and parent in rec.runs:
            found.add(parent)
            parent = rec.runs[parent]["parent"]
    return found


def plan_id(rec: Recorder, run: dict[str, Any]) -> Any:
    return next(k for k, v in rec.runs.items() if v is run)


async def test_a_first_try_that_succeeds_adds_no_run(h: Any) -> None:
    rec = Recorder()
    g = one_node(
        ResilientStateGraph(State),
        "only",
        _node(h.is_async, lambda s: {"trail": ["x"]}),
        policy=NodePolicy(),
    )
    graph = g.compile(checkpointer=h.saver)
    await h.invoke(graph, {"trail": []}, cfg("quiet", callbacks=[rec]))
    assert not [r for r in rec.runs.values() if "(try" in str(r["name"])]


# -- the custom stream ---------------------------------------------------------------


async def test_recovery_events_in_the_custom_stream(h: Any) -> None:
    graph = scenario(h.is_async, []).compile(checkpointer=h.saver)
    config = cfg("stream")
    if h.is_async:
        chunks = [c async for c in graph.astream({"trail": []}, config, stream_mode="custom")]
    else:
        chunks = await asyncio.to_thread(
            lambda: list(graph.stream({"trail": []}, config, stream_mode="custom"))
        )
    events = [c["resilience"] for c in chunks]
    assert [e["event"] for e in events] == [
        "try_failed",
        "try_failed",
        "try_failed",
        "effect_replayed",
        "try_failed",
        "fallback",
        "try_failed",
        "degraded",
        "try_failed",
        "partial_result",
    ]
    first = events[0]
    assert (first["node"], first["attempt"], first["kind"], first["action"]) == (
        "plan",
        1,
        "transient",
        "retry",
    )
    assert first["thread_id"] == config["configurable"]["thread_id"]


# -- OpenTelemetry -------------------------------------------------------------------


@pytest.fixture
def otel_readers(monkeypatch: pytest.MonkeyPatch) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    spans = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(spans))
    # The application's providers, for this test only (what set_*_provider
    # sets, which the API allows once per process).
    monkeypatch.setattr(otel._trace, "_TRACER_PROVIDER", tracers)
    monkeypatch.setattr(otel._metrics_state, "_METER_PROVIDER", meters)
    return reader, spans


def _counts(reader: Any) -> dict[tuple[str, tuple[tuple[str, Any], ...]], float]:
    found: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    key = (metric.name, tuple(sorted(point.attributes.items())))
                    found[key] = getattr(point, "value", None) or getattr(point, "count", 0)
    return found


async def test_an_otel_reader_sees_spans_per_try_and_the_counters_move(
    h: Any, otel_readers: Any
) -> None:
    reader, spans = otel_readers
    graph = scenario(h.is_async, []).compile(checkpointer=h.saver, name="research")
    await h.invoke(graph, {"trail": []}, cfg("otel"))
    names = [s.name for s in spans.get_finished_spans()]
    assert [n for n in names if n.startswith("plan")] == [
        "plan try 1",
        "plan try 2",
        "plan try 3",
    ]
    plan_spans = [s for s in spans.get_finished_spans() if s.name.startswith("plan")]
    assert [s.status.status_code.name for s in plan_spans] == ["ERROR", "ERROR", "UNSET"]
    assert plan_spans[0].attributes["graph"] == "research"
    assert plan_spans[0].attributes["kind"] == "transient"
    counts = _counts(reader)

    def count(name: str, **attrs: Any) -> float:
        return sum(
            v
            for (n, a), v in counts.items()
            if n == f"langgraph_resilience.{name}" and attrs.items() <= dict(a).items()
        )

    assert count("tries", node="plan", kind="transient") == 2
    assert count("tries", node="plan", kind="ok") == 1
    assert count("retries", node="plan", graph="research") == 2
    assert count("retries", node="notify") == 1
    assert count("fallbacks", node="search") == 1
    assert count("degraded_steps", node="enrich") == 1
    assert count("partial_results", graph="research") == 1
    assert count("effects_replayed") == 1
    assert count("checkpoint_writes", outcome="ok") > 0
    assert count("try_duration", node="plan") == 3  # a histogram: its count


def test_the_package_imports_and_runs_without_opentelemetry() -> None:
    script = """
import sys
for name in [m for m in sys.modules if m.startswith("opentelemetry")]:
    del sys.modules[name]
sys.modules["opentelemetry"] = None  # import opentelemetry -> ImportError
import operator
from typing import Annotated
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START
import langgraph_resilience.telemetry._otel as otel
from langgraph_resilience.worker._leases import Instant, Proof
from langgraph_resilience.worker._steps import Held, Invoke, ThreadState, Where, run_steps
from langgraph_resilience import Backoff, NodePolicy, ResilientState, ResilientStateGraph

class S(ResilientState, total=False):
    trail: Annotated[list[str], operator.add]

tries = []
def flaky(state):
    tries.append(1)
    if len(tries) < 2:
        raise ConnectionError("blip")
    return {"trail": ["ok"]}

g = ResilientStateGraph(S)
g.add_node("flaky", flaky, policy=NodePolicy(retry=Backoff(initial_interval=0.001)))
g.add_edge(START, "flaky")
g.add_edge("flaky", END)
out = g.compile(checkpointer=InMemorySaver()).invoke(
    {"trail": []}, {"configurable": {"thread_id": "t"}}
)
assert not otel.AVAILABLE and out["trail"] == ["ok"], (otel.AVAILABLE, out)
assert not any(m.startswith("opentelemetry.") for m in sys.modules)
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# -- a worker's takeover ---------------------------------------------------------------


def test_a_takeover_is_logged_when_the_new_worker_resumes_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = Instant.now()
    record = RunRecord(
        run_id="run-1",
        thread_id="thread-1",
        status="running",
        owner="worker-b",
        fencing_token=2,
        lease_expires_at=now.wall + 30,
        attempts=2,
        recoveries=1,  # worker-a died holding it
        input_type=None,
        input=None,
        budget_type=None,
        budget=None,
        outcome_type=None,
        outcome=None,
        created_at=now.wall,
        updated_at=now.wall,
    )
    steps = run_steps(Held(record, proof=Proof(deadline=now.after(30), margin=1.0)), None, None, 3)
    assert isinstance(next(steps), ThreadState)
    with caplog.at_level(logging.INFO, logger="langgraph_resilience"):
        assert isinstance(steps.send(Where("resume")), Invoke)
    [event] = [r for r in caplog.records if getattr(r, "event", None) == "takeover"]
    assert (event.run_id, event.thread_id, event.worker, event.levelname) == (
        "run-1",
        "thread-1",
        "worker-b",
        "WARNING",
    )


# -- the route of a step after a crash -------------------------------------------------


def test_an_error_stored_before_a_crash_still_routes_by_the_policy() -> None:
    """The error a step gave up with is stored as its repr: after a crash between
    the failure and its handler, the handler routes it where the policy says."""
    to_cache = error_handler({"search": give_up_of("cache", True)})
    command = to_cache({"trail": []}, NodeError(node="search", error="PermanentError('boom')"))
    assert command.goto == "cache"
    step = command.update["resilience"]["step"]
    assert (step["node"], step["status"]) == ("search", "fallback")
    ends = error_handler({"final": give_up_of(None, True)})
    failed = ends({"trail": []}, NodeError(node="final", error="KeyError('template')"))
    assert failed.goto == PARTIAL_RESULT
    assert failed.update["resilience"]["failed_step"]["error_type"] == "KeyError"
    with pytest.raises(RuntimeError, match="ConfigError"):  # not a failure to route
        ends({"trail": []}, NodeError(node="final", error="ConfigError('wiring')"))
