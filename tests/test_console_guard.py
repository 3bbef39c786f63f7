"""The console's request guard (`server._guard`, `server._params`): the DNS-rebinding
attack replayed against `langgraph-resilience ui` as a user starts it, and a 400
with the reason for every bad query parameter.

The attack: a page on evil.example rebinds its name to 127.0.0.1, so the browser
sends ``Host: evil.example:PORT`` (and, on a POST, that ``Origin``); before the
guard it read a session cookie and a CSRF token by GET and ran ``retry`` by POST.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient
from test_console import EVIL, console, opened, store  # noqa: F401  (store: the fixture)

from langgraph_resilience.checkpoint.sqlite import ResilientSqliteSaver
from langgraph_resilience.server import console_app
from langgraph_resilience.server._guard import refusal, served_hosts

ACTIONS = ("--allow-actions", "--graph", "cli_graph:builder")
EVIL_HOST = "evil.example"


def _status_of(db: str) -> str:
    with opened(db) as saver:
        [row] = saver.history.run_rows(EVIL)
        return str(row.status)


def _token(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the run page shows no action form"
    return found.group(1)


@pytest.mark.parametrize("flags", [(), ACTIONS], ids=["read-only", "allow-actions"])
def test_a_rebinding_page_gets_403_on_get_and_post(store: str, flags: tuple[str, ...]) -> None:  # noqa: F811
    with console(store, *flags) as url:
        port = url.rsplit(":", 1)[1]
        foreign = {"Host": f"{EVIL_HOST}:{port}", "Origin": f"http://{EVIL_HOST}:{port}"}
        run = f"/run?{httpx.QueryParams({'thread': EVIL, 'run': '1'})}"
        with httpx.Client(base_url=url) as client:
            page = client.get(run, headers={"Host": foreign["Host"]})
            assert page.status_code == 403
            assert "--allowed-host" in page.text and EVIL_HOST in page.text
            assert "set-cookie" not in page.headers and "csrf" not in page.text
            # Even with what the real page hands out (a session and a token) the
            # foreign POST is refused.
            real = client.get(run)
            assert real.status_code == 200
            token = _token(real.text) if flags else "x"
            form = {"thread": EVIL, "run": "1", "csrf": token}
            forged = client.post("/actions/retry", data=form, headers=foreign)
            assert forged.status_code == 403 and "--allowed-host" in forged.text
            # the right Host, but a POST from another origin
            other = client.post("/actions/retry", data=form, headers={"Origin": foreign["Origin"]})
            assert other.status_code == 403 and "Origin" in other.text
            assert _status_of(store) == "partial_complete"  # nothing was done
            if flags:  # the console's own page still acts
                own = client.post("/actions/retry", data=form, headers={"Origin": url})
                assert own.status_code == 303


def test_allowed_host_lets_a_proxy_name_in(store: str) -> None:  # noqa: F811
    with (
        console(store, "--allowed-host", "console.internal") as url,
        httpx.Client(base_url=url) as client,
    ):
        assert client.get("/runs", headers={"Host": "console.internal"}).status_code == 200
        assert client.get("/runs", headers={"Host": "localhost:1"}).status_code == 403
        assert client.get("/runs", headers={"Host": "other.internal"}).status_code == 403


def test_the_guard_decides_on_host_and_origin() -> None:
    hosts = served_hosts("127.0.0.1", 8765, ["proxy.example", "edge:443"])
    for ok in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "proxy.example:9", "edge:443"):
        assert refusal("GET", ok, None, hosts) is None, ok
    for bad in ("evil.example:8765", "127.0.0.1:8766", "edge:80", "", None):
        assert refusal("GET", bad, None, hosts), bad
    assert refusal("POST", "127.0.0.1:8765", "http://127.0.0.1:8765", hosts) is None
    assert refusal("POST", "127.0.0.1:8765", None, hosts) is None  # no Origin: a script
    for origin in ("null", "http://evil.example:8765", "file://", "http://127.0.0.1:9"):
        assert refusal("POST", "127.0.0.1:8765", origin, hosts), origin
    assert "[::1]:8765" in served_hosts("::1", 8765)
    assert "10.0.0.5:80" in served_hosts("10.0.0.5", 80)
    assert not any(h.startswith("0.0.0.0") for h in served_hosts("0.0.0.0", 80))


BAD_PARAMETERS = {
    "/runs?status=queued": "queued",
    "/runs?status=nope": "nope",
    "/runs?thread=a%00b": "NUL",
    "/run?thread=a%00b": "NUL",
    "/run?thread=fine&run=a%00b": "run",
    "/runs?before=garbage": "before",
    "/metrics?per=week": "per",
    f"/run?thread={'x' * 2000}": "1024",
}


@pytest.mark.parametrize("path", list(BAD_PARAMETERS))
def test_a_bad_parameter_is_a_400_that_says_why(path: str, tmp_path: Path) -> None:
    with ResilientSqliteSaver.from_conn_string(str(tmp_path / "p.db")) as saver:
        saver.setup()
        app = console_app(saver, hosts=served_hosts("127.0.0.1", 80) | {"testserver"})
        with TestClient(app, raise_server_exceptions=False) as client:
            answer = client.get(path)
    assert answer.status_code == 400, answer.text[:300]
    assert BAD_PARAMETERS[path] in answer.text
