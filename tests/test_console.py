"""The web console (`langgraph-resilience ui`) in a real browser: Playwright driving
Debian's chromium (/usr/bin/chromium, never a downloaded one), against the
command started as a user would, on a free loopback port, on SQLite, Postgres and
Redis (``--db redis://...#prefix``)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cli_graph
import console_graph
import httpx
import psycopg
import pytest
from conftest import PG_URL, _with_db, require_postgres
from redis_servers import REDIS_DOWN, REDIS_URL, flush_prefix
from spawn import spawn
from starlette.testclient import TestClient
from test_settle import payment_graph

from langgraph_resilience import Worker, cli
from langgraph_resilience.checkpoint.postgres import ResilientPostgresSaver
from langgraph_resilience.checkpoint.redis import ResilientRedisSaver
from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.history import RunReport, StepEntry, recovery_metrics
from langgraph_resilience.server import ConsoleActions, app, console_app
from langgraph_resilience.server._console import bucketed
from langgraph_resilience.server._pages import run_page
from langgraph_resilience.testing import FaultPlan, SimulatedCrash

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TESTS = Path(__file__).parent
CLI = str(Path(cli.__file__))
DOCS = TESTS.parent / "docs" / "img"
EVIL = "<script>alert(1)</script>"
pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) and os.environ.get("CI") != "true",
    reason="no chromium (apt-get install chromium)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def console(db: str, *flags: str) -> Iterator[str]:
    port = _free_port()
    cli = [sys.executable, "-m", "langgraph_resilience.cli", "ui", "--db", db, "--port", str(port)]
    scripts = TESTS / "scripts"  # where cli_graph is
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS), str(scripts)]),
    }
    proc = subprocess.Popen([*cli, *flags], cwd=scripts, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                httpx.get(f"{url}/runs", timeout=1)
                break
            except httpx.HTTPError:
                assert proc.poll() is None, "the console exited"
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@contextmanager
def opened(store: str) -> Iterator[Any]:
    """The saver on a store the fixture made: a SQLite file, a Postgres database, or
    ``redis://...#prefix`` (the key prefix after ``#``, as the command takes it)."""
    if store.startswith("redis://"):
        url, _, prefix = store.partition("#")
        with ResilientRedisSaver.from_conn_string(url, prefix=prefix) as saver:
            yield saver
        return
    cls: Any = ResilientSqliteSaver if store.endswith(".db") else ResilientPostgresSaver
    with cls.from_conn_string(store) as saver:
        yield saver


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store (a fresh one per test) holding a partial run on a thread whose id
    is HTML, and a run that succeeded."""
    dropped = prefix = None
    if request.param == "sqlite":
        db = str(tmp_path / "console.db")
    elif request.param == "postgres":
        require_postgres()
        dropped = f"lgr_console_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{dropped}"')
        db = _with_db(PG_URL, dropped)
    else:
        if REDIS_DOWN:
            pytest.skip(REDIS_DOWN)
        prefix = f"console{uuid.uuid4().hex[:8]}"
        db = f"{REDIS_URL}#{prefix}"
    with opened(db) as saver:
        if not prefix:  # Redis has nothing to set up (its setup says what it keeps on disk)
            saver.setup()
        graph = cli_graph.builder.compile(checkpointer=saver)
        graph.invoke({"done": []}, {"configurable": {"thread_id": EVIL}})
        graph.invoke({"done": [], "fix": "ok"}, {"configurable": {"thread_id": "fine"}})
    try:
        yield db
    finally:
        if dropped:
            with psycopg.connect(PG_URL, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{dropped}" WITH (FORCE)')
        if prefix:
            flush_prefix(prefix)


@pytest.fixture
def browser() -> Iterator[Any]:
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _shot(page: Any, tmp_path: Path, name: str, store: str) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir(exist_ok=True)
    page.screenshot(path=str(shots / f"console-{name}.png"), full_page=True)
    # one of each, from the SQLite run, into docs/img/ for the README: when missing, or
    # asked for (LGR_DOCS_SCREENSHOTS=1), so that a test run leaves the tree clean
    doc = DOCS / f"console-{name}.png"
    if store.endswith(".db") and (not doc.exists() or os.environ.get("LGR_DOCS_SCREENSHOTS")):
        shutil.copy(shots / f"console-{name}.png", doc)


def test_console_shows_and_retries(store: str, browser: Any, tmp_path: Path) -> None:
    with console(store, "--allow-actions", "--graph", "cli_graph:builder") as url:
        page = browser.new_page()
        answer = {"ok": False}
        page.on("dialog", lambda d: d.accept() if answer["ok"] else d.dismiss())  # confirm()
        page.goto(f"{url}/runs")
        # the partial run is listed in its colour; the thread id shows as text
        row = page.locator('tr.run[data-status="partial_complete"]')
        assert row.count() == 1
        badge = row.locator(".status")
        assert badge.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(255, 229, 208)"
        assert row.locator("a").inner_text() == EVIL
        assert page.locator("script", has_text="alert(1)").count() == 0
        _shot(page, tmp_path, "runs", store)

        row.locator("a").click()
        failed = page.locator('#graph g.node[data-node="b"]')
        assert failed.get_attribute("data-status") == "failed"
        assert (
            failed.locator("rect").evaluate("e => getComputedStyle(e).fill") == "rgb(248, 215, 218)"
        )
        assert page.locator("#thread").inner_text() == EVIL
        assert "partial complete" in page.locator("#run-status").inner_text()
        _shot(page, tmp_path, "run", store)

        page.fill("#update", '{"fix": "ok"}')
        page.click("#retry")  # answered "cancel": nothing is sent
        page.wait_for_timeout(200)
        assert page.locator("#flash").count() == 0
        assert "partial complete" in page.locator("#run-status").inner_text()
        answer["ok"] = True
        page.click("#retry")
        page.wait_for_selector("#flash")
        assert "now success" in page.locator("#flash").inner_text()
        assert "success" in page.locator("#run-status").inner_text()
        # the retry re-ran b: its node and step are marked redone; no retry button now
        assert "redone" in (
            page.locator('#graph g.node[data-node="b"]').get_attribute("class") or ""
        )
        assert page.locator("#steps .badge-redone").count() == 1
        assert page.locator("#retry").count() == 0
        page.screenshot(path=str(tmp_path / "screenshots" / "console-run-retried.png"))

        page.goto(f"{url}/metrics")
        assert page.locator("#plot-partial_completion_rate rect").count() == 24
        _shot(page, tmp_path, "metrics", store)


def test_console_resumes_a_crashed_run_and_cancels_a_paused_one(store: str, browser: Any) -> None:
    """A run whose process died in ``a`` reads ``running``: Resume finishes it. A
    run paused at ``c``'s question: Resume with an answer finishes it. A `Worker`
    run paused there: Cancel ends it ``cancelled``."""
    with opened(store) as saver:
        graph = cli_graph.builder.compile(checkpointer=saver)
        crashed = {"configurable": {"thread_id": "crashed"}}
        with pytest.raises(SimulatedCrash):
            FaultPlan().crash("a").apply(graph).invoke({"done": [], "fix": "ok"}, crashed)
    with opened(store) as saver:  # a process of its own: the other died
        graph = cli_graph.builder.compile(checkpointer=saver)
        asked = {"configurable": {"thread_id": "asked"}}
        graph.invoke({"done": [], "fix": "ok", "ask": True}, asked)
        worker = Worker(graph, checkpointer=saver, poll_interval=0.05)
        run_id = worker.submit({"done": [], "fix": "ok", "ask": True}, thread_id="asking")
        assert worker.run() == {run_id: "paused"}
    with console(store, "--allow-actions", "--graph", "cli_graph:builder") as url:
        page = browser.new_page()
        page.on("dialog", lambda d: d.accept())  # confirm()
        page.goto(f"{url}/run?thread=crashed")
        assert "running" in page.locator("#run-status").inner_text()
        assert page.locator("#cancel").count() == 0  # not a Worker's run: nothing to cancel
        page.click("#resume")
        page.wait_for_selector("#flash")
        assert "success" in page.locator("#run-status").inner_text()
        assert page.locator("#resume").count() == 0

        page.goto(f"{url}/run?thread=asked")
        assert "paused" in page.locator("#run-status").inner_text()
        page.fill("#answer", '"yes"')
        page.click("#resume")
        page.wait_for_selector("#flash")
        assert "success" in page.locator("#run-status").inner_text()

        page.goto(f"{url}/run?thread=asking")
        assert "paused" in page.locator("#run-status").inner_text()
        page.click("#cancel")
        page.wait_for_selector("#flash")
        assert "cancelled" in page.locator("#flash").inner_text()
    with opened(store) as saver:
        assert saver.read_run(run_id).status == "cancelled"
        graph = cli_graph.builder.compile(checkpointer=saver)
        assert graph.get_state(crashed).values["done"] == ["a", "b", "c"]
        assert graph.get_state(asked).values["done"] == ["a", "b", "c:yes"]


def test_read_only_has_no_buttons_and_refuses_posts(store: str, browser: Any) -> None:
    with console(store) as url:
        page = browser.new_page()
        page.goto(f"{url}/run?" + httpx.QueryParams({"thread": EVIL}).__str__())
        assert page.locator('#graph g.node[data-node="b"]').get_attribute("data-status") == "failed"
        assert (
            page.locator("#retry").count() == 0 and page.locator("form[method=post]").count() == 0
        )
        forged = httpx.post(f"{url}/actions/retry", data={"thread": EVIL, "csrf": "x"})
        assert forged.status_code == 403
    with opened(store) as saver:
        [row] = saver.history.run_rows(EVIL)
        assert row.status == "partial_complete"  # nothing was done


def test_actions_need_the_session_token(store: str) -> None:
    flags = ("--allow-actions", "--graph", "cli_graph:builder")
    with console(store, *flags) as url, httpx.Client(base_url=url) as client:
        client.get("/runs")  # a session cookie, but no token from a page
        forged = client.post("/actions/retry", data={"thread": EVIL, "run": "1", "csrf": "x"})
        assert forged.status_code == 403


def test_the_agent_server_app_mounts_the_console(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if store.startswith("redis://"):
        pytest.skip("the Agent Server app's checkpointer (LGR_DB) is SQL only")

    monkeypatch.setenv("LGR_DB", store)
    with TestClient(app) as client:
        runs = client.get("/resilience/console/runs")
        assert runs.status_code == 200
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in runs.text and EVIL not in runs.text
        assert 'href="/resilience/console/static/console.css"' in runs.text
        assert client.get("/resilience/console/static/console.js").status_code == 200
        assert client.post("/resilience/console/actions/retry", data={}).status_code == 403


def test_actions_need_a_graph(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ui", "--db", store, "--allow-actions"]) == 2
    assert "--allow-actions needs --graph" in capsys.readouterr().err


def test_a_nested_step_links_to_its_parent_step() -> None:
    steps = tuple(
        StepEntry(path=p, node=p.rpartition("/")[2], status="completed", attempts=1)
        for p in ("agent", "agent/model", "agent/tools")
    )
    text = run_page(
        RunReport(thread_id="t", run=1, status="success", steps=steps),
        base="",
        graph=None,
        token=None,
    )
    assert '<a class="parent" href="#step-agent">↑ in agent</a>' in text
    assert '<a class="nested" href="#step-agent-model">↓ agent/model</a>' in text
    assert '<a id="step-agent-tools"></a>' in text


def _csrf(page: str) -> str:
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert token, "no CSRF token on the page"
    return token[1]


def test_the_buttons_act_over_http(store: str) -> None:
    """The console's retry, resume and cancel (the command line's actions, as ``ui
    --allow-actions`` builds them), posted as a browser would, on every store."""
    from langgraph_resilience.cli._ui import _actions

    with opened(store) as saver:
        graph = cli_graph.builder.compile(checkpointer=saver)
        asked = {"configurable": {"thread_id": "asked"}}
        graph.invoke({"done": [], "fix": "ok", "ask": True}, asked)
        worker = Worker(graph, checkpointer=saver, poll_interval=0.05)
        run_id = worker.submit({"done": [], "fix": "ok", "ask": True}, thread_id="asking")
        assert worker.run() == {run_id: "paused"}
        app = console_app(saver, actions=_actions(saver, graph), graph=graph)
        with TestClient(app) as client:
            csrf = _csrf(client.get("/run", params={"thread": "asked"}).text)  # the session's

            def post(action: str, thread: str, **form: str) -> str:
                done = client.post(
                    f"/actions/{action}", data={"csrf": csrf, "thread": thread, "run": "", **form}
                )
                assert done.status_code == 200, done.text
                flash = re.search(r'id="flash"[^>]*>(.*?)<', done.text, re.S)
                assert flash, done.text[-2000:]
                return flash[1]

            assert "now partial" in post("retry", EVIL, update="{}")  # not fixed yet
            assert "now success" in post("retry", EVIL, update='{"fix": "ok"}')
            assert "now success" in post("resume", "asked", answer='"yes"')
            assert "cancelled" in post("cancel", "asking", run_id=run_id)
            unknown = client.post(
                "/actions/retry",
                data={"csrf": csrf, "thread": "nobody", "run": "", "update": "{}"},
                follow_redirects=False,
            )
            assert "retry+refused%3A+no+thread+%27nobody%27" in unknown.headers["location"]
        assert saver.history.run_rows(EVIL)[0].status == "success"
        assert graph.get_state(asked).values["done"] == ["a", "b", "c:yes"]
        found = saver.read_run(run_id)
        assert found is not None and found.status == "cancelled"


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_an_unknown_effect_is_settled_from_its_run_page(tmp_path: Path, backend: str) -> None:
    bank: list[str] = []
    config: Any = {"configurable": {"thread_id": "pay"}}
    if backend == "redis" and REDIS_DOWN:
        pytest.skip(REDIS_DOWN)
    prefix = f"settle{uuid.uuid4().hex[:8]}"
    db = f"{REDIS_URL}#{prefix}" if backend == "redis" else str(tmp_path / "s.db")
    with opened(db) as saver, contextlib.ExitStack() as cleanup:
        if backend == "redis":
            cleanup.callback(flush_prefix, prefix)
        saver.setup()
        graph = payment_graph(type("H", (), {"saver": saver})(), bank)
        with pytest.raises(SimulatedCrash):
            FaultPlan().crash_after_effect("pay").apply(graph).invoke({}, config)
        FaultPlan().apply(graph).invoke(None, config)  # stops: the outcome is unknown
        refuse = ConsoleActions(
            retry=lambda t, u: ("skipped", ""),
            resume=lambda t: ("skipped", ""),
            cancel=lambda r: ("skipped", ""),
        )
        with TestClient(console_app(saver, actions=refuse)) as client:
            page = client.get("/run", params={"thread": "pay"}).text
            token = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
            assert token and "it happened" in page
            form = {"csrf": token[1], "thread": "pay", "run": "1", "key": bank[0], "happened": "1"}
            done = client.post("/actions/settle", data=form)
            assert done.status_code == 200 and "settled: done" in done.text
            assert saver.effects.read("pay", bank[0]).status == "done"
            again = client.post("/actions/settle", data=form)
            assert "already has its outcome" in again.text  # refused, said on the page


def test_the_metrics_buckets_add_up_to_the_metrics(store: str) -> None:
    with opened(store) as saver:
        whole = recovery_metrics(saver)
        for per, count in (("hour", 24), ("day", 14)):
            found = bucketed(saver, per)
            assert len(found) == count
            assert sum(m.runs for _, m in found) == whole.runs == 2
            assert found[-1][1].runs_partial == 1 and found[-1][1].partial_completion_rate == 0.5


# -- what happened, as it happened (issues 38, 40) ------------------------------------------


def _sql(store: str, sql: str, *params: Any) -> None:
    """One statement on the store's own tables (what another driver would have written)."""
    if store.endswith(".db"):
        with sqlite3.connect(store) as db:
            db.execute(sql, params)
    else:
        with psycopg.connect(store, autocommit=True) as db:
            db.execute(sql.replace("?", "%s"), params)


