"""Handlers that read the read-model API: schedules, runs, workflow lists, the DLQ, the audit.

One workflow (`workflow show|history`, `replay`) is in slotflow.cli.workflows.
"""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from slotflow.cli.api import Params, path_segment
from slotflow.cli.context import Context
from slotflow.cli.errors import ApiRequestFailed, AuditFindings, CliError, UsageError
from slotflow.cli.output import (
    ATTEMPT_COLUMNS,
    AUDIT_COLUMNS,
    DLQ_COLUMNS,
    RUN_COLUMNS,
    SCHEDULE_COLUMNS,
    UNSCHEDULED_COLUMNS,
    WORKFLOW_COLUMNS,
    Column,
    error_text,
    lookup,
    schedule_state,
    spec_text,
    text,
)
from slotflow.cli.values import parse_instant
from slotflow.core.durations import parse_duration_text

MAX_LIMIT = 500


def _iso(value: str | None, flag: str) -> str | None:
    return parse_instant(value, flag=flag).isoformat() if value is not None else None


def _limit(ctx: Context) -> int:
    limit = int(ctx.args.limit)
    if not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"--limit must be between 1 and {MAX_LIMIT}, got {limit}")
    return limit


def _fetch(ctx: Context, path: str, *, not_found: str) -> Any:
    with ctx.api() as api:
        try:
            return api.get(path)
        except ApiRequestFailed as err:
            if err.status == 404:
                raise CliError(not_found) from None
            raise


def _listing(ctx: Context, path: str, params: Params, columns: Sequence[Column], *, empty: str) -> int:
    follow = bool(ctx.args.all)
    items: list[dict[str, Any]] = []
    next_cursor: str | None = None
    with ctx.api() as api:
        for page in api.pages(
            path, {**params, "limit": _limit(ctx), "cursor": ctx.args.cursor}, follow=follow
        ):
            items.extend(item for item in page.get("items", []) if isinstance(item, dict))
            next_cursor = page.get("next_cursor")
    if ctx.as_json:
        ctx.emit_json({"items": items, "next_cursor": None if follow else next_cursor})
        return 0
    ctx.emit_table(items, columns, empty=empty)
    if next_cursor and not follow:
        ctx.note(f"more rows: add --cursor {next_cursor} (or --all)")
    return 0


def schedule_list(ctx: Context) -> int:
    """`schedule list`: the schedules matching the filters, a page at a time."""
    a = ctx.args
    params = {"paused": a.paused, "tag": a.tag, "handler": a.handler, "id_prefix": a.id_prefix}
    return _listing(ctx, "/v1/schedules", params, SCHEDULE_COLUMNS, empty="no schedules")


def schedule_show(ctx: Context) -> int:
    """`schedule show`: one schedule, its next slots and its runs by state."""
    schedule_id = ctx.args.schedule_id
    body = _fetch(
        ctx, f"/v1/schedules/{path_segment(schedule_id)}", not_found=f"schedule {schedule_id} not found"
    )
    if ctx.as_json:
        ctx.emit_json(body)
        return 0
    ctx.emit_fields(
        [
            ("schedule", text(body.get("schedule_id"))),
            ("spec", spec_text(body.get("spec"))),
            ("handler", text(body.get("handler"))),
            ("state", schedule_state(body)),
            ("tags", text(body.get("tags"))),
            ("next fire", text(body.get("next_fire_at"))),
            ("created", text(body.get("created_at"))),
            ("updated", text(body.get("updated_at"))),
        ]
    )
    slots = [slot_text(slot) for slot in body.get("next_slots") or []]
    none = "none while paused" if body.get("paused") and not body.get("resume_at") else "none"
    ctx.out.write(
        "\nnext slots:\n" + "".join(f"  {slot}\n" for slot in slots) if slots else f"\nnext slots: {none}\n"
    )
    by_state = body.get("runs_by_state") or {}
    if by_state:
        ctx.out.write(
            "\nruns: " + "  ".join(f"{state}={count}" for state, count in sorted(by_state.items())) + "\n"
        )
    return 0


def slot_text(slot: Any) -> str:
    """A next-slot preview: the instant, and its wall-clock time in the schedule's zone if given."""
    if not isinstance(slot, Mapping):
        return text(slot)
    line = text(slot.get("at"))
    if slot.get("local"):
        line += f"  ({slot['local']} local)"
    if slot.get("dst"):
        # `local` is when it fires; a shifted slot also names the local time it stands for.
        stands_for = f", stands for {slot['nominal']}" if slot.get("nominal") else ""
        line += f"  [{slot['dst']}{stands_for}]"
    return line


