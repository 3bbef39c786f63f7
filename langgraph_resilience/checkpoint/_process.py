"""Who is executing, and whether an executor on this machine is still alive.

An effect's intent names its executor (`executor_id`): the host, the boot, the
PID namespace, the process (pid and start time, so a reused pid is not taken
for the old process) and a nonce of the call. Another executor that finds the
intent without an outcome asks `executor_alive`: on the same host, boot and PID
namespace it can tell for sure that the process is gone (killed, crashed) and
settle the intent at once instead of waiting for its lease to run out; anywhere
else only the lease tells.
"""

from __future__ import annotations

import os
import socket
from functools import lru_cache

__all__ = ["executor_alive", "executor_id"]


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


def executor_alive(owner: str) -> bool | None:
    """False when ``owner``'s process is surely gone, True when it surely runs,
    None when this process cannot tell (another host, or not Linux)."""
    try:
        machine, pid, start, _ = owner.split("|")
    except ValueError:
        return None
    if not machine.endswith("~") and machine == _machine() and pid.isdigit() and start:
        return _start(int(pid)) == start
    return None
