"""Durations as people write them: `15m`, `1h30m`, `250ms`, `90` (seconds), or ISO 8601 `PT15M`.

One parser for the CLI's flags and the contracts' duration fields, so a body the CLI would accept
is accepted over HTTP too (a user's `"every": "15m"` was a 422 while `--every 15m` worked).
"""

import re
from collections.abc import Mapping
from datetime import timedelta

from pydantic import TypeAdapter, ValidationError

_UNITS: Mapping[str, timedelta] = {
    "w": timedelta(weeks=1),
    "d": timedelta(days=1),
    "h": timedelta(hours=1),
    "m": timedelta(minutes=1),
    "s": timedelta(seconds=1),
    "ms": timedelta(milliseconds=1),
    "us": timedelta(microseconds=1),
}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|w|d|h|m|s)")
_SHORT = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|us|w|d|h|m|s))+$")
_SECONDS = re.compile(r"\d+(?:\.\d+)?")
_TIMEDELTA = TypeAdapter(timedelta)

DURATION_HINT = "use e.g. 30s, 5m, 1h30m, 2d, 250ms, a number of seconds, or ISO 8601 (PT1H)"


def short_duration(text: str) -> timedelta | None:
    """`15m`, `1h30m`, `250ms` or a bare number of seconds; None for anything else."""
    value = text.strip().lower()
    if _SECONDS.fullmatch(value):
        return timedelta(seconds=float(value))
    if not _SHORT.fullmatch(value):
        return None
    total = timedelta(0)
    for amount, unit in _PART.findall(value):
        total += _UNITS[unit] * float(amount)
    return total


def parse_duration_text(text: str) -> timedelta:
    """A duration in any form this module knows.

    Raises:
        ValueError: the text is none of them; the message says what a valid one looks like.
    """
    short = short_duration(text)
    if short is not None:
        return short
    value = text.strip()
    if value.upper().startswith(("P", "-P")):
        try:
            return _TIMEDELTA.validate_python(value.upper())
        except ValidationError:
            pass
    raise ValueError(f"{text!r} is not a duration; {DURATION_HINT}")


def lenient_duration(value: object) -> object:
    """A pydantic before-validator: the short forms become timedeltas, anything else passes on."""
    if isinstance(value, str):
        short = short_duration(value)
        if short is not None:
            return short
    return value
