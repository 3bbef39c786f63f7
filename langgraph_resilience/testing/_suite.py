"""`recovery_suite` / `arecovery_suite`: the four recovery tests on a user's graph.

The tests themselves are `_cases.suite_steps` (a generator of runs); these
drivers do each run: open a saver (a new one per run, as a restarted process
would), build the graph on it, apply the run's `FaultPlan`, invoke or resume,
and read the state back.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel
from langgraph.types import Durability, StateSnapshot

from langgraph_resilience._util._plans import Plan
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.checkpoint.sqlite.aio import AsyncResilientSqliteSaver
from langgraph_resilience.effects._settle import asettle_effect, settle_effect
from langgraph_resilience.errors import ConfigError, SimulatedCrash, describe
from langgraph_resilience.graph._retry_failed import aretry_failed, retry_failed
from langgraph_resilience.testing._cases import Run, RunResult, SuiteSpec, comparable, suite_steps
from langgraph_resilience.testing._report import RecoverySuiteReport

__all__ = ["CASES_ENV", "arecovery_suite", "recovery_suite"]

#: The environment variable with the most cases per family (0: every case).
CASES_ENV = "LGR_RECOVERY_CASES"
_DEFAULT_CASES = 4

BuildGraph = Callable[[BaseCheckpointSaver[Any]], Any]
SaverFactory = Callable[[], Any]  # a context manager (sync or async) yielding a saver


def _counter(name: str, source: Any) -> Callable[[], int]:
    """How to read how many times the outside world saw an effect."""
    if hasattr(source, "call_count"):  # a unittest.mock mock
        return lambda: int(source.call_count)
    if hasattr(source, "__len__"):  # a list or outbox of what was sent
        return lambda: len(source)
    if callable(source):
        return lambda: int(source())
    raise ConfigError(
        f"effects[{name!r}] must say how many times the effect happened: a mock (its "
        "call_count), a list of what was sent (its length) or a function returning the "
        f"count; got {source!r}"
    )


def _dedupe(names: Collection[str] | None) -> frozenset[str]:
    if names is None:
        return frozenset()
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ConfigError(
            "dedupe_effects takes the names of the side effects whose services "
            "deduplicate by idempotency key, as a set of str (e.g. "
            f"dedupe_effects={{'send_email'}}), got {names!r}"
        )
    return frozenset(names)


def _only(names: Collection[str] | None) -> frozenset[str] | None:
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(n, str) for n in names) or not names:
        raise ConfigError(
            "cases takes the names of the cases to run, as a non-empty set of str "
            "as the report names them (e.g. cases={\"crash after step 'draft'\"}), "
            f"got {names!r}"
        )
    return frozenset(names)


def _spec(
    input: Any,
    effects: Mapping[str, Any] | None,
    compare: Callable[[Any], Any] | None,
    max_cases: int | None,
    dedupe_effects: Collection[str] | None = None,
    cases: Collection[str] | None = None,
) -> SuiteSpec:
    if max_cases is None:
        raw = os.environ.get(CASES_ENV, str(_DEFAULT_CASES))
        try:
            max_cases = int(raw)
        except ValueError:
            raise ConfigError(f"{CASES_ENV} must be a whole number (0: all), got {raw!r}") from None
    if input is None:
        raise ConfigError("recovery_suite needs the graph's input (None means 'resume')")
    counters = {name: _counter(name, source) for name, source in (effects or {}).items()}
    return SuiteSpec(
        input=input,
        counters=counters,
        compare=compare or comparable,
        max_cases=max_cases,
        dedupe=_dedupe(dedupe_effects),
        only=_only(cases),
    )


def _compiled(built: Any, saver: BaseCheckpointSaver[Any]) -> Pregel[Any]:
    """The graph ``build_graph`` made on ``saver`` (compiled here if it is a builder)."""
    if not isinstance(built, Pregel) and hasattr(built, "compile"):
        built = built.compile(checkpointer=saver)
    if not isinstance(built, Pregel):
        raise ConfigError(
            f"build_graph must return a graph (a StateGraph or a compiled one), got {built!r}"
        )
    if not _same_saver(built.checkpointer, saver):
        raise ConfigError(
            "build_graph must compile the graph with the checkpointer it is given: "
            "def build_graph(saver): return builder.compile(checkpointer=saver)"
        )
    return built


def _same_saver(held: Any, saver: BaseCheckpointSaver[Any]) -> bool:
    """Whether a graph's checkpointer is ``saver``: the object itself, or the copy
    ``compile()`` keeps under strict msgpack (``with_allowlist``: a shallow copy
    with another serde: every other attribute the very same object)."""
    if held is saver:
        return True
    if type(held) is not type(saver):
        return False
    mine, theirs = vars(saver), vars(held)
    return mine.keys() == theirs.keys() and all(
        theirs[name] is value for name, value in mine.items() if name != "serde"
    )


def _config(config: RunnableConfig | None, thread_id: str) -> RunnableConfig:
    given: dict[str, Any] = dict(config or {})
    configurable = {**(given.get("configurable") or {}), "thread_id": thread_id}
    given["configurable"] = configurable
    return cast(RunnableConfig, given)


def _step(snapshot: StateSnapshot) -> int | None:
    if snapshot.config is None or not (snapshot.config.get("configurable") or {}).get(
        "checkpoint_id"
    ):
        return None
    return int((snapshot.metadata or {}).get("step", -1))


def _settled(saver: Any, lost: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Each lost outcome's key and the value its call returned."""
    return [
        (key, saver.serde.loads_typed((f.outcome_type, f.outcome)) if f.outcome_type else None)
        for key, f in sorted(lost.items())
    ]


