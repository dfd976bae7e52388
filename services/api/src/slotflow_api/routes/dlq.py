"""The DLQ as the dlq service reports it, and the redrive/discard commands (with their dry run).

A redrive is a request to each letter's owner (docs/decisions/0009): the letter reads `redriving`
until its owner answers, then `redriven` or `redrive_failed` with the reason. A redrive or discard
whose selection does not narrow is refused here (422) with the count it would take, unless it says
`all`; `?dry_run=true` answers what it would do without publishing anything.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse

from slotflow.contracts import DeadLetterFilter, DiscardDeadLetters, RedriveDeadLetters
from slotflow.contracts.dlq import RedriveDefinition
from slotflow_api import read_model
from slotflow_api.app_state import Services, services
from slotflow_api.bodies import DeepJsonRoute
from slotflow_api.errors import BadRequest, NotFound
from slotflow_api.routes.commands import COMMAND_RESPONSES, submit
from slotflow_api.routes.common import Cursor, Limit, Wait
from slotflow_api.routes.schedules import IdempotencyKey
from slotflow_api.schemas import (
    DeadLetter,
    DeadLetterDetail,
    DeadLetterPreview,
    DiscardBody,
    Page,
    RedriveBody,
)

# Bodies too deep for the JSON parser are a 422 naming where (slotflow_api.bodies).
router = APIRouter(tags=["dlq"], route_class=DeepJsonRoute)

Text = Annotated[str | None, Query(max_length=2000)]
DryRun = Annotated[
    bool, Query(description="answer what the command would touch (200, a preview) and publish nothing")
]
_ACTION_RESPONSES: dict[int | str, dict[str, Any]] = {
    **COMMAND_RESPONSES,
    200: {"model": DeadLetterPreview, "description": "with ?dry_run=true: what it would touch"},
}


@router.get("/v1/dlq", response_model=Page[DeadLetter], summary="List dead letters, newest change first")
async def list_dead_letters(
    s: Annotated[Services, Depends(services)],
    status: Annotated[
        str | None,
        Query(max_length=20, description="parked | redriving | redriven | redrive_failed | discarded"),
    ] = None,
    reason: Text = None,
    topic: Text = None,
    source: Text = None,
    job_id: Text = None,
    run_id: Text = None,
    workflow_id: Text = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> read_model.Page:
    return await read_model.list_dead_letters(
        s.pool,
        s.schema,
        status=status,
        reason=reason,
        topic=topic,
        source=source,
        job_id=job_id,
        run_id=run_id,
        workflow_id=workflow_id,
        limit=limit,
        cursor=cursor,
    )


async def _guard(s: Services, selection: DeadLetterFilter, *, select_all: bool, action: str) -> None:
    """Refuse a selection that does not narrow unless `all` says so, with what it would take."""
    if selection.narrows() or select_all:
        return
    taken, left_out = await read_model.count_selection(s.pool, s.schema, selection, bulk=action == "redrive")
    status = selection.status or "parked"
    raise BadRequest(
        f"the selection names no ids and none of source, topic, reason, job_id, run_id or workflow_id, so it "
        f"would {action} every {status} dead letter ({taken} now"
        + (f", besides {left_out} workflows' parked activities" if left_out else "")
        + '); a status or a time range alone still means all of them: narrow it in "selection", or '
        'send "all": true to mean every one'
    )


async def _preview(
    s: Services, action: str, selection: DeadLetterFilter, *, definition: RedriveDefinition, limit: int
) -> JSONResponse:
    preview = await read_model.preview_dead_letters(
        s.pool,
        s.schema,
        action=action,
        selection=selection,
        definition=definition,
        limit=limit,
        kafka=s.settings.kafka,
    )
    return JSONResponse(
        status_code=200, content=DeadLetterPreview.model_validate(preview).model_dump(mode="json")
    )


@router.post(
    "/v1/dlq/redrive",
    status_code=202,
    responses=_ACTION_RESPONSES,
    summary="Ask each selected dead letter's owner to redrive it (?dry_run=true: what it would touch)",
)
async def redrive(
    s: Annotated[Services, Depends(services)],
    body: RedriveBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
    dry_run: DryRun = False,
) -> JSONResponse:
    await _guard(s, body.selection, select_all=body.all, action="redrive")
    if dry_run:
        return await _preview(s, "redrive", body.selection, definition=body.definition, limit=body.limit)
    message = RedriveDeadLetters(
        selection=body.selection, limit=body.limit, definition=body.definition, all=body.all
    )
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/dlq/discard",
    status_code=202,
    responses=_ACTION_RESPONSES,
    summary="Discard the selected dead letters (?dry_run=true: what it would touch)",
)
async def discard(
    s: Annotated[Services, Depends(services)],
    body: DiscardBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
    dry_run: DryRun = False,
) -> JSONResponse:
    await _guard(s, body.selection, select_all=body.all, action="discard")
    if dry_run:
        return await _preview(s, "discard", body.selection, definition="as_run", limit=body.limit)
    message = DiscardDeadLetters(selection=body.selection, reason=body.reason, limit=body.limit, all=body.all)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.get(
    "/v1/dlq/{dead_letter_id:path}",
    response_model=DeadLetterDetail,
    summary="One dead letter (its id is topic:partition:offset of the original record); a run's "
    "letter carries the run's attempts with their tracebacks and log lines",
    responses={404: {"description": "no such dead letter"}},
)
async def get_dead_letter(
    s: Annotated[Services, Depends(services)],
    dead_letter_id: Annotated[str, Path(min_length=1, max_length=2000)],
) -> dict[str, object]:
    row = await read_model.get_dead_letter(s.pool, s.schema, dead_letter_id)
    if row is None:
        raise NotFound(f"dead letter {dead_letter_id!r} is not known (yet)")
    return row
