"""API tokens: create (the secret is shown once), list, revoke. All need the `admin` scope."""

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from slotflow_api import tokens
from slotflow_api.app_state import Services, services
from slotflow_api.auth import TOKEN_NAME_PATTERN, Scope, current_principal
from slotflow_api.bodies import DeepJsonRoute
from slotflow_api.errors import NotFound

# Bodies too deep for the JSON parser are a 422 naming where (slotflow_api.bodies).
router = APIRouter(tags=["tokens"], route_class=DeepJsonRoute)


class TokenBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=TOKEN_NAME_PATTERN, description="who or what holds it, e.g. oncall")
    scope: Scope = Field(description="read, operate (implies read) or admin (implies operate)")


class Token(BaseModel):
    token_id: str
    name: str
    scope: Scope
    created_at: datetime
    created_by: str | None
    revoked_at: datetime | None
    revoked_by: str | None
    last_used_at: datetime | None


class CreatedToken(Token):
    secret: str = Field(description="the bearer token; shown only now, only its digest is stored")


def _principal_name() -> str | None:
    who = current_principal()
    return who.name if who is not None else None


@router.get("/v1/tokens", response_model=list[Token], summary="The API tokens (never their secrets)")
async def list_tokens(
    s: Annotated[Services, Depends(services)],
    revoked: Annotated[bool, Query(description="include revoked tokens")] = False,
) -> list[dict[str, Any]]:
    return await tokens.list_tokens(s.pool, s.schema, include_revoked=revoked)


@router.post(
    "/v1/tokens",
    status_code=201,
    response_model=CreatedToken,
    summary="Create a token; the answer holds its secret, which cannot be shown again",
    responses={409: {"description": "a live token already has that name"}},
)
async def create_token(s: Annotated[Services, Depends(services)], body: TokenBody) -> dict[str, Any]:
    row, secret = await tokens.create_token(
        s.pool, s.schema, name=body.name, scope=body.scope, created_by=_principal_name()
    )
    return {**row, "secret": secret}


@router.delete(
    "/v1/tokens/{token}",
    response_model=Token,
    summary="Revoke a live token (by id or name); it is refused from then on",
    responses={404: {"description": "no live token with that id or name"}},
)
async def revoke_token(
    s: Annotated[Services, Depends(services)],
    token: Annotated[str, Path(min_length=1, max_length=100, description="the token's id or name")],
) -> dict[str, Any]:
    row = await tokens.revoke_token(s.pool, s.schema, token, revoked_by=_principal_name())
    if row is None:
        raise NotFound(f"no live token has the id or name {token!r} (`slotflow token list` shows them)")
    return row