def test_a_partial_run_draws_its_partial_result_an_error_run_its_error(
    store: str, browser: Any, tmp_path: Path
) -> None:
    """A partial result reached is drawn reached; the run's input shows verbatim;
    a run that ended ``error`` names its error; each run shows its graph version."""
    if store.startswith("redis://"):
        pytest.skip("the run row is edited in SQL, as another driver would have written it")
    _sql(
        store,
        "UPDATE resilience_run_log SET status = 'error', error = ?, graph_version = ? "
        "WHERE thread_id = ?",
        "GraphRecursionError: Recursion limit of 25 reached without hitting a stop condition",
        "7",
        "fine",
    )
    with console(store, "--graph", "cli_graph:builder") as url:
        page = browser.new_page()
        page.goto(f"{url}/run?" + str(httpx.QueryParams({"thread": EVIL})))
        node = page.locator('#graph g.node[data-node="partial_result"]')
        assert node.get_attribute("data-status") == "completed"
        assert "not reached" not in (node.text_content() or "")
        assert '"done": []' in page.locator("#input").inner_text()
        assert page.locator("#version").inner_text() == "none"
        assert page.locator("#error").count() == 0
        _shot(page, tmp_path, "partial", store)

        page.goto(f"{url}/run?thread=fine")
        assert "error" in page.locator("#run-status").inner_text()
        assert "GraphRecursionError: Recursion limit of 25" in page.locator("#error").inner_text()
        assert page.locator("#version").inner_text() == "7"
        assert '"fix": "ok"' in page.locator("#input").inner_text()

        page.goto(f"{url}/runs")
        row = page.locator('tr.run[data-status="error"]')
        assert row.locator("td.version").inner_text() == "7"


