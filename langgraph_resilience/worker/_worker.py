"""`Worker`: runs submitted runs to their end under a lease, and takes over the
runs of workers that died.

A run is a thread plus its input, queued in the saver's ``resilience_runs``
table by `Worker.submit`. Any number of workers (threads, processes, machines
sharing the database) claim queued runs, and runs whose lease expired, with a
time-bounded lease and a fencing token that grows with every claim:

- the worker renews its leases every ``lease_ttl / 3`` while the runs go on,
  also while one long node runs (renewal is not done by the run's thread);
- a run's config carries its fence, and the saver refuses every checkpoint,
  write, attempt and effect record whose token is no longer the run's
  (`LeaseLost`), in the same transaction: a worker that was paused past its
  lease (a zombie) cannot write after another took over;
- a worker that fails to renew asks the run to stop at the next step boundary
  (LangGraph's ``RunControl.request_drain``);
- claims, renewals and run ends go through a saver of their own (the saver's
  `lease_saver`: its own connection and lock), so they never wait behind a
  write of the runs that hangs;
- a side effect of a run calls only while the worker can prove it holds the
  run's lease, with a margin of one renewal period (`_leases`): a worker that
  was stalled past its lease, or cannot renew, raises `LeaseLost` instead;
- a run that stops because the store could not be reached is released (queued
  again) and its end is stored once the store is back: a store outage never
  ends a run as ``error``, nor turns a success into one;
- SIGTERM or SIGINT drains the worker: the steps in flight finish, their runs
  are released (queued again, nothing redone) and `run` returns. A drain waits
  at most ``drain_timeout`` (default ``lease_ttl``) for them: runs whose step is
  still busy then (a store call that hangs) are given back (released, fenced:
  the hung step can store nothing more) with one store call each, for another
  worker to claim at once; one the store cannot take back (a partition) is left
  to its lease, which runs out within ``lease_ttl``, and is then taken over
  (fenced: the stale worker can write nothing, nor call an effect). The drain
  counts from the signal; the loop's store calls run in a thread of their own
  and the loop stops waiting for one still unanswered at the drain's end (the
  store counts as unreachable), so `run` returns within ``drain_timeout`` plus
  a poll and the one give-back call (`exit_bound`, which the saver's store
  timeouts bound). What it did not wait for is in `left_behind`: their threads
  still run, and Python waits for LangGraph's at exit; the command line's
  ``worker`` exits without them (code 75);
- a run whose worker's process is known gone (on this machine: the claim names
  it) is taken over at the next poll, not after its lease;
- a run claimed after more than ``max_recoveries`` takeovers (it keeps killing
  its workers) ends as ``error``, with its partial result kept.

The per-run flow and the worker's loop are written once (`_worker_steps`:
`run_steps`, `worker_loop`); `run` (threads) and `arun` (asyncio tasks) only do
their I/O.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability

from langgraph_resilience._keys import RUN_META
from langgraph_resilience._util._plans import Plan
from langgraph_resilience.budget import Budget
from langgraph_resilience.checkpoint import (
    AsyncResilientSaver,
    AsyncRunQueueSaver,
    ResilientSaver,
    RunRecord,
)
from langgraph_resilience.checkpoint.archive._schedule import aarchiving, archiving, schedule_of
from langgraph_resilience.errors import ConfigError
from langgraph_resilience.graph._lifecycle import unrecovered_steps
from langgraph_resilience.worker._controls import RunControls
from langgraph_resilience.worker._leases import LEASES, Instant
from langgraph_resilience.worker._setup import (
    bind,
    default_worker_id,
    durability_of,
    in_thread,
    positive,
    resilient_saver,
    store_call_bound,
    store_down,
    stored_value,
)
from langgraph_resilience.worker._steps import (
    NO_ANSWER,
    Abandon,
    ClaimRuns,
    CurrentValues,
    Held,
    Invoke,
    Invoked,
    LoopSettings,
    Pause,
    Renew,
    RunOp,
    Start,
    ThreadState,
    Wait,
    invoked,
    released_waits,
    run_steps,
    store_wait,
    where_of,
    worker_loop,
)

__all__ = ["Worker"]

logger = logging.getLogger("langgraph_resilience")
# The stored outcome of a run a drain gave back while its step hung.
_GIVEN_BACK = {"released": "the worker drained while its step hung: given back"}
T = TypeVar("T")


def _run_of(held: Held) -> tuple[RunnableConfig, dict[str, Any]]:
    """How to list a run's top-level checkpoints: the thread, and the run's metadata."""
    where: RunnableConfig = {
        "configurable": {"thread_id": held.record.thread_id, "checkpoint_ns": ""}
    }
    return where, {RUN_META: held.record.run_id}


class Worker(RunControls):
    """Claims runs under a lease, heartbeats, resumes crashed runs.

    Args:
        graph: a compiled `ResilientStateGraph` (or its builder, compiled here).
        checkpointer: the resilient saver that holds the runs; default: the
            graph's own. A sync saver for `run`, an async one for `arun`.
        lease_ttl: seconds a claim lasts without renewal; a dead worker's runs
            are taken over about this long after it died.
        worker_id: this worker's name in the runs table (default host:pid:random).
        concurrency: runs this worker runs at once.
        poll_interval: seconds between looks for claimable runs (default
            ``min(1, lease_ttl / 10)``).
        max_recoveries: takeovers after which a run is given up as ``error``.
        drain_timeout: seconds a drain (SIGTERM, `drain`) waits for the steps in
            flight before it gives their runs back (``queued``; left to their
            leases when the store cannot be reached) and returns (default
            ``lease_ttl``; see `exit_bound`).
        archive_idle: move threads idle this long to the saver's archive while
            the worker runs (None: never; see ``saver.archive_idle``).
        archive_every: how often (seconds or timedelta) it looks for them.
        durability: LangGraph's durability of every run it drives (``"sync"``,
            ``"async"`` or ``"exit"``; default None: each graph's own, which is
            ``"sync"`` for a `ResilientStateGraph` and LangGraph's ``"async"``
            for any other). Pass ``"sync"`` for a plain ``StateGraph`` parent
            (``create_supervisor``, ``create_swarm``), a ``create_agent`` /
            deepagents agent or an ``@entrypoint``: their crash guarantees need
            it (docs/testing.md, "Which durability each builder needs").

    Example:
        >>> worker = Worker(graph, checkpointer=saver, lease_ttl=30)  # doctest: +SKIP
        >>> run_id = worker.submit({"topic": "tides"})  # doctest: +SKIP
        >>> worker.run()  # until no run is queued or running  # doctest: +SKIP
        >>> saver.read_run(run_id).status  # doctest: +SKIP
        'success'
    """

    def __init__(
        self,
        graph: CompiledStateGraph[Any, Any, Any, Any] | StateGraph[Any, Any, Any, Any],
        *,
        checkpointer: BaseCheckpointSaver[Any] | None = None,
        lease_ttl: float = 30.0,
        worker_id: str | None = None,
        concurrency: int = 1,
        poll_interval: float | None = None,
        max_recoveries: int = 3,
        drain_timeout: float | None = None,
        archive_idle: timedelta | float | None = None,
        archive_every: timedelta | float = 3600.0,
        durability: Durability | None = None,
    ) -> None:
        self.lease_ttl = positive("lease_ttl", lease_ttl, "seconds, e.g. 30")
        self.drain_timeout = (
            self.lease_ttl
            if drain_timeout is None
            else positive("drain_timeout", drain_timeout, "seconds, e.g. 30")
        )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"Worker concurrency must be an int >= 1, got {concurrency!r}")
        if isinstance(max_recoveries, bool) or not isinstance(max_recoveries, int):
            raise ConfigError(f"Worker max_recoveries must be an int >= 0, got {max_recoveries!r}")
        if max_recoveries < 0:
            raise ConfigError(f"Worker max_recoveries must be an int >= 0, got {max_recoveries!r}")
        self.poll_interval = (
            min(1.0, self.lease_ttl / 10)
            if poll_interval is None
            else positive("poll_interval", poll_interval, "seconds, e.g. 0.5")
        )
        self.concurrency = concurrency
        self.max_recoveries = max_recoveries
        self.durability = durability_of(durability)
        #: What each run's invoke takes besides its input and config.
        self._invoke_options: dict[str, Any] = (
            {} if self.durability is None else {"durability": self.durability}
        )
        self._archive = schedule_of(archive_idle, archive_every)
        self.worker_id = str(worker_id) if worker_id else default_worker_id()
        self.graph = bind(graph, checkpointer)
        self.saver = resilient_saver(self.graph)
        # Kept, as a protocol check probes every method; None: `arun` cannot run.
        queue = (AsyncResilientSaver, AsyncRunQueueSaver)
        self._async_saver = cast(Any, self.saver) if isinstance(self.saver, queue) else None
        self._held: dict[str, Held] = {}
        self._draining = threading.Event()
        self._drain_asked: float | None = None  # Instant.now().monotonic of the first drain
        self._left: list[str] = []  # what the last run returned without waiting for

    # -- draining --------------------------------------------------------------------

    def drain(self, reason: str = "worker draining") -> None:
        """Stop claiming; the runs in flight stop at their next step and are released."""
        if self._drain_asked is None:
            self._drain_asked = Instant.now().monotonic
        self._draining.set()
        for held in list(self._held.values()):
            held.control.request_drain(reason)

    def wait_for_drain(self, timeout: float | None = None) -> bool:
        """Block until a drain is asked for (SIGTERM, SIGINT, `drain`), at most
        ``timeout`` seconds; whether one was."""
        return self._draining.wait(timeout)

    @property
    def exit_bound(self) -> float:
        """Seconds from a drain's start within which `run` returns, whatever the
        store does: ``drain_timeout``, a poll, and one store call of the saver
        (the give-back of runs whose steps hang; `store_call_bound`: its tries'
        timeouts and retry waits). ``inf`` for a saver whose waits are unbounded."""
        return self.drain_timeout + self.poll_interval + store_call_bound(self.saver)

    @property
    def left_behind(self) -> tuple[str, ...]:
        """What the last `run` (or `arun`) returned without waiting for: ``run
        <id>`` for each run whose step a drain abandoned, ``store call <name>``
        for a store call of the loop unanswered at the drain's end. Their threads
        still run, each until its step or store call ends (Python waits for
        LangGraph's executor threads as it exits). A process that owns the worker
        may exit without them (``os._exit``), as the ``worker`` command does."""
        return tuple(self._left)

    def _drain_end(self) -> float | None:
        asked = self._drain_asked
        return None if asked is None else asked + self.drain_timeout

    @contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGTERM/SIGINT drain the worker (main thread only; elsewhere call `drain`)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {
            sig: signal.signal(sig, lambda signum, frame: self.drain(f"signal {signum}"))
            for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _settings(self, until_idle: bool) -> LoopSettings:
        return LoopSettings(
            lease_ttl=self.lease_ttl,
            poll_interval=self.poll_interval,
            concurrency=self.concurrency,
            until_idle=until_idle,
            drain_timeout=self.drain_timeout,
        )

    def _loop(self, until_idle: bool) -> Generator[Any, Any, dict[str, str]]:
        settings = self._settings(until_idle)
        return worker_loop(
            settings, self._held, self._draining.is_set, drain_asked=lambda: self._drain_asked
        )

    def _input_of(self, record: RunRecord) -> Any:
        return stored_value(self.saver.serde, record.input_type, record.input, None)

    def _answer_of(self, record: RunRecord) -> Any:
        return stored_value(self.saver.serde, record.resume_type, record.resume, NO_ANSWER)

    def _steps(self, held: Held) -> tuple[Plan[RunOp, str | None], RunnableConfig]:
        """A held run's steps, ready to drive, and the config its graph calls take."""
        record = held.record
        budget = self._budget_of(record)
        ended = stored_value(self.saver.serde, record.outcome_type, record.outcome, None)
        steps = run_steps(
            held,
            self._input_of(record),
            budget,
            self.max_recoveries,
            self._answer_of(record),
            released=released_waits(ended),
        )
        return Plan(steps), held.config(budget)

    def _budget_of(self, record: RunRecord) -> Budget | None:
        found = stored_value(self.saver.serde, record.budget_type, record.budget, None)
        return Budget.coerce(found, where=f"run {record.run_id}'s stored budget")

    # -- sync ----------------------------------------------------------------------

    def run(self, until_idle: bool = True) -> dict[str, str]:
        """Claim and run runs in threads until idle (no run queued and due, or
        running, anywhere, if ``until_idle``) or drained; returns {run id: status
        left in}. A run in a durable wait (queued until its ``not_before``) is
        work for later: ``run`` returns without it (as ``queued``);
        ``until_idle=False`` polls on and takes it up when it is due.

        Runs this worker lost to another (its lease expired) are not in the result;
        runs a drain abandoned (see ``drain_timeout``) are, as ``queued`` (given
        back) or ``running`` (the store could not be reached: left to its lease).
        After a drain it returns within `exit_bound`; what it did not wait for is
        in `left_behind`.

        Raises:
            StoreUnavailable: the store could not be reached as the worker started.
        """
        self._left = []
        loop = Plan(self._loop(until_idle))
        futures: dict[concurrent.futures.Future[str | None], str] = {}
        with (
            self._signals(),
            self.saver.lease_saver() as leases,
            archiving(self.saver, self._archive),
        ):
            for op in loop:
                if isinstance(op, ClaimRuns):
                    claim = leases.runs.claim
                    loop.reply = self._loop_call(claim, self.worker_id, op.room, self.lease_ttl)
                elif isinstance(op, Start):
                    name = f"lgr-run-{op.held.record.run_id}"
                    futures[in_thread(name, self._execute, op.held, leases)] = op.held.record.run_id
                elif isinstance(op, Wait):
                    if not futures:
                        time.sleep(op.timeout)
                        continue
                    finished, _ = concurrent.futures.wait(
                        futures, timeout=op.timeout, return_when=concurrent.futures.FIRST_COMPLETED
                    )
                    loop.reply = [(futures.pop(f), f.result()) for f in finished]
                elif isinstance(op, Renew):
                    renew = leases.runs.renew
                    loop.reply = self._loop_call(renew, self.worker_id, op.fences, self.lease_ttl)
                elif isinstance(op, Abandon):  # their daemon threads are left to themselves
                    futures = {f: r for f, r in futures.items() if r not in op.run_ids}
                    self._left.extend(f"run {r}" for r in op.run_ids)
                    blob = self._outcome_blob(_GIVEN_BACK)
                    loop.reply = [
                        f.run_id
                        for f in op.fences
                        if self._call(leases.runs.finish, f, "queued", blob, None)
                    ]
                else:
                    loop.reply = self._loop_call(leases.active_runs)
        return loop.value

    def _loop_call(self, method: Callable[..., Any], *args: Any) -> Any:
        """A store call of the loop (`_call`), in a thread of its own: the loop
        stops waiting for it at the drain's end (`store_wait`); it then counts as
        the store not answering (None) and its thread is left to itself."""
        future = in_thread(f"lgr-store-{method.__name__}", self._call, method, *args)
        began = Instant.now().monotonic
        while not future.done():
            wait = store_wait(Instant.now().monotonic, began, self._drain_end())
            if wait is None:
                return self._left_unanswered(method)
            concurrent.futures.wait([future], timeout=wait)
        return future.result()

    def _left_unanswered(self, method: Callable[..., Any]) -> None:
        self._left.append(f"store call {method.__name__}")
        logger.warning(
            "worker %s: %s still unanswered at the drain's end (%.1f s): the store counts "
            "as unreachable and the call is left to itself",
            self.worker_id,
            method.__name__,
            self.drain_timeout,
        )
        return None

    def _call(self, method: Callable[..., Any], *args: Any) -> Any:
        """A store call of the loop; a store that is down is tried again next round."""
        try:
            return method(*args)
        except Exception as exc:
            if not store_down(exc):
                raise
            logger.warning("worker %s: %s failed: %s", self.worker_id, method.__name__, exc)
            return None

    def _execute(self, held: Held, leases: ResilientSaver) -> str | None:
        steps, config = self._steps(held)
        with LEASES.holding(held.fence, held.proof):
            for op in steps:
                if isinstance(op, ThreadState):
                    try:
                        steps.reply = where_of(self.graph.get_state(config), held.record.run_id)
                    except Exception as exc:
                        steps.reply = exc
                elif isinstance(op, CurrentValues):
                    try:
                        steps.reply = dict(self.graph.get_state(config).values)
                    except Exception as exc:
                        steps.reply = exc
                elif isinstance(op, Invoke):
                    try:
                        self.graph.invoke(
                            op.value, config, control=held.control, **self._invoke_options
                        )
                        snapshot = self.graph.get_state(config)
                        where, meta = _run_of(held)
                        found = (
                            []
                            if snapshot.next
                            else cast(BaseCheckpointSaver[Any], self.saver).list(where, filter=meta)
                        )
                        steps.reply = invoked(snapshot, unrecovered_steps(found))
                    except Exception as exc:
                        steps.reply = Invoked(error=exc)
                elif isinstance(op, Pause):
                    time.sleep(op.seconds)
                else:
                    blob = self._outcome_blob(op.outcome)
                    steps.reply = self._call(
                        leases.runs.finish, held.fence, op.status, blob, op.wait, op.error
                    )
        return steps.value

    # -- async -----------------------------------------------------------------------

    async def arun(self, until_idle: bool = True) -> dict[str, str]:
        """Async twin of `run`: runs are asyncio tasks on this event loop (a drain
        that times out cancels the tasks it abandons)."""
        saver = self._asaver()
        self._left = []
        loop = Plan(self._loop(until_idle))
        tasks: dict[asyncio.Task[str | None], str] = {}
        with self._signals():
            async with saver.alease_saver() as leases, aarchiving(saver, self._archive):
                for op in loop:
                    if isinstance(op, ClaimRuns):
                        loop.reply = await self._aloop_call(
                            leases.runs.aclaim, self.worker_id, op.room, self.lease_ttl
                        )
                    elif isinstance(op, Start):
                        task = asyncio.ensure_future(self._aexecute(op.held, leases))
                        tasks[task] = op.held.record.run_id
                    elif isinstance(op, Wait):
                        if not tasks:
                            await asyncio.sleep(op.timeout)
                            continue
                        finished, _ = await asyncio.wait(
                            tasks, timeout=op.timeout, return_when=asyncio.FIRST_COMPLETED
                        )
                        loop.reply = [(tasks.pop(t), t.result()) for t in finished]
                    elif isinstance(op, Renew):
                        loop.reply = await self._aloop_call(
                            leases.runs.arenew, self.worker_id, op.fences, self.lease_ttl
                        )
                    elif isinstance(op, Abandon):
                        for task in [t for t, r in tasks.items() if r in op.run_ids]:
                            task.cancel()
                            del tasks[task]
                        self._left.extend(f"run {r}" for r in op.run_ids)
                        blob = self._outcome_blob(_GIVEN_BACK)
                        loop.reply = [
                            f.run_id
                            for f in op.fences
                            if await self._acall(leases.runs.afinish, f, "queued", blob, None)
                        ]
                    else:
                        loop.reply = await self._aloop_call(leases.aactive_runs)
        return loop.value

    async def _aloop_call(self, method: Callable[..., Any], *args: Any) -> Any:
        """Async twin of `_loop_call`: the call is a task, cancelled at the drain's end."""
        task = asyncio.ensure_future(self._acall(method, *args))
        began = Instant.now().monotonic
        while not task.done():
            wait = store_wait(Instant.now().monotonic, began, self._drain_end())
            if wait is None:
                task.cancel()
                return self._left_unanswered(method)
            await asyncio.wait({task}, timeout=wait)
        return task.result()

    async def _acall(self, method: Callable[..., Any], *args: Any) -> Any:
        try:
            return await method(*args)
        except Exception as exc:
            if not store_down(exc):
                raise
            logger.warning("worker %s: %s failed: %s", self.worker_id, method.__name__, exc)
            return None

    async def _aexecute(self, held: Held, leases: AsyncResilientSaver) -> str | None:
        steps, config = self._steps(held)
        with LEASES.holding(held.fence, held.proof):
            for op in steps:
                if isinstance(op, ThreadState):
                    try:
                        steps.reply = where_of(
                            await self.graph.aget_state(config), held.record.run_id
                        )
                    except Exception as exc:
                        steps.reply = exc
                elif isinstance(op, CurrentValues):
                    try:
                        steps.reply = dict((await self.graph.aget_state(config)).values)
                    except Exception as exc:
                        steps.reply = exc
                elif isinstance(op, Invoke):
                    try:
                        await self.graph.ainvoke(
                            op.value, config, control=held.control, **self._invoke_options
                        )
                        snapshot = await self.graph.aget_state(config)
                        where, meta = _run_of(held)
                        found = (
                            []
                            if snapshot.next
                            else [
                                t
                                async for t in cast(BaseCheckpointSaver[Any], self.saver).alist(
                                    where, filter=meta
                                )
                            ]
                        )
                        steps.reply = invoked(snapshot, unrecovered_steps(found))
                    except Exception as exc:
                        steps.reply = Invoked(error=exc)
                elif isinstance(op, Pause):
                    await asyncio.sleep(op.seconds)
                else:
                    blob = self._outcome_blob(op.outcome)
                    steps.reply = await self._acall(
                        leases.runs.afinish, held.fence, op.status, blob, op.wait, op.error
                    )
        return steps.value
