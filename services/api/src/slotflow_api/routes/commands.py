"""Publishing commands over HTTP, and read-your-writes on their acknowledgement."""

import asyncio
import json
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse

from slotflow.commands import publish_command
from slotflow.contracts import Message
from slotflow_api import read_model
from slotflow_api.app_state import Services, services
from slotflow_api.auth import current_principal
from slotflow_api.errors import BadRequest
from slotflow_api.routes.common import Cursor, Limit, Wait
from slotflow_api.schemas import CommandRecord, CommandStatus, Page

router = APIRouter(tags=["commands"])

#: Statuses after which waiting longer cannot change the answer.
FINAL = frozenset({"accepted", "rejected", "published"})

COMMAND_RESPONSES: dict[int | str, dict[str, Any]] = {
    202: {"description": "published; the body carries the command id (and its status if waited)"},
    200: {"model": CommandStatus, "description": "with ?wait=: the command was reflected"},
    409: {"description": "with ?wait=: its consumer rejected the command; detail says why"},
    422: {"description": "the body or a parameter is invalid; detail names each field"},
    503: {"description": "Kafka did not acknowledge; retry with the same Idempotency-Key"},
}


async def command_status(s: Services, command_id: str) -> CommandStatus:
    row = await read_model.get_command(s.pool, s.schema, command_id)
    if row is None:
        return CommandStatus(command_id=command_id, status="unknown")
    return CommandStatus(
        command_id=command_id,
        status=row["status"],
        reason=row["reason"],
        command_type=row["command_type"],
        subject=row["subject"],
        published_at=row["published_at"],
        acknowledged_at=row["acknowledged_at"],
        principal=row["principal"],
    )


async def wait_for_command(s: Services, command_id: str, seconds: float) -> CommandStatus:
    """The command's status once final, or as it is when ``seconds`` have passed."""
    deadline = time.monotonic() + min(seconds, s.settings.api.max_wait_seconds)
    delay = 0.01
    while True:
        status = await command_status(s, command_id)
        if status.status in FINAL or time.monotonic() >= deadline:
            return status
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.5, 0.1)


def _check_payload_size(s: Services, data: dict[str, Any]) -> None:
    """A schedule's payload rides along with every one of its runs: bounded per schedule."""
    definition = data.get("definition")
    if not isinstance(definition, dict) or not definition.get("payload"):
        return
    limit = s.settings.api.max_payload_bytes
    size = len(json.dumps(definition["payload"], separators=(",", ":")).encode())
    if size > limit:
        raise BadRequest(
            f"definition.payload is {size} bytes as JSON; the limit per schedule is {limit} bytes "
            "(SLOTFLOW_API_MAX_PAYLOAD_BYTES): every run of the schedule carries it, so pass large "
            "data by reference"
        )


async def submit(
    s: Services,
    message: Message,
    *,
    idempotency_key: str | None,
    wait: float | None,
    extra: dict[str, Any] | None = None,
) -> JSONResponse:
    """Publish ``message``; 202 with its id, or with ``wait`` its reflected status (and ``extra``
    merged into the body either way).

    Raises:
        BadRequest: a schedule's payload over its cap (what no consumer could store, the message
            model refused when the route built it: a 422 naming the field).
    """
    command_id = await publish_checked(s, message, idempotency_key=idempotency_key)
    return await answer(s, command_id, wait=wait, extra=extra)


async def publish_checked(s: Services, message: Message, *, idempotency_key: str | None) -> str:
    """Publish ``message`` once it passes the edge's checks; its command id.

    Raises:
        BadRequest: a schedule's payload over its cap.
    """
    # What its consumers could not store (a NUL, a value nested too deep, NaN) the message model
    # refused when the route built it (`slotflow.contracts.acceptance`): a 422 naming the field.
    _check_payload_size(s, message.model_dump(mode="json"))
    # Who asked travels with the command (the envelope's principal): the read model records it.
    # The api's key signs it and vouches for that name: only the api authenticated the caller.
    # Dated by the database's clock, which the consumers judge the replay window by.
    who = current_principal()
    signed_at = await read_model.database_now(s.pool) if s.signer is not None else None
    command_id = await publish_command(
        s.producer,
        s.settings.kafka,
        message,
        command_id=idempotency_key,
        source="api",
        principal=who.name if who is not None else None,
        signer=s.signer,
        signed_at=signed_at,
    )
    s.metrics.commands_published.labels(message.message_type).inc()
    return command_id


async def answer(
    s: Services, command_id: str, *, wait: float | None, extra: dict[str, Any] | None = None
) -> JSONResponse:
    """202 with the command id, or with ``wait`` the command's reflected status."""
    if wait is None:
        return JSONResponse(status_code=202, content={"command_id": command_id, **(extra or {})})
    status = await wait_for_command(s, command_id, wait)
    body = {**status.model_dump(mode="json"), **(extra or {})}
    if status.status == "rejected":
        return JSONResponse(status_code=409, content={"detail": status.reason or "rejected", **body})
    return JSONResponse(status_code=200 if status.status in FINAL else 202, content=body)


@router.get(
    "/v1/commands/{command_id:path}",
    response_model=CommandStatus,
    summary="A command's status; ?wait=SECONDS waits until it is reflected (read-your-writes)",
)
async def get_command(
    s: Annotated[Services, Depends(services)],
    command_id: Annotated[str, Path(min_length=1, max_length=1000)],
    wait: Wait = None,
) -> CommandStatus:
    if wait:
        return await wait_for_command(s, command_id, wait)
    return await command_status(s, command_id)


@router.get(
    "/v1/commands",
    response_model=Page[CommandRecord],
    summary="Commands seen on the command topics, newest first: who issued what, when, and its outcome",
)
async def list_commands(
    s: Annotated[Services, Depends(services)],
    subject: Annotated[
        str | None, Query(max_length=1000, description="schedule, workflow, dead letter...")
    ] = None,
    command_type: Annotated[
        str | None, Query(alias="type", max_length=200, description="e.g. schedule.pause")
    ] = None,
    principal: Annotated[str | None, Query(max_length=300, description="e.g. token:oncall")] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> read_model.Page:
    return await read_model.list_commands(
        s.pool,
        s.schema,
        subject=subject,
        command_type=command_type,
        principal=principal,
        limit=limit,
        cursor=cursor,
    )
