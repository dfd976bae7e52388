"""Handlers that send commands: schedules, workflows and the dead-letter queue.

Each builds the contract message from flags (bad input is a `UsageError` before anything is sent),
sends it through the api with the caller's token (or, with `--via kafka`, signed straight to
Kafka), and with `--wait` asks the API whether it was accepted.
"""

import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from slotflow.cli.context import Context
from slotflow.cli.errors import CliError, CommandRejected, UsageError
from slotflow.cli.output import PREVIEW_COLUMNS
from slotflow.cli.parsing import build_definition, build_spec, parse_instant, parse_json_object, validated
from slotflow.cli.publishing import OPEN_STATUSES, Published, publish, submit_via_api, wait_for_outcome
from slotflow.cli.serving import check_handler
from slotflow.contracts import (
    CancelWorkflow,
    CreateSchedule,
    DeadLetterFilter,
    DeleteSchedule,
    DiscardDeadLetters,
    Message,
    PauseSchedule,
    RedriveDeadLetters,
    ResumeSchedule,
    RetryActivity,
    ScheduleDefinition,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
    TriggerNow,
)
from slotflow.contracts.envelope import IDENTIFIER_PATTERN
from slotflow.contracts.search import SearchAttribute, typed_search_attributes

_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)


def identifier(value: str, what: str) -> str:
    """``value`` if it is a valid slotflow identifier, else a `UsageError` saying what is allowed."""
    if not _IDENTIFIER.fullmatch(value):
        raise UsageError(
            f"{what} {value!r} is not a valid identifier: start with a letter or digit, then up to 199 of "
            "letters, digits and . _ : / @ + -"
        )
    return value


def _deliver(ctx: Context, message: Message) -> Published:
    """``message`` sent the way the caller chose: through the api with the token's scope (the
    default), or signed straight to Kafka (`--via kafka`)."""
    args = ctx.args
    if ctx.via_kafka:
        signer = ctx.signer()
        return publish(ctx.kafka(), message, command_id=args.command_id, timeout=ctx.timeout, signer=signer)
    with ctx.api() as api:
        return submit_via_api(
            api,
            ctx.kafka(),
            message,
            command_id=args.command_id,
            select_all=bool(getattr(args, "select_all", False)),
        )


def send(ctx: Context, message: Message) -> int:
    """Send ``message``, optionally wait for its outcome, and print what happened."""
    args = ctx.args
    wait = float(getattr(args, "wait", 0.0) or 0.0)
    if wait < 0:
        raise UsageError(f"--wait must not be negative, got {wait:g}")
    published = _deliver(ctx, message)
    if wait > 0:
        try:
            with ctx.api() as api:
                published = wait_for_outcome(api, published, wait=wait)
        except CommandRejected:
            raise
        except CliError as err:
            raise CliError(
                f"command {published.command_id} was published to {published.topic}, "
                f"but its outcome could not be read: {err}"
            ) from None
    if ctx.as_json:
        ctx.emit_json(published.as_json())
    else:
        pairs = [
            ("command_id", published.command_id),
            ("type", published.command_type),
            ("topic", published.topic),
            ("key", published.key),
        ]
        if published.status is not None:
            pairs.append(("status", published.status))
        if published.summary:
            # What the consumer did, as it said it: "redrove 3 dead letter(s); ...".
            pairs.append(("result", published.summary))
        ctx.emit_fields(pairs)
    if published.status in OPEN_STATUSES:
        ctx.note(
            f"command {published.command_id} is still {published.status} after {wait:g} s: is the service that owns "
            f"{published.topic} running?"
        )
    return 0


def _definition(ctx: Context) -> ScheduleDefinition:
    a = ctx.args
    spec = build_spec(cron=a.cron, every=a.every, at=a.at, tz=a.tz, anchor=a.anchor)
    return build_definition(
        spec=spec,
        handler=identifier(a.handler, "--handler"),
        payload=a.payload,
        misfire=a.misfire,
        max_catch_up=a.max_catch_up,
        catch_up_window=a.catch_up_window,
        grace=a.grace,
        overlap=a.overlap,
        retry_base=a.retry_base,
        retry_cap=a.retry_cap,
        max_attempts=a.max_attempts,
        backoff_coefficient=a.backoff_coefficient,
        non_retryable=a.non_retryable,
        start_to_close=a.start_to_close,
        heartbeat_timeout=a.heartbeat_timeout,
        dst_repeated=a.dst_repeated,
        dst_nonexistent=a.dst_nonexistent,
        jitter=a.jitter,
        start_at=a.start_at,
        end_at=a.end_at,
        tags=a.tag,
    )


def _schedule_id(ctx: Context) -> str:
    return identifier(ctx.args.schedule_id, "SCHEDULE_ID")


