"""JSON request bodies nested too deep for Python's parser answer 422 naming where, not 400.

FastAPI parses a body with `json.loads`, whose C parser recurses: past about a thousand levels it
raises RecursionError, and FastAPI answers 400 "There was an error parsing the body". Every value
deeper than `slotflow.contracts.acceptance.VALUE_MAX_DEPTH` is refused anyway (the message models
say so, naming the field, for a body that parses); this one is refused in the same words. The
scan that names the place reads the body once, without recursion, and stops at the first
container past the limit.
"""

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from slotflow.contracts.acceptance import VALUE_MAX_DEPTH

#: Path components named before the rest is elided (the body's own fields come first).
_SHOWN_COMPONENTS = 4


class DeepJsonRequest(Request):
    """A request whose `json()` refuses a body too deep to parse with a 422 naming where."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = json.loads(body)
            except RecursionError:
                where = deep_path(body.decode("utf-8", errors="replace"), VALUE_MAX_DEPTH + 1)
                raise HTTPException(
                    status_code=422,
                    detail=f"{where or '(body)'}: is nested too deep to parse; a value may nest at most "
                    f"{VALUE_MAX_DEPTH} levels",
                ) from None
        return self._json


class DeepJsonRoute(APIRoute):
    """An APIRoute that reads its body through `DeepJsonRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route_handler(request: Request) -> Response:
            return await handler(DeepJsonRequest(request.scope, request.receive))

        return route_handler


def deep_path(text: str, levels: int) -> str:
    """The dotted path (keys, list indexes) to the first container ``levels`` deep in the JSON
    ``text``, cut after a few components; "" when nothing is that deep. Iterative, and it skips
    strings whole, so a long string or a deep body costs one pass at most."""
    path: list[str] = []
    # Per open container: is it an object, and the key (or index) its current child sits under.
    stack: list[list[Any]] = []
    key: str | None = None
    i = 0
    size = len(text)
    while i < size:
        char = text[i]
        if char == '"':
            end = _string_end(text, i)
            if stack and stack[-1][0] and stack[-1][1] is None:
                key = text[i + 1 : end]
            i = end + 1
            continue
        if char == ":" and stack and stack[-1][0]:
            stack[-1][1] = key
        elif char == ",":
            if stack and stack[-1][0]:
                stack[-1][1] = None
            elif stack:
                stack[-1][1] += 1
        elif char in "{[":
            if stack:
                path.append(str(stack[-1][1]))
            stack.append([char == "{", None if char == "{" else 0])
            if len(stack) >= levels:
                shown = path[:_SHOWN_COMPONENTS]
                return ".".join(shown) + ("..." if len(path) > _SHOWN_COMPONENTS else "")
        elif char in "}]" and stack:
            stack.pop()
            if stack:
                path.pop()
        i += 1
    return ""


def _string_end(text: str, start: int) -> int:
    """The index of the quote closing the string opened at ``start`` (or the text's end)."""
    i = start + 1
    while True:
        end = text.find('"', i)
        if end < 0:
            return len(text)
        backslashes = 0
        while text[end - 1 - backslashes] == "\\":
            backslashes += 1
        if backslashes % 2 == 0:
            return end
        i = end + 1
