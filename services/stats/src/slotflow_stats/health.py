"""The stats worker's health listener: what Kubernetes probes, a Prometheus scraper and an
operator's curl ask.

faust's own web server stays off (it would serve the tables to anyone who reaches it); this is a
listener of three paths and nothing else, bound to 127.0.0.1 unless a setting exposes it, like
every slotflow listener (docs/security.md, "Listeners"):

- ``GET /livez``: 200 while the worker's event loop answers (a wedged loop times the probe out);
- ``GET /readyz``: 200 once the worker has copied its windows to PostgreSQL within the last
  ``stale_after`` seconds (an empty copy counts: nothing changed), 503 with the reason otherwise;
- ``GET /metrics``: the worker's Prometheus metrics (slotflow_stats.metrics), as every slotflow
  service serves them.

No faust import: the pure parts of this package load in the durable core's environment too.
"""

import asyncio
import contextlib
import json
import time
from collections.abc import Callable

#: The longest request line and header block a probe sends; anything longer is refused.
MAX_REQUEST_BYTES = 8192


class FlushClock:
    """When the worker last copied its windows to PostgreSQL without an error."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last_ok: float | None = None

    def copied(self) -> None:
        self._last_ok = self._clock()

    def problem(self, stale_after: float) -> str | None:
        """None when ready; else why not."""
        if self._last_ok is None:
            return "starting: no copy to PostgreSQL yet"
        age = self._clock() - self._last_ok
        if age > stale_after:
            return f"no successful copy to PostgreSQL for {age:.0f} s (more than {stale_after:g} s)"
        return None


#: The Prometheus text format's content type (prometheus_client.CONTENT_TYPE_LATEST).
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PATHS = "/livez, /readyz or /metrics"


def answer(path: str, flushes: FlushClock, stale_after: float) -> tuple[int, dict[str, str]]:
    """The status and JSON body for a GET of a health ``path``."""
    if path == "/livez":
        return 200, {"status": "ok"}
    if path == "/readyz":
        problem = flushes.problem(stale_after)
        return (
            (200, {"status": "ok"})
            if problem is None
            else (503, {"status": "unavailable", "detail": problem})
        )
    return 404, {"detail": f"no such path {path!r}: {PATHS}"}


def _json(status: int, body: dict[str, str]) -> tuple[int, bytes]:
    return status, json.dumps(body).encode()


REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}


async def serve_health(
    host: str,
    port: int,
    flushes: FlushClock,
    stale_after: float,
    metrics: Callable[[], bytes] | None = None,
) -> asyncio.Server:
    """Start the listener (``metrics`` renders `GET /metrics`; None: 404); the caller closes the
    server it returns."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        content_type = "application/json"
        if len(parts) != 3:
            payload = _json(400, {"detail": "malformed request line"})
        elif parts[0] not in {"GET", "HEAD"}:
            payload = _json(405, {"detail": f"{parts[0]} is not allowed: GET {PATHS}"})
        elif parts[1].split("?", 1)[0] == "/metrics" and metrics is not None:
            content_type, payload = METRICS_CONTENT_TYPE, (200, metrics())
        else:
            payload = _json(*answer(parts[1].split("?", 1)[0], flushes, stale_after))
        status, body = payload
        writer.write(
            f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        )
        if not parts or parts[0] != "HEAD":
            writer.write(body)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, host, port, limit=MAX_REQUEST_BYTES)
