"""Schedules: list, show (with the next slots), runs by slot range, and the schedule commands."""

import asyncio
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Path, Query
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, ValidationError

from slotflow.contracts import (
    Backfill,
    CreateSchedule,
    DeleteSchedule,
    MarkSlots,
    PauseSchedule,
    RerunSlots,
    ResumeSchedule,
    ScheduleDefinition,
    TriggerNow,
    UpdateSchedule,
)
from slotflow.contracts.envelope import SCHEDULE_ID_PATTERN
from slotflow.contracts.schedules import (
    REPAIR_MAX_SLOTS,
    definition_changes,
    patch_definition,
    refuse_random_cron,
)
from slotflow.core.cronslots import Slot, slots_between
from slotflow.core.identity import run_id
from slotflow_api import read_model, repairs
from slotflow_api.app_state import Services, services
from slotflow_api.bodies import DeepJsonRoute
from slotflow_api.errors import BackfillsInFlight, BadRequest, NotFound, describe_validation
from slotflow_api.outlook import fire_time, outlook
from slotflow_api.routes.audit import judge
from slotflow_api.routes.commands import (
    COMMAND_RESPONSES,
    answer,
    publish_checked,
    submit,
    wait_for_command,
)
from slotflow_api.routes.common import Cursor, Limit, Wait
from slotflow_api.routes.handlers import handler_warnings
from slotflow_api.routes.runs import RUN_STATES, RunState
from slotflow_api.schemas import (
    BackfillBody,
    BackfillReport,
    BackfillSlot,
    BulkAnswer,
    BulkCommand,
    BulkPauseBody,
    BulkResumeBody,
    Calendar,
    CalendarEntry,
    CreateScheduleBody,
    MarkBody,
    Page,
    PauseBody,
    RepairAnswer,
    RepairSlot,
    RerunBody,
    ResumeBody,
    Run,
    Schedule,
    ScheduleDetail,
    UpdateScheduleBody,
)

# Bodies too deep for the JSON parser are a 422 naming where (slotflow_api.bodies).
router = APIRouter(tags=["schedules"], route_class=DeepJsonRoute)

ScheduleId = Annotated[str, Path(pattern=SCHEDULE_ID_PATTERN, description="the schedule id")]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key", max_length=1000, description="becomes the command id: a retry applies once"
    ),
]
NEXT_SLOTS = 5
Strict = Annotated[
    bool,
    Query(description="refuse (422, nothing published) when no live claimer serves the handler"),
]


