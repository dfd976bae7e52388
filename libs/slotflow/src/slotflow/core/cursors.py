"""The keyset-pagination cursor every list hands out: a sort key as URL-safe base64 JSON."""

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from slotflow.errors import PermanentError


class InvalidCursor(PermanentError):
    """The cursor is not one this service handed out; start again without it."""


def encode_cursor(values: list[Any]) -> str:
    """The sort key of a page's last row as an opaque, URL-safe cursor."""
    raw = json.dumps([v.isoformat() if isinstance(v, datetime) else v for v in values])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, kinds: tuple[type, ...]) -> list[Any]:
    """The sort key a cursor carries, each value checked against ``kinds``.

    Raises:
        InvalidCursor: not base64 JSON of the expected shape.
    """
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError) as err:
        raise InvalidCursor() from err
    if not isinstance(values, list) or len(values) != len(kinds):
        raise InvalidCursor()
    out: list[Any] = []
    for value, kind in zip(values, kinds, strict=True):
        if kind is datetime:
            try:
                parsed = datetime.fromisoformat(value) if isinstance(value, str) else None
            except ValueError:
                parsed = None
            if parsed is None or parsed.tzinfo is None:
                raise InvalidCursor()
            out.append(parsed)
        elif isinstance(value, kind) and not isinstance(value, bool):
            out.append(value)
        else:
            raise InvalidCursor()
    return out
