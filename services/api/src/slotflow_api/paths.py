"""Workflow ids in URL paths: every id a workflow may have is reachable, `/` included.

Workflow ids may hold `/` (as in Temporal, any id a user picks; and the SDK's default child id is
`{parent id}/child/{sequence}`). An id is one path segment when a client escapes it
(`quote(id, safe="")`, as the Python client and the CLI do): `/v1/workflows/a%2Fb/history`. The
ASGI server decodes `%2F` before routing, so the router alone would see `a/b/history` and could
not tell the id `a/b` with its history from the id `a/b/history`. `EncodedIdPaths` restores the
segment from the raw path: the router then matches the path with that id's slashes still escaped
(`/v1/workflows/a%2Fb/history`), and `workflow_id_param` unescapes it. An id sent unescaped
(`/v1/workflows/a/b/history`) is matched by the routes' `{workflow_id:path}`, the suffix routes
first: it works too, except for an id that itself ends in `/history`, `/query`, `/signal`, `/cancel` or
`/terminate`, which must be escaped (docs/api.md).
"""

import re
from typing import Annotated
from urllib.parse import unquote

from fastapi import Path
from starlette.types import ASGIApp, Receive, Scope, Send

from slotflow.contracts.envelope import IDENTIFIER_PATTERN
from slotflow_api.errors import BadRequest

#: Route prefixes whose next path segment is an id that may hold `/`.
ID_PREFIXES = (b"/v1/workflows/",)
_ESCAPED = re.compile(r"%2[Ff]|%25")
_ID = re.compile(IDENTIFIER_PATTERN)


class EncodedIdPaths:
    """ASGI middleware: an escaped id's slashes stay escaped in the path the router matches."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = with_escaped_ids(scope)
        await self.app(scope, receive, send)


def with_escaped_ids(scope: Scope) -> Scope:
    """``scope`` with its `path` rebuilt from `raw_path` when an id segment holds `%2F`."""
    raw: bytes | None = scope.get("raw_path")
    if not raw:
        return scope
    root: str = scope.get("root_path", "")
    raw = raw.split(b"?", 1)[0]
    if root and raw.startswith(root.encode()):
        raw = raw[len(root) :]
    for prefix in ID_PREFIXES:
        rest = raw[len(prefix) :]
        if not raw.startswith(prefix) or b"%2f" not in rest.lower():
            continue
        segment, slash, suffix = rest.partition(b"/")
        ident = unquote(segment.decode("latin-1"), errors="replace")
        # Escaped again, only what routing would split on (and the escape itself); the rest of
        # the path decoded as the server decodes it.
        kept = ident.replace("%", "%25").replace("/", "%2F")
        path = f"{root}{prefix.decode()}{kept}{slash.decode()}{unquote(suffix.decode('latin-1'))}"
        return {**scope, "path": path}
    return scope


def workflow_id_param(
    workflow_id: Annotated[
        str,
        Path(
            min_length=1,
            description="the workflow id; escape `/` as `%2F` (quote the id as one path segment)",
        ),
    ],
) -> str:
    """The workflow id a route was called with, unescaped and checked.

    Raises:
        BadRequest: not a workflow id (422 naming `workflow_id`).
    """
    ident = _ESCAPED.sub(lambda m: "%" if m.group(0) == "%25" else "/", workflow_id)
    if not _ID.fullmatch(ident):
        raise BadRequest(
            f"workflow_id: {ident[:200]!r} is not a workflow id (1 to 200 letters, digits and ._:/@+-, "
            "starting with a letter or digit)"
        )
    return ident