@router.get("/v1/schedules", response_model=Page[Schedule], summary="List schedules")
async def list_schedules(
    s: Annotated[Services, Depends(services)],
    paused: bool | None = None,
    tag: Annotated[str | None, Query(max_length=100)] = None,
    handler: Annotated[str | None, Query(max_length=200)] = None,
    deleted: Annotated[bool, Query(description="list deleted schedules instead of live ones")] = False,
    id_prefix: Annotated[
        str | None, Query(max_length=200, description="only schedules whose id starts with this")
    ] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> read_model.Page:
    page = await read_model.list_schedules(
        s.pool,
        s.schema,
        paused=paused,
        tag=tag,
        handler=handler,
        deleted=deleted,
        limit=limit,
        cursor=cursor,
        id_prefix=id_prefix,
    )
    now = await read_model.database_now(s.pool)
    for row in page.items:
        with_outlook(row, now=now, count=1)
    return page


def _nominal(slot: Slot) -> str | None:
    return slot.local if slot.dst == "shifted" else None


def with_outlook(row: dict[str, object], *, now: datetime, count: int) -> dict[str, object]:
    """Set the row's status, next fire and next slots from its definition at database time ``now``.

    The stored `next_fire_at` is only what the last lifecycle event said; the ticker moves on
    without telling, so the read side recomputes it (see slotflow_api.outlook).
    """
    definition = ScheduleDefinition.model_validate(row["definition"])
    resume_at = row["resume_at"]
    seen = outlook(
        str(row["schedule_id"]),
        definition,
        paused=bool(row["paused"]),
        resume_at=resume_at if isinstance(resume_at, datetime) else None,
        deleted=bool(row["deleted"]),
        once_handled=bool(row.pop("once_handled", False)),
        now=now,
        count=count,
    )
    row["status"] = seen.status
    row["next_fire_at"] = seen.next_fire_at
    # Kept for clients that read it: an automatic resume never catches up (docs/scheduling.md).
    row["catch_up_at_resume"] = False
    # `local` is when it fires on the wall clock; a shifted slot also names the time it stands for.
    row["next_slots"] = [
        {"at": slot.at, "local": slot.fires_local, "dst": slot.dst, "nominal": _nominal(slot)}
        for slot in seen.next_slots
    ]
    return row


#: How many schedules the calendar reads at most; past this it says `truncated`.
CALENDAR_SCHEDULES = 10_000


@router.get("/v1/calendar", response_model=Calendar, summary="Every schedule's firings in the next hours")
async def calendar(
    s: Annotated[Services, Depends(services)],
    hours: Annotated[int, Query(ge=1, le=168, description="the window after now")] = 24,
    limit: Annotated[int, Query(ge=1, le=2000, description="at most this many firings")] = 500,
) -> Calendar:
    now = await read_model.database_now(s.pool)
    until = now + timedelta(hours=hours)
    rows = await read_model.live_schedules(s.pool, s.schema, limit=CALENDAR_SCHEDULES + 1)
    truncated = len(rows) > CALENDAR_SCHEDULES
    entries: list[CalendarEntry] = []
    for row in rows[:CALENDAR_SCHEDULES]:
        schedule_id = str(row["schedule_id"])
        definition = ScheduleDefinition.model_validate(row["definition"])
        resume_at = row["resume_at"]
        # One more than the limit per schedule: if that many fall in the window, some are cut.
        seen = outlook(
            schedule_id,
            definition,
            paused=bool(row["paused"]),
            resume_at=resume_at if isinstance(resume_at, datetime) else None,
            deleted=False,
            once_handled=bool(row["once_handled"]),
            now=now,
            count=limit + 1,
        )
        for slot in seen.next_slots:
            fires = fire_time(schedule_id, definition, slot.at)
            if fires >= until:
                break
            entries.append(
                CalendarEntry(
                    fire_at=fires,
                    slot=slot.at,
                    local=slot.fires_local,
                    schedule_id=schedule_id,
                    handler=definition.handler,
                    run_id=run_id(schedule_id, slot.at),
                    status=seen.status,
                )
            )
    entries.sort(key=lambda e: (e.fire_at, e.schedule_id))
    truncated = truncated or len(entries) > limit
    return Calendar(start=now, end=until, items=entries[:limit], truncated=truncated)


@router.get(
    "/v1/schedules/{schedule_id}",
    response_model=ScheduleDetail,
    summary="One schedule, with its next firings",
    responses={404: {"description": "no such schedule"}},
)
async def get_schedule(
    s: Annotated[Services, Depends(services)], schedule_id: ScheduleId
) -> dict[str, object]:
    row = await read_model.get_schedule(s.pool, s.schema, schedule_id)
    if row is None:
        raise NotFound(f"schedule {schedule_id!r} is not known (yet)")
    now = await read_model.database_now(s.pool)
    return with_outlook(row, now=now, count=NEXT_SLOTS)


@router.get(
    "/v1/schedules/{schedule_id}/runs",
    response_model=Page[Run],
    summary="Runs of a schedule by slot range [from, to), newest first",
)
async def schedule_runs(
    s: Annotated[Services, Depends(services)],
    schedule_id: ScheduleId,
    start: Annotated[AwareDatetime | None, Query(alias="from")] = None,
    end: Annotated[AwareDatetime | None, Query(alias="to")] = None,
    state: Annotated[RunState | None, Query(description=" | ".join(RUN_STATES))] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> read_model.Page:
    _ordered(start, end)
    return await read_model.list_runs(
        s.pool,
        s.schema,
        job_id=schedule_id,
        state=state,
        start=start,
        end=end,
        ascending=False,
        limit=limit,
        cursor=cursor,
    )


def _ordered(start: datetime | None, end: datetime | None) -> None:
    if start is not None and end is not None and end <= start:
        raise BadRequest("`to` must be after `from`")


# -- commands -----------------------------------------------------------------------------------


@router.post("/v1/schedules", status_code=202, responses=COMMAND_RESPONSES, summary="Create a schedule")
async def create_schedule(
    s: Annotated[Services, Depends(services)],
    body: CreateScheduleBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
    strict: Strict = False,
) -> JSONResponse:
    message = CreateSchedule(schedule_id=body.schedule_id, definition=body.definition, paused=body.paused)
    warnings = await _served(s, body.definition.handler, strict=strict)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait, extra={"warnings": warnings})


async def _served(s: Services, handler: str, *, strict: bool) -> list[str]:
    """The warnings for a handler no live claimer serves; with ``strict`` they refuse the command."""
    warnings = await handler_warnings(s, handler)
    if warnings and strict:
        raise BadRequest(f"{warnings[0]}; nothing was published (strict)")
    return warnings


@router.put(
    "/v1/schedules/{schedule_id}",
    status_code=202,
    responses=COMMAND_RESPONSES,
    summary="Replace the whole definition (what the body leaves out takes its default; PATCH changes fields)",
)
async def update_schedule(
    s: Annotated[Services, Depends(services)],
    schedule_id: ScheduleId,
    body: UpdateScheduleBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
    strict: Strict = False,
) -> JSONResponse:
    message = UpdateSchedule(schedule_id=schedule_id, definition=body.definition)
    warnings = await _served(s, body.definition.handler, strict=strict)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait, extra={"warnings": warnings})


