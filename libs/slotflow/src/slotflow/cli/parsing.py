"""Build contract models from flags: schedule specs and whole schedule definitions.

Every failure is a `UsageError` naming the flag; nothing is sent before the whole command validates.
"""

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from slotflow.cli.errors import UsageError
from slotflow.cli.values import (
    explain,
    format_duration,
    parse_duration,
    parse_instant,
    parse_json_object,
)
from slotflow.contracts import (
    CronSpec,
    DstPolicy,
    IntervalSpec,
    MisfirePolicy,
    OnceSpec,
    RetryPolicy,
    ScheduleDefinition,
)

__all__ = [
    "build_definition",
    "build_spec",
    "explain",
    "format_duration",
    "parse_duration",
    "parse_instant",
    "parse_json_object",
    "validated",
]

M = TypeVar("M", bound=BaseModel)


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
    backoff_coefficient: float | None = None,
    non_retryable: list[str] | None = None,
    start_to_close: str | None = None,
    heartbeat_timeout: str | None = None,
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
        backoff_coefficient=backoff_coefficient,
        non_retryable=tuple(non_retryable) if non_retryable else None,
        start_to_close=_maybe_duration(start_to_close, "--start-to-close"),
        heartbeat_timeout=_maybe_duration(heartbeat_timeout, "--heartbeat-timeout"),
    )
    dst_fields = _drop_none(repeated=dst_repeated, nonexistent=dst_nonexistent)
    definition = _drop_none(
        spec=spec,
        handler=handler,
        payload=parse_json_object(payload, flag="--payload") if payload is not None else None,
        misfire=validated(MisfirePolicy, misfire_fields, what="misfire policy"),
        retry=validated(
            RetryPolicy,
            retry_fields,
            what="retry policy (--retry-base/--retry-cap/--max-attempts/--backoff-coefficient)",
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
