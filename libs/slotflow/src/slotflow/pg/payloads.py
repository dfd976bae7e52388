"""Large workflow payloads in PostgreSQL, stored once by content and read back by reference.

`PostgresPayloadStore` is the PostgreSQL side of the workflow SDK's `PayloadStore` protocol
(`slotflow.workflow.payloads`, whose `offload_payloads` / `resolve_payloads` the orchestrator calls
around the decision step): `put` returns `"sha256:<hex>"` of the bytes and is idempotent (the same
bytes are one row however often and however concurrently they are put); `get` hands back exactly
those bytes or raises `PayloadNotFound`. The table comes from the `PAYLOADS` migration
source (`pg/sql/payloads/`), which the owning service applies with its other migrations.

`put_payload` and `get_payload` take a connection and run inside the caller's transaction, so a
payload can commit with the history event that references it.
"""

import re

from slotflow.contracts.workflows import content_ref
from slotflow.errors import ConfigurationError, PayloadNotFound, TransientStorageError
from slotflow.pg.pool import CONNECTION_ERRORS, Conn, Pool
from slotflow.pg.statements import sql

__all__ = ["PayloadNotFound", "PostgresPayloadStore", "get_payload", "put_payload"]

_REF = re.compile(r"^sha256:[0-9a-f]{64}$")
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


# primary key (ref), the bytes' own hash: the same bytes are one row, however often they are put.
INSERT_PAYLOAD = (
    "INSERT INTO {schema}.payloads (ref, data, size) VALUES ($1, $2, $3) ON CONFLICT (ref) DO NOTHING"
)
SELECT_PAYLOAD = "SELECT data FROM {schema}.payloads WHERE ref = $1"


def _checked_ref(ref: str) -> str:
    if _REF.match(ref) is None:
        raise PayloadNotFound(f"{ref!r} is not a payload reference (expected sha256:<64 hex digits>)")
    return ref


async def put_payload(conn: Conn, *, schema: str, data: bytes) -> str:
    """Store ``data`` in the caller's transaction (once: an existing row is kept); returns its ref."""
    ref = content_ref(data)
    # A concurrent put of the same bytes waits on the primary key, then does nothing: no error.
    await conn.execute(
        sql(INSERT_PAYLOAD, schema),
        ref,
        data,
        len(data),
    )
    return ref


async def get_payload(conn: Conn, *, schema: str, ref: str) -> bytes:
    """The bytes stored under ``ref``.

    Raises:
        PayloadNotFound: nothing is stored under ``ref`` (or it is not a payload reference).
    """
    data = await conn.fetchval(sql(SELECT_PAYLOAD, schema), _checked_ref(ref))
    if data is None:
        raise PayloadNotFound(f"no payload {ref} in {schema}.payloads")
    return bytes(data)


class PostgresPayloadStore:
    """A `PayloadStore` on a pool: each call is its own transaction.

    Raises (every method):
        TransientStorageError: PostgreSQL did not answer; the same call may succeed later.
    """

    def __init__(self, pool: Pool, *, schema: str) -> None:
        if _SCHEMA.match(schema) is None:
            raise ConfigurationError(f"invalid schema name {schema!r}")
        self._pool = pool
        self._schema = schema

    async def put(self, data: bytes) -> str:
        """Store ``data`` once; returns `"sha256:<hex>"`, the same for the same bytes."""
        try:
            async with self._pool.acquire() as conn:
                return await put_payload(conn, schema=self._schema, data=data)
        except CONNECTION_ERRORS as err:
            raise TransientStorageError(f"cannot store a payload in PostgreSQL: {err}") from err

    async def get(self, ref: str) -> bytes:
        """The bytes ``put`` stored under ``ref``.

        Raises:
            PayloadNotFound: nothing is stored under ``ref``.
        """
        try:
            async with self._pool.acquire() as conn:
                return await get_payload(conn, schema=self._schema, ref=ref)
        except CONNECTION_ERRORS as err:
            raise TransientStorageError(f"cannot read payload {ref} from PostgreSQL: {err}") from err
