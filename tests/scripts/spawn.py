"""Real processes for the crash tests, forked from the test process.

A fresh interpreter spends most of a second importing LangGraph before it does
anything; the crash tests start about a hundred processes. A fork of the test
process starts with those imports done, and is otherwise the real thing: its
own pid, its own connections, killed with real signals (SIGKILL, SIGSTOP,
SIGTERM). The child runs the script as ``__main__`` with ``sys.argv`` set, and
its stdout and stderr go to files that `Process.communicate` reads, as
``subprocess.Popen(..., text=True)`` would.
"""

from __future__ import annotations

import atexit
import io
import logging
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = str(Path(__file__).parents[2])
# Output files of children not read back (a killed worker's, say), removed when
# the test process exits (the children leave with os._exit: no atexit there).
_UNREAD: set[str] = set()
atexit.register(lambda: [Path(p).unlink(missing_ok=True) for p in list(_UNREAD)])


class Process:
    """The part of ``subprocess.Popen`` the tests use, for a forked child."""

    def __init__(self, pid: int, args: list[str], out: str, err: str) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._out, self._err = out, err

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.001
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        texts = tuple(Path(p).read_text() for p in (self._out, self._err))
        for path in (self._out, self._err):
            Path(path).unlink(missing_ok=True)
            _UNREAD.discard(path)
        return texts[0], texts[1]

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


def spawn(script: str, *args: str) -> Process:
    """Run ``python script args...`` as a forked child of this process."""
    out = tempfile.mkstemp(prefix="lgr-out-")
    err = tempfile.mkstemp(prefix="lgr-err-")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test
        _run_child(script, list(args), out[0], err[0])
    os.close(out[0])
    os.close(err[0])
    _UNREAD.update((out[1], err[1]))
    return Process(pid, [script, *args], out[1], err[1])


def _run_child(script: str, args: list[str], out: int, err: int) -> None:
    code = 1
    try:
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
        # What the test process set up for itself: its log capture, its timeout alarm.
        logging.root.handlers.clear()
        logging.root.setLevel(logging.WARNING)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(ROOT)
        sys.argv = [script, *args]
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
