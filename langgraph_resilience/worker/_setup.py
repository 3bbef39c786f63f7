"""What the `Worker` needs around its runs: its id, its graph bound to the saver
that holds the runs, the durability it runs them with, threads that do not
outlive a drain, how long one store call of its saver may last, and the
messages of run-state errors."""

from __future__ import annotations

import concurrent.futures
import os
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, cast

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability

from langgraph_resilience._langgraph import DURABILITIES
from langgraph_resilience._store_errors import is_store_error
from langgraph_resilience.checkpoint import ResilientSaver, RunQueueSaver, RunRecord
from langgraph_resilience.checkpoint.store._store_retry import retry_window
from langgraph_resilience.errors import ConfigError, StoreUnavailable

__all__ = [
    "bind",
    "default_worker_id",
    "durability_of",
    "in_thread",
    "not_open",
    "not_paused",
    "positive",
    "resilient_saver",
    "store_call_bound",
    "store_down",
    "stored_value",
]

T = TypeVar("T")
#: How long one try of a SQLite saver waits for a lock (``sqlite3.connect``'s default).
SQLITE_TRY = 5.0


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def positive(name: str, value: Any, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"Worker {name} must be a positive number, got {value!r} ({example})")
    return float(value)


def durability_of(value: Any) -> Durability | None:
    """A Worker's ``durability=``: one of LangGraph's modes, or None (each run on
    its graph's own default)."""
    if value is None:
        return None
    for mode in DURABILITIES:
        if value == mode and isinstance(value, str):
            return mode
    raise ConfigError(
        "Worker durability must be 'sync', 'async' or 'exit' (LangGraph's durability of "
        "each run it drives; 'sync' for a plain parent, an agent or an @entrypoint to "
        f"keep the crash guarantees), or None for the graph's own default; got {value!r}"
    )


def not_open(run_id: str, record: RunRecord | None) -> str:
    if record is None:
        return f"run {run_id!r} does not exist"
    return (
        f"run {run_id!r} is {record.status}, not open (queued, running or paused): "
        "nothing to cancel"
    )


def not_paused(run_id: str, record: RunRecord | None) -> str:
    state = "does not exist" if record is None else f"is {record.status}"
    return f"run {run_id!r} {state}; only a paused run can be resumed"


def in_thread(name: str, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
    """``fn(*args)`` in a daemon thread: a run whose step hangs, and that a drain
    gave up on, does not keep the process from exiting."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def target() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


def store_call_bound(saver: ResilientSaver) -> float:
    """The longest one store call of ``saver`` may last, in seconds: each of its
    ``store_retry.max_attempts`` tries bounded (a Postgres saver's
    `PgTimeouts.try_bound`, a SQLite lock wait), plus the waits between them
    (`retry_window`). ``inf`` when a try is unbounded (``timeouts.read=None``)."""
    options: dict[str, Any] = getattr(saver, "_own_options", dict)()
    backoff = options.get("store_retry")
    if backoff is None:
        return float("inf")
    timeouts = options.get("timeouts")
    per_try = SQLITE_TRY if timeouts is None else timeouts.try_bound
    if per_try is None:
        return float("inf")
    return float(backoff.max_attempts * per_try + retry_window(backoff))


def store_down(exc: BaseException) -> bool:
    """A store error the loop rides out (tried again next round), not a bug."""
    return isinstance(exc, StoreUnavailable) or is_store_error(exc)


def bind(
    graph: CompiledStateGraph[Any, Any, Any, Any] | StateGraph[Any, Any, Any, Any],
    checkpointer: BaseCheckpointSaver[Any] | None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The compiled graph the worker runs, on the saver that holds the runs (checked
    by `resilient_saver`)."""
    saver = checkpointer
    if isinstance(graph, StateGraph):
        return graph.compile(checkpointer=saver)
    if saver is not None:
        return graph.copy(update={"checkpointer": saver})
    return graph


def resilient_saver(graph: CompiledStateGraph[Any, Any, Any, Any]) -> ResilientSaver:
    """The saver that holds the runs: the graph's, which must be a resilient one."""
    saver = graph.checkpointer
    if not isinstance(saver, ResilientSaver) and isinstance(saver, RunQueueSaver):
        # A Redis saver: the worker uses only its run queue and reads of runs.
        return cast(ResilientSaver, saver)
    if not isinstance(saver, ResilientSaver):
        raise ConfigError(
            "Worker needs a resilient saver to keep its runs and leases in: pass "
            "checkpointer=ResilientSqliteSaver(...), ResilientPostgresSaver(...) or "
            "ResilientRedisSaver(...) (or "
            "their async twins for arun), or compile the graph with one; got "
            f"{type(saver).__name__}."
        )
    return saver


def stored_value(serde: Any, type_: str | None, blob: bytes | None, missing: Any) -> Any:
    """A value a run record keeps (its input, budget, resume value), or ``missing``."""
    return missing if type_ is None else serde.loads_typed((type_, blob or b""))
