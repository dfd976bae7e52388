"""Bounds on what one request may make the api hold: the body, before it is read.

Without a bound a client could send any body: FastAPI reads it whole into memory before parsing
it (a 300 MB body took the process from 92 MB to a 1.26 GB peak, and it kept 973 MB afterwards).
A declared `Content-Length` above the limit is answered 413 before a byte of the body is read; a
body without one (chunked) is counted as it arrives and refused at the first chunk past the
limit. Either way at most the limit plus one chunk is ever held. The refused rest of the body is
read and dropped for a bounded while (see `DRAIN_BYTES`), so the client gets to read the 413.
"""

import asyncio
import json
import time
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from slotflow.errors import PermanentError


class BodyTooLarge(HTTPException, PermanentError):
    """The request body is larger than the api accepts (413); FastAPI passes HTTPExceptions on.

    Also a PermanentError: every slotflow error derives from the library's base (HTTPException
    comes first, so FastAPI's handling and its constructor are the ones used).
    """

    def __init__(self, limit: int, size: int | None = None) -> None:
        seen = f"{size} bytes" if size is not None else "more than that"
        super().__init__(
            status_code=413,
            detail=f"request body too large: the limit is {limit} bytes (SLOTFLOW_API_MAX_BODY_BYTES), "
            f"this one has {seen}; send large data by reference",
        )


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed length itself
    return None


#: After refusing a body the api keeps reading (and dropping) it for a while: a server that closes
#: a socket with unread data makes the kernel send a reset that can destroy the 413 before the
#: client reads it. Bounded in bytes and time, so a client cannot keep the connection busy.
DRAIN_BYTES = 64 * 1024 * 1024
DRAIN_SECONDS = 5.0


class BodyLimit:
    """ASGI middleware: no request body larger than ``max_bytes`` reaches the application."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await _refuse(receive, send, BodyTooLarge(limit, declared))
            return
        received = 0
        refused: BodyTooLarge | None = None

        async def limited() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = BodyTooLarge(limit)
                    raise refused
            return message

        async def watched(message: Message) -> None:
            # Once the body is refused, the application's own answer to that (FastAPI turns the
            # error into a response, or a 400 for a body it could not read) is replaced by ours.
            if refused is None:
                await send(message)

        try:
            await self.app(scope, limited, watched)
        except BodyTooLarge:
            if refused is None:
                raise
        if refused is not None:
            await _refuse(receive, send, refused)


async def _refuse(receive: Receive, send: Send, err: BodyTooLarge) -> None:
    body = json.dumps({"detail": err.detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            # The rest of the body is dropped, so the connection cannot carry another request.
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    # The answer goes out now; the response stays open while the rest of the body is drained.
    await send({"type": "http.response.body", "body": body, "more_body": True})
    drained = 0
    deadline = time.monotonic() + DRAIN_SECONDS
    while drained < DRAIN_BYTES:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            message = await asyncio.wait_for(receive(), timeout=remaining)
        except TimeoutError:
            break
        if message["type"] != "http.request":
            break
        drained += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    await send({"type": "http.response.body", "body": b""})


class RefuseNul:
    """ASGI middleware: a NUL in the path or a query parameter is a 422 in a person's words.

    No stored value can hold one (PostgreSQL's text cannot), so such a filter could only ever
    fail in the database with its own message; refused here, it names the parameter instead.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            where = _nul_in_request(scope)
            if where is not None:
                await _answer(
                    send,
                    422,
                    f"{where}: contains a NUL character (U+0000 or %00), which no stored value "
                    "can contain; remove it",
                )
                return
        await self.app(scope, receive, send)


def _nul_in_request(scope: Scope) -> str | None:
    if "\x00" in scope.get("path", ""):
        return "the path"
    query: bytes = scope.get("query_string", b"")
    if b"%00" not in query.lower() and b"\x00" not in query:
        return None
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if "\x00" in name:
            return "a query parameter name"
        if "\x00" in value:
            return f"query parameter {name!r}"
    return "the query string"


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
