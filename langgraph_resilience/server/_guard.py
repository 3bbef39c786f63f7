"""The console's request guard: the ``Host`` it serves, the ``Origin`` of each POST.

A page on another site can rebind its DNS name to 127.0.0.1 and then read the
console as its own origin (a session cookie, a CSRF token) and POST with them:
loopback binding and CSRF tokens do not stop that, a ``Host`` allowlist does
(the browser sends the attacker's name). `refusal` is the decision (pure);
`HostGuard` is the ASGI wrapper that answers 403 with it.

- ``Host``: one of `served_hosts` (the address served: ``127.0.0.1:PORT``,
  ``localhost:PORT``, ``[::1]:PORT``, the bound host), or one the user allowed
  (``langgraph-resilience ui --allowed-host NAME``, for a console behind a proxy;
  a name without ``:PORT`` allows it on any port).
- ``Origin`` on every POST (when the browser sends one): ``http(s)://`` and an
  allowed host; ``null`` is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, MutableMapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HostGuard", "refusal", "served_hosts"]

FLAG = "--allowed-host"
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
_WILDCARD = ("0.0.0.0", "::", "")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def served_hosts(host: str, port: int, allowed: Collection[str] = ()) -> frozenset[str]:
    """The ``Host`` values a console bound to ``host:port`` answers: the loopback
    names on that port, the bound host itself (unless a wildcard), and ``allowed``."""
    names = {f"{name}:{port}" for name in _LOOPBACK}
    if host not in _WILDCARD:
        names.add(f"{_bracketed(host)}:{port}")
    names.update(a.strip().lower() for a in allowed if a.strip())
    return frozenset(n.lower() for n in names)


def _allowed(host: str, hosts: Collection[str]) -> bool:
    host = host.strip().lower()
    if host in hosts:
        return True
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return name in hosts  # an allowed name without a port: on any port


def refusal(
    method: str, host: str | None, origin: str | None, hosts: Collection[str]
) -> str | None:
    """Why a request is refused (a 403's body), or None to serve it."""
    if not host or not _allowed(host, hosts):
        return (
            f"refused: this console serves {', '.join(sorted(hosts))}, not Host {host!r} "
            "(a page on another site rebinding its name to this address is refused so). "
            f"Behind a proxy, allow the name it forwards: {FLAG} NAME[:PORT] (repeatable)."
        )
    if method.upper() == "POST" and origin is not None:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not _allowed(parts.netloc, hosts):
            return (
                f"refused: a POST from Origin {origin!r}, which is not this console "
                f"({', '.join(sorted(hosts))}); allow a proxy's name with {FLAG} NAME[:PORT]."
            )
    return None


class HostGuard:
    """``app``, answering 403 (plain text: `refusal`) to a request whose ``Host``
    is not in ``hosts`` or a POST whose ``Origin`` is not."""

    def __init__(self, app: Any, hosts: Collection[str]) -> None:
        self.app = app
        self.hosts = frozenset(h.lower() for h in hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        said = refusal(scope["method"], headers.get("host"), headers.get("origin"), self.hosts)
        if said is None:
            await self.app(scope, receive, send)
            return
        body = said.encode()
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
