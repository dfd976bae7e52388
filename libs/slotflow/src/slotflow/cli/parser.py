"""The argparse tree of `slotflow`: every group, action and flag, with help a person can act on.

Handlers are attached with `set_defaults(handler=...)`; `slotflow.cli.__main__` dispatches.
"""

import argparse
import os
from typing import Any

from slotflow.cli.errors import DEFAULT_API_URL

_EPILOG = """\
Commands (create, pause, start, redrive, ...), queries (list, show, audit, ...), `token` and `key`
call the API (SLOTFLOW_API_URL, default http://127.0.0.1:8080) with a bearer token (--token or
SLOTFLOW_TOKEN): a command needs the scope its API route needs. `--via kafka` publishes commands
straight to Kafka instead (SLOTFLOW_KAFKA_*), signed with a registered key (--signing-key and
--signing-principal, or SLOTFLOW_SIGNING_KEY_FILE and SLOTFLOW_SIGNING_PRINCIPAL).
Exit codes: 0 ok, 1 failed, 2 bad usage.
"""


#: Handlers are named, not imported: `--help` and usage errors stay fast (no pydantic models,
#: aiokafka or httpx to load), and only the chosen handler's module is imported.
STACK = "slotflow.cli.stack:stack"
BOOTSTRAP_ROLES = "slotflow.cli.database:bootstrap_roles"


