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
from collections.abc import Iterator
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


def private_redis_server(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A fixture's body: a started `PrivateRedis` in ``tmp_path``, killed once the test
    is over; the test is skipped where there is no ``redis-server``."""
    import pytest

    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server on PATH")
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.kill()


# -- a test's look into the saver's keys (the key schema: docs/redis.md) ----------------


def _client() -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL)


def run_record(prefix: str, run_id: str) -> tuple[str, dict[str, object]] | None:
    """(thread, record as stored) of a run of the Redis saver under ``prefix``."""
    import json

    client = _client()
    try:
        thread = client.hget(f"{prefix}:runs:ids", run_id)
        if thread is None:
            return None
        raw = client.hget(f"{prefix}:{{{thread.decode()}}}:runs", run_id)
        return None if raw is None else (thread.decode(), json.loads(raw))
    finally:
        client.close()


def patch_run(prefix: str, run_id: str, **changes: object) -> None:
    """Change a stored run record (as another worker's claim would), and its lease
    index entry when its lease end moves."""
    import json

    found = run_record(prefix, run_id)
    assert found is not None, f"no run {run_id!r} under {prefix!r}"
    thread, record = found
    record.update(changes)
    client = _client()
    try:
        client.hset(f"{prefix}:{{{thread}}}:runs", run_id, json.dumps(record))
        ends = record.get("lease_expires_at")
        if record.get("status") == "running" and isinstance(ends, (int, float)):
            client.zadd(f"{prefix}:runs:leased", {f"{thread}\0{run_id}": int(ends * 1000)})
    finally:
        client.close()


def set_run_log_status(prefix: str, thread_id: str, status: str) -> None:
    """Set the status of a thread's run-ledger rows under ``prefix`` (``P:{T}:rl``,
    each the JSON of the SQL row), as an UPDATE of ``resilience_run_log`` would."""
    import json

    from langgraph_resilience.checkpoint.redis.store._keys import ledger_keys
    from langgraph_resilience.checkpoint.store._schema import RUN_LOG

    column = RUN_LOG.names.index("status")
    key = ledger_keys(prefix, thread_id).rl
    client = _client()
    try:
        rows = {f: raw for f, raw in client.hgetall(key).items() if f != b"\0v"}
        assert rows, f"no run-ledger rows of {thread_id!r} under {prefix!r}"
        for field, raw in rows.items():
            row = json.loads(raw)
            row[column] = status
            client.hset(key, field, json.dumps(row))
        client.hincrby(key, "\0v", 1)  # the ledger's version, as its writes move it
    finally:
        client.close()


def drop_runs_of(prefix: str, run_id: str) -> None:
    """Delete the runs of ``run_id``'s thread under ``prefix``, as the saver's
    ``delete_thread`` does first (`_runs.drop_threads`), its checkpoints kept."""
    from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
    from langgraph_resilience.checkpoint.redis.ledger import _runs

    found = run_record(prefix, run_id)
    assert found is not None, f"no run {run_id!r} under {prefix!r}"
    with ResilientRedisSaver.from_conn_string(REDIS_URL, prefix=prefix) as saver:
        saver._run(_runs.drop_threads(saver.place, [found[0]]))


def shift_not_before(prefix: str, run_id: str, seconds: float) -> None:
    """Move a queued run's not-before time ``seconds`` earlier (its record and its
    queue entry), as if that much time had passed."""
    found = run_record(prefix, run_id)
    assert found is not None, f"no run {run_id!r} under {prefix!r}"
    thread, record = found
    due = record.get("not_before")
    assert isinstance(due, (int, float)), record
    patch_run(prefix, run_id, not_before=due - seconds)
    client = _client()
    try:
        client.zadd(f"{prefix}:runs:queued", {f"{thread}\0{run_id}": int((due - seconds) * 1000)})
    finally:
        client.close()


def expire_run_lease(prefix: str, run_id: str) -> None:
    """The run's lease ended an hour ago."""
    found = run_record(prefix, run_id)
    assert found is not None
    ends = found[1]["lease_expires_at"]
    assert isinstance(ends, (int, float))
    patch_run(prefix, run_id, lease_expires_at=ends - 3600)


