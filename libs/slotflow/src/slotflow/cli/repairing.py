"""`slotflow schedule rerun` and `slotflow schedule mark`: an operator's repairs of a schedule's slots.

Both go through the api (`POST /v1/schedules/{id}/rerun` and `/mark`), which chooses the slots of
the range with its slot audit and says what it leaves out and why; `--dry-run` shows that and
publishes nothing. A range where nothing can be touched exits non-zero with the api's reason.
"""

from typing import Any

from slotflow.cli.commanding import identifier
from slotflow.cli.context import Context
from slotflow.cli.errors import UsageError
from slotflow.cli.output import REPAIR_COLUMNS
from slotflow.cli.values import parse_instant


def _range(ctx: Context) -> dict[str, Any]:
    a = ctx.args
    reason = (a.reason or "").strip()
    if not reason:
        raise UsageError("--reason is required: it is recorded with the repair and shown in the audit")
    body: dict[str, Any] = {
        "from": parse_instant(a.start, flag="--from").isoformat(),
        "reason": reason,
        "dry_run": bool(a.dry_run),
    }
    if a.end:
        body["to"] = parse_instant(a.end, flag="--to").isoformat()
    return body


def schedule_rerun(ctx: Context) -> int:
    """`schedule rerun`: re-run the slots of [--from, --to] with the schedule's current definition."""
    body = _range(ctx) | {"force": bool(ctx.args.force)}
    return _repair(ctx, "rerun", body)


def schedule_mark(ctx: Context) -> int:
    """`schedule mark`: mark the slots of [--from, --to] done or skipped (no effect runs)."""
    body = _range(ctx) | {"mark": ctx.args.mark}
    return _repair(ctx, "mark", body)


def _repair(ctx: Context, verb: str, body: dict[str, Any]) -> int:
    schedule_id = identifier(ctx.args.schedule_id, "SCHEDULE_ID")
    wait = float(ctx.args.wait or 0.0)
    with ctx.api() as api:
        answer: dict[str, Any] = api.run(
            api.transport.repair(
                "rerun" if verb == "rerun" else "mark",
                schedule_id,
                body,
                command_id=ctx.args.command_id,
                wait=wait or None,
            )
        )
    if ctx.as_json:
        ctx.emit_json(answer)
        return 0
    what = "re-run" if verb == "rerun" else f"mark {body.get('mark')}"
    count, left = answer["count"], answer["left_out_count"]
    if answer["dry_run"]:
        headline = f"a {what} would touch {count} slot(s) of {schedule_id}; nothing was published"
    else:
        headline = f"{what} of {count} slot(s) of {schedule_id} sent as command {answer['command_id']}"
    pairs = [("dry run" if answer["dry_run"] else verb, headline)]
    if answer.get("status"):
        pairs.append(
            ("status", f"{answer['status']}" + (f": {answer['reason']}" if answer.get("reason") else ""))
        )
    if left:
        pairs.append(("left out", f"{left} slot(s), each with its reason below"))
    if answer.get("pending"):
        pairs.append(("not judged yet", f"{answer['pending']} slot(s) too recent to judge: untouched"))
    ctx.emit_fields(pairs)
    ctx.out.write("\n")
    ctx.emit_table(list(answer["slots"]), REPAIR_COLUMNS, empty="")
    if answer["left_out"]:
        ctx.out.write("\nleft out:\n")
        ctx.emit_table(list(answer["left_out"]), REPAIR_COLUMNS, empty="")
    return 0