#: `--start-command-id` of signal, cancel and terminate (`SignalWorkflow.start_command_id`).
RUN_OF_START_HELP = (
    "only the run the StartWorkflow with this command id began: rejected when the id's current run is another"
)


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree."""
    root = argparse.ArgumentParser(
        prog="slotflow",
        description="Operate slotflow: schedules, runs, workflows, the dead-letter queue and the devstack.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _global_options(root, on_leaf=False)
    groups = root.add_subparsers(dest="group", metavar="GROUP", required=True)
    _schedule(groups)
    _workflow(groups)
    _runs(groups)
    _dlq(groups)
    _downstream(groups)
    _audit(groups)
    _token(groups)
    _key(groups)
    _replay(groups)
    _stack(groups)
    _db(groups)
    return root


def _global_options(parser: argparse.ArgumentParser, *, on_leaf: bool) -> None:
    # Accepted before or after the subcommand: on a leaf, SUPPRESS keeps the root's value unless given.
    defaults: dict[str, Any] = {
        "json": False,
        "api_url": os.environ.get("SLOTFLOW_API_URL", DEFAULT_API_URL),
        "timeout": 10.0,
        "token": os.environ.get("SLOTFLOW_TOKEN") or None,
        "via": os.environ.get("SLOTFLOW_CLI_VIA") or "api",
        "signing_key": None,
        "signing_principal": None,
    }
    if on_leaf:
        defaults = dict.fromkeys(defaults, argparse.SUPPRESS)
    parser.add_argument(
        "--json", action="store_true", default=defaults["json"], help="print the result as JSON, not a table"
    )
    parser.add_argument(
        "--api-url",
        metavar="URL",
        default=defaults["api_url"],
        help=f"read-model API base URL (env SLOTFLOW_API_URL, default {DEFAULT_API_URL})",
    )
    parser.add_argument(
        "--token",
        metavar="TOKEN",
        default=defaults["token"],
        # The value is never echoed: --help says where it comes from, not what it is.
        help="API bearer token (env SLOTFLOW_TOKEN; `slotflow token create` makes one)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        default=defaults["timeout"],
        help="give up on the API or Kafka after this long (default 10)",
    )
    parser.add_argument(
        "--via",
        choices=("api", "kafka"),
        default=defaults["via"],
        help="where commands go: through the API with the token's scope (default; env SLOTFLOW_CLI_VIA), "
        "or straight to Kafka, signed with a registered key",
    )
    parser.add_argument(
        "--signing-key",
        metavar="FILE",
        default=defaults["signing_key"],
        help="with --via kafka: the private key file (env SLOTFLOW_SIGNING_KEY_FILE; `slotflow key create`)",
    )
    parser.add_argument(
        "--signing-principal",
        metavar="PRINCIPAL",
        default=defaults["signing_principal"],
        help="with --via kafka: the principal that key is registered for, key:NAME "
        "(env SLOTFLOW_SIGNING_PRINCIPAL)",
    )


def _leaf(
    actions: Any, name: str, handler: str, help_text: str, description: str | None = None
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = actions.add_parser(
        name,
        help=help_text,
        description=description or help_text,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _global_options(parser, on_leaf=True)
    parser.set_defaults(handler_name=handler)
    return parser


def _command_options(parser: argparse.ArgumentParser, *, wait: float = 0.0) -> None:
    parser.add_argument(
        "--command-id",
        metavar="ID",
        help="idempotency key: publishing the same id twice applies the command once (default: a new id)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        metavar="SECONDS",
        default=wait,
        help="after sending, wait up to SECONDS for the command to be accepted or rejected (asks the API)"
        + (f"; default {wait:g}, 0 to only send" if wait else ""),
    )


def _strict(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse (exit 1, nothing published) when no live claimer serves the handler; "
        "without it a warning is printed",
    )


def _paging(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit", type=int, default=50, metavar="N", help="rows per page, 1..500 (default 50)"
    )
    parser.add_argument("--cursor", metavar="CURSOR", help="continue from a previous page's next cursor")
    parser.add_argument("--all", action="store_true", help="follow every page")


def _definition_flags(parser: argparse.ArgumentParser, *, patch: bool = False) -> None:
    spec = parser.add_argument_group("when it fires (exactly one of --cron, --every, --at)")
    spec.add_argument("--cron", metavar="EXPR", help="cron, 5 fields or 6 with seconds first: '0 2 * * *'")
    spec.add_argument("--tz", metavar="ZONE", help="IANA time zone of --cron (default UTC): Europe/Berlin")
    spec.add_argument("--every", metavar="DURATION", help="fixed interval on a grid: 30s, 15m, 1h30m, 1d")
    spec.add_argument("--anchor", metavar="TIME", help="grid origin of --every (default 2000-01-01T00:00Z)")
    spec.add_argument("--at", metavar="TIME", help="one slot at this time (ISO 8601 with offset)")
    what = parser.add_argument_group("what it runs")
    what.add_argument("--handler", required=not patch, metavar="NAME", help="registered handler name")
    what.add_argument("--payload", metavar="JSON", help="JSON object given to the handler, or @file.json")
    what.add_argument("--tag", action="append", metavar="TAG", help="label for filtering (repeatable)")
    policy = parser.add_argument_group("policies (unset flags keep the defaults)")
    policy.add_argument(
        "--misfire", choices=("fire_all", "fire_once", "skip"), help="missed slots (default fire_once)"
    )
    policy.add_argument("--max-catch-up", type=int, metavar="N", help="fire_all runs at most N missed slots")
    policy.add_argument(
        "--catch-up-window", metavar="DURATION", help="never run slots older than this (default 1d)"
    )
    policy.add_argument("--grace", metavar="DURATION", help="late but not missed within this (default 60s)")
    policy.add_argument(
        "--overlap",
        choices=("allow", "skip", "buffer_one", "buffer_all", "cancel_previous"),
        help="previous run still running",
    )
    policy.add_argument("--retry-base", metavar="DURATION", help="first back-off ceiling (default 1s)")
    policy.add_argument("--retry-cap", metavar="DURATION", help="largest back-off (default 120s)")
    policy.add_argument(
        "--max-attempts",
        type=int,
        metavar="N",
        help="attempts before dead-lettering (default 5; 0: no limit)",
    )
    policy.add_argument(
        "--backoff-coefficient",
        type=float,
        metavar="X",
        help="how fast the back-off ceiling grows per retry, up to --retry-cap (default 2; 1: constant)",
    )
    policy.add_argument(
        "--non-retryable", action="append", metavar="ERROR", help="error type never retried (repeatable)"
    )
    policy.add_argument("--start-to-close", metavar="DURATION", help="one attempt's time limit (default 5m)")
    policy.add_argument(
        "--heartbeat-timeout",
        metavar="DURATION",
        help="fail an attempt silent this long (no ctx.heartbeat); retried by the policy (default: none)",
    )
    policy.add_argument(
        "--dst-repeated", choices=("first", "last", "both"), help="a local time that happens twice"
    )
    policy.add_argument(
        "--dst-nonexistent", choices=("shift", "skip"), help="a local time that never happens"
    )
    policy.add_argument(
        "--jitter", metavar="DURATION", help="fire each slot up to this much late (fixed per slot)"
    )
    policy.add_argument("--start-at", metavar="TIME", help="no slots before this time")
    policy.add_argument("--end-at", metavar="TIME", help="no slots at or after this time")


def _schedule(groups: Any) -> None:
    parser = groups.add_parser("schedule", help="create, change and inspect schedules")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = _leaf(
        actions,
        "create",
        "slotflow.cli.commanding:schedule_create",
        "create a schedule (publishes CreateSchedule)",
    )
    create.add_argument("schedule_id", metavar="SCHEDULE_ID")
    _definition_flags(create)
    create.add_argument("--paused", action="store_true", help="create it paused")
    _strict(create)
    _command_options(create)

    update = _leaf(
        actions,
        "update",
        "slotflow.cli.updating:schedule_update",
        "change the fields given, keep the rest (publishes UpdateSchedule with a patch)",
        "Change only what the flags say; everything else keeps its current value. --tz or --anchor "
        "alone change the current cron's zone or interval's grid; --payload replaces the payload "
        "whole. Prints what changes before sending it.",
    )
    update.add_argument("schedule_id", metavar="SCHEDULE_ID")
    _definition_flags(update, patch=True)
    _strict(update)
    _command_options(update)

    listing = _leaf(actions, "list", "slotflow.cli.querying:schedule_list", "list schedules")
    state = listing.add_mutually_exclusive_group()
    state.add_argument("--paused", dest="paused", action="store_const", const=True, help="only paused ones")
    state.add_argument("--active", dest="paused", action="store_const", const=False, help="only active ones")
    listing.add_argument("--tag", metavar="TAG", help="only schedules with this tag")
    listing.add_argument("--handler", metavar="NAME", help="only schedules running this handler")
    listing.add_argument("--id-prefix", metavar="PREFIX", help="only schedules whose id starts with this")
    _paging(listing)

    show = _leaf(actions, "show", "slotflow.cli.querying:schedule_show", "one schedule with its next slots")
    show.add_argument("schedule_id", metavar="SCHEDULE_ID")

    pause = _leaf(actions, "pause", "slotflow.cli.commanding:schedule_pause", "stop firing until resumed")
    pause.add_argument("schedule_id", metavar="SCHEDULE_ID", nargs="+", help="one or more, one command each")
    pause.add_argument("--reason", default="", help="why (shown in list and the dashboard)")
    pause.add_argument("--resume-at", metavar="TIME", help="resume by itself at this time")
    _command_options(pause)

    for name, handler, text in (
        (
            "resume",
            "slotflow.cli.commanding:schedule_resume",
            "fire again; slots that passed while paused are skipped (reason paused) unless --catch-up",
        ),
        ("delete", "slotflow.cli.commanding:schedule_delete", "stop and remove a schedule (its runs stay)"),
        ("trigger", "slotflow.cli.commanding:schedule_trigger", "run once now, outside the spec"),
    ):
        leaf = _leaf(actions, name, handler, text)
        if name == "resume":
            leaf.add_argument(
                "schedule_id", metavar="SCHEDULE_ID", nargs="+", help="one or more, one command each"
            )
            leaf.add_argument(
                "--catch-up",
                action="store_true",
                help="run the slots that passed while paused under the misfire policy instead of "
                "skipping them",
            )
        else:
            leaf.add_argument("schedule_id", metavar="SCHEDULE_ID")
        _command_options(leaf)

    rerun = _leaf(
        actions,
        "rerun",
        "slotflow.cli.repairing:schedule_rerun",
        "run slots in [--from, --to] again with the schedule's current definition",
        "Run the slots in [--from, --to] again with the schedule's CURRENT definition (a handler fixed\n"
        "by `schedule update`, a new payload or policy). Dead-lettered, failed, missed and skipped\n"
        "slots are re-run under their own run id; a running slot is left out, and a completed one\n"
        "too unless --force, which runs its effect again as a new run `<run id>#rerun-<n>`.\n"
        "--dry-run shows what it would touch and leaves out, and why; nothing is published.",
    )
    mark = _leaf(
        actions,
        "mark",
        "slotflow.cli.repairing:schedule_mark",
        "mark slots in [--from, --to] done or skipped, with a reason (no effect runs)",
        "Record the slots in [--from, --to] as done (handled by hand) or skipped, with a reason; no\n"
        "effect runs. Slots whose run is in progress or completed are left out, with the reason.\n"
        "The audit shows `marked done by <you>: <reason>`; a marked slot may still be re-run.",
    )
    for repair in (rerun, mark):
        repair.add_argument("schedule_id", metavar="SCHEDULE_ID")
        repair.add_argument(
            "--from",
            dest="start",
            required=True,
            metavar="TIME",
            help="the first slot (e.g. 2026-12-02T02:00:00Z)",
        )
        repair.add_argument(
            "--to", dest="end", metavar="TIME", help="the last slot, inclusive (default: --from)"
        )
        repair.add_argument(
            "--reason", required=True, help="why: recorded with the repair, shown in the audit"
        )
        repair.add_argument(
            "--dry-run", action="store_true", help="show what it would touch and leave out; publish nothing"
        )
        _command_options(repair)
    mark.add_argument(
        "mark",
        choices=("done", "skipped"),
        help="what the slots are marked: done (handled by hand) or skipped",
    )
    rerun.add_argument(
        "--force",
        action="store_true",
        help="also re-run completed slots: each runs its effect AGAIN, as a new run <run id>#rerun-<n>",
    )

    backfill = _leaf(
        actions,
        "backfill",
        "slotflow.cli.backfilling:schedule_backfill",
        "run every slot of the spec in [start, end)",
        "Run every slot of the spec in [start, end). The runs follow the backfill's own overlap "
        "policy, not the schedule's: by default one after another in slot order.",
    )
    backfill.add_argument("schedule_id", metavar="SCHEDULE_ID")
    backfill.add_argument(
        "--start", required=True, metavar="TIME", help="first slot at or after (e.g. now-3d)"
    )
    backfill.add_argument("--end", required=True, metavar="TIME", help="slots before this time")
    backfill.add_argument(
        "--max-slots", type=int, default=1000, metavar="N", help="refuse more slots (default 1000)"
    )
    backfill.add_argument(
        "--overlap",
        dest="backfill_overlap",
        default="buffer_all",
        choices=("buffer_all", "allow", "skip", "buffer_one", "cancel_previous"),
        help="what a backfilled run does while another run of the schedule runs (default buffer_all: "
        "wait its turn, in slot order)",
    )
    backfill.add_argument(
        "--max-concurrent",
        type=int,
        default=1,
        metavar="N",
        help="with buffer_all: how many backfilled runs may run at once (default 1)",
    )
    backfill.add_argument(
        "--dry-run", action="store_true", help="list the runs it would create; publish nothing"
    )
    backfill.add_argument(
        "--follow",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="after publishing, wait up to SECONDS for every slot's run to finish and print the "
        "summary (fired, skipped, failed); exit 1 if any failed",
    )
    _command_options(backfill)


def _workflow(groups: Any) -> None:
    parser = groups.add_parser("workflow", help="start, signal, cancel, inspect and check workflows")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    start = _leaf(
        actions,
        "start",
        "slotflow.cli.commanding:workflow_start",
        "start a workflow (publishes StartWorkflow)",
    )
    start.add_argument("workflow_id", metavar="WORKFLOW_ID")
    start.add_argument(
        "--type", dest="workflow_type", required=True, metavar="TYPE", help="registered workflow type"
    )
    start.add_argument("--input", metavar="JSON", help="JSON object given to the workflow, or @file.json")
    start.add_argument(
        "--execution-timeout",
        type=float,
        metavar="SECONDS",
        help="fail the run (WorkflowTimedOut) if it has not ended this long after its start",
    )
    start.add_argument(
        "--id-reuse-policy",
        choices=("reject_duplicate", "allow_after_close", "terminate_running"),
        default="reject_duplicate",
        help="when the id is taken: refuse (default), start a new run once the last one closed, or "
        "terminate the open run and start a new one",
    )
    start.add_argument("--memo", metavar="JSON", help="JSON object shown with the workflow, or @file.json")
    start.add_argument(
        "--search-attribute",
        dest="search_attributes",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a search attribute to find the workflow by (repeat for more): VALUE as JSON (5 an int, "
        '2.5 a float, true a bool, ["a","b"] a keyword list, {"type":"datetime","value":"..."} typed), '
        "else a keyword string",
    )
    _command_options(start)

    signal = _leaf(
        actions,
        "signal",
        "slotflow.cli.commanding:workflow_signal",
        "deliver a named signal to a running workflow",
    )
    signal.add_argument("workflow_id", metavar="WORKFLOW_ID")
    signal.add_argument("signal", metavar="SIGNAL")
    signal.add_argument("--payload", metavar="JSON", help="JSON object sent with the signal, or @file.json")
    signal.add_argument("--start-command-id", metavar="COMMAND_ID", help=RUN_OF_START_HELP)
    _command_options(signal)

    cancel = _leaf(
        actions,
        "cancel",
        "slotflow.cli.bulk_workflows:cancel",
        "ask a workflow, or every one a selection takes, to stop (compensations run)",
        "Cancel WORKFLOW_ID: its compensations run, newest first, and it ends cancelled.\n"
        "With a selection (--type, --status, several ids, --all) every open workflow it takes gets\n"
        "its own CancelWorkflow, through the api; closed ones and those compensating already are\n"
        "left out, with the count. --dry-run shows what it would take; nothing is published.",
    )
    terminate = _leaf(
        actions,
        "terminate",
        "slotflow.cli.bulk_workflows:terminate",
        "end a workflow, or every one a selection takes, now, without its code or compensations",
        "Terminate WORKFLOW_ID: it ends now, its code and compensations unrun. With a selection\n"
        "(--type, --status, several ids, --all) every open workflow it takes gets its own\n"
        "TerminateWorkflow, through the api: a compensating one ends with its compensations\n"
        "unfinished (the answer counts them). --dry-run shows what it would take; nothing is published.",
    )
    for ending in (cancel, terminate):
        ending.add_argument("workflow_ids", metavar="WORKFLOW_ID", nargs="*", help="the workflow(s)")
        ending.add_argument("--reason", default="", help="why (required with a selection)")
        ending.add_argument("--start-command-id", metavar="COMMAND_ID", help=RUN_OF_START_HELP + " (one id)")
        ending.add_argument("--type", dest="workflow_type", metavar="TYPE", help="select workflows of TYPE")
        ending.add_argument(
            "--status", metavar="STATUS", help="select workflows in STATUS (running, stuck, ...)"
        )
        ending.add_argument(
            "--all",
            action="store_true",
            help="mean every workflow (of --status): required when no id or --type narrows it",
        )
        ending.add_argument(
            "--limit", type=int, metavar="N", help="take at most N workflows, oldest first (default 500)"
        )
        ending.add_argument(
            "--dry-run", action="store_true", help="show what it would take and leave out; publish nothing"
        )
        _command_options(ending)

    retry = _leaf(
        actions,
        "retry-activity",
        "slotflow.cli.commanding:workflow_retry_activity",
        "retry a parked activity (only while the workflow still waits on it)",
        'Retry the activity the workflow parked at SEQUENCE (on_dead_letter="park"; `workflow show`\n'
        "lists it under `waiting`). The orchestrator retries it only while the workflow still waits on\n"
        "that exact activity and it is parked; otherwise the command is rejected with the reason.",
    )
    retry.add_argument("workflow_id", metavar="WORKFLOW_ID")
    retry.add_argument(
        "sequence", type=int, metavar="SEQUENCE", help="the activity's sequence in the history"
    )
    retry.add_argument("--reason", default="", help="why (kept with the command)")
    _command_options(retry)

    listing = _leaf(actions, "list", "slotflow.cli.querying:workflow_list", "list workflows")
    listing.add_argument("--type", dest="workflow_type", metavar="TYPE")
    listing.add_argument("--status", metavar="STATUS")
    listing.add_argument("--from", dest="start", metavar="TIME", help="started at or after")
    listing.add_argument("--to", dest="end", metavar="TIME", help="started before")
    listing.add_argument(
        "--attention",
        nargs="?",
        const="1h",
        metavar="AGE",
        help="only the workflows that need an operator: stuck on a non-determinism, waiting on a "
        "parked activity, or waiting on a signal for longer than AGE (default 1h; 30m, 2d, seconds "
        "or ISO 8601)",
    )
    listing.add_argument(
        "--query",
        metavar="QUERY",
        help="a condition on built-in fields and search attributes, e.g. \"Customer = 'acme' AND "
        'ExecutionStatus = \'Running\'" (docs/api.md, "Listing workflows by a query")',
    )
    _paging(listing)

    show = _leaf(
        actions,
        "show",
        "slotflow.cli.workflows:workflow_show",
        "status, current step, pending work and compensations",
    )
    show.add_argument("workflow_id", metavar="WORKFLOW_ID")

    query = _leaf(
        actions,
        "query",
        "slotflow.cli.workflows:workflow_query",
        "ask a workflow's @workflow.query handler (reads its state; records nothing)",
    )
    query.add_argument("workflow_id", metavar="WORKFLOW_ID")
    query.add_argument("query", metavar="QUERY", help="the handler's name")
    query.add_argument(
        "--arg", metavar="JSON", help='the handler\'s argument as JSON ("mug", 3, {...}), or @file.json'
    )
    query.add_argument("--start-command-id", metavar="COMMAND_ID", help=RUN_OF_START_HELP)

    history = _leaf(
        actions,
        "history",
        "slotflow.cli.workflows:workflow_history",
        "the workflow's recorded history, in order",
    )
    history.add_argument("workflow_id", metavar="WORKFLOW_ID")
    history.add_argument(
        "--origin",
        choices=("history", "command", "activity", "timer"),
        help="only entries from this source (history: the typed workflow history)",
    )

    check = _leaf(
        actions,
        "check",
        "slotflow.cli.checking:workflow_check",
        "find determinism traps in workflow code before deploy (exit 1 on findings)",
        "Read the workflow classes (decorated with workflow.defn) of each MODULE, without importing\n"
        "it, and report every use of the host clock, random, uuid1/uuid4, the environment, direct\n"
        "I/O (files, sockets, HTTP, database and Kafka clients), subprocesses, threads and asyncio\n"
        "tasks or sleeps the runtime does not own, as file:line:col with what to use instead.\n"
        "Module-level functions the workflow calls are checked too. Exit 0: no findings; 1: findings\n"
        "or nothing to check. A line ending in `# workflow-check: ignore` is not reported.",
    )
    check.add_argument(
        "modules",
        nargs="+",
        metavar="MODULE",
        help="dotted module or package (examples.orders), or a .py file or directory",
    )


def _runs(groups: Any) -> None:
    parser = groups.add_parser("runs", help="inspect runs (one per slot, with every attempt)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = _leaf(
        actions,
        "list",
        "slotflow.cli.querying:runs_list",
        "list runs, of one schedule by slot range or across jobs",
    )
    listing.add_argument(
        "--schedule", metavar="SCHEDULE_ID", help="runs of this schedule (slot range with --from/--to)"
    )
    listing.add_argument("--job", metavar="JOB_ID", help="runs of this job id (a schedule or a workflow)")
    listing.add_argument("--state", metavar="STATE", help="only runs in this state")
    listing.add_argument("--from", dest="start", metavar="TIME", help="slots at or after (with --schedule)")
    listing.add_argument("--to", dest="end", metavar="TIME", help="slots before (with --schedule)")
    _paging(listing)
    show = _leaf(actions, "show", "slotflow.cli.querying:runs_show", "one run with every attempt")
    show.add_argument("run_id", metavar="RUN_ID", help="e.g. merchant-payouts@2026-12-02T02:00:00Z")


#: A dead letter's statuses (docs/dlq.md).
DLQ_STATUSES = ("parked", "redriving", "redriven", "redrive_failed", "discarded")


def _selection(parser: argparse.ArgumentParser) -> None:
    pick = parser.add_argument_group("which dead letters (at least one, or --all)")
    pick.add_argument(
        "--id", dest="ids", action="append", metavar="DEAD_LETTER_ID", help="this one (repeatable)"
    )
    pick.add_argument("--source", metavar="SERVICE", help="parked by this service")
    pick.add_argument("--topic", metavar="TOPIC", help="from this original topic")
    pick.add_argument(
        "--failure-reason", metavar="REASON", help="parked for this reason (invalid_payload, ...)"
    )
    pick.add_argument("--job", metavar="JOB_ID", help="of this job")
    pick.add_argument("--run", metavar="RUN_ID", help="of this run")
    pick.add_argument("--workflow", metavar="WORKFLOW_ID", help="of this workflow's parked activities")
    pick.add_argument(
        "--status",
        choices=DLQ_STATUSES,
        help="in this status (default: parked); alone it still means every letter of it: add a filter or --all",
    )
    pick.add_argument("--since", metavar="TIME", help="parked at or after (alone: add a filter or --all)")
    pick.add_argument("--until", metavar="TIME", help="parked before")
    pick.add_argument(
        "--all", dest="select_all", action="store_true", help="every parked message (no filter)"
    )
    parser.add_argument(
        "--limit", type=int, default=1000, metavar="N", help="act on at most N (default 1000)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="show how many it would touch and the first of them (asks the API), and publish nothing",
    )


def _dlq(groups: Any) -> None:
    parser = groups.add_parser("dlq", help="inspect, redrive and discard dead letters")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = _leaf(actions, "list", "slotflow.cli.querying:dlq_list", "list dead letters")
    listing.add_argument("--status", choices=DLQ_STATUSES)
    listing.add_argument("--reason", metavar="REASON", help="parked for this reason")
    listing.add_argument("--topic", metavar="TOPIC")
    listing.add_argument("--source", metavar="SERVICE")
    listing.add_argument("--job", metavar="JOB_ID")
    listing.add_argument("--run", metavar="RUN_ID")
    listing.add_argument("--workflow", metavar="WORKFLOW_ID")
    _paging(listing)
    show = _leaf(
        actions, "show", "slotflow.cli.querying:dlq_show", "one dead letter with its origin and error"
    )
    show.add_argument("dead_letter_id", metavar="DEAD_LETTER_ID")
    redrive = _leaf(
        actions,
        "redrive",
        "slotflow.cli.commanding:dlq_redrive",
        "ask each dead letter's owner to carry it through again",
        "Ask the owner of each selected letter to redrive it: a schedule's dead-lettered run is reopened\n"
        "by the claimer from its own record (--definition as_run) or re-issued by the ticker from the\n"
        "schedule's current definition (--definition current); a poison record is read back from its\n"
        "topic by the service that consumes it. Each letter reads `redriving` until its owner answers,\n"
        "then `redriven` or `redrive_failed` with the reason (`dlq list`, `dlq show`). A workflow's parked\n"
        "activity is left out of a bulk redrive: name it with --id, or `workflow retry-activity`.\n"
        'Prints what was done ("redrove N dead letter(s)"); a selection matching nothing exits 1.',
    )
    _selection(redrive)
    redrive.add_argument(
        "--definition",
        choices=("as_run", "current"),
        default="as_run",
        help="a schedule's run: the JobDue it ran with (as_run, default), or its schedule's current definition",
    )
    _command_options(redrive, wait=10.0)
    discard = _leaf(actions, "discard", "slotflow.cli.commanding:dlq_discard", "mark dead letters discarded")
    _selection(discard)
    discard.add_argument("--reason", required=True, help="why they are discarded (kept with them)")
    _command_options(discard, wait=10.0)


def _token(groups: Any) -> None:
    parser = groups.add_parser("token", help="API tokens: create, list, revoke (needs an admin token)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = _leaf(
        actions,
        "create",
        "slotflow.cli.tokens:token_create",
        "create a token and print its secret (shown only once)",
        "Create an API token. Scopes nest: admin (define schedules, manage tokens) implies operate "
        "(pause, resume, trigger, backfill, signal, cancel, terminate, redrive, discard), which "
        "implies read. The secret is printed once on stdout; only its digest is stored.",
    )
    create.add_argument("--name", required=True, metavar="NAME", help="who or what holds it: oncall, ci, ...")
    create.add_argument("--scope", required=True, choices=("read", "operate", "admin"))
    listing = _leaf(actions, "list", "slotflow.cli.tokens:token_list", "list tokens (never their secrets)")
    listing.add_argument("--revoked", action="store_true", help="include revoked tokens")
    revoke = _leaf(actions, "revoke", "slotflow.cli.tokens:token_revoke", "revoke a token by id or name")
    revoke.add_argument("which", metavar="TOKEN_ID_OR_NAME")


def _key(groups: Any) -> None:
    parser = groups.add_parser(
        "key", help="signing keys for commands sent straight to Kafka: create, list, revoke (needs admin)"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = _leaf(
        actions,
        "create",
        "slotflow.cli.keys:key_create",
        "make a key pair here, register its public half, and write the private one to a file",
        "Make an Ed25519 key pair on this machine, register its public half with the API for the "
        "principal key:NAME and the scope given (the private half never leaves this machine), and "
        "write the private half to --out (mode 0600, never overwritten). Commands signed with it "
        "(`--via kafka`) are proven as key:NAME where signatures are required.",
    )
    create.add_argument(
        "--name", required=True, metavar="NAME", help="who or what holds it: alice, billing-batch, ..."
    )
    create.add_argument("--scope", required=True, choices=("read", "operate", "admin"))
    create.add_argument(
        "--out", metavar="FILE", help="where the private key goes (default: ./slotflow-key-NAME.pem)"
    )
    create.add_argument(
        "--public-key",
        metavar="BASE64URL",
        help="register this public key (made elsewhere) instead of making a pair here",
    )
    listing = _leaf(actions, "list", "slotflow.cli.keys:key_list", "list signing keys (public halves)")
    listing.add_argument("--revoked", action="store_true", help="include revoked keys")
    revoke = _leaf(
        actions,
        "revoke",
        "slotflow.cli.keys:key_revoke",
        "revoke a key by id or name: every service refuses it",
    )
    revoke.add_argument("which", metavar="KEY_ID_OR_NAME")


def _downstream(groups: Any) -> None:
    parser = groups.add_parser(
        "downstream", help="the claimers' retry budgets and circuit breakers per downstream"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    module = "slotflow.cli.downstreams"
    _leaf(actions, "list", f"{module}:downstream_list", "every downstream: circuit, budget, held runs")
    show = _leaf(actions, "show", f"{module}:downstream_show", "one downstream: held runs and changes")
    show.add_argument("name", metavar="DOWNSTREAM")
    opening = _leaf(
        actions,
        "open",
        f"{module}:downstream_open",
        "open its circuit by hand: runs that need it are held until it is closed",
    )
    closing = _leaf(
        actions, "close", f"{module}:downstream_close", "close its circuit: held runs resume in slot order"
    )
    for leaf in (opening, closing):
        leaf.add_argument("name", metavar="DOWNSTREAM")
        leaf.add_argument("--reason", required=True, help="why (kept with the change)")
        _command_options(leaf)
    configure = _leaf(
        actions,
        "configure",
        f"{module}:downstream_configure",
        "set its own budget and breaker settings (flags left out keep the claimers' defaults)",
    )
    configure.add_argument("name", metavar="DOWNSTREAM")
    configure.add_argument("--retry-ratio", type=float, metavar="R", help="retries per first attempt")
    configure.add_argument("--min-retries-per-second", type=float, metavar="N", help="the budget's floor")
    configure.add_argument("--window-seconds", type=float, metavar="S", help="the sliding window")
    configure.add_argument("--failure-rate", type=float, metavar="R", help="failures/calls that open it")
    configure.add_argument("--min-volume", type=int, metavar="N", help="fewest calls before it may open")
    configure.add_argument("--cooldown-seconds", type=float, metavar="S", help="open this long, then probe")
    configure.add_argument("--probes", type=int, metavar="N", help="attempts let through half-open")
    _command_options(configure)


def _audit(groups: Any) -> None:
    audit = _leaf(
        groups,
        "audit",
        "slotflow.cli.querying:audit",
        "compare the slots a schedule should have fired with what was recorded",
        "Compare the slots a schedule should have fired (its spec and policy) with the recorded runs:\n"
        "fired, missed, skipped_by_policy, late and duplicated_effect slots.",
    )
    audit.add_argument("schedule_id", metavar="SCHEDULE_ID")
    audit.add_argument("--from", dest="start", default="now-1d", metavar="TIME", help="default now-1d")
    audit.add_argument("--to", dest="end", default="now", metavar="TIME", help="default now")
    audit.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if any slot was missed or had a duplicated effect, or a run dead-lettered",
    )


def _replay(groups: Any) -> None:
    replay = _leaf(
        groups,
        "replay",
        "slotflow.cli.replaying:replay",
        "replay recorded workflow histories against the current code (exit 1 on a mismatch)",
        "Replay recorded histories against the workflow classes of the modules named with --module\n"
        "(imported like a claimer imports its handler modules), exactly as the orchestrator replays\n"
        "them after a crash, acting on nothing. Each history is first checked (gap-free from #1,\n"
        "nothing after the end); each of its runs is then replayed. The first mismatch prints its\n"
        "diff (sequence, what the history recorded, what the code did) and exits 1: deploying that\n"
        "code would stop the workflow.\n"
        "Histories: a JSON file (envelopes or `workflow history --json` output, a list, or JSON\n"
        "lines), the workflow-history topic (SLOTFLOW_KAFKA_*; --type / --workflow-id filter), or\n"
        "one WORKFLOW_ID from the read-model API.\n"
        "Without --module, `replay WORKFLOW_ID` lists what a replay hands back to the code, decision\n"
        "by decision, and exits 1 on an open NonDeterminismDetected (the workflow is stopped).",
    )
    replay.add_argument(
        "workflow_id", nargs="?", metavar="WORKFLOW_ID", help="this workflow's history, from the API"
    )
    source = replay.add_argument_group("where the histories come from (exactly one)")
    source.add_argument(
        "--file", metavar="PATH", help="a JSON (or JSON lines) file of history events; - is stdin"
    )
    source.add_argument(
        "--topic", action="store_true", help="the workflow-history topic, read to its current end"
    )
    pick = replay.add_argument_group("which histories (repeatable; default all)")
    pick.add_argument(
        "--type", dest="workflow_types", action="append", metavar="TYPE", help="of this workflow type"
    )
    pick.add_argument(
        "--workflow-id", dest="workflow_ids", action="append", metavar="ID", help="this workflow"
    )
    payloads = replay.add_argument_group("large payloads stored by reference (only when a history has them)")
    payloads.add_argument(
        "--payloads-dsn", metavar="DSN", help="PostgreSQL holding the payload table (postgresql://...)"
    )
    payloads.add_argument(
        "--payloads-schema",
        default="orchestrator",
        metavar="SCHEMA",
        help="schema of the payload table (default orchestrator)",
    )
    replay.add_argument(
        "--module",
        dest="modules",
        action="append",
        metavar="MODULE",
        help="import the workflow classes from this module or package (repeatable, or comma-separated)",
    )


def _stack(groups: Any) -> None:
    parser = groups.add_parser("stack", help="the local devstack (Kafka + PostgreSQL on loopback)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    _leaf(actions, "up", STACK, "start Kafka and PostgreSQL (prints the env exports)")
    down = _leaf(actions, "down", STACK, "stop them")
    down.add_argument("--clean", action="store_true", help="also delete their data")
    _leaf(actions, "status", STACK, "are they running (exit 0) or not (3)")


def _db(groups: Any) -> None:
    parser = groups.add_parser("db", help="PostgreSQL set-up an operator runs once (roles, schemas)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    roles = _leaf(
        actions,
        "bootstrap-roles",
        BOOTSTRAP_ROLES,
        "create one role per service, owning its schema, with read grants where a service reads another",
        description="Create (or bring up to date) one login role per service (ticker, claimer, orchestrator,\n"
        "dlq, stats, api), each owning its schema and nothing else, plus the read grants the code needs\n"
        "(orchestrator reads claimer, api reads stats). Idempotent. Connect as a role that may create\n"
        "roles. Set each role's password afterwards (psql: \\password slotflow_ticker).",
    )
    roles.add_argument(
        "--dsn",
        metavar="DSN",
        help="administrator connection (default SLOTFLOW_PG_ADMIN_DSN, then SLOTFLOW_PG_DSN)",
    )
    roles.add_argument(
        "--prefix",
        default="slotflow_",
        metavar="PREFIX",
        help="role names are PREFIX + service (default slotflow_)",
    )
    roles.add_argument(
        "--print",
        dest="print_sql",
        action="store_true",
        help="print the SQL (for psql) instead of running it",
    )
