"""Where a `FaultPlan` goes into a compiled graph, without changing the graph's code.

Two hook points, both on copies or instances the test owns:

- **node taps** (here): a copy of the compiled graph whose nodes' runnables are
  wrapped (`instrument`). Around each node (outside its `NodePolicy`) the tap
  records the execution and crashes the run where the plan says; inside the
  policy (a `ResilientStateGraph` node is wrapped again from its builder's own
  action) the plan's errors are raised, so the policy retries or routes them as
  the node's own. Subgraphs added as nodes are copied and tapped the same way.
  The functional ``@task`` calls a node makes (an ``@entrypoint``'s) are tapped
  through the call its config hands the node's function (`Session.calling`):
  each task is a step, crashed before or after its body or once its result is
  stored (between two tasks).
- **saver taps** (`_saver_taps`): store faults, the crash cut-off, effect calls.

A `Tracker` collects what the runs of one test case did; a `Session` is one run
(both shared by the two kinds of taps).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.errors import ParentCommand
from langgraph.pregel import Pregel

from langgraph_resilience._langgraph import (
    CALL_KEY,
    DURABILITY_KEY,
    NS_END,
    NS_SEP,
    PATH_KEY,
    SEND_PATH,
    TASKS_CHANNEL,
    RunnableCallable,
    coerce_to_runnable,
)
from langgraph_resilience.errors import SimulatedCrash
from langgraph_resilience.graph._builder import ResilientStateGraph
from langgraph_resilience.graph._drivers import is_async
from langgraph_resilience.graph._step_log import log_of, step_path
from langgraph_resilience.graph._task import CURRENT_ATTEMPT, TaskContext
from langgraph_resilience.testing._faults import (
    CrashFault,
    CrashWhen,
    StoreFault,
    matches,
)

__all__ = ["LANDING_TIMEOUT", "Execution", "PlanLike", "Session", "Tracker", "instrument"]

#: How long a write waits for the writes handed before it (a bound, not a
#: timing: each arrives as soon as its background thread runs).
LANDING_TIMEOUT = 30.0


class PlanLike(Protocol):
    """What the taps ask of a `FaultPlan`."""

    def node_fault(self, path: str, try_number: int) -> BaseException | None: ...
    def crash_at(self, path: str, when: CrashWhen) -> CrashFault | None: ...
    def crash_after(self, effect: str, call: int) -> CrashFault | None: ...
    def store_faults(self) -> tuple[StoreFault, ...]: ...


@dataclass(kw_only=True)
class Execution:
    """One execution of a step: where, in which run of the case, and what it did."""

    path: str
    node: str
    task_id: str
    namespace: str  # the graph it ran in (its parent tasks' namespace)
    step: int
    run: int
    finished: bool = False
    stored: bool = False
    #: It ended by handing off (``Command(graph=Command.PARENT)``, a swarm's or
    #: supervisor's handoff): its write is the command's update.
    handoff: bool = False
    #: Seen by the saver only (its writes stored), not by a node tap: a step of
    #: a graph invoked inside a node or a tool (an agent called in a node).
    nested: bool = False
    #: A functional ``@task`` (its result is stored apart, between two tasks).
    task: bool = False
    #: The path of the step whose body called it (a task's entrypoint), if any.
    caller: str | None = None
    #: The functional tasks its body called so far, by name, in call order.
    calls: list[str] = field(default_factory=list)
    effects: dict[str, int] = field(default_factory=dict)  # counter moves while it ran
    counters: dict[str, int] = field(default_factory=dict)  # the counters when it started


class Tracker:
    """What the runs of one test case did: executions, crashes, effect calls.

    ``counters`` name the effects whose calls the test can count (how many times
    the outside world saw them so far).
    """

    def __init__(self, counters: Mapping[str, Callable[[], int]] | None = None) -> None:
        self.counters = dict(counters or {})
        self.executions: list[Execution] = []
        self.run = 0
        self.crashes: list[tuple[int, str]] = []  # (run, where)
        self.store_failures: list[tuple[int, str]] = []
        self.effect_calls: dict[str, int] = {}
        self.puts: dict[int, int] = {}  # checkpoint writes tried, by run
        self._fired: set[int] = set()
        self._spent: dict[int, int] = {}
        self._paths: dict[tuple[str, int, str], str] = {}
        self._seen: dict[str, int] = {}
        self._keys: dict[str, str] = {}  # idempotency key -> effect name
        # idempotency key -> (the counters at its latest claim, whether an earlier
        # try or run had claimed it: a call now is a re-call with the same key)
        self._claims: dict[str, tuple[dict[str, int], bool]] = {}
        #: Counter moves while a side effect's call ran, per counter.
        self.in_ledger: dict[str, int] = {}
        #: Counter moves while a side effect was called again with an idempotency
        #: key called before, per (counter, effect name).
        self.resent: dict[tuple[str, str], int] = {}
        #: Counter moves while a side effect was called under an idempotency key
        #: not called before (a new intent), per (counter, effect name).
        self.fresh: dict[tuple[str, str], int] = {}
        self._by_task: dict[str, Execution] = {}
        self._steps: dict[str, int] = {}  # checkpoint id -> its step (nested graphs')
        self._sends: dict[str, tuple[str, list[str]]] = {}  # ns -> (checkpoint id, Send nodes)
        self._marks: dict[str, tuple[int, dict[str, int]]] = {}  # ns -> (run, counters)
        #: The outcomes a crash right after an effect's call kept from the store
        #: (idempotency key -> OutcomeFields): what the outside system would show.
        self.lost_outcomes: dict[str, Any] = {}
        self.lock = threading.RLock()

    def read_counters(self) -> dict[str, int]:
        return {name: int(read()) for name, read in self.counters.items()}

    def path_of(self, name: str, task: TaskContext, state: Any) -> str:
        """The step's task path: the run log's when the state has one, else counted
        here (the same step after a resume keeps its path). Inside a subgraph the
        path starts with its parent step's (``research[1]/agent``), so the
        subgraphs of two `Send` branches name their steps apart. An agent
        middleware's hook node (``ResilienceMiddleware.before_model``) is not
        counted in the run log: each visit is counted here, by its superstep."""
        if isinstance(state, Mapping) and "resilience" in state and not _hook(name):
            path = step_path(name, task, log_of(state))
        else:
            path = self._counted(name, task)
        segments = task.checkpoint_ns.split(NS_SEP)
        if len(segments) >= 2:
            with self.lock:
                parent = self._by_task.get(segments[-2].partition(NS_END)[2])
            if parent is not None:
                path = f"{parent.path}/{path[len(task.graph_path) :]}"
        return path

    def _counted(self, name: str, task: TaskContext) -> str:
        base = task.graph_path + name
        if task.send_index is not None:
            base += f"[{task.send_index}]"
        key = (base, task.step or 0, _parent(task.checkpoint_ns))
        with self.lock:
            found = self._paths.get(key)
            if found is None:
                seen = self._seen[base] = self._seen.get(base, 0) + 1
                found = self._paths[key] = base if seen == 1 else f"{base}#{seen}"
        return found

    def task_path(self, name: str, task: TaskContext) -> str:
        """A functional task's path: its name, as the run log names a task's
        step, from its caller's second call of it on with the call's number
        (``fetch#2``). The number counts the caller's calls (``calls``), made
        again in the same order when it runs again, the finished ones' results
        read back: a task keeps its path across resumes and restarts."""
        ns = task.checkpoint_ns.split(NS_SEP)
        path: tuple[Any, ...] = tuple((task.config.get("metadata") or {}).get(PATH_KEY) or ())
        with self.lock:
            caller = self._by_task.get(ns[-2].partition(NS_END)[2]) if len(ns) >= 2 else None
            index = path[2] if len(path) > 2 and isinstance(path[2], int) else None
            if caller is None or index is None:
                return name
            seen = caller.calls[: index + 1].count(name)
        return name if seen <= 1 else f"{name}#{seen}"

    def fire_once(self, fault: object) -> bool:
        """Whether a crash fires now (each fires once in a case, not again on resume)."""
        with self.lock:
            if id(fault) in self._fired:
                return False
            self._fired.add(id(fault))
            return True

    def spend(self, fault: StoreFault) -> bool:
        """Whether a store fault fires now (``times`` in a case)."""
        with self.lock:
            used = self._spent.get(id(fault), 0)
            if used >= fault.times:
                return False
            self._spent[id(fault)] = used + 1
            return True

    def started(self, path: str, name: str, task: TaskContext) -> Execution:
        e = Execution(
            path=path,
            node=name,
            task_id=task.task_id,
            namespace=_parent(task.checkpoint_ns),
            step=task.step or 0,
            run=self.run,
            counters=self.read_counters(),
        )
        with self.lock:
            self.executions.append(e)
            self._by_task[e.task_id] = e
        return e

    def finished(self, e: Execution, *, handoff: bool = False) -> None:
        after = self.read_counters()
        e.effects = {k: after[k] - v for k, v in e.counters.items() if after[k] != v}
        e.finished = True
        e.handoff = handoff

    def fired(self, fault: object) -> bool:
        """Whether a crash of the case's plan has fired."""
        with self.lock:
            return id(fault) in self._fired or id(fault) in self._spent

    def stored(self, task_id: str) -> None:
        with self.lock:
            e = self._by_task.get(task_id)
        if e is not None:
            e.stored = True

    # -- steps seen by the saver only (a graph invoked inside a node or a tool) --------

    def checkpoint_put(self, run: int, ns: str, checkpoint_id: str, step: int) -> None:
        """A checkpoint of the graph at ``ns``: its tasks start from here."""
        counters = self.read_counters()
        with self.lock:
            self._steps[checkpoint_id] = step
            self._marks[ns] = (run, counters)

    def nested_write(
        self,
        run: int,
        at_start: Mapping[str, int],
        config: Mapping[str, Any],
        task_id: str,
        task_path: str,
        writes: Any,
    ) -> Execution | None:
        """The execution of a step whose writes the saver is storing and no node
        tap saw (a step of an agent invoked inside a node or a tool), recorded
        now (its body ran); None for a step the taps know or an input write."""
        conf = config.get("configurable") or {}
        ns, checkpoint_id = str(conf.get("checkpoint_ns") or ""), str(conf.get("checkpoint_id"))
        counters = self.read_counters()
        with self.lock:
            seen, sends = self._by_task.get(task_id), self._sends.get(ns)
            # a node tap's, or this run's (the same task id comes back on a resume)
            known = seen is not None and (not seen.nested or seen.run == run)
            mine = [
                getattr(v, "node", "?") for c, v in writes if c == TASKS_CHANNEL
            ]  # the Sends it makes, for the push tasks of the next step
            if mine:
                held = sends[1] if sends and sends[0] == checkpoint_id else []
                self._sends[ns] = (checkpoint_id, held + mine)
            if known or not ns:
                return None
            parts = [p.strip() for p in task_path.lstrip("~").split(",")]
            index: int | None = None
            if parts[0] == SEND_PATH and len(parts) > 1 and parts[1].isdigit():
                index = int(parts[1])
                name = sends[1][index] if sends and index < len(sends[1]) else "push"
            else:
                name = parts[-1]
            if not name or name.startswith("__"):
                return None
            parent = self._by_task.get(ns.split(NS_SEP)[-1].partition(NS_END)[2])
            base = f"{parent.path}/{name}" if parent is not None else name
            if index is not None:
                base += f"[{index}]"
            key = (base, 0, checkpoint_id)
            path = self._paths.get(key)
            if path is None:
                visits = self._seen[base] = self._seen.get(base, 0) + 1
                path = self._paths[key] = base if visits == 1 else f"{base}#{visits}"
            mark_run, mark = self._marks.get(ns, (0, {}))
            before = mark if mark_run == run else at_start
            e = Execution(
                path=path,
                node=name,
                task_id=task_id,
                namespace=ns,
                step=self._steps.get(checkpoint_id, -1) + 1,
                run=run,
                finished=True,
                nested=True,
                effects={k: v - before.get(k, v) for k, v in counters.items()},
                counters=counters,
            )
            e.effects = {k: v for k, v in e.effects.items() if v}
            self._marks[ns] = (run, counters)
            self.executions.append(e)
            self._by_task[task_id] = e
        return e

    def path_of_task(self, task_id: str) -> str | None:
        with self.lock:
            e = self._by_task.get(task_id)
        return e.path if e is not None else None

    def effect_claimed(self, key: str, name: str, again: bool) -> None:
        """An effect's intent was claimed; ``again``: the claim took over one an
        earlier try or run had left (its outcome unknown, or a failed call)."""
        counters = self.read_counters()
        with self.lock:
            self._keys[key] = name
            self._claims[key] = (counters, again)

    def effect_done(self, key: str) -> tuple[str, int] | None:
        """The effect's name and its call number in the case, when its call
        returned; the counters that moved since its claim are the call's."""
        after = self.read_counters()
        with self.lock:
            name = self._keys.get(key)
            if name is None:
                return None
            n = self.effect_calls[name] = self.effect_calls.get(name, 0) + 1
            before, again = self._claims.pop(key, ({}, False))
            for counter, value in after.items():
                moved = value - before.get(counter, value)
                if moved > 0:
                    self.in_ledger[counter] = self.in_ledger.get(counter, 0) + moved
                    slot = (counter, name)
                    calls = self.resent if again else self.fresh
                    calls[slot] = calls.get(slot, 0) + moved
        return name, n


def _parent(namespace: str) -> str:
    return namespace.rpartition(NS_SEP)[0]


class Session:
    """One run of a case under a plan: the plan, the case's tracker, whether it crashed."""

    def __init__(self, plan: PlanLike, tracker: Tracker) -> None:
        self.plan = plan
        self.tracker = tracker
        self.dead = False
        self.puts = 0
        self._on_crash: list[Callable[[], None]] = []
        self._tasks: dict[tuple[Any, str], Any] = {}  # (function, caller) -> its tap
        self._tasks_done: set[str] = set()  # the functional tasks of this run that returned
        #: The tasks whose writes this run's saver has taken (stored, refused or
        #: failed), and a condition a checkpoint save waits on for them (`landed`).
        self._landed: set[str] = set()
        self._landing = threading.Condition()
        tracker.run += 1
        self.run = tracker.run
        self.at_start = tracker.read_counters()

    def crash(self, fault: CrashFault, where: str) -> None:
        """Die here: SIGKILL, or stop every later write of this run's saver."""
        if fault.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        self.dead = True
        for forget in self._on_crash:
            forget()
        self.tracker.crashes.append((self.run, where))
        raise SimulatedCrash(f"simulated crash {where}")

    def on_crash(self, forget: Callable[[], None]) -> None:
        """Call ``forget`` when the run crashes (what a killed process loses)."""
        self._on_crash.append(forget)

    def refuse_if_dead(self) -> None:
        if self.dead:
            raise SimulatedCrash(
                "this saver belongs to a process that FaultPlan crashed: it writes nothing "
                "more, as a killed process would. Open a new saver on the same store (as a "
                "restarted process does) and use the graph without the plan, e.g. "
                "build(ResilientSqliteSaver.from_conn_string(path)).invoke(None, config)"
            )

    def store_error(self, target: str, where: str, path: str | None = None) -> None:
        for fault in self.plan.store_faults():
            if fault.target != target:
                continue
            if target == "checkpoint" and fault.at != self.puts:
                continue
            if target == "writes" and (path is None or not matches(fault.path or "", path)):
                continue
            if self.tracker.spend(fault):
                self.tracker.store_failures.append((self.run, where))
                raise fault.make()

    # -- around a node ---------------------------------------------------------------

    def before(self, name: str, state: Any, config: RunnableConfig) -> Execution:
        self.refuse_if_dead()  # a killed process runs no more steps
        task = TaskContext(config=config)
        path = self.tracker.path_of(name, task, state)
        e = self.tracker.started(path, name, task)
        self._crash_at(path, "before")
        return e

    def task_waits(self) -> frozenset[str]:
        """The tasks of this run whose writes a functional task about to start
        waits for: those finished before it. LangGraph starts the next task as
        soon as one returns, its result stored in the background; under a plan
        it starts once that result is stored (or refused), so a crash once a
        task's result is stored lands between it and the next. None under
        ``durability="exit"``, which stores no write before the run ends."""
        task = TaskContext.current()
        if task is None or task.config.get("configurable", {}).get(DURABILITY_KEY) == "exit":
            return frozenset()
        with self.tracker.lock:
            return frozenset(self._tasks_done)

    def before_task(self, name: str, caller: str) -> Execution:
        """A functional task's body is about to run (its own task context), the
        results of the tasks before it stored (`task_waits`)."""
        self.refuse_if_dead()
        task = TaskContext.current()
        assert task is not None  # LangGraph runs a task's function as a runnable
        e = self.tracker.started(self.tracker.task_path(name, task), name, task)
        e.task, e.caller = True, caller
        self._crash_at(e.path, "before")
        self.inject(e.path, task.node_attempt)
        return e

    def after_task(self, e: Execution) -> None:
        with self.tracker.lock:
            self._tasks_done.add(e.task_id)
        self.after(e)

    @contextlib.contextmanager
    def calling(self, e: Execution, config: RunnableConfig) -> Iterator[RunnableConfig]:
        """The node's config with the functional tasks it calls tapped (the call
        LangGraph hands it under ``CALL_KEY``, read by ``@task`` from the config
        the node runs in, which LangGraph sets to the node's own), if it can."""
        conf = config.get("configurable") or {}
        call = conf.get(CALL_KEY)
        if call is None:
            yield config
            return

        def tapped(func: Any, *args: Any, **kwargs: Any) -> Any:
            with self.tracker.lock:
                e.calls.append(_task_name(func))
            return call(self._task_tap(func, e.path), *args, **kwargs)

        given = cast(RunnableConfig, {**config, "configurable": {**conf, CALL_KEY: tapped}})
        token = var_child_runnable_config.set(given)
        try:
            yield given
        finally:
            var_child_runnable_config.reset(token)

    def _task_tap(self, func: Any, caller: str) -> Any:
        """``func`` run as a step (one tap per function: LangGraph names the
        task, and keeps its id, by the function it is given)."""
        key = (func, caller)
        found = self._tasks.get(key)
        if found is not None:
            return found
        name = _task_name(func)
        if is_async(func):

            @functools.wraps(func)
            async def arun(*args: Any, **kwargs: Any) -> Any:
                await self.await_landed(self.task_waits(), LANDING_TIMEOUT)
                e = self.before_task(name, caller)
                out = await func(*args, **kwargs)
                self.after_task(e)
                return out

            found = arun
        else:

            @functools.wraps(func)
            def run(*args: Any, **kwargs: Any) -> Any:
                self.wait_landed(self.task_waits(), LANDING_TIMEOUT)
                e = self.before_task(name, caller)
                out = func(*args, **kwargs)
                self.after_task(e)
                return out

            found = run
        self._tasks[key] = found
        return found

    def after(self, e: Execution, *, handoff: bool = False) -> None:
        self.tracker.finished(e, handoff=handoff)
        self._crash_at(e.path, "after")

    def writing(self, config: Mapping[str, Any], task_id: str, task_path: str, writes: Any) -> None:
        """A step's writes are about to be stored: a step no node tap saw (of an
        agent invoked inside a node or a tool) is recorded, and crashed here
        when the plan crashes it after its body ran (its work done, not stored)."""
        e = self.tracker.nested_write(self.run, self.at_start, config, task_id, task_path, writes)
        if e is not None:
            self._crash_at(e.path, "after")

    def landed(self, task_id: str) -> None:
        """The saver is done with the task's writes (stored, refused, or failed)."""
        with self._landing:
            self._landed.add(task_id)
            self._landing.notify_all()

    def all_landed(self, task_ids: frozenset[str]) -> bool:
        with self._landing:
            return task_ids <= self._landed

    def wait_landed(self, task_ids: frozenset[str] | None, timeout: float) -> None:
        """Block until the saver is done with the writes of ``task_ids`` (see
        `_saver_taps`: a checkpoint is stored after its step's writes)."""
        if not task_ids:
            return
        with self._landing:
            self._landing.wait_for(lambda: task_ids <= self._landed, timeout)

    async def await_landed(self, task_ids: frozenset[str] | None, timeout: float) -> None:
        """Async twin of `wait_landed`: the writes' tasks run on this event loop."""
        if not task_ids:
            return
        deadline = time.monotonic() + timeout
        while not self.all_landed(task_ids) and time.monotonic() < deadline:
            await asyncio.sleep(0.001)

    def stored(self, task_id: str) -> None:
        """The step's writes were stored: crash here if the plan says so."""
        self.tracker.stored(task_id)
        path = self.tracker.path_of_task(task_id)
        if path is not None:
            self._crash_at(path, "stored")

    def _crash_at(self, path: str, when: CrashWhen) -> None:
        fault = self.plan.crash_at(path, when)
        if fault is not None and self.tracker.fire_once(fault):
            self.crash(fault, f"{when} step {path!r}")

    def inject_node(
        self, name: str, state: Any, config: RunnableConfig | None, try_number: int
    ) -> None:
        """Raise the plan's error for this try of the node, if it names one."""
        task = TaskContext(config=config) if config is not None else TaskContext.current()
        if task is None:
            return
        self.inject(self.tracker.path_of(name, task, state), try_number)

    def inject(self, path: str, try_number: int) -> None:
        """Raise the plan's error for this try of the step at ``path``, if it names one."""
        error = self.plan.node_fault(path, try_number)
        if error is not None:
            raise error


# -- the graph ---------------------------------------------------------------------------


def instrument(graph: Pregel[Any], session: Session) -> Pregel[Any]:
    """A copy of ``graph`` with every node tapped (the graph itself is not changed)."""
    found = getattr(graph, "builder", None)
    builder: ResilientStateGraph[Any] | None = (
        found if isinstance(found, ResilientStateGraph) else None
    )
    nodes = dict(graph.nodes)
    for name, node in graph.nodes.items():
        if name.startswith("__") or not isinstance(node.bound, Runnable):
            continue
        inner: Runnable[Any, Any] = node.bound
        if builder is not None and name in builder._actions:
            action = _inside(builder._actions[name], name, session)
            policy = builder._policies.get(name)
            wrapped = builder._wrap(name, action, policy)
            inner = coerce_to_runnable(wrapped, name=name, trace=False)
            inside = True
        else:
            if isinstance(inner, Pregel):
                inner = instrument(inner, session)
            inside = False
        nodes[name] = node.copy({"bound": _tap(name, inner, session, inside)})
    return graph.copy({"nodes": nodes})


def _tap(name: str, inner: Runnable[Any, Any], s: Session, inside: bool) -> Runnable[Any, Any]:
    """Around a node: record it, crash where planned; errors too when not ``inside``."""

    def call(state: Any, config: RunnableConfig) -> Any:
        e = s.before(name, state, config)
        if not inside:
            s.inject_node(name, state, config, TaskContext(config=config).node_attempt)
        try:
            with s.calling(e, config) as given:
                out = inner.invoke(state, given)
        except ParentCommand:  # a handoff: the step's body ran, its write is the command
            s.after(e, handoff=True)
            raise
        s.after(e)
        return out

    async def acall(state: Any, config: RunnableConfig) -> Any:
        e = s.before(name, state, config)
        if not inside:
            s.inject_node(name, state, config, TaskContext(config=config).node_attempt)
        try:
            with s.calling(e, config) as given:
                out = await inner.ainvoke(state, given)
        except ParentCommand:
            s.after(e, handoff=True)
            raise
        s.after(e)
        return out

    return RunnableCallable(call, acall, name=name, trace=False, recurse=False)


def _task_name(func: Any) -> str:
    """The name LangGraph gives the task of ``func`` (``get_runnable_for_task``)."""
    if hasattr(func, "__name__"):
        return str(func.__name__)
    if hasattr(func, "func"):
        return str(func.func.__name__)
    return type(func).__name__


def _try_number() -> int:
    attempt = CURRENT_ATTEMPT.get()
    return attempt.number if attempt is not None else 1


def _inside(action: Any, name: str, s: Session) -> Any:
    """The node's own action, raising the plan's errors first (inside its policy)."""
    if isinstance(action, Runnable):
        target = instrument(action, s) if isinstance(action, Pregel) else action

        def call(state: Any, config: RunnableConfig) -> Any:
            s.inject_node(name, state, config, _try_number())
            return target.invoke(state, config)

        async def acall(state: Any, config: RunnableConfig) -> Any:
            s.inject_node(name, state, config, _try_number())
            return await target.ainvoke(state, config)

        return RunnableCallable(call, acall, name=name, trace=False, recurse=False)
    if is_async(action):

        @functools.wraps(action)
        async def async_node(state: Any, *args: Any, **kwargs: Any) -> Any:
            s.inject_node(name, state, None, _try_number())
            return await action(state, *args, **kwargs)

        return async_node

    @functools.wraps(action)
    def sync_node(state: Any, *args: Any, **kwargs: Any) -> Any:
        s.inject_node(name, state, None, _try_number())
        return action(state, *args, **kwargs)

    return sync_node


#: The hooks of LangChain's agent middleware, each a node named ``<middleware>.<hook>``.
_HOOKS = (".before_agent", ".before_model", ".after_model", ".after_agent")


def _hook(name: str) -> bool:
    """Whether node ``name`` is an agent middleware's hook (`Tracker.path_of`)."""
    return name.endswith(_HOOKS)