def test_a_paused_run_shows_its_question_and_its_waiting_node(
    store: str, browser: Any, tmp_path: Path
) -> None:
    """With the graph (its state's tasks) and without (the checkpoint's writes)."""
    with opened(store) as saver:
        graph = cli_graph.builder.compile(checkpointer=saver)
        asked = {"configurable": {"thread_id": "asked"}}
        graph.invoke({"done": [], "fix": "ok", "ask": True}, asked)
    for flags in (("--allow-actions", "--graph", "cli_graph:builder"), ()):
        with console(store, *flags) as url:
            page = browser.new_page()
            page.goto(f"{url}/run?thread=asked")
            assert "paused" in page.locator("#run-status").inner_text()
            question = page.locator("#question").inner_text()
            assert "approve?" in question and "waiting in c" in question, flags
            node = page.locator('#graph g.node[data-node="c"]')
            assert node.get_attribute("data-status") == "waiting", flags
            assert "waiting" in (node.text_content() or "")
            if flags:
                assert page.locator("#answer").count() == 1  # the box beside the question
                _shot(page, tmp_path, "paused", store)


def test_the_runs_list_marks_recovered_degraded_stale_and_blocked_runs(
    store: str, browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run resumed after its process died is recovered; a run with a step skipped
    degraded; a Worker run whose worker was SIGKILLed (its holder gone) stale; a
    thread paused in a node the console's graph (v2) no longer has blocked."""
    ledger = tmp_path / "ledger.txt"
    monkeypatch.setenv("LGR_CLI_LEDGER", str(ledger))
    with opened(store) as saver:
        graph = cli_graph.builder.compile(checkpointer=saver)
        crashed = {"configurable": {"thread_id": "crashed"}}
        with pytest.raises(SimulatedCrash):
            FaultPlan().crash("b").apply(graph).invoke({"done": [], "fix": "ok"}, crashed)
    with opened(store) as saver:
        graph = cli_graph.builder.compile(checkpointer=saver)
        graph.invoke(None, crashed)  # resumed by another process: a recovery
        graph.invoke(
            {"done": [], "ask": True, "fix": "ok"}, {"configurable": {"thread_id": "asked"}}
        )
        console_graph.degrading.compile(checkpointer=saver).invoke(
            {"done": []}, {"configurable": {"thread_id": "degraded"}}
        )
        run_id = Worker(cli_graph.builder, checkpointer=saver).submit(
            {"done": [], "fix": "ok", "slow": 60.0}, thread_id="killed"
        )
    proc = spawn(CLI, "worker", "--db", store, "--graph", "cli_graph:builder", "--lease-ttl", "600")
    deadline = time.monotonic() + 30
    while not ledger.exists() or f"a {proc.pid}" not in ledger.read_text():  # a started
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=15)
    with opened(store) as saver:
        found = saver.read_run(run_id)
        assert found is not None and found.status == "running"  # its lease runs 10 minutes
    with console(store, "--graph", "console_graph:renamed") as url:
        page = browser.new_page()
        page.goto(f"{url}/runs")

        def marks(thread: str) -> set[str]:
            row = page.locator("tr.run", has=page.locator(f'a:text-is("{thread}")'))
            return set((row.get_attribute("data-marks") or "").split())

        assert marks("crashed") == {"recovered"}
        assert marks("degraded") == {"degraded"}
        assert marks("killed") == {"stale"}
        assert marks("asked") == {"blocked"}
        assert marks("fine") == set()
        badge = page.locator("tr.run .mk-stale")
        assert badge.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(248, 215, 218)"
        page.goto(f"{url}/run?thread=asked")
        assert "'c'" in page.locator("#blocked").inner_text()  # names the node it lost
    with console(store, "--graph", "cli_graph:builder") as url:  # the graph it ran on
        page = browser.new_page()
        page.goto(f"{url}/run?thread=crashed")
        assert "crash" in page.locator("#timeline").inner_text()
        assert "redone" in (page.locator('#graph g.node[data-node="b"]').text_content() or "")
        _shot(page, tmp_path, "recovered", store)


def test_a_live_workers_run_is_not_stale() -> None:
    from langgraph_resilience.server._facts import is_stale

    run = type("R", (), {"status": "running", "lease_expires_at": 200.0, "holder": "h"})()
    assert not is_stale("running", run, 100.0, alive=lambda h: True)
    assert not is_stale("running", run, 100.0, alive=lambda h: None)  # another host: lease
    assert is_stale("running", run, 100.0, alive=lambda h: False)
    assert is_stale("running", run, 300.0, alive=lambda h: True)
    assert not is_stale("paused", run, 300.0, alive=lambda h: False)
