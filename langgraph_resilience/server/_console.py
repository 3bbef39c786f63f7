"""`console_app`: the resilience console, a few server-rendered pages over a saver.

``/runs`` (the run rows, newest first, paged), ``/run?thread=T&run=N`` (its report
drawn), ``/metrics`` (the four recovery metrics per hour or day) and, only when
built with `ConsoleActions`, ``POST /actions/{retry,resume,cancel,settle}``: each
checks the session's CSRF token (a cookie and a form field) and redirects back to
the run with what came of it. Without actions every POST is refused (403).
Built with ``hosts`` (as `langgraph-resilience ui` builds it), a request whose
``Host`` is not one of them, or a POST from another ``Origin``, is refused (403,
`_guard`); a bad query parameter is a 400 that says why (`_params`).
`langgraph-resilience ui` serves it; mount it under any Starlette app
(``Mount("/console", console_app(saver))``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import langgraph_resilience.server._params as _params
from langgraph_resilience.checkpoint.runlog._run_log_reads import cursor_of
from langgraph_resilience.effects import settle_effect
from langgraph_resilience.errors import ConfigError, RunStateError, UnknownThread
from langgraph_resilience.history import RecoveryMetrics, recovery_metrics, run_report
from langgraph_resilience.history._metrics import COUNTS
from langgraph_resilience.server._facts import run_facts, run_marks
from langgraph_resilience.server._guard import HostGuard
from langgraph_resilience.server._pages import (
    esc,
    flash_of,
    metrics_page,
    page,
    run_page,
    runs_page,
)

__all__ = ["ConsoleActions", "console_app"]

STATIC = Path(__file__).with_name("static")
_COOKIE = "lgr_console"
_PAGE = 50
_CSP = "default-src 'self'; style-src 'self' 'unsafe-inline'"
_WIDTH = {"hour": (3600, 24), "day": (86400, 14)}


@dataclass(frozen=True, kw_only=True)
class ConsoleActions:
    """What the console's buttons do; each returns (ended status, detail).

    ``retry(thread, update)``, ``resume(thread)`` (``resume(thread, answer)``
    when the page answers a paused run's question: the value its interrupt
    returns), ``cancel(run_id)``; settling an effect is `settle_effect` on the
    console's saver.
    """

    retry: Callable[[str, Mapping[str, Any] | None], tuple[str, str]]
    resume: Callable[..., tuple[str, str]]
    cancel: Callable[[str], tuple[str, str]]


def _token(secret: bytes, session: str) -> str:
    return hmac.new(secret, session.encode(), hashlib.sha256).hexdigest()


def _before(raw: str | None) -> tuple[float, str, int] | None:
    if not raw:
        return None
    try:
        at, thread, run = json.loads(raw)
        return float(at), str(thread), int(run)
    except (ValueError, TypeError):
        raise ConfigError(
            f"?before= must be a cursor the runs page made, got {raw[:60]!r}"
        ) from None


def _count(found: RecoveryMetrics | None, name: str) -> int:
    return 0 if found is None else int(getattr(found, name))


def _active(saver: Any, first: float, width: int, page: int = 10_000) -> set[int]:
    """The buckets (from ``first``, ``width`` seconds each) in which a run row
    started or was updated: the run rows newest first, until one started before."""
    active: set[int] = set()
    before = None
    while True:
        rows = saver.history.run_rows(limit=page, before=before)
        for r in rows:
            for at in (r.started_at, r.updated_at):
                if at >= first:
                    active.add(int((at - first) // width))
        if len(rows) < page or rows[-1].started_at < first:
            return active
        before = cursor_of(rows[-1])


def bucketed(saver: Any, per: str, now: float | None = None) -> list[tuple[str, RecoveryMetrics]]:
    """The four metrics per hour (last 24) or day (last 14), oldest first: the
    counts of `recovery_metrics` since each bucket's start, less the next's.

    `recovery_metrics` is asked once per bucket with activity (a run row started
    or updated in it, read from the run rows): since the start of a quiet
    bucket the figures are those since the next active one's."""
    if per not in _WIDTH:
        raise ConfigError(f"?per= takes hour or day, got {per!r}")
    width, count = _WIDTH[per]
    now = time.time() if now is None else now
    start = now - now % width + width  # the end of the current bucket
    first = start - count * width
    active = _active(saver, first, width)
    since: list[RecoveryMetrics | None] = [None] * (count + 1)
    for i in range(count - 1, -1, -1):  # newest first: a quiet bucket takes the next's
        if i in active:
            since[i] = recovery_metrics(saver, since=max(0.0, now - (first + i * width)))
        else:
            since[i] = since[i + 1]
    out = []
    for i in range(count):
        older, newer = since[i], since[i + 1]
        counts = {n: _count(older, n) - _count(newer, n) for n in COUNTS}
        label = time.strftime(
            "%m-%d %H:00" if per == "hour" else "%Y-%m-%d",
            time.gmtime(start - (count - i) * width),
        )
        out.append((label, RecoveryMetrics.of_counts(counts)))
    return out


