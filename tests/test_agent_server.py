"""examples/agent_server under a real ``langgraph dev`` (LangGraph Agent Server's
in-memory server), on SQLite and on Postgres, driven with ``langgraph_sdk``.

One server per dialect serves the whole story: a flaky node retried, an email
sent once, a second input on a thread a second run, the report, metrics, storage
and runs read through our routes, a partial result finished through the retry
route. Then the server is SIGKILLed while ``polish`` works on after the email
went out, started again, and re-runs the run from its queue: the email went out
once, the steps before were not redone, and our report shows the recovery.

No ``--allow-blocking``: the server fails any blocking call on its event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import IN_CI, require_postgres
from langgraph_sdk import get_client

EXAMPLE = Path(__file__).parent.parent / "examples" / "agent_server"
LANGGRAPH = Path(sys.executable).parent / "langgraph"
# langgraph dev writes its runs and threads to this file every 10 s (and at a clean stop).
OPS_FILE = Path(".langgraph_api") / ".langgraph_ops.pckl"

pytestmark = pytest.mark.crash


def _require_server() -> None:
    try:
        import langgraph_api  # noqa: F401
    except ImportError:
        missing = "the server extra is not installed (pip install 'langgraph-resilience[server]')"
        if IN_CI:
            pytest.fail(f"CI=true but {missing}")
        pytest.skip(missing)
    assert LANGGRAPH.exists(), f"no langgraph command beside {sys.executable}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One ``langgraph dev`` on loopback, in ``home`` (its copy of the example)."""

    def __init__(self, home: Path, db: str) -> None:
        self.home, self.db = home, db
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home / "server.log"
        self.outbox = home / "outbox.jsonl"
        self.hold = home / "hold"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "LGR_DB": self.db,
            "OUTBOX": str(self.outbox),
            "POLISH_HOLD": str(self.hold),
            "PYTHONPATH": str(EXAMPLE.parent.parent),
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGSMITH_TRACING": "false",
        }
        command = [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*command, "--port", str(self.port), "--config", "langgraph.json"],
                cwd=self.home,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: a kill reaches all it started
            )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"langgraph dev exited:\n{self.tail()}"
            try:
                if httpx.get(f"{self.url}/ok", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"langgraph dev did not answer in 90 s:\n{self.tail()}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def sent(self, to: str) -> list[dict[str, Any]]:
        """The emails the outbox holds for ``to``."""
        if not self.outbox.exists():
            return []
        lines = self.outbox.read_text().splitlines()
        return [m for m in map(json.loads, lines) if m["to"] == to]

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", params=params, timeout=30)

    def post(self, path: str, body: Any) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", json=body, timeout=30)


@contextmanager
def served(tmp_path: Path, db: str) -> Iterator[Server]:
    home = tmp_path / "app"
    home.mkdir()
    for name in ("graph.py", "langgraph.json"):
        shutil.copy(EXAMPLE / name, home / name)
    server = Server(home, db)
    try:
        server.start()
        yield server
    except BaseException:
        print(server.tail())  # shown by pytest on failure
        raise
    finally:
        server.stop()


def _report(server: Server, thread: str, **params: Any) -> dict[str, Any]:
    reply = server.get(f"/resilience/threads/{thread}/report", **params)
    assert reply.status_code == 200, reply.text
    found: dict[str, Any] = reply.json()
    return found


def _steps(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["path"]: s for s in report["steps"]}


async def _story(server: Server) -> None:
    client = get_client(url=server.url, api_key=None)
    # A flaky node retried, an email sent once.
    a = (await client.threads.create())["thread_id"]
    first = {"topic": "checkpoints", "to": "a@example.com", "channel": "blog"}
    out = await client.runs.wait(a, "report", input=first)
    assert out["resilience"]["status"] == "success", out["resilience"]
    one = _report(server, a, run=1)
    assert one["status"] == "success"
    assert _steps(one)["research"]["attempts"] == 2
    assert _steps(one)["research"]["kinds"] == ["transient"]
    assert [e["status"] for e in one["effects"]] == ["done"]
    assert len(server.sent("a@example.com")) == 1

    # A second input on the thread: a second run, with its own email.
    out = await client.runs.wait(a, "report", input={**first, "topic": "leases"})
    assert out["resilience"]["status"] == "success"
    two = _report(server, a)
    assert (two["run"], two["runs_on_thread"], two["status"]) == (2, 2, "success")
    assert len({m["key"] for m in server.sent("a@example.com")}) == 2
    state = await client.threads.get_state(a)  # the server's own view of our run log
    assert state["values"]["resilience"]["status"] == "success"
    (latest,) = await client.threads.get_history(a, limit=1)
    assert latest["values"]["resilience"]["status"] == "success"

    # A partial result, finished through the retry route (a run of the server's queue).
    b = (await client.threads.create())["thread_id"]
    bad = {"topic": "fences", "to": "b@example.com", "channel": "tv"}
    out = await client.runs.wait(b, "report", input=bad)
    assert out["resilience"]["status"] == "partial_complete"
    assert out["resilience"]["failed_step"]["path"] == "publish"
    reply = server.post(f"/resilience/threads/{b}/retry", {"update": {"channel": "blog"}})
    assert reply.status_code == 202, reply.text
    out = await client.runs.join(b, reply.json()["run_id"])
    assert out["resilience"]["status"] == "success" and out["published"] == "blog:fences"
    assert len(server.sent("b@example.com")) == 1  # notify was not run again
    retried = _report(server, b)
    assert [r["kind"] for r in retried["recoveries"]] == ["retry_failed"]
    assert _steps(retried)["research"]["runs"] == 1

    again = server.post(f"/resilience/threads/{b}/retry", {})
    assert again.status_code == 409 and again.json()["error"] == "nothing_to_retry"
    unknown = server.get("/resilience/threads/no-such-thread/report")
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_thread"
    assert server.get("/resilience/threads/no-such-thread/storage").status_code == 404
    wrong = server.post(f"/resilience/threads/{b}/retry", {"updates": {}})
    assert wrong.status_code == 400 and "update" in wrong.json()["detail"]

    metrics = server.get("/resilience/metrics").json()
    assert (metrics["runs_ended"], metrics["partial_completion_rate"]) == (3, 0.0)
    assert metrics["recoveries_by_kind"]["retry_failed"] == 1
    runs = server.get("/resilience/runs").json()
    assert {(r["thread_id"], r["run"]) for r in runs} == {(a, 1), (a, 2), (b, 1)}
    # each run names the server's run that ran it (the server's ids and ours linked)
    for thread in (a, b):
        theirs = {r["run_id"] for r in await client.runs.list(thread)}
        ours = {r["run_id"] for r in runs if r["thread_id"] == thread}
        assert ours and ours <= theirs, (ours, theirs)
    assert len({r["run_id"] for r in runs if r["thread_id"] == a}) == 2
    storage = server.get(f"/resilience/threads/{a}/storage").json()
    assert storage["checkpoints"] > 0 and storage["writes"] > 0
    assert storage["channels"]["resilience"]["checkpoint_bytes"] > 0
    assert storage["ledger"]["resilience_effects"] == 2
    # the web console's pages, read-only, beside the routes
    console = server.get("/resilience/console/runs")
    assert console.status_code == 200 and f">{a}</a>" in console.text
    assert server.get("/resilience/console/run", thread=b).status_code == 200
    assert server.post("/resilience/console/actions/retry", {}).status_code == 403


async def _start_crash_run(server: Server) -> tuple[str, str]:
    """A run held in ``polish`` after its email went out, stored by the dev server."""
    client = get_client(url=server.url, api_key=None)
    server.hold.touch()
    c = (await client.threads.create())["thread_id"]
    crash = {"topic": "crashes", "to": "c@example.com", "channel": "blog"}
    run = await client.runs.create(c, "report", input=crash)
    deadline = time.monotonic() + 30
    while not server.sent("c@example.com"):
        assert time.monotonic() < deadline, "the email never went out"
        await asyncio.sleep(0.1)
    emailed = time.time()
    ops = server.home / OPS_FILE
    # The dev server stores its runs every 10 s: kill it only once the run is stored running.
    while not ops.exists() or ops.stat().st_mtime <= emailed:
        assert time.monotonic() < deadline + 15, "langgraph dev never stored its runs"
        await asyncio.sleep(0.2)
    return c, run["run_id"]


async def _after_crash(server: Server, thread: str, run_id: str) -> None:
    client = get_client(url=server.url, api_key=None)
    deadline = time.monotonic() + 60
    while (await client.runs.get(thread, run_id))["status"] != "success":
        assert time.monotonic() < deadline, "the server did not re-run the killed run"
        await asyncio.sleep(0.3)
    assert len(server.sent("c@example.com")) == 1  # the email went out once
    report = _report(server, thread)
    assert report["status"] == "success" and report["run"] == 1
    steps = _steps(report)
    assert all(steps[p]["runs"] == 1 for p in ("research", "draft", "notify"))  # not redone
    assert steps["research"]["attempts"] == 2  # its retries are the first run's
    (recovery,) = report["recoveries"]
    assert recovery["kind"] == "crash" and recovery["redone_paths"] == ["polish"]
    assert report["effects"][0]["status"] == "done" and not report["effects"][0]["replayed"]
    metrics = server.get("/resilience/metrics").json()
    assert metrics["recoveries_by_kind"]["crash"] == 1
    assert metrics["recovery_success_rate"] == 1.0


async def _served_story(tmp_path: Path, db: str) -> None:
    with served(tmp_path, db) as server:
        await _story(server)
        thread, run_id = await _start_crash_run(server)
        server.kill(signal.SIGKILL)  # polish is working on; the email went out
        server.hold.unlink()
        server.start()  # the same folder: the dev server's stored runs
        await _after_crash(server, thread, run_id)


@pytest.mark.timeout(300)
async def test_sqlite_under_langgraph_dev(tmp_path: Path) -> None:
    _require_server()
    await _served_story(tmp_path, str(tmp_path / "runs.db"))


@pytest.mark.timeout(300)
async def test_postgres_under_langgraph_dev(tmp_path: Path, pg_dsn: str) -> None:
    _require_server()
    require_postgres()
    await _served_story(tmp_path, pg_dsn)
