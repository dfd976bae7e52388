"""`slotflow schedule backfill`: a dry run listing the slots, the command, and its summary.

The dry run and the summary read `GET /v1/schedules/{id}/backfill`, which plans the slots the way
the ticker does (every slot of the spec in [start, end)) and says how each slot's run stands.
"""

import time
from typing import Any

from slotflow.cli.api import ApiClient, path_segment
from slotflow.cli.commanding import identifier, send
from slotflow.cli.context import Context
from slotflow.cli.errors import CliError, UsageError
from slotflow.cli.parsing import parse_instant, validated
from slotflow.contracts import Backfill

#: How often --follow asks for progress.
POLL_SECONDS = 0.5


def _report(api: ApiClient, message: Backfill) -> dict[str, Any]:
    body: dict[str, Any] = api.get(
        f"/v1/schedules/{path_segment(message.schedule_id)}/backfill",
        {"from": message.start.isoformat(), "to": message.end.isoformat(), "max_slots": message.max_slots},
    )
    return body


def summary_line(report: dict[str, Any]) -> str:
    """`backfill of 60 slots finished: 58 completed, 1 skipped, 1 failed` (or how far it got)."""
    counts = (
        f"{report.get('completed', 0)} completed, {report.get('skipped', 0)} skipped, "
        f"{report.get('failed', 0)} failed"
    )
    expected = report.get("expected", 0)
    if report.get("finished"):
        return f"backfill of {expected} slots finished: {counts}"
    waiting = int(report.get("in_progress", 0)) + int(report.get("not_started", 0))
    return f"backfill of {expected} slots not finished: {counts}, {waiting} still to run"


def schedule_backfill(ctx: Context) -> int:
    """`schedule backfill`: send a Backfill for a slot range (or show it with --dry-run)."""
    a = ctx.args
    fields = {
        "schedule_id": identifier(a.schedule_id, "SCHEDULE_ID"),
        "start": parse_instant(a.start, flag="--start"),
        "end": parse_instant(a.end, flag="--end"),
        "max_slots": a.max_slots,
        "overlap": a.backfill_overlap,
        "max_concurrent": a.max_concurrent,
    }
    message = validated(Backfill, fields, what="backfill")
    follow = float(a.follow or 0.0)
    if follow < 0:
        raise UsageError(f"--follow must not be negative, got {follow:g}")
    if a.dry_run:
        return _dry_run(ctx, message)
    if follow and not a.wait:
        a.wait = min(follow, 30.0)
    code = send(ctx, message)
    if not follow:
        return code
    deadline = time.monotonic() + follow
    with ctx.api() as api:
        report = _report(api, message)
        while not report.get("finished") and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            report = _report(api, message)
    if ctx.as_json:
        ctx.emit_json(report)
    else:
        ctx.out.write(summary_line(report) + "\n")
    if not report.get("finished"):
        ctx.note(f"the backfill was still running after --follow {follow:g} s")
        return 0
    return 1 if report.get("failed") else 0


def _dry_run(ctx: Context, message: Backfill) -> int:
    with ctx.api() as api:
        report = _report(api, message)
    if ctx.as_json:
        ctx.emit_json(report)
    else:
        slots = report.get("slots") or []
        existing = [slot for slot in slots if slot.get("state")]
        ctx.out.write(
            f"dry run: a backfill of {message.schedule_id} from {message.start.isoformat()} to "
            f"{message.end.isoformat()} creates {len(slots) - len(existing)} run(s) (overlap "
            f"{message.overlap}, {message.max_concurrent} at a time); nothing was published\n"
        )
        for slot in slots:
            state = slot.get("state")
            ctx.out.write(f"  {slot.get('run_id')}" + (f"  (already {state})" if state else "") + "\n")
        if existing:
            # A backfill's run id is its slot's, so it leaves a slot that already has a run as it is.
            ctx.note(
                f"{len(existing)} slot(s) already have a run, which a backfill leaves as it is; to run "
                f"them again with the current definition: slotflow schedule rerun {message.schedule_id} "
                f"--from {message.start.isoformat()} --to {message.end.isoformat()} --reason ..."
            )
    refused = report.get("refused")
    if refused:
        raise CliError(f"the ticker would refuse this backfill: {refused}")
    return 0
