"""The DLQ as the dlq service reports it, and the redrive/discard commands."""

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse

from slotflow.contracts import DiscardDeadLetters, RedriveDeadLetters
from slotflow_api import read_model
from slotflow_api.app_state import Services, services
from slotflow_api.bodies import DeepJsonRoute
from slotflow_api.errors import NotFound
from slotflow_api.routes.commands import COMMAND_RESPONSES, submit
from slotflow_api.routes.common import Cursor, Limit, Wait
from slotflow_api.routes.schedules import IdempotencyKey
from slotflow_api.schemas import DeadLetter, DeadLetterDetail, DiscardBody, Page, RedriveBody

# Bodies too deep for the JSON parser are a 422 naming where (slotflow_api.bodies).
router = APIRouter(tags=["dlq"], route_class=DeepJsonRoute)

Text = Annotated[str | None, Query(max_length=2000)]


@router.get("/v1/dlq", response_model=Page[DeadLetter], summary="List dead letters, newest change first")
async def list_dead_letters(
    s: Annotated[Services, Depends(services)],
    status: Annotated[str | None, Query(max_length=20, description="parked | redriven | discarded")] = None,
    reason: Text = None,
    topic: Text = None,
    source: Text = None,
    job_id: Text = None,
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
        limit=limit,
        cursor=cursor,
    )


@router.post(
    "/v1/dlq/redrive",
    status_code=202,
    responses=COMMAND_RESPONSES,
    summary="Send the selected dead letters back to their topics",
)
async def redrive(
    s: Annotated[Services, Depends(services)],
    body: RedriveBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    message = RedriveDeadLetters(selection=body.selection, limit=body.limit)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/dlq/discard",
    status_code=202,
    responses=COMMAND_RESPONSES,
    summary="Discard the selected dead letters",
)
async def discard(
    s: Annotated[Services, Depends(services)],
    body: DiscardBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    message = DiscardDeadLetters(selection=body.selection, reason=body.reason, limit=body.limit)
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
