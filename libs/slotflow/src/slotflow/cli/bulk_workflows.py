"""`slotflow workflow cancel|terminate` with a selection: many workflows at once, through the api.

`--type`, `--status`, `--all` or `--dry-run` (or more than one WORKFLOW_ID) turn a cancel or a
terminate into a bulk one: `POST /v1/workflows/cancel` or `/terminate`, which takes the open
workflows of the selection, publishes one command per workflow and says what it leaves out and why
(closed ones; for a cancel, those compensating already). `--dry-run` shows that and publishes
nothing. A selection without ids or a type must say `--all`; the api refuses it otherwise, and a
selection that takes nothing exits non-zero with the api's reason.
"""

from argparse import Namespace
from typing import Any, Literal

from slotflow.cli.commanding import identifier, workflow_cancel, workflow_terminate
from slotflow.cli.context import Context
from slotflow.cli.errors import UsageError
from slotflow.cli.output import BULK_LEFT_OUT_COLUMNS, BULK_WORKFLOW_COLUMNS


def cancel(ctx: Context) -> int:
    """`workflow cancel`: one workflow (a CancelWorkflow, over either transport), or a selection."""
    return bulk_workflows(ctx, "cancel") if is_bulk(ctx.args) else workflow_cancel(ctx)


def terminate(ctx: Context) -> int:
    """`workflow terminate`: one workflow (a TerminateWorkflow, over either transport), or a selection."""
    return bulk_workflows(ctx, "terminate") if is_bulk(ctx.args) else workflow_terminate(ctx)


def is_bulk(args: Namespace) -> bool:
    """Whether the command names a selection rather than one workflow."""
    return bool(args.workflow_type or args.status or args.all or args.dry_run or len(args.workflow_ids) != 1)


def bulk_workflows(ctx: Context, action: Literal["cancel", "terminate"]) -> int:
    """Preview or send a bulk cancel or terminate, and print what it took and left out."""
    a = ctx.args
    if a.start_command_id is not None:
        raise UsageError("--start-command-id names one run of one workflow: not with a selection")
    reason = (a.reason or "").strip()
    if not reason:
        raise UsageError(
            f"--reason is required for a {action} of a selection: it is recorded with each command"
        )
    body: dict[str, Any] = {
        "workflow_ids": [identifier(w, "WORKFLOW_ID") for w in a.workflow_ids],
        "all": bool(a.all),
        "reason": reason,
        "dry_run": bool(a.dry_run),
    }
    if a.limit is not None:
        body["limit"] = a.limit
    if a.workflow_type:
        body["type"] = a.workflow_type
    if a.status:
        body["status"] = a.status
    with ctx.api() as api:
        answer: dict[str, Any] = api.run(api.transport.bulk_workflows(action, body, command_id=a.command_id))
    if ctx.as_json:
        ctx.emit_json(answer)
        return 0
    count = answer["count"]
    if answer["dry_run"]:
        headline = f"a {action} would take {count} workflow(s); nothing was published"
    else:
        headline = f"{action} sent to {count} workflow(s), one command each"
    pairs: list[tuple[str, str]] = [("dry run" if answer["dry_run"] else action, headline)]
    if answer.get("more"):
        pairs.append(("beyond --limit", f"{answer['more']} more open workflow(s) match: untouched"))
    for why, n in answer["left_out"].items():
        pairs.append(("left out", f"{n}: {why}"))
    if action == "terminate" and answer.get("compensating"):
        pairs.append(("compensating", f"{answer['compensating']} end with their compensations unfinished"))
    ctx.emit_fields(pairs)
    ctx.out.write("\n")
    ctx.emit_table(list(answer["workflows"]), BULK_WORKFLOW_COLUMNS, empty="")
    if answer.get("left_out_workflows"):
        ctx.out.write("\nleft out (the first of them):\n")
        ctx.emit_table(list(answer["left_out_workflows"]), BULK_LEFT_OUT_COLUMNS, empty="")
    return 0