def schedule_create(ctx: Context) -> int:
    """`schedule create`: send a CreateSchedule built from the flags."""
    message = CreateSchedule(
        schedule_id=_schedule_id(ctx), definition=_definition(ctx), paused=ctx.args.paused
    )
    check_handler(ctx, message.definition.handler)
    return send(ctx, message)


def _each_schedule(ctx: Context, build: Callable[[str], Message]) -> int:
    """``build``'s command for every SCHEDULE_ID given (a repeated one once), each sent on its own.

    With several, `--command-id ID` becomes `ID:{schedule}` per command (a retry applies each
    once), and a rejection is reported and the rest still sent; the exit code is 1 if any was.
    """
    ids = [identifier(value, "SCHEDULE_ID") for value in dict.fromkeys(ctx.args.schedule_id)]
    messages = [build(sid) for sid in ids]  # every one checked before anything is published
    if len(messages) == 1:
        return send(ctx, messages[0])
    base = ctx.args.command_id
    rejected = 0
    try:
        for sid, message in zip(ids, messages, strict=True):
            ctx.args.command_id = None if base is None else f"{base}:{sid}"
            try:
                send(ctx, message)
            except CommandRejected as err:
                ctx.note(f"{sid}: {err}")
                rejected += 1
    finally:
        ctx.args.command_id = base
    return 1 if rejected else 0


def schedule_pause(ctx: Context) -> int:
    """`schedule pause`: a PauseSchedule per SCHEDULE_ID (with an automatic resume time if given)."""
    resume_at = parse_instant(ctx.args.resume_at, flag="--resume-at") if ctx.args.resume_at else None

    def pause(sid: str) -> Message:
        fields: dict[str, Any] = {"schedule_id": sid, "reason": ctx.args.reason}
        if resume_at is not None:
            fields["resume_at"] = resume_at
        return validated(PauseSchedule, fields, what="pause")

    return _each_schedule(ctx, pause)


def schedule_resume(ctx: Context) -> int:
    """`schedule resume`: a ResumeSchedule per SCHEDULE_ID (`--catch-up`: the paused slots meet
    the misfire policy instead of being skipped)."""
    catch_up = bool(ctx.args.catch_up)
    return _each_schedule(ctx, lambda sid: ResumeSchedule(schedule_id=sid, catch_up=catch_up))


def schedule_delete(ctx: Context) -> int:
    """`schedule delete`: send a DeleteSchedule."""
    return send(ctx, DeleteSchedule(schedule_id=_schedule_id(ctx)))


def schedule_trigger(ctx: Context) -> int:
    """`schedule trigger`: send a TriggerNow (one run now, outside the grid)."""
    return send(ctx, TriggerNow(schedule_id=_schedule_id(ctx)))


def _workflow_id(ctx: Context) -> str:
    return identifier(ctx.args.workflow_id, "WORKFLOW_ID")


def workflow_start(ctx: Context) -> int:
    """`workflow start`: send a StartWorkflow."""
    a = ctx.args
    fields: dict[str, Any] = {
        "workflow_id": _workflow_id(ctx),
        "workflow_type": identifier(a.workflow_type, "--type"),
        "input": parse_json_object(a.input, flag="--input") if a.input is not None else {},
        "id_reuse_policy": a.id_reuse_policy,
    }
    if a.execution_timeout is not None:
        fields["execution_timeout"] = timedelta(seconds=a.execution_timeout)
    if a.memo is not None:
        fields["memo"] = parse_json_object(a.memo, flag="--memo")
    if a.search_attributes:
        fields["search_attributes"] = _search_attributes(a.search_attributes)
    return send(ctx, validated(StartWorkflow, fields, what="start"))


def _search_attributes(pairs: list[str]) -> dict[str, SearchAttribute]:
    """`--search-attribute NAME=VALUE` flags typed: VALUE as JSON when it parses, else a keyword."""
    values: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--search-attribute {pair!r}: give NAME=VALUE")
        if name in values:
            raise UsageError(f"--search-attribute: {name} is given twice")
        try:
            values[name] = json.loads(text)
        except json.JSONDecodeError:
            values[name] = text
    try:
        return typed_search_attributes(values)
    except ValueError as err:
        raise UsageError(f"--search-attribute: {err}") from None


def workflow_signal(ctx: Context) -> int:
    """`workflow signal`: send a SignalWorkflow with its JSON payload."""
    a = ctx.args
    message = SignalWorkflow(
        workflow_id=_workflow_id(ctx),
        signal=identifier(a.signal, "SIGNAL"),
        payload=parse_json_object(a.payload, flag="--payload") if a.payload is not None else {},
        start_command_id=a.start_command_id,
    )
    return send(ctx, message)


def workflow_cancel(ctx: Context) -> int:
    """`workflow cancel WORKFLOW_ID`: send a CancelWorkflow (the workflow compensates and ends)."""
    return send(ctx, validated(CancelWorkflow, _ending(ctx), what="cancel"))


