"""Turn flag values into contract values: durations, instants, JSON objects, schedule definitions.

Pure functions, no I/O except reading a file named with `@path`. Every failure is a `UsageError`
whose message names the flag and says what a valid value looks like.
"""

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from slotflow.cli.errors import UsageError
from slotflow.contracts import (
    CronSpec,
    DstPolicy,
    IntervalSpec,
    MisfirePolicy,
    OnceSpec,
    RetryPolicy,
    ScheduleDefinition,
)

_UNITS: Mapping[str, timedelta] = {
    "w": timedelta(weeks=1),
    "d": timedelta(days=1),
    "h": timedelta(hours=1),
    "m": timedelta(minutes=1),
    "s": timedelta(seconds=1),
    "ms": timedelta(milliseconds=1),
    "us": timedelta(microseconds=1),
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|w|d|h|m|s)")
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|us|w|d|h|m|s))+$")
_RELATIVE = re.compile(r"^now(?:(?P<sign>[+-])(?P<amount>.+))?$")
_TIMEDELTA = TypeAdapter(timedelta)
M = TypeVar("M", bound=BaseModel)

DURATION_HINT = "use e.g. 30s, 5m, 1h30m, 2d, 250ms, a number of seconds, or ISO 8601 (PT1H)"
INSTANT_HINT = "use ISO 8601 with a UTC offset (2026-03-01T02:00:00Z, 2026-03-01T03:00+01:00) or now, now-1d"


def parse_duration(text: str, *, flag: str = "duration") -> timedelta:
    """`"1h30m"`, `"90"` (seconds), `"250ms"` or ISO 8601 `"PT1H30M"` as a timedelta."""
    value = text.strip().lower()
    if not value:
        raise UsageError(f"{flag} is empty; {DURATION_HINT}")
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        return timedelta(seconds=float(value))
    if _DURATION.fullmatch(value):
        total = timedelta(0)
        for amount, unit in _DURATION_PART.findall(value):
            total += _UNITS[unit] * float(amount)
        return total
    if value.startswith(("p", "-p")):
        try:
            return _TIMEDELTA.validate_python(text.strip().upper())
        except ValidationError:
            pass
    raise UsageError(f"{flag} {text!r} is not a duration; {DURATION_HINT}")


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
        base = now or datetime.now(tz=UTC)
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
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object ({{...}}), got {type(value).__name__}")
    return value


def explain(err: ValidationError) -> str:
    """One line per failing field, without pydantic's URLs."""
    lines = []
    for item in err.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"])
        message = str(item["msg"]).removeprefix("Value error, ")
        lines.append(f"{where}: {message}" if where else message)
    return "; ".join(lines)


def validated(model: type[M], data: Mapping[str, Any], *, what: str) -> M:
    """``model.model_validate(data)``, a `UsageError` naming ``what`` if it does not validate."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as err:
        raise UsageError(f"invalid {what}: {explain(err)}") from None


def build_spec(
    *,
    cron: str | None,
    every: str | None,
    at: str | None,
    tz: str | None,
    anchor: str | None,
) -> CronSpec | IntervalSpec | OnceSpec:
    """The schedule spec from exactly one of --cron, --every, --at."""
    given = [
        name for name, value in (("--cron", cron), ("--every", every), ("--at", at)) if value is not None
    ]
    if len(given) != 1:
        raise UsageError(
            "give exactly one of --cron, --every or --at" + (f" (got {', '.join(given)})" if given else "")
        )
    if tz is not None and cron is None:
        raise UsageError("--tz applies to --cron only (intervals and one-shot times carry their own offset)")
    if anchor is not None and every is None:
        raise UsageError("--anchor applies to --every only")
    if cron is not None:
        fields: dict[str, Any] = {"expression": cron}
        if tz is not None:
            fields["timezone"] = tz
        try:
            return CronSpec.model_validate(fields)
        except ValidationError as err:
            problems = {str(e["loc"][0]) if e["loc"] else "": e for e in err.errors(include_url=False)}
            if "timezone" in problems:
                raise UsageError(
                    f"--tz {tz!r} is not a known IANA time zone (e.g. UTC, Europe/Berlin)"
                ) from None
            reasons = "; ".join(
                str(e["msg"]).removeprefix("Value error, ") for e in err.errors(include_url=False)
            )
            raise UsageError(
                f"--cron {cron!r}: {reasons}; "
                "use 5 fields (minute hour day month weekday) or 6 with seconds first"
            ) from None
    if every is not None:
        interval: dict[str, Any] = {"every": parse_duration(every, flag="--every")}
        if anchor is not None:
            interval["anchor"] = parse_instant(anchor, flag="--anchor")
        return validated(IntervalSpec, interval, what="--every")
    return OnceSpec(at=parse_instant(at or "", flag="--at"))


def build_definition(
    *,
    spec: CronSpec | IntervalSpec | OnceSpec,
    handler: str,
    payload: str | None = None,
    misfire: str | None = None,
    max_catch_up: int | None = None,
    catch_up_window: str | None = None,
    grace: str | None = None,
    overlap: str | None = None,
    retry_base: str | None = None,
    retry_cap: str | None = None,
    max_attempts: int | None = None,
    non_retryable: list[str] | None = None,
    start_to_close: str | None = None,
    dst_repeated: str | None = None,
    dst_nonexistent: str | None = None,
    jitter: str | None = None,
    start_at: str | None = None,
    end_at: str | None = None,
    tags: list[str] | None = None,
) -> ScheduleDefinition:
    """A whole ScheduleDefinition from flags; unset policy flags keep the contract defaults."""
    misfire_fields = _drop_none(
        policy=misfire,
        max_catch_up=max_catch_up,
        catch_up_window=_maybe_duration(catch_up_window, "--catch-up-window"),
        grace=_maybe_duration(grace, "--grace"),
    )
    retry_fields = _drop_none(
        base=_maybe_duration(retry_base, "--retry-base"),
        cap=_maybe_duration(retry_cap, "--retry-cap"),
        max_attempts=max_attempts,
        non_retryable=tuple(non_retryable) if non_retryable else None,
        start_to_close=_maybe_duration(start_to_close, "--start-to-close"),
    )
    dst_fields = _drop_none(repeated=dst_repeated, nonexistent=dst_nonexistent)
    definition = _drop_none(
        spec=spec,
        handler=handler,
        payload=parse_json_object(payload, flag="--payload") if payload is not None else None,
        misfire=validated(MisfirePolicy, misfire_fields, what="misfire policy"),
        retry=validated(
            RetryPolicy, retry_fields, what="retry policy (--retry-base/--retry-cap/--max-attempts)"
        ),
        dst=validated(DstPolicy, dst_fields, what="DST policy"),
        overlap=overlap,
        jitter=_maybe_duration(jitter, "--jitter"),
        start_at=parse_instant(start_at, flag="--start-at") if start_at is not None else None,
        end_at=parse_instant(end_at, flag="--end-at") if end_at is not None else None,
        tags=tuple(tags) if tags else None,
    )
    return validated(ScheduleDefinition, definition, what="schedule")


def _maybe_duration(value: str | None, flag: str) -> timedelta | None:
    return parse_duration(value, flag=flag) if value is not None else None


def _drop_none(**fields: Any) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}
