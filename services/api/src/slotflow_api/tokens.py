"""The API tokens in the api's schema: create (only the secret's digest is stored), list, revoke.

Its statements, each with the invariant it keeps, are in `slotflow_api.sql.auth`; `slotflow_api.auth`
reads the table to authenticate.
"""

from typing import Any

import asyncpg

from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow_api.auth import Scope, digest, new_token
from slotflow_api.errors import TokenConflict
from slotflow_api.sql.auth import INSERT_TOKEN, LIST_TOKENS, REVOKE_TOKEN_BY_ID, REVOKE_TOKEN_BY_NAME


async def create_token(
    pool: Pool, schema: str, *, name: str, scope: Scope, created_by: str | None
) -> tuple[dict[str, Any], str]:
    """Store a new token; its row and its secret (shown once: only its digest is kept).

    Raises:
        TokenConflict: a live token already has ``name``.
    """
    token_id, secret = new_token()
    try:
        row = await pool.fetchrow(
            sql(INSERT_TOKEN, schema), token_id, name, scope, digest(secret), created_by
        )
    except asyncpg.UniqueViolationError as err:
        raise TokenConflict(
            f"a live token is already named {name!r}: revoke it first (`slotflow token revoke {name}`) "
            "or choose another name"
        ) from err
    return dict(row) if row is not None else {}, secret


async def list_tokens(pool: Pool, schema: str, *, include_revoked: bool) -> list[dict[str, Any]]:
    return [dict(r) for r in await pool.fetch(sql(LIST_TOKENS, schema), include_revoked)]


async def revoke_token(
    pool: Pool, schema: str, token: str, *, revoked_by: str | None
) -> dict[str, Any] | None:
    """Revoke the live token with id or name ``token``; its row, or None when none is live."""
    row = await pool.fetchrow(sql(REVOKE_TOKEN_BY_ID, schema), token, revoked_by)
    if row is None:
        row = await pool.fetchrow(sql(REVOKE_TOKEN_BY_NAME, schema), token, revoked_by)
    return dict(row) if row is not None else None
