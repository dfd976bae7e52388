"""Downstreams as the claimers report them, and an operator's open, close and settings commands."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from fastapi.responses import JSONResponse

from slotflow.contracts import CloseDownstream, ConfigureDownstream, DownstreamSettings, OpenDownstream
from slotflow_api import read_model
from slotflow_api.app_state import Services, services
from slotflow_api.bodies import DeepJsonRoute
from slotflow_api.errors import NotFound
from slotflow_api.routes.commands import COMMAND_RESPONSES, submit
from slotflow_api.routes.common import Wait
from slotflow_api.routes.schedules import IdempotencyKey
from slotflow_api.schemas import Downstream, DownstreamDetail, DownstreamReasonBody

# Bodies too deep for the JSON parser are a 422 naming where (slotflow_api.bodies).
router = APIRouter(tags=["downstreams"], route_class=DeepJsonRoute)

Name = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[^/\x00-\x1f\x7f]+$")]


@router.get(
    "/v1/downstreams",
    response_model=list[Downstream],
    summary="Every downstream: circuit state, retry budget in use, held runs",
)
async def list_downstreams(s: Annotated[Services, Depends(services)]) -> list[dict[str, Any]]:
    return await read_model.downstreams(s.pool, s.schema)


@router.get(
    "/v1/downstreams/{name}",
    response_model=DownstreamDetail,
    summary="One downstream with its latest changes and its held runs in slot order",
)
async def get_downstream(s: Annotated[Services, Depends(services)], name: Name) -> dict[str, Any]:
    found = await read_model.downstream(s.pool, s.schema, name)
    if found is None:
        raise NotFound(f"downstream {name} not found (no claimer has reported it yet)")
    return found


@router.post(
    "/v1/downstreams/{name}/open",
    status_code=202,
    responses=COMMAND_RESPONSES,
    summary="Open its circuit by hand: runs that need it are held until it is closed",
)
async def open_downstream(
    s: Annotated[Services, Depends(services)],
    name: Name,
    body: DownstreamReasonBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    message = OpenDownstream(downstream=name, reason=body.reason)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.post(
    "/v1/downstreams/{name}/close",
    status_code=202,
    responses=COMMAND_RESPONSES,
    summary="Close its circuit: the held runs resume in slot order",
)
async def close_downstream(
    s: Annotated[Services, Depends(services)],
    name: Name,
    body: DownstreamReasonBody,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    message = CloseDownstream(downstream=name, reason=body.reason)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)


@router.put(
    "/v1/downstreams/{name}/settings",
    status_code=202,
    responses=COMMAND_RESPONSES,
    summary="Set its own budget and breaker settings (fields left out keep the claimers' defaults)",
)
async def configure_downstream(
    s: Annotated[Services, Depends(services)],
    name: Name,
    body: DownstreamSettings,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = None,
) -> JSONResponse:
    message = ConfigureDownstream(downstream=name, settings=body)
    return await submit(s, message, idempotency_key=idempotency_key, wait=wait)