def _value(op: Run, resumed_from: int | None) -> Any:
    """What the run is invoked with: None resumes, the input starts."""
    return None if op.resume and resumed_from is not None else op.input


def _ended(
    op: Run, crashes: int, error: BaseException | None, values: Any, resumed_from: int | None
) -> RunResult:
    """How the run ended: crashed (the plan's crash fired), failed or completed."""
    if len(op.tracker.crashes) > crashes or isinstance(error, SimulatedCrash):
        return RunResult(outcome="crashed", values=values, resumed_from=resumed_from)
    if error is not None:
        text = describe(error)[:300]
        return RunResult(outcome="failed", error=text, values=values, resumed_from=resumed_from)
    return RunResult(outcome="completed", values=values, resumed_from=resumed_from)


@contextlib.contextmanager
def _default_store(factory: SaverFactory | None, saver_class: Any) -> Iterator[SaverFactory]:
    if factory is not None:
        yield factory
        return
    with tempfile.TemporaryDirectory(prefix="lgr-recovery-") as tmp:
        path = str(Path(tmp) / "recovery.db")
        yield lambda: saver_class.from_conn_string(path)


@contextlib.asynccontextmanager
async def _opened(opened: Any) -> AsyncIterator[Any]:
    """A saver from a factory's context manager, async or not."""
    if hasattr(opened, "__aenter__"):
        async with opened as saver:
            yield saver
    else:
        with opened as saver:
            yield saver


@dataclass(frozen=True, kw_only=True)
class _Runs:
    """What every run of the suite shares: how to build the graph and call it."""

    build_graph: BuildGraph
    config: RunnableConfig | None
    durability: Durability | None

    @property
    def options(self) -> dict[str, Any]:
        return {"durability": self.durability} if self.durability is not None else {}

    def graph(self, saver: BaseCheckpointSaver[Any]) -> Pregel[Any]:
        return _compiled(self.build_graph(saver), saver)

    def config_of(self, op: Run) -> RunnableConfig:
        return _config(self.config, op.thread_id)


