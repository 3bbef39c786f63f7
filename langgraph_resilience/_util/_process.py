"""Who is executing, and whether an executor on this machine is still alive.

An effect's intent names its executor (`executor_id`): the host, the boot, the
PID namespace, the process (pid and start time, so a reused pid is not taken
for the old process) and a nonce of the call. Another executor that finds the
intent without an outcome asks `executor_alive`: on the same host, boot and PID
namespace it can tell for sure that the process is gone (killed, crashed) and
settle the intent at once instead of waiting for its lease to run out; anywhere
else only the lease tells. A `Worker`'s claim of a run names its process the
same way (`process_id`), so a run whose worker died on this machine is taken
over at the next poll.

Leases judged on this machine (SQLite's) also read its clock here: `clock_now`
is the boot clock (``CLOCK_BOOTTIME``: every process of the machine and time
namespace reads the same one, it counts a suspend, and no one steps it) and
its `clock_id`; a lease renewed on the same clock is judged by it, so a wall
clock stepped forward or back moves no lease.

An effect's intent of this very process is judged by what this process knows: its call
is alive while it runs (`executing` holds its owner), and gone once it ended,
for instance when the call returned but its outcome could not be stored (a full
disk): a later try of the same step in this process then settles it at once
instead of waiting out the lease as if another process held it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import NamedTuple

__all__ = [
    "ClockReading",
    "clock_id",
    "clock_now",
    "executing",
    "executor_alive",
    "executor_id",
    "machine",
    "process_id",
]

# The owners of this process's calls that run now (a set: no call holds two).
_running: set[str] = set()
_running_lock = threading.Lock()


@lru_cache(maxsize=1)
def _machine() -> str:
    """host, boot and PID namespace: where a pid means one process."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux: no sure answer, leases decide
        return f"{socket.gethostname()}~"
    return f"{socket.gethostname()}~{boot}~{pidns}"


def machine() -> str:
    """This process's host, boot and PID namespace (the prefix of its `process_id`)."""
    return _machine()


@lru_cache(maxsize=1)
def clock_id() -> str:
    """The boot clock's identity: the boot and the time namespace (readings of
    `clock_now` compare only under one id). Empty when unknown (not Linux)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        try:
            timens = os.readlink("/proc/self/ns/time")
        except OSError:  # a kernel without time namespaces: one clock per boot
            timens = ""
    except OSError:
        return ""
    return f"{boot}~{timens}"


class ClockReading(NamedTuple):
    """This machine's boot clock now: ``ticks`` seconds on the clock ``clock``
    (`clock_id`; empty: no clock shared by the machine's processes is known)."""

    clock: str
    ticks: float


_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def clock_now() -> ClockReading:
    """The boot clock now."""
    if _BOOTTIME is None:  # not Linux: no clock known to be shared; leases use the wall
        return ClockReading("", time.monotonic())
    return ClockReading(clock_id(), time.clock_gettime(_BOOTTIME))


def _start(pid: int) -> str | None:
    """A process's start time since boot (clock ticks), or None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):  # killed and not yet reaped: gone all the same
        return None
    return fields[19].decode()


def executor_id(nonce: str) -> str:
    """This process's identity, with ``nonce`` naming one call (no '|' inside)."""
    return f"{_this_process(os.getpid())}|{nonce}"


def process_id() -> str:
    """This process's identity (`executor_id` without a call's nonce)."""
    return f"{_this_process(os.getpid())}|"


@lru_cache(maxsize=2)
def _this_process(pid: int) -> str:  # keyed by pid: a forked child is another process
    return f"{_machine()}|{pid}|{_start(pid) or ''}"


# Read at import, outside any event loop: an async side effect asks for them in
# one, where the first read of /proc (``os.readlink``) would block it (LangGraph
# Agent Server's ``langgraph dev`` fails such a call with a BlockingError).
_machine()
clock_id()
_this_process(os.getpid())


@contextmanager
def executing(owner: str) -> Iterator[None]:
    """While the call of ``owner`` (an `executor_id` of this process) runs."""
    with _running_lock:
        _running.add(owner)
    try:
        yield
    finally:
        with _running_lock:
            _running.discard(owner)


def executor_alive(owner: str) -> bool | None:
    """False when ``owner``'s process (or, in this process, its call) is surely
    gone, True when it surely runs, None when this process cannot tell (another
    host, or not Linux)."""
    try:
        where, pid, start, nonce = owner.split("|")
    except ValueError:
        return None
    if nonce and f"{where}|{pid}|{start}" == _this_process(os.getpid()):
        # One call of this process (a run's holder, with no nonce, is the process).
        with _running_lock:
            return owner in _running
    if not where.endswith("~") and where == _machine() and pid.isdigit() and start:
        return _start(int(pid)) == start
    return None


def _after_fork() -> None:  # a child runs none of its parent's calls (their pid is not its)
    global _running_lock
    _running_lock = threading.Lock()
    _running.clear()


os.register_at_fork(after_in_child=_after_fork)
