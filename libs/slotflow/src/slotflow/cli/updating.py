"""`slotflow schedule update`: change only the fields given (a merge patch), and say what changes.

The patch is built from the flags given and nothing else, so `--every 30s --handler reports.v2`
keeps the payload, tags and policies. The ticker applies it to its own stored definition; before
sending, the CLI reads the current definition from the API (when it can) and prints each change.
"""

from datetime import timedelta
from typing import Any

from pydantic import TypeAdapter, ValidationError

from slotflow.cli.api import path_segment
from slotflow.cli.commanding import identifier, send
from slotflow.cli.context import Context
from slotflow.cli.errors import ApiRequestFailed, CliError, UsageError
from slotflow.cli.parsing import build_spec, parse_duration, parse_instant, parse_json_object, validated
from slotflow.cli.serving import check_handler
from slotflow.cli.values import explain
from slotflow.contracts import ScheduleDefinition, UpdateSchedule
from slotflow.contracts.schedules import definition_changes, patch_definition

_DURATION = TypeAdapter(timedelta)


def _iso(value: timedelta) -> str:
    text: str = _DURATION.dump_python(value, mode="json")
    return text


def _duration(value: str | None, flag: str) -> str | None:
    return _iso(parse_duration(value, flag=flag)) if value is not None else None


def _instant(value: str | None, flag: str) -> str | None:
    return parse_instant(value, flag=flag).isoformat() if value is not None else None


def _given(**fields: Any) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


def build_patch(a: Any) -> dict[str, Any]:
    """The merge patch the flags ask for: only the fields given.

    Raises:
        UsageError: nothing to change, or a flag's value is invalid.
    """
    patch: dict[str, Any] = {}
    if a.cron is not None or a.every is not None or a.at is not None:
        spec = build_spec(cron=a.cron, every=a.every, at=a.at, tz=a.tz, anchor=a.anchor)
        # Only the fields given: a new interval keeps no old anchor unless --anchor says so, but
        # the kind's own defaults come from the contract, not from this dump.
        patch["spec"] = spec.model_dump(mode="json", exclude_unset=True) | {"kind": spec.kind}
    elif a.tz is not None or a.anchor is not None:
        patch["spec"] = _given(timezone=a.tz, anchor=_instant(a.anchor, "--anchor"))
    if a.handler is not None:
        patch["handler"] = identifier(a.handler, "--handler")
    if a.payload is not None:
        patch["payload"] = parse_json_object(a.payload, flag="--payload")
    misfire = _given(
        policy=a.misfire,
        max_catch_up=a.max_catch_up,
        catch_up_window=_duration(a.catch_up_window, "--catch-up-window"),
        grace=_duration(a.grace, "--grace"),
    )
    retry = _given(
        base=_duration(a.retry_base, "--retry-base"),
        cap=_duration(a.retry_cap, "--retry-cap"),
        max_attempts=a.max_attempts,
        backoff_coefficient=a.backoff_coefficient,
        non_retryable=list(a.non_retryable) if a.non_retryable else None,
        start_to_close=_duration(a.start_to_close, "--start-to-close"),
        heartbeat_timeout=_duration(a.heartbeat_timeout, "--heartbeat-timeout"),
    )
    dst = _given(repeated=a.dst_repeated, nonexistent=a.dst_nonexistent)
    patch.update(
        _given(
            misfire=misfire or None,
            retry=retry or None,
            dst=dst or None,
            overlap=a.overlap,
            jitter=_duration(a.jitter, "--jitter"),
            start_at=_instant(a.start_at, "--start-at"),
            end_at=_instant(a.end_at, "--end-at"),
            tags=list(a.tag) if a.tag else None,
        )
    )
    if not patch:
        raise UsageError("nothing to change: give at least one definition flag (see --help)")
    return patch


def change_lines(before: ScheduleDefinition, after: ScheduleDefinition) -> list[str]:
    """`  spec.every: PT1M -> PT30S` for each field that changes."""
    return [f"  {field}: {old} -> {new}" for field, old, new in definition_changes(before, after)]


def schedule_update(ctx: Context) -> int:
    """`schedule update`: send an UpdateSchedule with the changed fields, showing the change first."""
    schedule_id = identifier(ctx.args.schedule_id, "SCHEDULE_ID")
    patch = build_patch(ctx.args)
    message = validated(UpdateSchedule, {"schedule_id": schedule_id, "patch": patch}, what="update")
    if "handler" in patch:
        check_handler(ctx, patch["handler"])
    current = _current(ctx, schedule_id)
    if current is not None:
        try:
            patched = patch_definition(current, patch)
        except ValidationError as err:
            raise UsageError(f"the change does not fit schedule {schedule_id}: {explain(err)}") from None
        lines = change_lines(current, patched)
        if not lines:
            ctx.note(f"schedule {schedule_id} already has these values; the update changes nothing")
        else:
            ctx.err.write("changes:\n" + "".join(line + "\n" for line in lines))
    return send(ctx, message)


def _current(ctx: Context, schedule_id: str) -> ScheduleDefinition | None:
    """The definition the read model holds, or None (with a note) when it cannot be read."""
    try:
        with ctx.api() as api:
            body = api.get(f"/v1/schedules/{path_segment(schedule_id)}")
    except ApiRequestFailed as err:
        if err.status == 404:
            ctx.note(f"schedule {schedule_id} is not known to the API (yet); sending the change as given")
            return None
        raise
    except CliError as err:
        ctx.note(f"cannot show what changes ({err}); sending the change as given")
        return None
    try:
        return ScheduleDefinition.model_validate(body.get("definition"))
    except (ValidationError, AttributeError):
        return None
