"""`app`: the resilience views as LangGraph Agent Server custom routes.

``langgraph.json``'s ``"http": {"app": "langgraph_resilience.server:app"}`` mounts
these beside the server's own API (``"enable_custom_route_auth": true`` puts them
behind the server's auth):

- ``GET /resilience/runs`` (``?status=partial_complete&limit=50``): `alist_runs`;
- ``GET /resilience/threads/{thread_id}/report`` (``?run=2``): `arun_report`;
- ``GET /resilience/metrics`` (``?since=3600``, seconds back): `arecovery_metrics`;
- ``GET /resilience/threads/{thread_id}/storage``: bytes per channel,
  checkpoints, writes and ledger rows (the server's own ``/threads/{id}/storage``
  answers 501 for a custom checkpointer);
- ``/resilience/console/``: the web console's pages (`console_app`, read-only:
  retry through the route below);
- ``POST /resilience/threads/{thread_id}/retry`` (JSON ``{"update": {...},
  "step": "...", "assistant_id": "..."}``, all optional): `retry_failed`'s
  command, sent as a new run through the server's own run API (the same app,
  with the caller's headers), so it is queued, streamed and joined like any run;
  answers 202 with the run. A plain ``StateGraph`` parent (a supervisor, a
  swarm: no run log in its state) is retried as `retry_failed` retries it
  (`graph._retry_parent`): its failed agent call runs again from a copy of the
  checkpoint the call began at (the server's ``POST /threads/{id}/state``,
  ``as_node="__copy__"``), its run's row reopened. The retry's run takes the
  durability the failed run's server run was created with (the server's
  ``GET /threads/{id}/runs/{run_id}``, the run id its row keeps), else
  ``"sync"`` (`retry_durability`): never the server's default, ``"async"``,
  for want of asking.

The app reads its own saver (`checkpointer`, ``LGR_DB``), opened by its lifespan
on the server's event loop; every read is async. Errors are JSON
``{"error": ..., "detail": ...}``: 404 for an unknown thread, 409 for a thread with
nothing to retry, 400 for bad parameters.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, NamedTuple

import httpx
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, Send
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

import langgraph_resilience.graph._retry_parent as _parent
from langgraph_resilience._keys import RETRY_FAILED_KEY
from langgraph_resilience._langgraph import DURABILITIES
from langgraph_resilience.checkpoint import AsyncResilientSaver, AsyncRunLedger
from langgraph_resilience.errors import ConfigError, RunStateError, UnknownThread
from langgraph_resilience.graph._retry_failed import keeps_run_log, retry_plan
from langgraph_resilience.history import alist_runs, arecovery_metrics, arun_report
from langgraph_resilience.server._checkpointer import checkpointer, sync_saver
from langgraph_resilience.server._console import console_app
from langgraph_resilience.telemetry._emit import recovery_event

__all__ = ["app", "command_json", "retry_durability"]

Handler = Callable[[Request], Awaitable[JSONResponse]]
CONSOLE = "/resilience/console"
# The caller's headers the retry's run request carries (the server's auth reads them).
_FORWARDED = ("authorization", "x-api-key", "cookie")


def _error(status: int, error: str, detail: str) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code=status)


def _saver(request: Request) -> Any:
    """The app's saver (an `AsyncResilientSaver`, opened by the lifespan)."""
    saver: AsyncResilientSaver = request.app.state.resilience_saver
    return saver


def _guarded(handler: Handler) -> Handler:
    """``handler``, with the library's errors as JSON answers."""

    async def guarded(request: Request) -> JSONResponse:
        try:
            return await handler(request)
        except UnknownThread as exc:
            return _error(404, "unknown_thread", str(exc))
        except RunStateError as exc:
            return _error(409, "nothing_to_retry", str(exc))
        except ConfigError as exc:
            return _error(400, "bad_request", str(exc))

    guarded.__name__ = handler.__name__
    return guarded


def _int(request: Request, name: str, default: int | None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"?{name}= must be a whole number, got {raw!r}") from None


async def runs(request: Request) -> JSONResponse:
    statuses = request.query_params.getlist("status") or None
    limit = _int(request, "limit", 100) or 100
    found = await alist_runs(_saver(request), status=statuses, limit=limit)
    return JSONResponse([r.to_dict() for r in found])