@router.patch(
    "/v1/schedules/{schedule_id}",
    status_code=202,
    responses=COMMAND_RESPONSES,
    summary="Change only the fields given (a JSON merge patch of the definition)",
)
async def patch_schedule(
    s: Annotated[Services, Depends(services)],
    schedule_id: ScheduleId,
    patch: Annotated[
        dict[str, Any],
        Body(
            description="the fields of the definition to change, as a JSON merge patch (RFC 7396): "
            'objects merge key by key (`{"retry": {"max_attempts": 3}}` keeps the other retry '
            "fields), null resets a field to its default, a spec of another kind replaces the spec",
            examples=[{"spec": {"every": "PT30S"}, "handler": "reports.v2"}],
        ),
    ],
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
    strict: Strict = False,
) -> JSONResponse:
    message = UpdateSchedule(schedule_id=schedule_id, patch=patch)
    handler = patch.get("handler")
    warnings = await _served(s, handler, strict=strict) if isinstance(handler, str) else []
    changes: list[dict[str, Any]] | None = None
    row = await read_model.get_schedule(s.pool, s.schema, schedule_id)
    if row is not None and not row["deleted"]:
        # Checked against the definition the read model holds, so a patch that cannot fit is a
        # 422 now rather than a rejection later; the ticker applies it to its own copy.
        current = ScheduleDefinition.model_validate(row["definition"])
        try:
            patched = patch_definition(current, patch)
        except ValidationError as err:
            raise BadRequest(
                f"the patch does not fit schedule {schedule_id}: {describe_validation(err.errors())}"
            ) from None
        try:
            refuse_random_cron(patched)
        except ValueError as err:
            raise BadRequest(f"schedule {schedule_id}: {err}") from None
        changes = [
            {"field": field, "from": old, "to": new}
            for field, old, new in definition_changes(current, patched)
        ]
    return await submit(
        s,
        message,
        idempotency_key=idempotency_key,
        wait=wait,
        extra={"changes": changes, "warnings": warnings},
    )


async def _bulk(
    s: Services,
    messages: list[PauseSchedule] | list[ResumeSchedule],
    *,
    idempotency_key: str | None,
    wait: float | None,
) -> BulkAnswer:
    # One command per schedule, each keyed by its schedule like a single pause; a retried request
    # with the same Idempotency-Key publishes the same ids, so each schedule applies it once.
    answer = []
    for message in messages:
        key = None if idempotency_key is None else f"{idempotency_key}:{message.schedule_id}"
        command_id = await publish_checked(s, message, idempotency_key=key)
        answer.append(BulkCommand(schedule_id=message.schedule_id, command_id=command_id))
    if wait is not None:
        statuses = await asyncio.gather(*(wait_for_command(s, c.command_id, wait) for c in answer))
        for command, status in zip(answer, statuses, strict=True):
            command.status = status.status
            command.reason = status.reason
    return BulkAnswer(commands=answer)


