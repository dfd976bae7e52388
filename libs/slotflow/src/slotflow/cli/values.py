"""Flag values that are not contract models: durations, instants, JSON objects.

Kept apart from `slotflow.cli.parsing` so queries never import the contract models. Pure functions,
no I/O except reading a file named with `@path`; every failure is a `UsageError` that names the
flag and says what a valid value looks like.
"""

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from slotflow.cli.errors import UsageError
from slotflow.core.durations import DURATION_HINT, parse_duration_text

_RELATIVE = re.compile(r"^now(?:(?P<sign>[+-])(?P<amount>.+))?$")

INSTANT_HINT = "use ISO 8601 with a UTC offset (2026-03-01T02:00:00Z, 2026-03-01T03:00+01:00) or now, now-1d"


def parse_duration(text: str, *, flag: str = "duration") -> timedelta:
    """`"1h30m"`, `"90"` (seconds), `"250ms"` or ISO 8601 `"PT1H30M"` as a timedelta."""
    if not text.strip():
        raise UsageError(f"{flag} is empty; {DURATION_HINT}")
    try:
        return parse_duration_text(text)
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a duration; {DURATION_HINT}") from None


def format_duration(value: timedelta) -> str:
    """The inverse of `parse_duration` for display: `1h30m`, `250ms`, `0s`."""
    if value < timedelta(0):
        return "-" + format_duration(-value)
    micros = value // timedelta(microseconds=1)
    parts = []
    for unit, size in (("d", 86_400_000_000), ("h", 3_600_000_000), ("m", 60_000_000), ("s", 1_000_000)):
        count, micros = divmod(micros, size)
        if count:
            parts.append(f"{count}{unit}")
    if micros:
        millis, rest = divmod(micros, 1000)
        parts.append(f"{millis}ms" if not rest else f"{micros}us")
    return "".join(parts) or "0s"


def parse_instant(text: str, *, flag: str = "time", now: datetime | None = None) -> datetime:
    """An aware datetime from ISO 8601 with an offset, or `now`, `now-1d`, `now+2h`.

    A naive time is refused: a scheduler must never guess which zone a user meant.
    """
    value = text.strip()
    relative = _RELATIVE.fullmatch(value.lower())
    if relative:
        # "now" in a query is a convenience for the person typing; no slot decision rests on it.
        # Whole seconds: `--at now+2m` names a one-shot whose run id reads ...T11:37:12Z, not
        # ...T11:37:12.483920Z (an ISO time with a fraction keeps it: asked for, given).
        base = (now or datetime.now(tz=UTC)).replace(microsecond=0)
        if relative.group("amount") is None:
            return base
        delta = parse_duration(relative.group("amount"), flag=flag)
        return base + delta if relative.group("sign") == "+" else base - delta
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a time; {INSTANT_HINT}") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise UsageError(f"{flag} {text!r} has no UTC offset; add one, e.g. {value}Z or {value}+01:00")
    return parsed


def parse_json_object(text: str, *, flag: str) -> dict[str, Any]:
    """A JSON object given inline or as `@path/to/file.json`."""
    value = parse_json_value(text, flag=flag)
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object ({{...}}), got {type(value).__name__}")
    return value


def parse_json_value(text: str, *, flag: str) -> Any:
    """Any JSON value given inline or as `@path/to/file.json`."""
    source = text
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            source = path.read_text(encoding="utf-8")
        except OSError as err:
            raise UsageError(f"{flag}: cannot read {path}: {err.strerror or err}") from None
    try:
        value = json.loads(source)
    except json.JSONDecodeError as err:
        raise UsageError(
            f"{flag} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}"
        ) from None
    return value


def explain(err: ValidationError) -> str:
    """One line per failing field, without pydantic's URLs."""
    lines = []
    for item in err.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"])
        message = str(item["msg"]).removeprefix("Value error, ")
        lines.append(f"{where}: {message}" if where else message)
    return "; ".join(lines)