async def report(request: Request) -> JSONResponse:
    thread = request.path_params["thread_id"]
    raw = request.query_params.get("run")
    run: int | str | None = int(raw) if raw and raw.isdigit() else raw or None
    found = await arun_report(_saver(request), thread, run=run)
    return JSONResponse(found.to_dict())


async def metrics(request: Request) -> JSONResponse:
    since = _int(request, "since", None)
    found = await arecovery_metrics(_saver(request), since=since)
    return JSONResponse(found.to_dict())


async def storage(request: Request) -> JSONResponse:
    thread = request.path_params["thread_id"]
    saver = _saver(request)
    await saver.aget_tuple({"configurable": {"thread_id": thread}})  # restores an archived one
    found = await saver.history.astorage(thread)
    if found.empty:
        raise UnknownThread(f"the store has no thread {thread!r}: no checkpoint, write or run")
    return JSONResponse(found.to_dict())


def command_json(command: Command[Any]) -> dict[str, Any]:
    """A `Command` as the server's run API takes it (``command`` of a run request)."""
    gotos = command.goto if isinstance(command.goto, (list, tuple)) else [command.goto]
    goto = [{"node": g.node, "input": g.arg} if isinstance(g, Send) else g for g in gotos if g]
    return {"goto": goto, "update": command.update}


def _api(request: Request) -> httpx.AsyncClient:
    """A client of the server's own API, in process, with the caller's headers."""
    headers = {k: v for k, v in request.headers.items() if k.lower() in _FORWARDED}
    transport = httpx.ASGITransport(app=request.app)
    return httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers)


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"the retry body must be JSON, got {raw[:80]!r}: {exc}") from None
    if not isinstance(body, dict) or set(body) - {"update", "step", "assistant_id"}:
        raise ConfigError(
            'the retry body takes {"update": {...}, "step": "path", "assistant_id": "..."}, '
            f"all optional; got {str(body)[:120]}"
        )
    if body.get("update") is not None and not isinstance(body["update"], Mapping):
        raise ConfigError(f"update must be an object of state keys, got {body['update']!r}")
    return body