@router.post(
    "/v1/schedules/pause",
    status_code=202,
    response_model=BulkAnswer,
    responses={422: COMMAND_RESPONSES[422], 503: COMMAND_RESPONSES[503]},
    summary="Pause several schedules with one reason (one PauseSchedule each)",
)
async def pause_schedules(
    s: Annotated[Services, Depends(services)],
    body: BulkPauseBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> BulkAnswer:
    ids = list(dict.fromkeys(body.schedule_ids))
    messages = [PauseSchedule(schedule_id=i, reason=body.reason, resume_at=body.resume_at) for i in ids]
    return await _bulk(s, messages, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/schedules/resume",
    status_code=202,
    response_model=BulkAnswer,
    responses={422: COMMAND_RESPONSES[422], 503: COMMAND_RESPONSES[503]},
    summary="Resume several schedules (one ResumeSchedule each)",
)
async def resume_schedules(
    s: Annotated[Services, Depends(services)],
    body: BulkResumeBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> BulkAnswer:
    messages = [
        ResumeSchedule(schedule_id=i, catch_up=body.catch_up) for i in dict.fromkeys(body.schedule_ids)
    ]
    return await _bulk(s, messages, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/schedules/{schedule_id}/pause", status_code=202, responses=COMMAND_RESPONSES, summary="Pause"
)
async def pause_schedule(
    s: Annotated[Services, Depends(services)],
    schedule_id: ScheduleId,
    body: Annotated[PauseBody | None, Body()] = None,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    chosen = body or PauseBody()
    message = PauseSchedule(schedule_id=schedule_id, reason=chosen.reason, resume_at=chosen.resume_at)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/schedules/{schedule_id}/resume", status_code=202, responses=COMMAND_RESPONSES, summary="Resume"
)
async def resume_schedule(
    s: Annotated[Services, Depends(services)],
    schedule_id: ScheduleId,
    body: Annotated[ResumeBody | None, Body()] = None,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    catch_up = body.catch_up if body is not None else False
    message = ResumeSchedule(schedule_id=schedule_id, catch_up=catch_up)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.delete("/v1/schedules/{schedule_id}", status_code=202, responses=COMMAND_RESPONSES, summary="Delete")
async def delete_schedule(
    s: Annotated[Services, Depends(services)],
    schedule_id: ScheduleId,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    return await submit(
        s, DeleteSchedule(schedule_id=schedule_id), idempotency_key=idempotency_key, wait=wait
    )


@router.post(
    "/v1/schedules/{schedule_id}/trigger",
    status_code=202,
    responses=COMMAND_RESPONSES,
    summary="Run once now, outside the spec",
)
async def trigger_schedule(
    s: Annotated[Services, Depends(services)],
    schedule_id: ScheduleId,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    return await submit(s, TriggerNow(schedule_id=schedule_id), idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/schedules/{schedule_id}/backfill",
    status_code=202,
    responses={
        **COMMAND_RESPONSES,
        409: {
            "description": "the schedule has SLOTFLOW_API_MAX_BACKFILLS_IN_FLIGHT backfills in flight "
            "already (nothing was published); or with ?wait=: the ticker rejected the backfill"
        },
    },
    summary="Run every slot of the spec in [start, end) (GET the same path first for a dry run)",
)
async def backfill_schedule(
    s: Annotated[Services, Depends(services)],
    schedule_id: ScheduleId,
    body: BackfillBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    message = Backfill(
        schedule_id=schedule_id,
        start=body.start,
        end=body.end,
        max_slots=body.max_slots,
        overlap=body.overlap,
        max_concurrent=body.max_concurrent,
    )
    limit = s.settings.api.max_backfills_in_flight
    # Each backfill emits all its slots at once; without a bound per schedule one client could
    # repeat a 10,000-slot backfill at will. The lock makes concurrent requests count in turn.
    async with s.pool.acquire() as conn, conn.transaction():
        await read_model.lock_backfills(conn, schedule_id)
        in_flight = await read_model.backfills_in_flight(
            conn, s.schema, schedule_id, besides=idempotency_key or ""
        )
        if in_flight >= limit:
            raise BackfillsInFlight(
                f"schedule {schedule_id!r} has {in_flight} backfills in flight, the most allowed "
                f"(SLOTFLOW_API_MAX_BACKFILLS_IN_FLIGHT = {limit}); wait until one has finished "
                "(GET this path with its from and to shows its progress)"
            )
        command_id = await publish_checked(s, message, idempotency_key=idempotency_key)
        await read_model.record_backfill(
            conn, s.schema, command_id=command_id, schedule_id=schedule_id, start=body.start, end=body.end
        )
    return await answer(s, command_id, wait=wait)


@router.get(
    "/v1/schedules/{schedule_id}/backfill",
    response_model=BackfillReport,
    response_model_by_alias=True,
    summary="A backfill's slots in [from, to) and how their runs stand: before it, the dry run "
    "(the slots it would create); after it, its progress and summary",
    responses={404: {"description": "no such schedule"}},
)
async def backfill_progress(
    s: Annotated[Services, Depends(services)],
    schedule_id: ScheduleId,
    start: Annotated[AwareDatetime, Query(alias="from")],
    end: Annotated[AwareDatetime, Query(alias="to")],
    max_slots: Annotated[int, Query(ge=1, le=100_000)] = 1000,
) -> BackfillReport:
    return await backfill_report(s, schedule_id, start, end, max_slots=max_slots)


async def backfill_report(
    s: Services, schedule_id: str, start: datetime, end: datetime, *, max_slots: int
) -> BackfillReport:
    """The slots a Backfill of [start, end) emits, as the ticker plans them, with their runs."""
    _ordered(start, end)
    row = await read_model.get_schedule(s.pool, s.schema, schedule_id)
    if row is None or row["deleted"]:
        raise NotFound(f"schedule {schedule_id!r} is not known (yet)")
    definition = ScheduleDefinition.model_validate(row["definition"])
    now = await read_model.database_now(s.pool)
    # The ticker's own plan: every slot of the spec in [start, end), start_at/end_at not applied.
    slots = slots_between(
        definition.spec,
        definition.dst,
        after=start - _EPSILON,
        until=end - _EPSILON,
        limit=max_slots + 1,
        schedule_id=schedule_id,
    )
    refused = None
    if end > now:
        refused = f"end {end.isoformat()} is after the current time; future slots fire on their own"
    elif len(slots) > max_slots:
        refused = f"more than max_slots={max_slots} slots; split the range or raise max_slots"
    slots = slots[:max_slots]
    states = await read_model.backfill_states(s.pool, s.schema, schedule_id, start, end)
    listed = []
    counts = {"completed": 0, "skipped": 0, "dead_lettered": 0}
    in_progress = not_started = 0
    for slot in slots:
        rid = run_id(schedule_id, slot.at)
        state = states.get(rid)
        listed.append(BackfillSlot(slot=slot.at, run_id=rid, local=slot.fires_local, state=state))
        if state is None:
            not_started += 1
        elif state in counts:
            counts[state] += 1
        else:
            in_progress += 1
    return BackfillReport(
        schedule_id=schedule_id,
        start=start,
        end=end,
        expected=len(slots),
        refused=refused,
        slots=listed,
        completed=counts["completed"],
        skipped=counts["skipped"],
        failed=counts["dead_lettered"],
        in_progress=in_progress,
        not_started=not_started,
        finished=refused is None and bool(slots) and in_progress == 0 and not_started == 0,
    )


_EPSILON = timedelta(microseconds=1)


# -- an operator's repairs: re-run and mark --------------------------------------------------------

#: The slots a repair's answer lists (touched, and left out): the count says how many in all.
REPAIR_SHOWN = 20
_REPAIR_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": RepairAnswer, "description": "a dry run (`dry_run: true`): what it would touch"},
    404: {"description": "the read model knows no such schedule"},
    409: {"description": "with ?wait=: the ticker rejected the command (the reason says why)"},
    422: {"description": "a bad range, or no slot of the range can be touched (the detail says why)"},
    503: COMMAND_RESPONSES[503],
}


async def _select(
    s: Services,
    schedule_id: str,
    start: datetime,
    end: datetime | None,
    verb: repairs.Verb,
    *,
    force: bool = False,
) -> repairs.Selection:
    """The slots of [start, end] (inclusive) a repair touches, judged by the slot audit.

    Raises:
        BadRequest: `to` before `from`; no slot to touch (with what was left out and why); too many.
        NotFound: no such schedule in the read model.
    """
    last = end or start
    if last < start:
        raise BadRequest("`to` must not be before `from`")
    now = await read_model.database_now(s.pool)
    judged = await judge(s, schedule_id, start, last + timedelta(microseconds=1), now=now)
    selection = repairs.select(judged.report, verb, force=force)
    if not selection.chosen:
        what = "re-run" if verb == "rerun" else "marked"
        why = [f"{lo.slot.isoformat()}: {lo.reason}" for lo in selection.left_out[:3]]
        if selection.pending:
            why.append(f"{selection.pending} slot(s) too recent to judge yet")
        raise BadRequest(
            f"no slot of schedule {schedule_id!r} in [{start.isoformat()}, {last.isoformat()}] can be {what}"
            + (f": {'; '.join(why)}" if why else ": the range holds no slot of the schedule")
        )
    if len(selection.chosen) > REPAIR_MAX_SLOTS:
        raise BadRequest(
            f"the range holds {len(selection.chosen)} slots to touch; one command takes at most "
            f"{REPAIR_MAX_SLOTS}: narrow `from`/`to`"
        )
    return selection


def _repair_answer(selection: repairs.Selection, *, dry_run: bool) -> dict[str, Any]:
    return RepairAnswer(
        dry_run=dry_run,
        count=len(selection.chosen),
        slots=[
            RepairSlot(slot=c.slot, run_id=c.run_id, state=c.state, action=c.action)
            for c in selection.chosen[:REPAIR_SHOWN]
        ],
        left_out_count=len(selection.left_out),
        left_out=[
            RepairSlot(slot=lo.slot, run_id=lo.run_id, state=lo.state, reason=lo.reason)
            for lo in selection.left_out[:REPAIR_SHOWN]
        ],
        pending=selection.pending,
    ).model_dump(mode="json")


async def _publish_repair(
    s: Services,
    message: RerunSlots | MarkSlots,
    selection: repairs.Selection,
    *,
    idempotency_key: str | None,
    wait: float | None,
) -> JSONResponse:
    command_id = await publish_checked(s, message, idempotency_key=idempotency_key)
    body = {**_repair_answer(selection, dry_run=False), "command_id": command_id}
    if wait is None:
        return JSONResponse(status_code=202, content=body)
    status = await wait_for_command(s, command_id, wait)
    body |= {"status": status.status, "reason": status.reason}
    if status.status == "rejected":
        return JSONResponse(status_code=409, content={"detail": status.reason or "rejected", **body})
    return JSONResponse(status_code=200 if status.status in ("accepted", "published") else 202, content=body)


@router.post(
    "/v1/schedules/{schedule_id}/rerun",
    status_code=202,
    response_model=RepairAnswer,
    responses=_REPAIR_RESPONSES,
    summary="Re-run the slots in [from, to] with the schedule's current definition "
    "(`dry_run: true`: what it would touch)",
)
async def rerun_slots(
    s: Annotated[Services, Depends(services)],
    schedule_id: ScheduleId,
    body: RerunBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    selection = await _select(s, schedule_id, body.start, body.end, "rerun", force=body.force)
    if body.dry_run:
        return JSONResponse(status_code=200, content=_repair_answer(selection, dry_run=True))
    message = RerunSlots(
        schedule_id=schedule_id,
        slots=tuple(c.slot for c in selection.chosen if c.action == "rerun"),
        forced=tuple(c.slot for c in selection.chosen if c.action == "forced_rerun"),
        reason=body.reason,
    )
    return await _publish_repair(s, message, selection, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/schedules/{schedule_id}/mark",
    status_code=202,
    response_model=RepairAnswer,
    responses=_REPAIR_RESPONSES,
    summary="Mark the slots in [from, to] done or skipped, with a reason; no effect runs "
    "(`dry_run: true`: what it would touch)",
)
async def mark_slots(
    s: Annotated[Services, Depends(services)],
    schedule_id: ScheduleId,
    body: MarkBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    selection = await _select(s, schedule_id, body.start, body.end, "mark")
    if body.dry_run:
        return JSONResponse(status_code=200, content=_repair_answer(selection, dry_run=True))
    message = MarkSlots(
        schedule_id=schedule_id,
        slots=tuple(c.slot for c in selection.chosen),
        mark=body.mark,
        reason=body.reason,
    )
    return await _publish_repair(s, message, selection, idempotency_key=idempotency_key, wait=wait)
