"""How a run's lease is judged over: by its time, or by its holder.

A lease ends in one of two ways. Its time runs out: by the server's clock on
Postgres; on SQLite by this machine's boot clock when it was renewed on the
same one (`_process.clock_now`: a wall clock stepped forward or back moves no
lease), else by the wall clock. Or its holder is known gone: a claim names the
claiming process (`Claimant.holder`), and a claimer on the same machine, boot
and PID namespace that finds that process dead (`_process.executor_alive`, as
the effect claims judge their holders) takes the run over at once, fenced as
for an expired lease. Elsewhere only the lease's time tells.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_resilience._util._process import (
    ClockReading,
    clock_now,
    executor_alive,
    machine,
    process_id,
)
from langgraph_resilience.checkpoint.store._schema import RUNS
from langgraph_resilience.checkpoint.store._store import Dialect, Statements, Stmt

__all__ = ["Claimant", "dead_holders", "lease_values", "taken_over"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Claimant:
    """Who claims or renews leases, and this machine's boot clock then.

    Attributes:
        holder: the claiming process (`_process.process_id`).
        machine: its host, boot and PID namespace: holders with this prefix can
            be judged alive or gone from here.
        clock: the boot clock now (`_process.clock_now`).
    """

    holder: str
    machine: str
    clock: ClockReading

    @classmethod
    def here(cls) -> Claimant:
        return cls(holder=process_id(), machine=machine(), clock=clock_now())


def _lease_over(d: Dialect, clock: ClockReading) -> tuple[str, tuple[Any, ...]]:
    """The condition a running run's lease has run out on, and its parameters."""
    if not d.local_leases or not clock.clock:
        return "lease_expires_at < NOW()", ()
    return (
        "(CASE WHEN lease_clock = ? THEN lease_ticks < ? ELSE lease_expires_at < NOW() END)",
        (clock.clock, clock.ticks),
    )


def lease_values(d: Dialect, who: Claimant, lease_ttl: float) -> tuple[Any, ...]:
    """The holder, the boot clock and its reading at the lease's end, as stored."""
    if not d.local_leases or not who.clock.clock:
        return (who.holder, None, None)
    return (who.holder, who.clock.clock, who.clock.ticks + float(lease_ttl))


def _like_prefix(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{escaped}%"


def dead_holders(d: Dialect, who: Claimant) -> Statements[list[str]]:
    """The holders of running runs that are processes of ``who``'s machine, boot
    and PID namespace known to be gone (`executor_alive`)."""
    if who.machine.endswith("~"):  # no /proc to tell by: leases alone decide
        return []
    rows = yield Stmt(
        d.sql(
            f"SELECT DISTINCT holder FROM {RUNS.name} "
            "WHERE status = 'running' AND holder LIKE ? ESCAPE '\\'"
        ),
        (_like_prefix(f"{who.machine}|"),),
        fetch=True,
    )
    return [str(h) for (h,) in rows if h is not None and executor_alive(str(h)) is False]


def taken_over(d: Dialect, clock: ClockReading, dead: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
    """The condition of a running run a claim takes over (its lease ran out, or its
    holder is among ``dead``), and its parameters."""
    over, params = _lease_over(d, clock)
    return (
        f"(status = 'running' AND ({over} OR holder IN_LIST(?)))",
        (*params, d.list_param(dead)),
    )
