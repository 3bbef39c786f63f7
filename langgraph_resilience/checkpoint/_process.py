"""Who is executing, and whether an executor on this machine is still alive.

An effect's intent names its executor (`executor_id`): the host, the boot, the
PID namespace, the process (pid and start time, so a reused pid is not taken
for the old process) and a nonce of the call. Another executor that finds the
intent without an outcome asks `executor_alive`: on the same host, boot and PID
namespace it can tell for sure that the process is gone (killed, crashed) and
settle the intent at once instead of waiting for its lease to run out; anywhere
else only the lease tells.

An intent of this very process is judged by what this process knows: its call
is alive while it runs (`executing` holds its owner), and gone once it ended,
for instance when the call returned but its outcome could not be stored (a full
disk): a later try of the same step in this process then settles it at once
instead of waiting out the lease as if another process held it.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

__all__ = ["executing", "executor_alive", "executor_id"]

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


@lru_cache(maxsize=2)
def _this_process(pid: int) -> str:  # keyed by pid: a forked child is another process
    return f"{_machine()}|{pid}|{_start(pid) or ''}"


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
        machine, pid, start, _ = owner.split("|")
    except ValueError:
        return None
    if f"{machine}|{pid}|{start}" == _this_process(os.getpid()):
        with _running_lock:
            return owner in _running
    if not machine.endswith("~") and machine == _machine() and pid.isdigit() and start:
        return _start(int(pid)) == start
    return None


def _after_fork() -> None:  # a child runs none of its parent's calls (their pid is not its)
    global _running_lock
    _running_lock = threading.Lock()
    _running.clear()


os.register_at_fork(after_in_child=_after_fork)