def recovery_suite(
    build_graph: BuildGraph,
    input: Any,
    *,
    checkpointer_factory: SaverFactory | None = None,
    effects: Mapping[str, Any] | None = None,
    compare: Callable[[Any], Any] | None = None,
    config: RunnableConfig | None = None,
    max_cases: int | None = None,
    durability: Durability | None = None,
    dedupe_effects: Collection[str] | None = None,
    cases: Collection[str] | None = None,
) -> RecoverySuiteReport:
    """Run the four recovery tests on your graph and report what each found.

    The graph first runs clean on ``input`` (the reference). Then each case runs
    it under a `FaultPlan` and resumes it (``invoke(None, config)``, with a new
    saver each time, as a restarted process would) until it completes:

    1. ``step_crash``: a crash after each step (its work done, not yet stored);
    2. ``checkpoint_write``: each checkpoint write fails, and each step's writes;
    3. ``double_recovery``: crashes at two different steps, one after the other;
    4. ``effect_replay``: a crash right after each side effect's call returned,
       and after each step that moved an effect counter.

    A case passes when the final state equals the reference's, no step that had
    completed before a failure ran again, and every effect in ``effects`` was
    called exactly as often as in the reference. The report tells an extra call
    that re-called a `side_effect` with the same idempotency key (its outcome
    unknown after a crash: a duplicate unless the service deduplicates by key;
    ``reconcile`` closes it) from one made outside the effect ledger (no key:
    sent twice).

    Args:
        build_graph: ``build_graph(saver)`` returns your graph compiled with that
            saver (or the uncompiled builder, compiled here).
        input: the graph's input.
        checkpointer_factory: returns a context manager that opens a saver on the
            store to test on, the same store each call (default: a temporary
            SQLite file), e.g. ``lambda: ResilientPostgresSaver.from_conn_string(dsn)``.
        effects: per effect name, how to count its real calls: a mock (its
            ``call_count``), a list of what was sent (its length) or a function
            returning the count.
        compare: maps a final state to what must equal the reference's (default:
            the state without the run log, messages without their ids).
        config: config for every run (its ``thread_id`` is replaced per case).
        max_cases: at most this many cases per family (default ``LGR_RECOVERY_CASES``
            or 4; 0 runs every case).
        durability: run every invoke with this LangGraph durability (default: the
            graph's own; ``ResilientStateGraph`` compiles with ``"sync"``), to see
            what ``"async"`` or ``"exit"`` would cost.
        dedupe_effects: names of side effects (their `side_effect` name) whose
            services deduplicate by the idempotency key they are passed: a
            re-call with the same key is then not a duplicate (the case passes
            and says so). Calls outside the ledger are never excused.
        cases: run only the cases of these names (as the report names them,
            e.g. ``{"crash after step 'draft'"}``), whatever ``max_cases`` says;
            the others are listed in ``not_run``. The clean run still runs first.

    Raises:
        ConfigError: bad arguments, a name in ``cases`` this graph's suite does
            not have (the error lists the names it has), or the clean run does
            not complete.

    Example:
        >>> report = recovery_suite(build, {"q": "..."}, effects={"email": sent})  # doctest: +SKIP
        >>> report.assert_ok()  # doctest: +SKIP
    """
    spec = _spec(input, effects, compare, max_cases, dedupe_effects, cases)
    runs = _Runs(build_graph=build_graph, config=config, durability=durability)
    with _default_store(checkpointer_factory, ResilientSqliteSaver) as factory:

        def run(op: Run) -> RunResult:
            cfg, crashes = runs.config_of(op), len(op.tracker.crashes)
            with factory() as saver:
                graph = runs.graph(saver)
                resumed_from = _step(graph.get_state(cfg))
                faulty = op.plan.apply(graph, tracker=op.tracker)
                try:
                    if op.settle:
                        for key, result in _settled(saver, op.settle):
                            settle_effect(saver, op.thread_id, key, happened=True, result=result)
                        retry_failed(cast(Any, faulty), cfg)
                    else:
                        faulty.invoke(_value(op, resumed_from), cfg, **runs.options)
                    error = None
                except (Exception, SimulatedCrash) as exc:
                    error = exc
                values = graph.get_state(cfg).values
            return _ended(op, crashes, error, values, resumed_from)

        steps = Plan(suite_steps(spec))
        for op in steps:
            steps.reply = run(op)
        return steps.value


async def arecovery_suite(
    build_graph: BuildGraph,
    input: Any,
    *,
    checkpointer_factory: SaverFactory | None = None,
    effects: Mapping[str, Any] | None = None,
    compare: Callable[[Any], Any] | None = None,
    config: RunnableConfig | None = None,
    max_cases: int | None = None,
    durability: Durability | None = None,
    dedupe_effects: Collection[str] | None = None,
    cases: Collection[str] | None = None,
) -> RecoverySuiteReport:
    """`recovery_suite` for async graphs and savers (``ainvoke``); the default
    store is a temporary file under `AsyncResilientSqliteSaver`.

    Example:
        >>> report = await arecovery_suite(build_graph, {"query": "q"})  # doctest: +SKIP
    """
    spec = _spec(input, effects, compare, max_cases, dedupe_effects, cases)
    runs = _Runs(build_graph=build_graph, config=config, durability=durability)
    with _default_store(checkpointer_factory, AsyncResilientSqliteSaver) as factory:

        async def run(op: Run) -> RunResult:
            cfg, crashes = runs.config_of(op), len(op.tracker.crashes)
            async with _opened(factory()) as saver:
                graph = runs.graph(saver)
                resumed_from = _step(await graph.aget_state(cfg))
                faulty = op.plan.apply(graph, tracker=op.tracker)
                try:
                    if op.settle:
                        for key, result in _settled(saver, op.settle):
                            await asettle_effect(
                                saver, op.thread_id, key, happened=True, result=result
                            )
                        await aretry_failed(cast(Any, faulty), cfg)
                    else:
                        await faulty.ainvoke(_value(op, resumed_from), cfg, **runs.options)
                    error = None
                except (Exception, SimulatedCrash) as exc:
                    error = exc
                values = (await graph.aget_state(cfg)).values
            return _ended(op, crashes, error, values, resumed_from)

        steps = Plan(suite_steps(spec))
        for op in steps:
            steps.reply = await run(op)
        return steps.value