def runs_list(ctx: Context) -> int:
    """`runs list`: runs of one schedule (by slot range) or of any job."""
    a = ctx.args
    start, end = _iso(a.start, "--from"), _iso(a.end, "--to")
    if a.schedule is not None and a.job is not None:
        raise UsageError("give --schedule or --job, not both")
    if a.schedule is not None:
        path = f"/v1/schedules/{path_segment(a.schedule)}/runs"
        params: Params = {"from": start, "to": end, "state": a.state}
    else:
        if start is not None or end is not None:
            raise UsageError("--from/--to select a slot range of one schedule: add --schedule SCHEDULE_ID")
        path, params = "/v1/runs", {"job_id": a.job, "state": a.state}
    try:
        return _listing(ctx, path, params, RUN_COLUMNS, empty="no runs")
    except ApiRequestFailed as err:
        if err.status == 404 and a.schedule is not None:
            raise CliError(f"schedule {a.schedule} not found") from None
        raise


def runs_show(ctx: Context) -> int:
    """`runs show`: one run with its timings and every attempt."""
    run_id = ctx.args.run_id
    body = _fetch(ctx, f"/v1/runs/{path_segment(run_id)}", not_found=f"run {run_id} not found")
    if ctx.as_json:
        ctx.emit_json(body)
        return 0
    ctx.emit_fields(
        (label, text(lookup(body, name)))
        for label, name in (
            ("run", "run_id"),
            ("job", "job_id"),
            ("slot", "slot"),
            ("kind", "kind"),
            ("state", "state"),
            ("fence token", "fence_token"),
            ("owner", "owner"),
            ("due", "timings.due_at"),
            ("fire at", "timings.fire_at"),
            ("started", "timings.started_at"),
            ("finished", "timings.finished_at"),
            ("lateness ms", "timings.lateness_ms"),
            ("duration ms", "timings.duration_ms"),
            ("completions", "completions"),
            ("handler", "handler"),
            ("payload", "payload"),
            ("result", "result"),
        )
    )
    if body.get("error"):
        ctx.emit_fields([("error", error_text(body["error"]))])
    _attempts(ctx, body.get("attempts"))
    return 0


def _attempts(ctx: Context, found: Any) -> None:
    """The attempts table, then per attempt its traceback and the handler's log lines."""
    attempts = [item for item in found or [] if isinstance(item, dict)]
    ctx.out.write("\nattempts:\n")
    ctx.emit_table(attempts, ATTEMPT_COLUMNS, empty="  none recorded")
    for a in attempts:
        tb, logs = a.get("traceback") or "", [str(line) for line in a.get("logs") or []]
        if not tb and not logs:
            continue
        ctx.out.write(f"\nattempt {a.get('attempt')} (fence {a.get('fence_token')}, {a.get('owner')}): ")
        ctx.out.write(f"{a.get('outcome')}{' ' + error_text(a['error']) if a.get('error') else ''}\n")
        if logs:
            ctx.out.write("  log:\n" + "".join(f"    {line}\n" for line in logs))
        if tb:
            ctx.out.write("  traceback:\n" + "".join(f"    {line}\n" for line in tb.rstrip().splitlines()))


def workflow_list(ctx: Context) -> int:
    """`workflow list`: the workflows matching the filters, a page at a time."""
    a = ctx.args
    params = {
        "type": a.workflow_type,
        "status": a.status,
        "from": _iso(a.start, "--from"),
        "to": _iso(a.end, "--to"),
        "attention": _attention(a.attention),
        "query": a.query,
    }
    empty = "no workflow needs attention" if a.attention is not None else "no workflows"
    return _listing(ctx, "/v1/workflows", params, WORKFLOW_COLUMNS, empty=empty)


def _attention(value: str | None) -> str | None:
    """`--attention AGE` checked here, so a bad age is this CLI's usage error, not the api's."""
    if value is None:
        return None
    try:
        parse_duration_text(value)
    except ValueError as err:
        raise UsageError(f"--attention: {err}") from err
    return value


def dlq_list(ctx: Context) -> int:
    """`dlq list`: the dead letters matching the filters, a page at a time."""
    a = ctx.args
    params = {
        "status": a.status,
        "reason": a.reason,
        "topic": a.topic,
        "source": a.source,
        "job_id": a.job,
        "run_id": a.run,
        "workflow_id": a.workflow,
    }
    return _listing(ctx, "/v1/dlq", params, DLQ_COLUMNS, empty="no dead letters")