def tasks_written(prefix: str, thread_id: str, channel: str) -> set[tuple[str, ...]]:
    """(namespace, checkpoint, task) of the node tasks of a thread whose writes to
    ``channel`` are stored (``P:{T}:w``: ``<ns>\\0<checkpoint>\\0<task>\\0<idx>`` ->
    a JSON header naming the write's task path and channel, then its value), not
    the input's (LangGraph's ``__start__`` task), as `helpers.tasks_written` on SQL."""
    import json

    client = _client()
    try:
        stored = client.hgetall(f"{prefix}:{{{thread_id}}}:w")
    finally:
        client.close()
    found: set[tuple[str, ...]] = set()
    for field, record in stored.items():
        ns, checkpoint_id, task_id, _ = field.decode().split("\0")
        header = json.loads(record.partition(b"\n")[0])
        if header["c"] == channel and "__start__" not in header["p"]:
            found.add((ns, checkpoint_id, task_id))
    return found


def checkpoint_parents(prefix: str, thread_id: str, ns: str = "") -> dict[str, str | None]:
    """The thread's checkpoints in ``ns``: id -> parent id."""
    import json

    client = _client()
    try:
        stored = client.hgetall(f"{prefix}:{{{thread_id}}}:cp")
    finally:
        client.close()
    out: dict[str, str | None] = {}
    for field, record in stored.items():
        found_ns, _, checkpoint_id = field.decode().partition("\0")
        if found_ns == ns:
            out[checkpoint_id] = json.loads(record.partition(b"\n")[0])["p"]
    return out


def write_count(prefix: str, thread_id: str) -> int:
    client = _client()
    try:
        return int(client.hlen(f"{prefix}:{{{thread_id}}}:w"))
    finally:
        client.close()


class PrivateCluster:
    """A Redis Cluster of its own: three masters on free loopback ports, no replicas,
    no disk (``appendonly no``, no RDB), each node's files in its own tmp dir."""

    def __init__(self, tmp: Path, masters: int = 3) -> None:
        self.dir, self.ports = tmp, [_cluster_port() for _ in range(masters)]
        self.url = f"redis://127.0.0.1:{self.ports[0]}/0"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        """Start the nodes, join them (``redis-cli --cluster create``) and wait until
        every node says ``cluster_state:ok``."""
        exe = shutil.which("redis-server") or "redis-server"
        for port in self.ports:
            home = self.dir / str(port)
            home.mkdir(parents=True, exist_ok=True)
            self.procs.append(
                subprocess.Popen(
                    [
                        exe,
                        "--port", str(port),
                        "--bind", "127.0.0.1",
                        "--dir", str(home),
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", "2000",
                        "--appendonly", "no",
                        "--save", "",
                    ],
                    stdout=subprocess.DEVNULL,
                )
            )  # fmt: skip
        for port in self.ports:
            _wait_ping(f"redis://127.0.0.1:{port}/0")
        subprocess.run(
            [
                shutil.which("redis-cli") or "redis-cli",
                "--cluster", "create",
                *(f"127.0.0.1:{port}" for port in self.ports),
                "--cluster-replicas", "0",
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=30,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if all(_cluster_ok(port) for port in self.ports):
                return
            time.sleep(0.05)
        raise RuntimeError(f"private Redis Cluster on ports {self.ports} not ok in 20s")

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()


def _cluster_port() -> int:
    """A free port whose cluster bus port (``port + 10000``) is free and valid too."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def _wait_ping(url: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if redis.Redis.from_url(url).ping():
                return
        except redis.RedisError:
            time.sleep(0.05)
    raise RuntimeError(f"private redis-server at {url} did not start")


def _cluster_ok(port: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        return b"cluster_state:ok" in client.execute_command("CLUSTER", "INFO")
    except redis.RedisError:
        return False
    finally:
        client.close()


def private_redis_cluster(tmp_path: Path) -> Iterator[PrivateCluster]:
    """A fixture's body: a started `PrivateCluster` in ``tmp_path``, killed once the
    test is over; skipped where there is no ``redis-server`` (not under ``CI=true``,
    where it must run)."""
    import pytest

    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        if os.environ.get("CI") == "true":
            raise RuntimeError("CI=true: the Redis Cluster tests need redis-server and redis-cli")
        pytest.skip("no redis-server or redis-cli on PATH (needed for a private Redis Cluster)")
    cluster = PrivateCluster(tmp_path)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill()
