"""Redis for the tests: the machine's (``LGR_REDIS_URL``, default
``redis://127.0.0.1:6379/9``; each test under its own key prefix, flushed after)
and private ``redis-server``s with an AOF (a free port, a tmp dir) to SIGKILL."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

REDIS_URL = os.environ.get("LGR_REDIS_URL", "redis://127.0.0.1:6379/9")


def _down() -> str | None:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        return f"Redis at {REDIS_URL} unreachable ({exc})"
    return None


#: Why the machine's Redis cannot be used (None: it can).
REDIS_DOWN = _down()


def flush_prefix(prefix: str) -> None:
    """Delete a test's keys (a SCAN the savers never do: tests only)."""
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A ``redis-server`` of its own: appendonly yes, appendfsync always, no RDB."""

    def __init__(self, tmp: Path) -> None:
        self.dir, self.port = tmp, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start (again: from its AOF) and wait until it answers."""
        self.proc = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.dir),
                "--appendonly", "yes",
                "--appendfsync", "always",
                "--save", "",
            ],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(self.url).ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"private redis-server on port {self.port} did not start")

    def kill(self) -> None:
        """SIGKILL: nothing is flushed beyond what the AOF already holds."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
