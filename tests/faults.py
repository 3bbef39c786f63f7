"""Fault injection for the network and the store: a TCP proxy that fails the way
networks do, and a Postgres server of the tests' own that they may stop.

- `TcpProxy`: listens on 127.0.0.1 and forwards to a server on loopback. It can
  `close` every connection, `drop` replies (hold server→client bytes), `blackhole`
  (accept, pass nothing either way) and `heal`. Held bytes stay in the kernel's
  socket buffers (the proxy stops reading), so nothing is lost or reordered: after
  `heal` they arrive late, as after a partition. Bounded: at most
  ``max_connections`` pairs, two threads each, one 64 KiB chunk held per
  direction, every blocking call waits at most 50 ms, `stop` joins every thread.
- `PgServer`: initdb once into a temporary directory, a free loopback port,
  `stop` / `start` / `restart` with pg_ctl (``durable=True``: ``fsync`` and
  ``synchronous_commit`` on, as a production server runs; off by default, for
  speed). Never touches another server. As root, the server runs as the
  ``postgres`` user (initdb refuses root).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

_TICK = 0.05
_CHUNK = 65536
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


# -- the proxy -------------------------------------------------------------------------


@dataclass(eq=False)
class _Pair:
    client: socket.socket
    server: socket.socket
    threads: list[threading.Thread] = field(default_factory=list)
    closed: threading.Event = field(default_factory=threading.Event)

    def close(self) -> None:
        self.closed.set()
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


class TcpProxy:
    """A loopback TCP proxy that breaks on demand (see the module docstring).

    Example:
        with TcpProxy(5432) as proxy:
            dsn = proxy.dsn("postgresql://postgres@127.0.0.1:5432/db")
            proxy.blackhole(); ...; proxy.heal()
    """

    def __init__(
        self, upstream_port: int, upstream_host: str = "127.0.0.1", *, max_connections: int = 64
    ) -> None:
        if upstream_host not in _LOOPBACK:
            raise ValueError(f"the proxy only forwards to loopback, not {upstream_host!r}")
        self.upstream = (upstream_host, upstream_port)
        self.max_connections = max_connections
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_TICK)
        self.port: int = self._listener.getsockname()[1]
        self._pairs: set[_Pair] = set()
        self._lock = threading.Lock()
        self._up = True  # client -> server passes
        self._down = True  # server -> client passes
        self._stopped = threading.Event()
        self.accepted = 0
        self._acceptor = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._acceptor.start()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def dsn(self, dsn: str) -> str:
        """``dsn`` pointed at the proxy instead of its server."""
        params = conninfo_to_dict(dsn)
        params.update(host="127.0.0.1", port=str(self.port))
        params.pop("hostaddr", None)
        return make_conninfo("", **params)

    # -- faults ----------------------------------------------------------------------

    def close(self) -> None:
        """Close every open connection (each side sees the other go away)."""
        with self._lock:
            pairs, self._pairs = list(self._pairs), set()
        for pair in pairs:
            pair.close()

    def drop(self) -> None:
        """Hold every reply (server -> client) until `heal`; requests still pass."""
        self._up, self._down = True, False

    def blackhole(self) -> None:
        """Accept connections, pass nothing either way until `heal`."""
        self._up, self._down = False, False

    def heal(self) -> None:
        """Forward again; what was held is delivered now."""
        self._up, self._down = True, True

    def stop(self) -> None:
        """Close everything and join every thread."""
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._acceptor.join(timeout=2)
        with self._lock:
            threads = [t for pair in self._pairs for t in pair.threads]
        self.close()
        for thread in threads:
            thread.join(timeout=2)

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    # -- the threads -----------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            if self.connections >= self.max_connections:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=2)
            except OSError:
                client.close()  # the server is down: the client sees it go away
                continue
            pair = _Pair(client, server)
            for sock in (client, server):
                sock.settimeout(5)  # a send to a peer that stopped reading gives up
            pair.threads = [
                threading.Thread(target=self._pump, args=(pair, src, dst, up), daemon=True)
                for src, dst, up in ((client, server, True), (server, client, False))
            ]
            with self._lock:
                self._pairs.add(pair)
            for thread in pair.threads:
                thread.start()

    def _passes(self, up: bool) -> bool:
        return self._up if up else self._down

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket, up: bool) -> None:
        held = b""
        try:
            while not (pair.closed.is_set() or self._stopped.is_set()):
                if not self._passes(up):
                    time.sleep(_TICK)  # not reading: the bytes wait in the kernel
                    continue
                if held:
                    dst.sendall(held)
                    held = b""
                if not select.select([src], [], [], _TICK)[0]:
                    continue
                data = src.recv(_CHUNK)
                if not data:
                    break
                if self._passes(up):
                    dst.sendall(data)
                else:
                    held = data  # read just before the link went down
        except (OSError, ValueError):  # ValueError: select on a socket another thread closed
            pass
        finally:
            pair.close()
            with self._lock:
                self._pairs.discard(pair)


# -- a private Postgres server ---------------------------------------------------------


class PgUnavailable(RuntimeError):
    """A private Postgres server cannot be set up here (the message says why)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """A Postgres server of the tests' own, in a temporary directory.

    Create it with `PgServer.create` (raises `PgUnavailable` with the reason when
    initdb cannot run here); `destroy` stops it and removes its files.
    """

    def __init__(
        self, root: Path, bindir: Path, run_as: list[str], port: int, durable: bool = False
    ) -> None:
        self.durable = durable
        self.root = root
        self.data = root / "data"
        self.bindir = bindir
        self.run_as = run_as
        self.port = port
        self.log = root / "server.log"

    @classmethod
    def create(cls, durable: bool = False) -> PgServer:
        initdb = shutil.which("initdb") or shutil.which("initdb", path="/usr/local/bin")
        if initdb is None:
            raise PgUnavailable("initdb is not on PATH (install the PostgreSQL server)")
        bindir = Path(initdb).resolve().parent
        if not (bindir / "pg_ctl").exists():
            raise PgUnavailable(f"no pg_ctl next to {initdb}")
        run_as: list[str] = []
        root = Path(tempfile.mkdtemp(prefix="lgr-pg-"))
        if os.geteuid() == 0:  # initdb refuses root: run the server as postgres
            runuser = shutil.which("runuser")
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(root, ignore_errors=True)
                raise PgUnavailable("running as root and there is no postgres user") from None
            if runuser is None:
                shutil.rmtree(root, ignore_errors=True)
                raise PgUnavailable("running as root and runuser is missing")
            run_as = [runuser, "-u", "postgres", "--"]
            os.chown(root, user.pw_uid, user.pw_gid)
        server = cls(root, bindir, run_as, _free_port(), durable)
        try:
            server._run(
                "initdb", "-D", str(server.data), "-A", "trust", "-U", "postgres", "--no-sync"
            )
            server.start()
        except (OSError, subprocess.SubprocessError) as exc:
            server.destroy()
            raise PgUnavailable(f"cannot start a private Postgres server: {exc}") from exc
        return server

    def _run(self, tool: str, *args: str, timeout: float = 60) -> None:
        command = [*self.run_as, str(self.bindir / tool), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise subprocess.SubprocessError(
                f"{tool} exited with {done.returncode}: {(done.stderr or done.stdout).strip()}"
            )

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    @property
    def running(self) -> bool:
        try:
            psycopg.connect(self.dsn(), connect_timeout=2).close()
        except psycopg.Error:
            return False
        return True

    def start(self) -> None:
        fast = "" if self.durable else "-c fsync=off -c synchronous_commit=off "
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 {fast}"
            "-c full_page_writes=off -c max_connections=60"
        )
        self._run(
            "pg_ctl", "start", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "30",
            "-o", options,
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: sessions are told and ended; ``immediate``: as a
        crash)."""
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", mode, "-w", "-t", "30")

    def restart(self) -> None:
        self.stop()
        self.start()

    def ensure_running(self) -> None:
        if not self.running:
            self.start()

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.dsn(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def destroy(self) -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class Outage:
    """Stop ``server`` now and start it again ``seconds`` later, in the background.

    ``wait()`` returns once it is back; ``down_for`` is how long it was refusing
    connections (from the end of the stop to the end of the start).
    """

    def __init__(self, server: PgServer, seconds: float) -> None:
        self.server = server
        self.seconds = seconds
        server.stop()
        self._stopped_at = time.monotonic()
        self.down_for = 0.0
        self.back_at = 0.0  # time.monotonic() once it is back
        self.finished: dict[str, float] = {}  # what the test notes about its runs
        self._thread = threading.Thread(target=self._bring_back, daemon=True)
        self._thread.start()

    def _bring_back(self) -> None:
        time.sleep(self.seconds)
        self.server.start()
        self.back_at = time.monotonic()
        self.down_for = self.back_at - self._stopped_at

    def wait(self) -> None:
        self._thread.join(timeout=self.seconds + 60)