def workflow_retry_activity(ctx: Context) -> int:
    """`workflow retry-activity`: a RetryActivity for a parked activity."""
    fields = {"workflow_id": _workflow_id(ctx), "sequence": ctx.args.sequence, "reason": ctx.args.reason}
    return send(ctx, validated(RetryActivity, fields, what="retry"))


def workflow_terminate(ctx: Context) -> int:
    """`workflow terminate WORKFLOW_ID`: send a TerminateWorkflow (it ends without compensating)."""
    return send(ctx, validated(TerminateWorkflow, _ending(ctx), what="terminate"))


def _ending(ctx: Context) -> dict[str, Any]:
    """The fields of one workflow's cancel or terminate."""
    a = ctx.args
    return {
        "workflow_id": identifier(a.workflow_ids[0], "WORKFLOW_ID"),
        "reason": a.reason,
        "start_command_id": a.start_command_id,
    }


def selection(ctx: Context) -> DeadLetterFilter:
    """The dead letters a redrive or discard acts on, through the guard: a selection must narrow
    (ids, or what a letter is: source, topic, reason, job, run, workflow), or say `--all`; a status
    or a time range alone is another spelling of every letter (`DeadLetterFilter.narrows`)."""
    a = ctx.args
    fields: dict[str, Any] = {
        "ids": tuple(a.ids or ()),
        "source_service": a.source,
        "topic": a.topic,
        "reason": a.failure_reason,
        "job_id": a.job,
        "run_id": a.run,
        "workflow_id": a.workflow,
        "status": a.status,
        "since": parse_instant(a.since, flag="--since") if a.since is not None else None,
        "until": parse_instant(a.until, flag="--until") if a.until is not None else None,
    }
    chosen = validated(
        DeadLetterFilter,
        {name: value for name, value in fields.items() if value not in (None, ())},
        what="selection",
    )
    if chosen.narrows() and a.select_all:
        raise UsageError("--all selects every dead letter; do not combine it with a filter")
    if not chosen.narrows() and not a.select_all:
        spelt = " and ".join(
            flag for flag, value in (("--status", a.status), ("--since/--until", a.since or a.until)) if value
        )
        raise UsageError(
            "say which dead letters: --id, --source, --topic, --failure-reason, --job, --run or --workflow, "
            "or --all for every one" + (f" ({spelt} alone still means every one of them)" if spelt else "")
        )
    return chosen


def _dlq_action(ctx: Context, message: RedriveDeadLetters | DiscardDeadLetters) -> int:
    """Preview (`--dry-run`) or publish a redrive or discard; either says how many it touches."""
    if ctx.args.dry_run:
        return _preview(ctx, message)
    return send(ctx, message)


def _preview(ctx: Context, message: RedriveDeadLetters | DiscardDeadLetters) -> int:
    with ctx.api() as api:
        body = api.run(api.transport.preview(message))
    if ctx.as_json:
        ctx.emit_json(body)
    else:
        action = "redrive" if isinstance(message, RedriveDeadLetters) else "discard"
        pairs = [
            ("dry run", f"a {action} would touch {body['would_touch']} dead letter(s); nothing was published")
        ]
        owners = body.get("owners") or {}
        if owners:
            pairs.append(
                ("owners asked", ", ".join(f"{name} {count}" for name, count in sorted(owners.items())))
            )
        if body.get("refused"):
            pairs.append(("refused", f"{body['refused']}: no owner can redrive them"))
        if body.get("left_out"):
            pairs.append(("left out", f"{body['left_out']} {body.get('left_out_reason') or ''}".strip()))
        ctx.emit_fields(pairs)
        if body.get("items"):
            ctx.out.write("\nfirst of them:\n")
            ctx.emit_table(list(body["items"]), PREVIEW_COLUMNS, empty="")
    if not body["would_touch"]:
        left = body.get("left_out") or 0
        raise CliError(
            "no dead letter matches the selection"
            + (f" ({left} workflows' parked activities left out: name them with --id)" if left else "")
        )
    return 0


def dlq_redrive(ctx: Context) -> int:
    """`dlq redrive`: a RedriveDeadLetters for the selection (or its preview with `--dry-run`)."""
    fields = {
        "selection": selection(ctx),
        "limit": ctx.args.limit,
        "definition": ctx.args.definition,
        "all": ctx.args.select_all,
    }
    return _dlq_action(ctx, validated(RedriveDeadLetters, fields, what="redrive"))


def dlq_discard(ctx: Context) -> int:
    """`dlq discard`: a DiscardDeadLetters for the selection, with its reason (or its preview)."""
    fields = {
        "selection": selection(ctx),
        "reason": ctx.args.reason,
        "limit": ctx.args.limit,
        "all": ctx.args.select_all,
    }
    return _dlq_action(ctx, validated(DiscardDeadLetters, fields, what="discard"))
