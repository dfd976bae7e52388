"""Workflows: list, show (state derived from the typed history), history, commands."""

from datetime import timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, Query
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime

from slotflow.contracts import CancelWorkflow, SignalWorkflow, StartWorkflow, TerminateWorkflow
from slotflow.core.durations import parse_duration_text
from slotflow_api import read_model
from slotflow_api.app_state import Services, services
from slotflow_api.bodies import DeepJsonRoute
from slotflow_api.errors import BadRequest, NotFound
from slotflow_api.paths import workflow_id_param
from slotflow_api.routes.commands import COMMAND_RESPONSES, submit
from slotflow_api.routes.common import Cursor, Limit, Wait
from slotflow_api.routes.schedules import IdempotencyKey
from slotflow_api.schemas import (
    CancelBody,
    HistoryEntry,
    Page,
    SignalBody,
    StartWorkflowBody,
    Workflow,
    WorkflowDetail,
)

# Bodies too deep for the JSON parser are a 422 naming where (slotflow_api.bodies).
router = APIRouter(tags=["workflows"], route_class=DeepJsonRoute)

#: The workflow id of a route: `{workflow_id:path}` matches an id with `/` (escaped or not, see
#: slotflow_api.paths), and the dependency unescapes and checks it.
WorkflowId = Annotated[str, Depends(workflow_id_param)]


@router.get("/v1/workflows", response_model=Page[Workflow], summary="List workflows, newest first")
async def list_workflows(
    s: Annotated[Services, Depends(services)],
    workflow_type: Annotated[str | None, Query(alias="type", max_length=200)] = None,
    status: Annotated[str | None, Query(max_length=50)] = None,
    start: Annotated[AwareDatetime | None, Query(alias="from")] = None,
    end: Annotated[AwareDatetime | None, Query(alias="to")] = None,
    attention: Annotated[
        str | None,
        Query(
            max_length=50,
            description="only the workflows that need an operator: stuck on a non-determinism, or "
            "waiting on a signal for longer than this age (`30m`, `1h`, `2d`, seconds, or ISO 8601 "
            "`PT1H`)",
        ),
    ] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> read_model.Page:
    if start is not None and end is not None and end <= start:
        raise BadRequest("`to` must be after `from`")
    age = _attention_age(attention) if attention is not None else None
    return await read_model.list_workflows(
        s.pool,
        s.schema,
        workflow_type=workflow_type,
        status=status,
        start=start,
        end=end,
        limit=limit,
        cursor=cursor,
        attention=age,
    )


def _attention_age(text: str) -> timedelta:
    """The age of the `attention` filter; a 400 naming the forms it takes otherwise."""
    try:
        age = parse_duration_text(text)
    except ValueError as err:
        raise BadRequest(f"attention: {err}") from err
    if age < timedelta(0):
        raise BadRequest(f"attention: {text!r} is negative; give the age a wait must pass, e.g. 1h")
    return age


@router.get(
    "/v1/workflows/{workflow_id:path}/history",
    response_model=Page[HistoryEntry],
    summary="Everything recorded about a workflow, oldest first",
    responses={404: {"description": "no such workflow"}},
)
async def get_history(
    s: Annotated[Services, Depends(services)],
    workflow_id: WorkflowId,
    origin: Annotated[
        Literal["command", "history", "activity", "timer"] | None,
        Query(description="only entries from this source; `history` is the typed workflow history"),
    ] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> read_model.Page:
    page = await read_model.workflow_history(
        s.pool, s.schema, workflow_id, limit=limit, cursor=cursor, origin=origin
    )
    missing = not page.items and cursor is None
    if missing and await read_model.get_workflow(s.pool, s.schema, workflow_id) is None:
        raise NotFound(f"workflow {workflow_id!r} is not known (yet)")
    return page


@router.post("/v1/workflows", status_code=202, responses=COMMAND_RESPONSES, summary="Start a workflow")
async def start_workflow(
    s: Annotated[Services, Depends(services)],
    body: StartWorkflowBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    timeout = body.execution_timeout_seconds
    message = StartWorkflow(
        workflow_id=body.workflow_id,
        workflow_type=body.workflow_type,
        input=body.input,
        id_reuse_policy=body.id_reuse_policy,
        execution_timeout=timedelta(seconds=timeout) if timeout is not None else None,
    )
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/workflows/{workflow_id:path}/signal", status_code=202, responses=COMMAND_RESPONSES, summary="Signal"
)
async def signal_workflow(
    s: Annotated[Services, Depends(services)],
    workflow_id: WorkflowId,
    body: SignalBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    message = SignalWorkflow(workflow_id=workflow_id, signal=body.signal, payload=body.payload)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/workflows/{workflow_id:path}/cancel", status_code=202, responses=COMMAND_RESPONSES, summary="Cancel"
)
async def cancel_workflow(
    s: Annotated[Services, Depends(services)],
    workflow_id: WorkflowId,
    body: Annotated[CancelBody | None, Body()] = None,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    message = CancelWorkflow(workflow_id=workflow_id, reason=(body or CancelBody()).reason)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/workflows/{workflow_id:path}/terminate",
    status_code=202,
    responses=COMMAND_RESPONSES,
    summary="Terminate: end now, without running the code or its compensations",
)
async def terminate_workflow(
    s: Annotated[Services, Depends(services)],
    workflow_id: WorkflowId,
    body: Annotated[CancelBody | None, Body()] = None,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    message = TerminateWorkflow(workflow_id=workflow_id, reason=(body or CancelBody()).reason)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


# Last: `{workflow_id:path}` alone matches every path below /v1/workflows/, so the routes with a
# suffix (history, signal, cancel, terminate) are matched first.
@router.get(
    "/v1/workflows/{workflow_id:path}",
    response_model=WorkflowDetail,
    summary="One workflow: status, current step, activities, timers, compensations",
    responses={404: {"description": "no such workflow"}},
)
async def get_workflow(
    s: Annotated[Services, Depends(services)], workflow_id: WorkflowId
) -> dict[str, object]:
    row = await read_model.get_workflow(s.pool, s.schema, workflow_id)
    if row is None:
        raise NotFound(f"workflow {workflow_id!r} is not known (yet)")
    return row
