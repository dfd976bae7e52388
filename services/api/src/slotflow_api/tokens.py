"""The API tokens in the api's schema: create (only the secret's digest is stored), list, revoke.

Each statement carries the invariant it keeps; `slotflow_api.auth` reads the table to authenticate.
"""

from typing import Any

import asyncpg

from slotflow.pg.pool import Pool
from slotflow.pg.statements import compose, sql
from slotflow_api.auth import Scope, digest, new_token
from slotflow_api.errors import TokenConflict

_COLUMNS = "token_id, name, scope, created_at, created_by, revoked_at, revoked_by, last_used_at"

# One live token per name (the partial unique index `api_tokens_live_name`): a second create with
# a live name fails with a unique violation, answered 409. The secret itself is never stored.
_INSERT_TOKEN = compose(
    "INSERT INTO {schema}.api_tokens (token_id, name, scope, secret_sha256, created_by) "
    "VALUES ($1, $2, $3, $4, $5) RETURNING {columns}",
    columns=_COLUMNS,
)
# Newest first; revoked ones only when asked (they stay, so who revoked what stays known).
_LIST_TOKENS = compose(
    "SELECT {columns} FROM {schema}.api_tokens WHERE $1 OR revoked_at IS NULL "
    "ORDER BY created_at DESC, token_id",
    columns=_COLUMNS,
)
# Revoking is final and idempotent on the row: a revoked token is never live again (its digest
# stays, so `authenticate` says "revoked" rather than "unknown"). By id first, then by live name:
# a name that looks like another token's id cannot revoke that other token by accident.
_REVOKE_BY_ID = compose(
    "UPDATE {schema}.api_tokens SET revoked_at = now(), revoked_by = $2 "
    "WHERE token_id = $1 AND revoked_at IS NULL RETURNING {columns}",
    columns=_COLUMNS,
)
_REVOKE_BY_NAME = compose(
    "UPDATE {schema}.api_tokens SET revoked_at = now(), revoked_by = $2 "
    "WHERE name = $1 AND revoked_at IS NULL RETURNING {columns}",
    columns=_COLUMNS,
)


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
            sql(_INSERT_TOKEN, schema), token_id, name, scope, digest(secret), created_by
        )
    except asyncpg.UniqueViolationError as err:
        raise TokenConflict(
            f"a live token is already named {name!r}: revoke it first (`slotflow token revoke {name}`) "
            "or choose another name"
        ) from err
    return dict(row) if row is not None else {}, secret


async def list_tokens(pool: Pool, schema: str, *, include_revoked: bool) -> list[dict[str, Any]]:
    return [dict(r) for r in await pool.fetch(sql(_LIST_TOKENS, schema), include_revoked)]


async def revoke_token(
    pool: Pool, schema: str, token: str, *, revoked_by: str | None
) -> dict[str, Any] | None:
    """Revoke the live token with id or name ``token``; its row, or None when none is live."""
    row = await pool.fetchrow(sql(_REVOKE_BY_ID, schema), token, revoked_by)
    if row is None:
        row = await pool.fetchrow(sql(_REVOKE_BY_NAME, schema), token, revoked_by)
    return dict(row) if row is not None else None