def console_app(
    saver: Any,
    *,
    actions: ConsoleActions | None = None,
    graph: Any = None,
    base: str = "",
    hosts: Collection[str] | None = None,
) -> Starlette:
    """The console over ``saver`` (a sync resilient saver or a `ResilientRedisSaver`,
    or a function of no arguments returning it when asked); ``actions`` allows the
    buttons (settle is `settle_effect` on the saver, the others ``actions``'); ``graph``
    (compiled) draws every node; ``base`` is the path it is mounted at; ``hosts``
    the ``Host`` values it answers (`_guard.served_hosts`; None: any, for an app
    that guards its own, as the Agent Server's does)."""
    secret = secrets.token_bytes(32)
    history = getattr(saver, "history", None)
    if history is not None and not hasattr(history, "run_rows"):
        raise ConfigError(
            f"the console reads the run ledger, which a {type(saver).__name__} does not "
            "keep: give it a ResilientSqliteSaver, ResilientPostgresSaver or ResilientRedisSaver"
        )
    store: Callable[[], Any] = (lambda: saver) if history is not None else saver

    def session_of(request: Request) -> str:
        """The session's id: its cookie, or a new one `html` sets."""
        if not hasattr(request.state, "session"):
            request.state.session = request.cookies.get(_COOKIE) or secrets.token_urlsafe(24)
        return str(request.state.session)

    def html(
        request: Request, title: str, body: str, tab: str, flash: str = "", code: int = 200
    ) -> Response:
        text = page(title, body, base=base, tab=tab, actions=actions is not None, flash=flash)
        reply = HTMLResponse(text, status_code=code, headers={"Content-Security-Policy": _CSP})
        session = session_of(request)
        if request.cookies.get(_COOKIE) != session:
            reply.set_cookie(_COOKIE, session, httponly=True, samesite="strict")
        return reply

    def runs(request: Request) -> Response:
        q = request.query_params
        statuses = _params.statuses(q)
        thread = _params.thread(q)
        rows = store().history.run_rows(
            thread or None, statuses=statuses, limit=_PAGE + 1, before=_before(q.get("before"))
        )
        more = json.dumps(list(cursor_of(rows[_PAGE - 1]))) if len(rows) > _PAGE else None
        body = runs_page(
            rows[:_PAGE],
            base=base,
            statuses=statuses,
            thread=thread,
            problems_first=q.get("problems") == "1",
            next_cursor=more,
            marks=run_marks(store(), rows[:_PAGE], graph),
        )
        return html(request, "Runs", body, "Runs")

    def run(request: Request) -> Response:
        q = request.query_params
        thread = _params.thread(q)
        number = _params.run_number(q)
        try:
            report = run_report(store(), thread, run=number)
        except UnknownThread as exc:
            return html(request, "No such run", f"<p>{esc(exc)}</p>", "Runs", code=404)
        token = _token(secret, session_of(request)) if actions is not None else None
        flash = flash_of(q.get("said"), q.get("ok") == "1")
        facts = run_facts(store(), report, graph)
        body = run_page(report, base=base, graph=graph, token=token, facts=facts)
        return html(request, f"Run {report.run} of {report.thread_id}", body, "Runs", flash)

    def metrics(request: Request) -> Response:
        per = _params.per(request.query_params)
        body = metrics_page(bucketed(store(), per), base=base, per=per)
        return html(request, "Recovery metrics", body, "Metrics")

    async def act(request: Request) -> Response:
        if actions is None:
            return Response("the console was started read-only (no --allow-actions)", 403)
        # an urlencoded form, parsed here (no python-multipart needed)
        form = {k: v[-1] for k, v in parse_qs((await request.body()).decode()).items()}
        session = request.cookies.get(_COOKIE)
        given = str(form.get("csrf") or "")
        if not session or not hmac.compare_digest(given, _token(secret, session)):
            return Response("bad or missing CSRF token: reload the page and try again", 403)
        thread, run_no = str(form.get("thread") or ""), str(form.get("run") or "")
        which = request.path_params["action"]
        try:
            ok, said = await run_in_threadpool(_do, which, thread, form)
        except (ConfigError, RunStateError, LookupError, ValueError) as exc:
            ok, said = False, f"{which} refused: {exc}"
        back = f"{base}/run?" + urlencode(
            {"thread": thread, "run": run_no, "said": said, "ok": "1" if ok else "0"}
        )
        return RedirectResponse(back, status_code=303)

    def _do(which: str, thread: str, form: Any) -> tuple[bool, str]:
        assert actions is not None
        if which == "retry":
            raw = str(form.get("update") or "").strip()
            update = json.loads(raw) if raw else None
            if update is not None and not isinstance(update, dict):
                raise ConfigError(f"update must be a JSON object of state keys, got {raw[:80]}")
            ended, detail = actions.retry(thread, update)
        elif which == "resume":
            raw = str(form.get("answer") or "").strip()
            if raw:
                ended, detail = actions.resume(thread, json.loads(raw))
            else:
                ended, detail = actions.resume(thread)
        elif which == "cancel":
            ended, detail = actions.cancel(str(form.get("run_id") or ""))
        elif which == "settle":
            happened = form.get("happened") == "1"
            record = settle_effect(store(), thread, str(form.get("key") or ""), happened=happened)
            return True, f"effect {record.idempotency_key} settled: {record.status}"
        else:
            raise ConfigError(f"no action {which!r}: retry, resume, cancel or settle")
        return ended == "success", f"{which}: the thread is now {ended}" + (
            f" ({detail})" if detail else ""
        )

    def home(request: Request) -> Response:
        return RedirectResponse(f"{base}/runs")

    return Starlette(
        routes=[
            Route("/", home),
            Route("/runs", runs, methods=["GET"]),
            Route("/run", run, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/actions/{action}", act, methods=["POST"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        middleware=[] if hosts is None else [Middleware(HostGuard, hosts=hosts)],
        exception_handlers={ConfigError: _params.bad_parameter},
    )
