"""How `recovery_metrics` and `run_report` read the store: written once as
generators of `Read` (a saver method and its arguments), run by a sync driver
(`drive`) or an async one (`adrive`, the a-prefixed methods)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple, TypeVar

from langgraph_resilience.checkpoint import AsyncResilientSaver, ResilientSaver
from langgraph_resilience.errors import ConfigError

__all__ = ["Read", "Reads", "adrive", "async_saver_of", "drive", "saver_of"]

T = TypeVar("T")


class Read(NamedTuple):
    """Call ``method`` of the saver (``"a" + method`` on an async one)."""

    method: str
    args: tuple[Any, ...] = ()


Reads = Generator[Read, Any, T]


def _checkpointer(target: Any) -> Any:
    """The saver itself, or the saver of a compiled graph."""
    return getattr(target, "checkpointer", None) or target


def _wrong(target: Any, what: str, wanted: str) -> ConfigError:
    return ConfigError(
        f"{what} reads a resilient saver's store: pass {wanted} (or a graph compiled with "
        f"one; the a-prefixed twin takes an async saver, the other a sync one), got "
        f"{type(_checkpointer(target)).__name__}"
    )


def saver_of(target: Any, what: str) -> ResilientSaver:
    saver = _checkpointer(target)
    if not isinstance(saver, ResilientSaver):
        raise _wrong(target, what, "ResilientSqliteSaver or ResilientPostgresSaver")
    return saver


def async_saver_of(target: Any, what: str) -> AsyncResilientSaver:
    saver = _checkpointer(target)
    if not isinstance(saver, AsyncResilientSaver):
        raise _wrong(target, what, "AsyncResilientSqliteSaver or AsyncResilientPostgresSaver")
    return saver


def drive(saver: ResilientSaver, reads: Reads[T]) -> T:
    reply: Any = None
    while True:
        try:
            op = reads.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply = getattr(saver, op.method)(*op.args)


async def adrive(saver: AsyncResilientSaver, reads: Reads[T]) -> T:
    reply: Any = None
    while True:
        try:
            op = reads.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply = await getattr(saver, "a" + op.method)(*op.args)
