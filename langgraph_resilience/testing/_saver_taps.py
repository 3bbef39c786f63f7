"""The saver taps of a `FaultPlan` (the node taps are in `_taps`).

Instance attributes on the run's saver (`tap_saver`): count checkpoint writes
and fail the ones the plan names, note which tasks' writes were stored, crash
right after an effect's call returned, and, once the run crashed, refuse every
write and forget effect outcomes not yet stored, as a killed process stores
nothing more. LangGraph stores a step's writes and the next checkpoint in
background threads (or tasks) that race; under a plan a checkpoint is stored
only once the saver is done with every write the loop handed it before (stored,
refused or crashed at), so a crash after a step's body or after its writes are
stored lands before the next checkpoint, and the counters a checkpoint notes
(what a nested step's effects are counted from) are read after the step
before. Intents claimed under a plan name an executor that is gone, so a later
claim in this same process settles them at once, as after a real kill.
The effect ledger is tapped by a subclass of the saver's ``effects`` interface,
put on the saver (``_effects_type``).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from langgraph_resilience._langgraph import (
    ERROR_CHANNEL,
    INTERRUPT_CHANNEL,
    RESUME_CHANNEL,
    handed_writes,
)
from langgraph_resilience.testing._taps import LANDING_TIMEOUT, Session

__all__ = ["tap_saver"]

_ERROR_CHANNELS = frozenset({ERROR_CHANNEL, INTERRUPT_CHANNEL, RESUME_CHANNEL})


def _untapped(saver: Any, name: str) -> Any:
    """The saver's own method, as it was before any plan tapped it: a saver used
    by run after run (an `InMemorySaver` shared by the suite's runs) is tapped
    again for each run, and a dead run's taps must not stay in the way."""
    originals: dict[str, Any] = saver.__dict__.setdefault("_lgr_untapped", {})
    if name not in originals:
        originals[name] = getattr(saver, name)
    return originals[name]


def tap_saver(saver: BaseCheckpointSaver[Any], s: Session) -> None:
    """Put the store faults and the crash cut-off on ``saver`` (instance attributes)."""
    d = saver.__dict__
    cls = type(saver)
    put, aput = _untapped(saver, "put"), _untapped(saver, "aput")
    put_writes, aput_writes = _untapped(saver, "put_writes"), _untapped(saver, "aput_writes")

    def before_put(config: Any, checkpoint: Any, metadata: Any) -> None:
        s.refuse_if_dead()
        s.puts += 1
        s.tracker.puts[s.run] = s.puts
        s.store_error("checkpoint", f"checkpoint write {s.puts}")
        ns = str((config.get("configurable") or {}).get("checkpoint_ns") or "")
        step = (metadata or {}).get("step", -1)
        s.tracker.checkpoint_put(s.run, ns, str(checkpoint.get("id")), int(step))

    def before_writes(
        config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> bool:
        s.refuse_if_dead()
        if all(channel in _ERROR_CHANNELS for channel, _ in writes):
            return False
        s.writing(config, task_id, task_path, writes)
        path = s.tracker.path_of_task(task_id)
        s.store_error("writes", f"writes of step {path!r}", path)
        return True

    def tapped_put(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        s.wait_landed(handed_writes(), LANDING_TIMEOUT)
        before_put(config, checkpoint, metadata)
        return put(config, checkpoint, metadata, new_versions)

    async def tapped_aput(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        await s.await_landed(handed_writes(), LANDING_TIMEOUT)
        before_put(config, checkpoint, metadata)
        return await aput(config, checkpoint, metadata, new_versions)

    def tapped_put_writes(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        try:
            output = before_writes(config, writes, task_id, task_path)
            put_writes(config, writes, task_id, task_path)
            if output:
                s.stored(task_id)
        finally:
            s.landed(task_id)

    async def tapped_aput_writes(
        config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        try:
            output = before_writes(config, writes, task_id, task_path)
            await aput_writes(config, writes, task_id, task_path)
            if output:
                s.stored(task_id)
        finally:
            s.landed(task_id)

    d.update(
        put=tapped_put,
        aput=tapped_aput,
        put_writes=tapped_put_writes,
        aput_writes=tapped_aput_writes,
    )
    _tap_ledger(saver, s, d, cls)


def _tap_ledger(saver: Any, s: Session, d: dict[str, Any], cls: type[Any]) -> None:
    """The resilient saver's own writes: refused after a crash; a crash right
    after an effect's call, before its outcome is stored."""
    # the SQL savers' writes go through ``_transact``, the Redis savers' operations
    # through ``_run``; a read (``_query``) is let through: what reads the store
    # after a crash is the suite looking at what the run left (``get_state``
    # reads the run's row), and a dead run's writes are refused all the same
    io = next((n for n in ("_transact", "_run") if hasattr(cls, n)), None)
    if io is None or not hasattr(cls, "_effects_type"):
        return  # a saver without the ledger: only its put/put_writes are tapped
    transact = _untapped(saver, io)
    state = getattr(saver, "_state", None)
    if state is not None:
        s.on_crash(state.outcomes.take_all)  # outcomes not yet stored die with the process

    if hasattr(cls, "_query"):
        d["_query"] = _reading(_untapped(saver, "_query"))
    if inspect.iscoroutinefunction(getattr(cls, io)):  # the async savers' I/O

        async def atransact(statements: Any, *args: Any, **options: Any) -> Any:
            if s.dead and options.get("flush"):
                return None  # closing a dead saver: a killed process flushes nothing
            if not _READING.get():
                s.refuse_if_dead()
            return await transact(statements, *args, **options)

        d[io] = atransact
    else:

        def stransact(statements: Any, *args: Any, **options: Any) -> Any:
            if s.dead and options.get("flush"):
                return None  # closing a dead saver: a killed process flushes nothing
            if not _READING.get():
                s.refuse_if_dead()
            return transact(statements, *args, **options)

        d[io] = stransact
    # The class's own (never a tapped one): a saver used by run after run is tapped
    # again for each, and a dead run's taps must not stay in the way.
    d["_effects_type"] = _tapped_effects(cls._effects_type, s)


#: Set while a saver's ``_query`` (a read) runs: its I/O is not refused after a crash.
_READING: ContextVar[bool] = ContextVar("lgr_reading", default=False)


def _reading(query: Any) -> Any:
    """``query`` (a saver's ``_query``, sync or async) with `_READING` set around it."""
    if inspect.iscoroutinefunction(query):

        async def aread(statements: Any) -> Any:
            token = _READING.set(True)
            try:
                return await query(statements)
            finally:
                _READING.reset(token)

        return aread

    def read(statements: Any) -> Any:
        token = _READING.set(True)
        try:
            return query(statements)
        finally:
            _READING.reset(token)

    return read


def _tapped_effects(effects: type[Any], s: Session) -> type[Any]:
    """``saver.effects`` under a plan: claims noted and held by an executor that
    is gone, outcomes that may crash the run right after the call returned."""

    def claim(self: Any, thread_id: str, rec: Any, *args: Any, **kwargs: Any) -> Any:
        found = effects.claim(self, thread_id, _as_mortal(rec), *args, **kwargs)
        _claimed(s, rec, found)
        return found

    def record(self: Any, thread_id: str, key: str, fields: Any, *args: Any) -> Any:
        _effect_returned(s, key, fields)
        return effects.record(self, thread_id, key, fields, *args)

    def renew(self: Any, thread_id: str, key: str, owner: str, lease: float) -> Any:
        return effects.renew(self, thread_id, key, _mortal(owner), lease)

    def defer(self: Any, thread_id: str, key: str, fields: Any) -> None:
        if s.dead:
            return
        _effect_returned(s, key, fields)
        effects.defer(self, thread_id, key, fields)

    methods: dict[str, Any] = {
        "__slots__": (),
        "claim": claim,
        "record": record,
        "renew": renew,
        "defer": defer,
    }
    if hasattr(effects, "aclaim"):  # an async saver's

        async def aclaim(self: Any, thread_id: str, rec: Any, *args: Any, **kwargs: Any) -> Any:
            found = await effects.aclaim(self, thread_id, _as_mortal(rec), *args, **kwargs)
            _claimed(s, rec, found)
            return found

        async def arecord(self: Any, thread_id: str, key: str, fields: Any, *args: Any) -> Any:
            _effect_returned(s, key, fields)
            return await effects.arecord(self, thread_id, key, fields, *args)

        async def arenew(self: Any, thread_id: str, key: str, owner: str, lease: float) -> Any:
            return await effects.arenew(self, thread_id, key, _mortal(owner), lease)

        methods.update(aclaim=aclaim, arecord=arecord, arenew=arenew)
    return type(f"Tapped{effects.__name__}", (effects,), methods)


def _claimed(s: Session, rec: Any, found: Any) -> None:
    """Note a claim; one that took over an earlier claim of the same key makes
    the call that follows a re-call with that key."""
    s.tracker.effect_claimed(rec.idempotency_key, rec.name, found.verdict == "took_over")


def _mortal(owner: str) -> str:
    """An executor id that `executor_alive` reports gone (its start time is not
    this process's): a later claim in this same process, after a simulated crash,
    settles the intent at once, as it would after a real kill, instead of
    waiting for a live call to end."""
    parts = owner.split("|")
    if len(parts) == 4 and not parts[2].endswith("~simulated"):
        parts[2] += "~simulated"
    return "|".join(parts)


def _as_mortal(record: Any) -> Any:
    return replace(record, owner=_mortal(record.owner)) if record.owner else record


def _effect_returned(s: Session, key: str, fields: Any) -> None:
    s.refuse_if_dead()
    found = s.tracker.effect_done(key)
    if found is None:
        return
    name, n = found
    fault = s.plan.crash_after(name, n)
    if fault is not None and s.tracker.fire_once(fault):
        s.tracker.lost_outcomes[key] = fields  # the call happened; its record did not
        s.crash(fault, f"after effect {name!r} (call {n}) returned")
