"""Signing keys: register a principal's public key, list them, revoke one. All need `admin`.

A key registered here proves the principal `key:<name>` on commands written straight to Kafka
(the CLI's `--kafka`, the Python client's Kafka transport), with the scope given here; the api
distributes it to every service that checks commands (docs/security.md, "Signed commands").
"""

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from slotflow.contracts.keys import KEY_NAME_PATTERN
from slotflow.contracts.scopes import Scope
from slotflow_api import keys
from slotflow_api.app_state import Services, services
from slotflow_api.auth import current_principal
from slotflow_api.errors import NotFound

router = APIRouter(tags=["keys"])

#: How long a registration or revocation waits for its record to reach the keys topic.
PUBLISH_WAIT_S = 10.0


class KeyBody(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "name": "deploy-bot",
                    "scope": "operate",
                    "public_key": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
                }
            ]
        },
    )

    name: str = Field(
        pattern=KEY_NAME_PATTERN, description="who or what holds it; its principal is key:<name>"
    )
    scope: Scope = Field(description="what its commands may do: read (nothing), operate, or admin")
    public_key: str = Field(
        min_length=1, max_length=200, description="the Ed25519 public key: 32 raw bytes, base64url"
    )


class Key(BaseModel):
    key_id: str
    name: str
    principal: str
    scope: Scope
    public_key: str
    acts_for_others: bool = Field(
        description="the api's own keys: they sign for the callers the api authenticated"
    )
    created_at: datetime
    created_by: str | None
    revoked_at: datetime | None
    revoked_by: str | None


def _principal_name() -> str | None:
    who = current_principal()
    return who.name if who is not None else None


async def _distributed(s: Services) -> None:
    # The record is committed in the outbox; the answer waits (bounded) until it is on the keys
    # topic, from where every service refuses a revoked key at its next command.
    if s.relay is not None:
        s.relay.wake()
        await s.relay.flush(timeout=PUBLISH_WAIT_S)


@router.get("/v1/keys", response_model=list[Key], summary="The signing keys (public halves only)")
async def list_keys(
    s: Annotated[Services, Depends(services)],
    revoked: Annotated[bool, Query(description="include revoked keys")] = False,
) -> list[dict[str, Any]]:
    return await keys.list_keys(s.pool, s.schema, include_revoked=revoked)


@router.post(
    "/v1/keys",
    status_code=201,
    response_model=Key,
    summary="Register a principal's public key; commands it signs are proven as key:<name>",
    responses={409: {"description": "the key is registered already, or a live key has that name"}},
)
async def create_key(s: Annotated[Services, Depends(services)], body: KeyBody) -> dict[str, Any]:
    row = await keys.create_key(
        s.pool,
        s.schema,
        s.settings.kafka,
        name=body.name,
        scope=body.scope,
        public_key=body.public_key,
        created_by=_principal_name(),
    )
    await _distributed(s)
    return row


@router.delete(
    "/v1/keys/{key}",
    response_model=Key,
    summary="Revoke a live key (by id or name): every service refuses its commands from then on",
    responses={404: {"description": "no live key with that id or name"}},
)
async def revoke_key(
    s: Annotated[Services, Depends(services)],
    key: Annotated[str, Path(min_length=1, max_length=100, description="the key's id or name")],
) -> dict[str, Any]:
    row = await keys.revoke_key(s.pool, s.schema, s.settings.kafka, key, revoked_by=_principal_name())
    if row is None:
        raise NotFound(f"no live key has the id or name {key!r} (`slotflow key list` shows them)")
    await _distributed(s)
    return row
