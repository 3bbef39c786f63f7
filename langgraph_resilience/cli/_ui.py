"""``langgraph-resilience ui``: the console (`server.console_app`) on a store,
served by uvicorn; its buttons are the command line's own actions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langgraph_resilience.cli._actions import cancel_run, resume_thread, retry_thread
from langgraph_resilience.cli._store import CliError, load_graph, open_store, thread_exists
from langgraph_resilience.errors import RunStateError, needs_extra

try:  # the `console` extra (starlette, uvicorn); the rest of the CLI runs without it
    import uvicorn

    from langgraph_resilience.server._console import ConsoleActions, console_app
    from langgraph_resilience.server._guard import served_hosts

    _CONSOLE_MISSING: str | None = None
except ImportError as missing:
    _CONSOLE_MISSING = needs_extra("the console needs", "console", missing)

__all__ = ["serve_console"]


def _actions(saver: Any, graph: Any) -> Any:
    """The CLI's retry, resume and cancel, with its checks (a known thread, not held
    by a worker), for the console's buttons."""

    def known(thread: str) -> None:
        if not thread_exists(saver, thread):
            raise LookupError(f"no thread {thread!r} in the store")

    def retry(thread: str, update: Mapping[str, Any] | None) -> tuple[str, str]:
        known(thread)
        acted = retry_thread(graph, saver, thread, update=update)
        return acted.status, acted.detail

    def resume(thread: str, answer: Any = None) -> tuple[str, str]:
        known(thread)
        acted = resume_thread(graph, saver, thread, value=answer)
        return acted.status, acted.detail

    def cancel(run_id: str) -> tuple[str, str]:
        try:
            was = cancel_run(saver, run_id, "cancelled from the console")
        except RunStateError as exc:
            return "error", str(exc)
        return "cancelled", f"it was {was}"

    return ConsoleActions(retry=retry, resume=resume, cancel=cancel)


def serve_console(
    db: str | None,
    *,
    host: str,
    port: int,
    allow_actions: bool,
    graph_spec: str | None,
    allowed_hosts: Sequence[str] = (),
) -> int:
    """Serve the console on ``host:port`` until interrupted: to requests whose
    ``Host`` is that address (or one of ``allowed_hosts``), 403 to the rest."""
    if _CONSOLE_MISSING:
        raise CliError(_CONSOLE_MISSING)
    if allow_actions and not graph_spec:
        raise CliError(
            "--allow-actions needs --graph MODULE:ATTR: retry and resume run the graph "
            "(e.g. --graph myapp.pipeline:builder)"
        )
    with open_store(db, redis_ok=True) as store:
        graph = load_graph(graph_spec, store.saver) if graph_spec else None
        actions = _actions(store.saver, graph) if allow_actions else None
        hosts = served_hosts(host, port, allowed_hosts)
        app = console_app(store.saver, actions=actions, graph=graph, hosts=hosts)
        where = "" if host in ("127.0.0.1", "localhost", "::1") else " (NOT loopback)"
        mode = "actions allowed" if allow_actions else "read-only"
        print(f"console on http://{host}:{port}/runs{where}, {mode}: Ctrl-C stops it", flush=True)
        uvicorn.run(app, host=host, port=port, log_level="warning")
    return 0