def dlq_show(ctx: Context) -> int:
    """`dlq show`: one dead letter, with its run's attempts or its traceback."""
    dead_letter_id = ctx.args.dead_letter_id
    body = _fetch(
        ctx, f"/v1/dlq/{path_segment(dead_letter_id)}", not_found=f"dead letter {dead_letter_id} not found"
    )
    if ctx.as_json:
        ctx.emit_json(body)
        return 0
    ctx.emit_fields(
        (name.replace("_", " "), text(value))
        for name, value in body.items()
        if name not in ("value_b64", "attempts", "traceback")
    )
    if body.get("attempts"):
        # A dead-lettered run's letter: the run's attempt history, each with traceback and log.
        _attempts(ctx, body["attempts"])
    elif body.get("traceback"):
        ctx.out.write(
            "\ntraceback:\n" + "".join(f"  {line}\n" for line in str(body["traceback"]).splitlines())
        )
    return 0


AUDIT_STATUSES = ("fired", "missed", "skipped_by_policy", "late", "held", "duplicated_effect")
#: The headline: what became of each slot (a slot that fired succeeded only if its run completed).
AUDIT_OUTCOMES = ("succeeded", "failed", "in_flight", "held", "missed", "skipped", "duplicated_effect")


def audit(ctx: Context) -> int:
    """`audit`: every expected slot of a schedule in a range and what became of it."""
    a = ctx.args
    start, end = parse_instant(a.start, flag="--from"), parse_instant(a.end, flag="--to")
    if end <= start:
        raise UsageError(f"--to ({end.isoformat()}) must be after --from ({start.isoformat()})")
    params = {"schedule": a.schedule_id, "from": start.isoformat(), "to": end.isoformat()}
    with ctx.api() as api:
        try:
            body = api.get("/v1/audit", params)
        except ApiRequestFailed as err:
            if err.status == 404:
                raise CliError(f"schedule {a.schedule_id} not found") from None
            raise
    summary: Mapping[str, Any] = body.get("summary") or {}
    if ctx.as_json:
        ctx.emit_json(body)
    else:
        slots = [slot for slot in body.get("slots") or [] if isinstance(slot, dict)]
        ctx.out.write(
            f"audit of {a.schedule_id} from {_when(start)} to {_when(end)}: {body.get('expected', 0)} slots expected\n"
        )
        if body.get("note"):
            ctx.out.write(f"note: {body['note']}\n")
        ctx.out.write("\n")
        ctx.emit_table(slots, AUDIT_COLUMNS, empty="no slots in this range")
        outcomes: Mapping[str, Any] = body.get("outcomes") or {}
        ctx.out.write(
            "\noutcomes: " + "  ".join(f"{name}={outcomes.get(name, 0)}" for name in AUDIT_OUTCOMES) + "\n"
        )
        ctx.out.write(
            "how they fired: " + "  ".join(f"{name}={summary.get(name, 0)}" for name in AUDIT_STATUSES) + "\n"
        )
        if body.get("pending"):
            ctx.out.write(f"{body['pending']} recent slots are too new to judge yet\n")
        unscheduled = [run for run in body.get("unscheduled") or [] if isinstance(run, dict)]
        if unscheduled:
            ctx.out.write("\nruns off the schedule's grid (manual triggers, off-grid backfills):\n")
            ctx.emit_table(unscheduled, UNSCHEDULED_COLUMNS, empty="")
        dead = [run for run in body.get("dead_lettered") or [] if isinstance(run, dict)]
        if dead:
            ctx.out.write("\nruns that ended dead-lettered (see slotflow dlq list):\n")
            ctx.emit_table(dead, UNSCHEDULED_COLUMNS, empty="")
    if a.check:
        bad = {name: int(summary.get(name, 0)) for name in ("missed", "duplicated_effect")}
        dead_lettered = len(body.get("dead_lettered") or [])
        if any(bad.values()) or dead_lettered:
            raise AuditFindings(
                f"schedule {a.schedule_id}: {bad['missed']} missed and {bad['duplicated_effect']} "
                f"duplicated-effect slots, {dead_lettered} dead-lettered runs in the range"
            )
    return 0


def _when(value: datetime) -> str:
    return value.isoformat(timespec="seconds")
