"""A SERVER span per HTTP request (tracing on), so a command sent over HTTP has one trace from the
request through the command record to whatever consumes it; never for the probes.

The span continues the caller's W3C context (a `traceparent` request header, as an instrumented
client sends it) and is named `{method} {route template}`; the command a request publishes is its
child (`create <topic>`). Probes and scrapes (`/healthz`, `/readyz`, `/metrics`) are not traced:
a kubelet asking every few seconds would fill the tracing backend with traces of nothing.
Attributes are identifiers only (method, route template, path, status), never a body or a query.
"""

from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from slotflow import tracing

#: The instrumentation scope of the api's request spans.
TRACE_SCOPE = "slotflow.api"
#: Asked by probes and scrapers, every few seconds: never traced.
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class TraceRequests:
    """ASGI middleware: each HTTP request but a probe in a SERVER span while tracing is on."""

    def __init__(self, app: ASGIApp, *, untraced: frozenset[str] = UNTRACED_PATHS) -> None:
        self.app = app
        self._untraced = untraced

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not tracing.enabled() or scope["path"] in self._untraced:
            await self.app(scope, receive, send)
            return
        method = scope["method"] if scope["method"] in _METHODS else "_OTHER"
        status: dict[str, int] = {}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        parent = tracing.extract([(key.decode("latin-1"), value) for key, value in scope["headers"]])
        with tracing.span(
            TRACE_SCOPE,
            method,
            kind=tracing.SpanKind.SERVER,
            parent=parent,
            attributes={"http.request.method": method, "url.path": scope["path"]},
        ) as span:
            try:
                await self.app(scope, receive, sending)
            finally:
                route = _route(scope)
                # The route is known once the router matched: the span takes its name from it.
                span.update_name(f"{method} {route}" if route else method)
                if route:
                    span.set_attribute("http.route", route)
                if "code" in status:
                    span.set_attribute("http.response.status_code", status["code"])
                    if status["code"] >= 500:
                        span.set_status(tracing.Status(tracing.StatusCode.ERROR))


def _route(scope: Mapping[str, Any]) -> str | None:
    """The template of the route the router matched (`/v1/schedules/{schedule_id}`), if any."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else None
