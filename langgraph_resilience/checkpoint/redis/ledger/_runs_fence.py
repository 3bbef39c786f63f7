"""Fencing on Redis: a thread script's command made its fenced twin (the run's
token checked in the same script, `_runs_scripts.FENCE`), and the `LeaseLost`
behind a refusal. Used by every fenced write of a thread (``put``,
``put_writes``), apart from the queue (`_runs`) so that `_ops` can use it."""

from __future__ import annotations

from typing import Any

from langgraph_resilience.checkpoint.ledger._runs import Fence, lease_lost_error
from langgraph_resilience.checkpoint.redis.ledger._runs_scripts import FENCED, LEASE_LOST
from langgraph_resilience.errors import LeaseLost

__all__ = ["fence_command", "lease_lost_of", "runs_key"]


def runs_key(prefix: str, thread_id: str) -> str:
    """The thread's run records (`_runs`): under its hash tag, beside its checkpoints."""
    return f"{prefix}:{{{thread_id}}}:runs"


def fence_command(
    prefix: str, thread_id: str, command: tuple[Any, ...], fence: Fence | None
) -> tuple[Any, ...]:
    """A thread script's command (``EVALSHA sha n keys... args...``), fenced by
    ``fence``: its fenced twin, with the thread's ``runs`` hash and the fence
    appended (`_runs_scripts.fenced`). Unchanged without a fence."""
    if fence is None:
        return command
    _, sha, n, *rest = command
    keys, args = rest[:n], rest[n:]
    twin = FENCED[sha]
    return (
        "EVALSHA",
        twin.sha,
        n + 1,
        *keys,
        runs_key(prefix, thread_id),
        *args,
        fence.run_id,
        str(fence.token),
    )


def lease_lost_of(exc: BaseException) -> LeaseLost | None:
    """The `LeaseLost` behind a fenced script's refusal (None: another error)."""
    text = str(exc)
    at = text.rfind(f"{LEASE_LOST} ")
    if at < 0:
        return None
    current, token, run_id = text[at + len(LEASE_LOST) + 1 :].split(" ", 2)
    fence = Fence(run_id=run_id, token=int(token))
    return lease_lost_error(fence, None if current == "none" else int(current))
