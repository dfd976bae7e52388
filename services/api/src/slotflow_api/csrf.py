"""Cross-site request forgery and Host checks, as a pure ASGI middleware (no body is read).

A page elsewhere can make an operator's browser send a form post (`application/x-www-form-urlencoded`,
`multipart/form-data` or `text/plain`) with no preflight; the bodyless commands (trigger, pause,
resume, cancel) accepted exactly that, so a foreign page triggered a run on a paused schedule
(issue 23). So every state-changing request (POST, PUT, PATCH, DELETE) must either carry a JSON
body (`Content-Type: application/json`) or the custom header `X-Slotflow-Client`: neither can be
sent cross-origin without a CORS preflight, which this API never grants. An `Origin` header, when
sent, must be this API's own origin (or one of `SLOTFLOW_API_ALLOWED_ORIGINS`). And when
`SLOTFLOW_API_ALLOWED_HOSTS` is set, any request whose Host is not listed is refused (against DNS
rebinding). Refusals are 403 with a `detail` saying what to send.

Authentication (slotflow_api.auth) does not replace this: tokens travel in the `Authorization`
header, which a browser never adds to another site's request (the dashboard keeps its token in
`sessionStorage`, not a cookie), so the two are independent layers, and this one still guards an
API run with `SLOTFLOW_API_AUTH=off`.
"""

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

CLIENT_HEADER = "x-slotflow-client"
_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _headers(scope: Scope) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        found[name.decode("latin-1").lower()] = value.decode("latin-1")
    return found


def _host_name(host: str) -> str:
    """The name part of a Host header (`[::1]:8080` -> `::1`, `api:8080` -> `api`)."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def refusal(scope: Scope, *, allowed_hosts: frozenset[str], allowed_origins: frozenset[str]) -> str | None:
    """Why the request must be refused, or None (pure: exercised by the unit tests)."""
    headers = _headers(scope)
    host = headers.get("host", "")
    if allowed_hosts and _host_name(host).lower() not in allowed_hosts:
        return f"Host {host!r} is not one this API serves (SLOTFLOW_API_ALLOWED_HOSTS)"
    if scope.get("method", "GET") not in _STATE_CHANGING:
        return None
    origin = headers.get("origin")
    if origin is not None:
        parts = urlsplit(origin)
        own = parts.netloc.lower() == host.lower() and parts.scheme in ("http", "https")
        if not own and origin.lower() not in allowed_origins:
            return f"cross-origin request from {origin!r} refused (SLOTFLOW_API_ALLOWED_ORIGINS)"
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json" and not headers.get(CLIENT_HEADER):
        return (
            "state-changing requests need a JSON body (Content-Type: application/json) or the "
            "X-Slotflow-Client header; a browser form from another site can send neither"
        )
    return None


class CsrfGuard:
    """Refuses what `refusal` names with 403; everything else passes through untouched."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: Iterable[str], allowed_origins: Iterable[str]) -> None:
        self._app = app
        self._hosts = frozenset(h.lower() for h in allowed_hosts)
        self._origins = frozenset(o.lower().rstrip("/") for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            why = refusal(scope, allowed_hosts=self._hosts, allowed_origins=self._origins)
            if why is not None:
                body = json.dumps({"detail": why}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 403,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self._app(scope, receive, send)
