"""One place that tells the outside what recovery did: logs, streams, callbacks, OTel.

An event (a failed try, a fallback, a degraded step, a partial result, an
effect replayed or reconciled, a lease taken over, a recovery) goes out in one
call (`emit`) to:

- standard `logging`, under the ``langgraph_resilience`` logger, with the
  step's ids as structured extras (``event``, ``thread_id``, ``run_id``,
  ``run``, ``graph``, ``path``, ``node``, ``attempt``, ``kind``, ``wait`` ...);
- LangGraph's ``custom`` stream mode, as ``{"resilience": {"event": ..., ...}}``
  (inside a node; elsewhere there is no stream to write to);
- LangChain callbacks, as a custom event named ``resilience.<event>`` with the
  same fields (``astream_events(version="v2")`` yields it as
  ``on_custom_event``), when the run has callback handlers;
- OpenTelemetry counters (`_otel`), when the ``otel`` extra is installed and
  the application set a meter provider.

Callbacks also get ``resilience.try_started`` as each try of a watched node
starts and ``resilience.try_ended`` as it succeeds (a try that fails ends with
``resilience.try_failed``): ``astream_events`` has no error event, so a failed
try's own callback run shows no end there; these close it.

Each try of a node with a policy is also a LangChain callback run of its own
once the node has failed a try (`TryRun`): the failed try is reported as a
child run of the node's run that ended with ``on_chain_error``, and every later
try runs inside its own child run, so a tracer (LangSmith) shows each try as
the run it is. A step whose first try succeeds adds nothing: no run, no event,
no log line (an OTel span only when the application set a tracer provider).

This module imports no other module of the package (the checkpoint package
calls it too).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForChainRun, CallbackManagerForChainRun
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import (
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
    patch_config,
    var_child_runnable_config,
)
from langgraph.config import get_stream_writer

import langgraph_resilience.telemetry._otel as otel
from langgraph_resilience._keys import GRAPH_KEY, TRY_ATTEMPT_META, TRY_NODE_META, TRY_STARTED_META

__all__ = [
    "TryRun",
    "announce",
    "aannounce",
    "begin_try",
    "checkpoint_write",
    "effect_event",
    "recovery_event",
    "takeover_event",
    "try_config",
    "emit",
    "failed_try",
    "has_callbacks",
]

logger = logging.getLogger("langgraph_resilience")


#: Which OTel counter an event moves (``tries`` and ``retries`` move on
#: ``try_failed``, by its action).
_COUNTED = {
    "fallback": "fallbacks",
    "degraded": "degraded_steps",
    "partial_result": "partial_results",
    "effect_replayed": "effects_replayed",
    "effect_reconciled": "effects_reconciled",
    "takeover": "takeovers",
    "recovery": "recoveries",
}
_ATTRIBUTES = ("graph", "node", "kind")


def emit(event: str, level: int, message: str, *args: Any, **fields: Any) -> None:
    """Tell the logs, the custom stream and OTel that ``event`` happened.

    ``message % args`` is the log line; ``fields`` are its structured extras,
    the stream event's fields and (``graph``, ``node``, ``kind``) the OTel
    attributes.
    """
    if logger.isEnabledFor(level):
        logger.log(level, message, *args, extra={"event": event, **fields})
    _stream({"event": event, **fields})
    announce(event, var_child_runnable_config.get(), **fields)
    if otel.AVAILABLE:
        _count(event, fields)


#: The prefix of the custom events resilience dispatches to callbacks.
CUSTOM_EVENT = "resilience."


def announce(event: str, config: RunnableConfig | None, **fields: Any) -> None:
    """Dispatch ``resilience.<event>`` to the callbacks of ``config`` (a node's
    run), if it has any: nothing to do on a run nobody watches."""
    if config is None or not has_callbacks(config):
        return
    try:
        dispatch_custom_event(CUSTOM_EVENT + event, {"event": event, **fields}, config=config)
    except Exception:  # no parent run to hang it on; a handler that failed
        logger.debug("could not dispatch %s to the run's callbacks", event, exc_info=True)


async def aannounce(event: str, config: RunnableConfig | None, **fields: Any) -> None:
    """Async twin of `announce`."""
    if config is None or not has_callbacks(config):
        return
    try:
        await adispatch_custom_event(
            CUSTOM_EVENT + event, {"event": event, **fields}, config=config
        )
    except Exception:  # no parent run to hang it on; a handler that failed
        logger.debug("could not dispatch %s to the run's callbacks", event, exc_info=True)


def _stream(payload: dict[str, Any]) -> None:
    try:
        writer = get_stream_writer()
    except (RuntimeError, KeyError, AttributeError):  # not inside a node: no stream
        return
    writer({"resilience": payload})


def _count(event: str, fields: Mapping[str, Any]) -> None:
    attributes = {k: fields[k] for k in _ATTRIBUTES if fields.get(k) is not None}
    if event == "try_failed":
        otel.add("tries", attributes)
        if fields.get("action") == "retry":
            otel.add("retries", attributes)
            otel.record("retry_wait", float(fields.get("wait") or 0.0), attributes)
        return
    if event in ("limit_wait", "limit_busy"):
        attributes["limit"] = fields.get("limit", "")
        if event == "limit_busy":
            otel.add("limit_busy", attributes)
        else:
            otel.record("limit_wait", float(fields.get("waited") or 0.0), attributes)
        return
    if event == "recovery":
        otel.add("recoveries", {**attributes, "kind": fields.get("recovery", "")})
        if fields.get("steps_redone"):
            otel.add("steps_redone", attributes, int(fields["steps_redone"]))
        return
    counter = _COUNTED.get(event)
    if counter is not None:
        otel.add(counter, attributes)


def checkpoint_write(counter: str) -> None:
    """Count one checkpoint or writes try (``checkpoint_put_ok``, ``writes_put_failed`` ...)."""
    if otel.idle():  # nothing configured: what every write asks while OTel is off
        return
    if otel.meter_provider_set():
        write, _, outcome = counter.partition("_put_")
        otel.add("checkpoint_writes", {"write": write, "outcome": outcome})


# -- each try as a span and, after a failure, a callback run ------------------------------

#: The config of the try in progress when it runs inside its own callback run.
_TRY_CONFIG: ContextVar[RunnableConfig | None] = ContextVar("lgr_try_config", default=None)


def try_config(config: RunnableConfig) -> RunnableConfig:
    """The config a runnable node's action is called with: its try's, when the
    try has a callback run of its own (so what it runs nests under the try)."""
    found = _TRY_CONFIG.get()
    return config if found is None else found


def has_callbacks(config: Mapping[str, Any] | None) -> bool:
    """Whether a run under ``config`` reports to any callback handler."""
    callbacks = (config or {}).get("callbacks")
    if callbacks is None:
        return False
    handlers = callbacks if isinstance(callbacks, list) else getattr(callbacks, "handlers", [])
    return bool(handlers)


class TryRun:
    """One try of a node: its OTel span, and its callback run from the second
    try on (a first try's run is reported only if it fails, by `failed_sync`)."""

    __slots__ = ("attributes", "config", "manager", "node", "number", "span", "started", "token")

    def __init__(
        self, node: str, number: int, config: RunnableConfig, started: float | None = None
    ) -> None:
        graph = (config.get("configurable") or {}).get(GRAPH_KEY)
        self.node = node
        self.number = number
        self.config = config
        self.attributes: dict[str, Any] = {"graph": graph or "", "node": node, "attempt": number}
        self.started = time.time() if started is None else started
        self.span: Any = None
        self.manager: CallbackManagerForChainRun | AsyncCallbackManagerForChainRun | None = None
        self.token: Any = None

    @property
    def name(self) -> str:
        return f"{self.node} (try {self.number})"

    def _traced(self) -> RunnableConfig:
        """The node's config, with the try in the metadata its run records."""
        metadata = {
            **(self.config.get("metadata") or {}),
            TRY_NODE_META: self.node,
            TRY_ATTEMPT_META: self.number,
            TRY_STARTED_META: self.started,
        }
        return {**self.config, "metadata": metadata}

    def _enter(self, manager: Any) -> None:
        """Run the try inside its callback run: what it calls nests under it."""
        self.manager = manager
        child = patch_config(self.config, callbacks=manager.get_child())
        self.token = var_child_runnable_config.set(child), _TRY_CONFIG.set(child)

    def _leave(self, error: BaseException | None, kind: str | None) -> None:
        if self.token is not None:
            var_child_runnable_config.reset(self.token[0])
            _TRY_CONFIG.reset(self.token[1])
            self.token = None
        if otel.AVAILABLE:
            _close_span(self, error, kind)

    # sync
    def start_sync(self, state: Any) -> None:
        if self.number > 1 and has_callbacks(self.config):
            manager = get_callback_manager_for_config(self._traced()).on_chain_start(
                None, _inputs(state), name=self.name
            )
            self._enter(manager)

    def end_sync(self, output: Any, error: BaseException | None, kind: str | None) -> None:
        self._leave(error, kind)
        manager = self.manager
        if manager is None and error is not None and has_callbacks(self.config):
            manager = get_callback_manager_for_config(self._traced()).on_chain_start(
                None, {}, name=self.name
            )
        self.manager = None
        if isinstance(manager, CallbackManagerForChainRun):
            if error is None:
                manager.on_chain_end(_outputs(output))
            else:
                manager.on_chain_error(error)

    # async
    async def start_async(self, state: Any) -> None:
        if self.number > 1 and has_callbacks(self.config):
            manager = await get_async_callback_manager_for_config(self._traced()).on_chain_start(
                None, _inputs(state), name=self.name
            )
            self._enter(manager)

    async def end_async(self, output: Any, error: BaseException | None, kind: str | None) -> None:
        self._leave(error, kind)
        manager = self.manager
        if manager is None and error is not None and has_callbacks(self.config):
            manager = await get_async_callback_manager_for_config(self._traced()).on_chain_start(
                None, {}, name=self.name
            )
        self.manager = None
        if isinstance(manager, AsyncCallbackManagerForChainRun):
            if error is None:
                await manager.on_chain_end(_outputs(output))
            else:
                await manager.on_chain_error(error)


def begin_try(node: str, number: int, config: RunnableConfig) -> TryRun | None:
    """The try about to start, or None for a first try nobody watches (the
    happy path: no callback run, no span, no count)."""
    if number == 1 and (otel.idle() or not otel.watching()):
        return None
    tr = TryRun(node, number, config)
    if otel.AVAILABLE:
        tr.span = otel.start_try(node, tr.attributes)
    return tr


def failed_try(
    tr: TryRun | None, node: str, number: int, config: RunnableConfig, started: float
) -> TryRun:
    """The try that just failed: ``tr``, or (a first try nobody watched) a
    `TryRun` made now, so its failure is reported as a run of its own."""
    return tr if tr is not None else TryRun(node, number, config, started)


def _close_span(tr: TryRun, error: BaseException | None, kind: str | None) -> None:
    """Close the try's span; count it and its time (a failed try's count is `emit`'s)."""
    attributes = {**tr.attributes, "kind": kind or "ok"}
    otel.end_try(tr.span, error, attributes)
    tr.span = None
    slim = {k: attributes[k] for k in _ATTRIBUTES}
    if error is None:
        otel.add("tries", slim)
    otel.record("try_duration", time.time() - tr.started, slim)


def _inputs(state: Any) -> dict[str, Any]:
    return dict(state) if isinstance(state, Mapping) else {"input": state}


def _outputs(output: Any) -> dict[str, Any]:
    return dict(output) if isinstance(output, Mapping) else {"output": output}


def effect_event(event: str, effect: str, key: str, thread_id: str, found: Any) -> None:
    """A side effect's result came from the ledger (``effect_replayed``: INFO, its
    call was not made again) or from its ``reconcile`` (``effect_reconciled``:
    WARNING, an unsettled call was settled by asking the outside system).
    ``found``: the result, for a reconciled effect (None: it did not happen)."""
    if event == "effect_replayed":
        emit(
            event,
            logging.INFO,
            "side effect %s (key %s) replayed from the ledger: not called again",
            effect,
            key,
            effect=effect,
            key=key,
            thread_id=thread_id,
        )
    else:
        emit(
            event,
            logging.WARNING,
            "side effect %s (key %s) had no recorded outcome; reconcile says it %s",
            effect,
            key,
            "happened" if found is not None else "did not happen: calling it",
            effect=effect,
            key=key,
            thread_id=thread_id,
            happened=found is not None,
        )


def recovery_event(recovery: str, thread_id: str, paths: list[str], graph: str | None) -> None:
    """A run is recovered (``recovery``: ``retry_failed``, ``takeover`` ...): INFO,
    with the steps it runs again (``steps_redone`` counts them)."""
    emit(
        "recovery",
        logging.INFO,
        "thread %s recovered by %s: running again %s",
        thread_id,
        recovery,
        ", ".join(paths) or "its pending steps",
        recovery=recovery,
        thread_id=thread_id,
        graph=graph,
        paths=paths,
        steps_redone=len(paths),
    )


def takeover_event(run_id: str, thread_id: str, recoveries: int, owner: str | None) -> None:
    """A worker resumes a run whose former worker's lease ran out (WARNING): a
    recovery of kind ``takeover``."""
    emit(
        "takeover",
        logging.WARNING,
        "run %s (thread %s) taken over by %s after its worker's lease ran out (takeover %d)",
        run_id,
        thread_id,
        owner,
        recoveries,
        run_id=run_id,
        thread_id=thread_id,
        worker=owner,
        recoveries=recoveries,
    )
    if otel.AVAILABLE:
        otel.add("recoveries", {"kind": "takeover"})
