"""Whether a ``running`` run's process is gone (``stale``), pure but for asking
`_process.executor_alive` about a process of this machine.

A `Worker`'s run is held by its claim: stale when its lease ran out or its
holder is known gone. A run no Worker holds (a user's ``graph.invoke``) names
the process driving it in its row (``holder``, `_process.process_id`) and when
it was last seen (``seen_at``: its start, a resume, a retry; readers add the
end of its latest step and the row's ``updated_at``). It is stale when that
process is known gone: on this machine (same host, boot and PID namespace) its
pid no longer runs the process that started the run; on this host after a
reboot (another boot), surely; on another machine, only when it was last seen
longer than `STALE_AFTER` ago (a node may take minutes: the bound is generous,
a guess, never a verdict of the process itself).
"""

from __future__ import annotations

from collections.abc import Callable

from langgraph_resilience._util._process import executor_alive, machine

__all__ = ["STALE_AFTER", "plain_run_stale", "worker_run_stale"]

#: Seconds without a sign of a run's holder on another machine after which it is
#: taken for gone.
STALE_AFTER = 900.0

Alive = Callable[[str], bool | None]


def _rebooted(holder: str, here: str) -> bool:
    """Whether ``holder`` ran on this host in an earlier boot (it is gone)."""
    theirs, ours = holder.split("|", 1)[0].split("~"), here.split("~")
    if len(theirs) < 2 or len(ours) < 2 or not (theirs[1] and ours[1]):
        return False  # a boot not known (not Linux): no sure answer
    return theirs[0] == ours[0] and theirs[1] != ours[1]


def plain_run_stale(
    status: str,
    holder: str | None,
    seen: tuple[float | None, ...],
    now: float,
    alive: Alive = executor_alive,
    here: str | None = None,
    after: float = STALE_AFTER,
) -> bool:
    """A ``running`` run no Worker holds whose process is gone (``seen``: times it
    was seen at, any of them None). A row naming no holder (stored before schema
    version 3, or a Worker's) is never stale by this."""
    if status != "running" or holder is None:
        return False
    verdict = alive(holder)
    if verdict is not None:
        return not verdict
    if _rebooted(holder, machine() if here is None else here):
        return True
    last = max((float(t) for t in seen if t is not None), default=None)
    return last is not None and now - last > after


def worker_run_stale(
    status: str,
    lease_expires_at: float | None,
    holder: str | None,
    now: float,
    alive: Alive = executor_alive,
) -> bool:
    """A `Worker` run ``running`` whose lease ran out or whose holder is known gone."""
    if status != "running":
        return False
    if lease_expires_at is not None and float(lease_expires_at) < now:
        return True
    return holder is not None and alive(str(holder)) is False