async def _answer(api: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
    reply = await api.request(method, path, **kw)
    if reply.status_code == 404:
        raise UnknownThread(f"the server has no thread at {path}: {reply.text[:200]}")
    reply.raise_for_status()
    return reply.json()


class _Checkpoint(NamedTuple):
    """One of the server's thread states, as `_retry_parent.fork_point` reads it."""

    config: RunnableConfig
    next: tuple[str, ...]


#: Thread states read per request of the server's history, newest first.
_PAGE = 50


async def _run_history(api: httpx.AsyncClient, thread: str, since: str | None) -> list[_Checkpoint]:
    """The thread's checkpoints, newest first, back to the run's input
    checkpoint (``since``; all of them without it), page by page."""
    found: list[_Checkpoint] = []
    while True:
        before = {"before": found[-1].config["configurable"]["checkpoint_id"]} if found else {}
        page = await _answer(
            api, "POST", f"/threads/{thread}/history", json={"limit": _PAGE, **before}
        )
        found += [
            _Checkpoint(
                {"configurable": dict(s.get("checkpoint") or {})}, tuple(s.get("next") or ())
            )
            for s in page
        ]
        oldest = found[-1].config["configurable"].get("checkpoint_id") if found else None
        if len(page) < _PAGE or (since is not None and str(oldest or "") < since):
            return found


async def _parent_run(
    api: httpx.AsyncClient, saver: Any, thread: str, body: Mapping[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    """A plain parent's retry (`graph._retry_parent`, as `retry_failed` does it):
    the failed run's row, a copy of the checkpoint its failed agent call began
    at, the row reopened from the copy; the steps it re-runs, and the run."""
    _parent.refuse_options(thread, body.get("update"), False)
    history = saver.history
    failed = _parent.failed_run(thread, await history.arun_rows(thread, limit=1), body.get("step"))
    points = await _run_history(api, thread, failed.since)
    at = _parent.fork_point(thread, points, failed.node, failed.since)
    copied = await _answer(
        api,
        "POST",
        f"/threads/{thread}/state",
        json={"values": None, "as_node": _parent.COPY, "checkpoint": at.config["configurable"]},
    )
    fork = str(copied["checkpoint"]["checkpoint_id"])
    await history.areopen_run(thread, failed.run, fork, [failed.path])
    run = {
        "input": None,
        "checkpoint": {"checkpoint_id": fork},
        "config": {"configurable": {RETRY_FAILED_KEY: True}},
    }
    return [failed.path], run


def retry_durability(server_run: Mapping[str, Any] | None) -> str:
    """The durability a retry's run takes: the one the failed run's server run
    (as ``GET /threads/{id}/runs/{run_id}`` answers it; None: not knowable) was
    created with, else ``"sync"``, which the crash guarantees need."""
    kwargs = (server_run or {}).get("kwargs")
    said = kwargs.get("durability") if isinstance(kwargs, Mapping) else None
    return said if said in DURABILITIES else "sync"


async def _server_run(api: httpx.AsyncClient, saver: Any, thread: str) -> Any:
    """The server's run of the thread's latest run row (its run id), or None:
    no row, no run id on it, or a server that no longer knows the run."""
    rows = await saver.history.arun_rows(thread, limit=1)
    run_id = rows[0].run_id if rows else None
    if not run_id:
        return None
    reply = await api.get(f"/threads/{thread}/runs/{run_id}")
    return reply.json() if reply.status_code == 200 else None


async def retry(request: Request) -> JSONResponse:
    thread = request.path_params["thread_id"]
    body = await _body(request)
    async with _api(request) as api:
        try:
            state = await _answer(api, "GET", f"/threads/{thread}/state")
            values = state.get("values") or {}
            parent = not keeps_run_log(values) and isinstance(_saver(request), AsyncRunLedger)
            if parent:  # named first: the retry reopens the run's row
                assistant = body.get("assistant_id") or await _assistant_of(api, thread)
                steps, run = await _parent_run(api, _saver(request), thread, body)
            else:
                plan = retry_plan(
                    values,
                    thread,
                    update=body.get("update"),
                    step=body.get("step"),
                    head_step=(state.get("metadata") or {}).get("step"),
                )
                steps = [str(f.get("path")) for f in plan.steps]
                run = {
                    "command": command_json(plan.command),
                    "config": {"configurable": plan.configurable},
                }
                assistant = body.get("assistant_id") or await _assistant_of(api, thread)
            durability = retry_durability(await _server_run(api, _saver(request), thread))
            recovery_event("retry_failed", thread, steps, None)
            payload = {"assistant_id": assistant, **run, "durability": durability}
            reply = await api.post(f"/threads/{thread}/runs", json=payload)
        except httpx.HTTPStatusError as exc:
            return _error(exc.response.status_code, "server_refused", exc.response.text[:500])
    if reply.status_code >= 400:
        return _error(reply.status_code, "server_refused", reply.text[:500])
    return JSONResponse(reply.json(), status_code=202)


async def _assistant_of(api: httpx.AsyncClient, thread: str) -> str:
    """The assistant (or graph) the thread last ran."""
    found = await _answer(api, "GET", f"/threads/{thread}")
    metadata = found.get("metadata") or {}
    assistant = metadata.get("assistant_id") or metadata.get("graph_id")
    if not assistant:
        raise ConfigError(
            f"thread {thread!r} names no assistant it ran: pass "
            '{"assistant_id": "..."} in the retry body'
        )
    return str(assistant)


def _console_saver() -> Any:
    return app.state.console_saver


@asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    async with AsyncExitStack() as stack:
        app.state.resilience_saver = await stack.enter_async_context(checkpointer())
        # the console's sync saver, opened and closed off the event loop (it blocks)
        console = sync_saver()
        app.state.console_saver = await asyncio.to_thread(console.__enter__)
        stack.push_async_callback(asyncio.to_thread, console.__exit__, None, None, None)
        yield


app = Starlette(
    routes=[
        Route("/resilience/runs", _guarded(runs), methods=["GET"]),
        Route("/resilience/metrics", _guarded(metrics), methods=["GET"]),
        Route("/resilience/threads/{thread_id}/report", _guarded(report), methods=["GET"]),
        Route("/resilience/threads/{thread_id}/storage", _guarded(storage), methods=["GET"]),
        Route("/resilience/threads/{thread_id}/retry", _guarded(retry), methods=["POST"]),
        Mount(CONSOLE, console_app(_console_saver, base=CONSOLE)),
    ],
    lifespan=_lifespan,
)
