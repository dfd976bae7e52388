"""Signing keys in the api's schema: register (the public half only), list, revoke; and the api's own.

Each change commits with its SigningKey record staged in the api's outbox, which the relay
publishes to the keys topic (`slotflow.keys.v1`, written by the api alone); every command consumer
follows that topic (`slotflow.principals.keyring`). The table is the api's record of who registered
and revoked what; the topic is how it reaches the services. Its statements, each with the invariant
it keeps, are in `slotflow_api.sql.auth`.
"""

from datetime import datetime
from typing import Any

import asyncpg

from slotflow.contracts import SigningKey, wrap
from slotflow.contracts.scopes import Scope
from slotflow.contracts.topics import SIGNING_KEYS
from slotflow.errors import ConfigurationError
from slotflow.pg.outbox import Staged, append_many
from slotflow.pg.pool import Conn, Pool
from slotflow.pg.statements import sql
from slotflow.principals.signing import MalformedKey, Signer, decode_public_key, encode_public_key, key_id_of
from slotflow.settings import KafkaSettings
from slotflow_api.errors import BadRequest, KeyConflict
from slotflow_api.sql.auth import (
    INSERT_KEY,
    INSERT_OWN_KEY,
    KEY_BY_ID,
    LIST_KEYS,
    REVOKE_KEY_BY_ID,
    REVOKE_KEY_BY_NAME,
)

#: The principal of the api's own keys: it signs every command it publishes and names the caller.
API_PRINCIPAL = "service:api"


def principal_of(name: str) -> str:
    """The principal a key registered under ``name`` proves: `key:<name>`."""
    return f"key:{name}"


def record(row: Any, kafka: KafkaSettings) -> Staged:
    """The SigningKey record of ``row`` (its whole state) for the keys topic, keyed by key id.

    Its id names the state, so the relay publishing a row twice collapses and a revocation is a
    record of its own."""
    key = SigningKey(
        key_id=row["key_id"],
        name=row["name"],
        principal=row["principal"],
        scope=row["scope"],
        public_key=row["public_key"],
        acts_for_others=row["acts_for_others"],
        created_at=row["created_at"],
        created_by=row["created_by"],
        revoked_at=row["revoked_at"],
        revoked_by=row["revoked_by"],
    )
    state = "revoked" if key.revoked_at is not None else "registered"
    at: datetime = key.revoked_at or key.created_at
    envelope = wrap(key, id=f"{key.key_id}/{state}", key=key.key_id, source="api", occurred_at=at)
    return Staged(kafka.topic(SIGNING_KEYS), envelope)


async def create_key(
    pool: Pool,
    schema: str,
    kafka: KafkaSettings,
    *,
    name: str,
    scope: Scope,
    public_key: str,
    created_by: str | None,
) -> dict[str, Any]:
    """Register ``public_key`` for principal `key:<name>` with ``scope``; its row.

    Raises:
        BadRequest: ``public_key`` is not an Ed25519 public key.
        KeyConflict: the key is registered already (live or revoked), or a live key has ``name``.
    """
    try:
        decoded = decode_public_key(public_key)
    except MalformedKey as err:
        raise BadRequest(f"public_key: {err}") from None
    key_id = key_id_of(decoded)
    async with pool.acquire() as conn, conn.transaction():
        known = await conn.fetchrow(sql(KEY_BY_ID, schema), key_id)
        if known is not None:
            state = "revoked" if known["revoked_at"] is not None else "live"
            raise KeyConflict(
                f"this public key is registered already, as {known['name']!r} ({state}): a key is registered "
                "once, and a revoked one never comes back; make a new key (`slotflow key create`)"
            )
        try:
            row = await conn.fetchrow(
                sql(INSERT_KEY, schema),
                key_id,
                name,
                principal_of(name),
                scope,
                encode_public_key(decoded),
                False,
                created_by,
            )
        except asyncpg.UniqueViolationError as err:
            raise KeyConflict(
                f"a live key is already named {name!r}: revoke it first (`slotflow key revoke {name}`) "
                "or choose another name"
            ) from err
        await append_many(conn, schema=schema, items=[record(row, kafka)])
    return dict(row) if row is not None else {}


async def list_keys(pool: Pool, schema: str, *, include_revoked: bool) -> list[dict[str, Any]]:
    return [dict(r) for r in await pool.fetch(sql(LIST_KEYS, schema), include_revoked)]


async def revoke_key(
    pool: Pool, schema: str, kafka: KafkaSettings, key: str, *, revoked_by: str | None
) -> dict[str, Any] | None:
    """Revoke the live key with id or name ``key``; its row, or None when none is live."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(sql(REVOKE_KEY_BY_ID, schema), key, revoked_by)
        if row is None:
            row = await conn.fetchrow(sql(REVOKE_KEY_BY_NAME, schema), key, revoked_by)
        if row is None:
            return None
        await append_many(conn, schema=schema, items=[record(row, kafka)])
    return dict(row)


async def register_own(conn: Conn, schema: str, kafka: KafkaSettings, signer: Signer) -> bool:
    """Register the api's own key (principal `service:api`, admin, acting for its callers) in the
    caller's transaction, and stage its record for the keys topic; whether the key was new.

    A key file reused across restarts finds its row and announces it again: the record is
    idempotent (the same id and state), and a keys topic that lost it (recreated) gets it back.

    Raises:
        ConfigurationError: the key was revoked: the api must not sign with it (give it a new one).
    """
    row = await conn.fetchrow(
        sql(INSERT_OWN_KEY, schema),
        signer.key_id,
        f"api.{signer.key_id[2:14]}",
        API_PRINCIPAL,
        signer.public_key,
    )
    new = row is not None
    if row is None:
        row = await conn.fetchrow(sql(KEY_BY_ID, schema), signer.key_id)
    if row is None:
        raise ConfigurationError(f"the api's signing key {signer.key_id} was neither registered nor found")
    if row["revoked_at"] is not None:
        raise ConfigurationError(
            f"the api's signing key {signer.key_id} was revoked at {row['revoked_at']:%Y-%m-%d %H:%M:%S%z}; "
            "give the api a new one (SLOTFLOW_API_SIGNING_KEY_FILE, or unset it for a key made at start)"
        )
    await append_many(conn, schema=schema, items=[record(row, kafka)])
    return new
