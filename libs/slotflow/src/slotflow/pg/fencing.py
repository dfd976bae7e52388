"""Fenced writes for user tables: storage keeps the highest fencing token it has seen, refuses lower.

A lease only says when it is safe to hand a run to another claimer; it cannot recall a write the
old claimer already has on its way. So the storage that records the effect checks the token
itself: a claimer frozen with token 7 wakes up after another took the run over with token 8, and
its write bounces off a row that already carries 8.

Two shapes:

- `fenced_upsert`: the effect is one row keyed by something unique (a payout keyed by run id).
  The row carries the token; a conditional upsert keeps the highest and refuses lower ones.
- `advance_fence`: the effect is several writes. Advance a per-resource fence row first, in the
  same transaction; its row lock serialises writers and a stale token fails before anything else
  is written. The table comes from `fences_ddl()`.

Identifiers (table and column names) are validated and quoted, never interpolated raw: the values
travel as parameters.
"""

import re
from collections.abc import Mapping
from typing import Any, TypeAlias

import asyncpg

from slotflow.errors import ConfigurationError, FenceRejected
from slotflow.pg.pool import Conn
from slotflow.pg.statements import compose

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

#: A row as written, returned by `fenced_upsert`.
Row: TypeAlias = asyncpg.Record

#: The default name of the resource fence table.
FENCES_TABLE = "slotflow_fences"


class InvalidIdentifier(ConfigurationError):
    """A table or column name is not a plain SQL identifier."""


def quote_identifier(name: str) -> str:
    """``name`` double-quoted, after checking it is a plain identifier (letters, digits, `_`)."""
    if _IDENTIFIER.match(name) is None:
        raise InvalidIdentifier(f"{name!r} is not a plain SQL identifier")
    return f'"{name}"'


def quote_table(name: str) -> str:
    """A table name, optionally schema-qualified (``schema.table``), validated and quoted."""
    parts = name.split(".")
    if len(parts) > 2:
        raise InvalidIdentifier(f"{name!r} has more than one dot")
    return ".".join(quote_identifier(part) for part in parts)


def fences_ddl(table: str = FENCES_TABLE) -> str:
    """DDL for the resource fence table `advance_fence` writes (idempotent: IF NOT EXISTS)."""
    quoted = quote_table(table)
    return (
        f"CREATE TABLE IF NOT EXISTS {quoted} (\n"
        "    resource    text        PRIMARY KEY,  -- one fence per resource\n"
        "    fence_token bigint      NOT NULL,     -- the highest token that wrote; lower ones are refused\n"
        "    updated_at  timestamptz NOT NULL DEFAULT now()\n"
        ")"
    )


#: DDL for the default fence table (`slotflow_fences`).
FENCES_DDL = fences_ddl()

# Each `{name}` below is filled by `compose` with identifiers already validated and quoted (or
# `$n` placeholders): no value is ever part of the text.

#: The WHERE on DO UPDATE is the fence: a conflicting row with a higher token is left alone and
#: RETURNING yields nothing, all under the row lock, so two writers cannot both pass.
FENCED_UPSERT = (
    "INSERT INTO {table} AS t ({columns}) VALUES ({placeholders}) "
    "ON CONFLICT ({key_columns}) DO UPDATE SET {updates} "
    "WHERE t.{token} <= EXCLUDED.{token} "
    "RETURNING *"
)
CURRENT_FENCE_VALUE = "SELECT {token} FROM {table} WHERE {where}"
#: The fence row's lock serialises writers of one resource; a lower token updates nothing.
ADVANCE_FENCE = (
    "INSERT INTO {table} AS f (resource, fence_token) VALUES ($1, $2) "
    "ON CONFLICT (resource) DO UPDATE SET fence_token = EXCLUDED.fence_token, updated_at = now() "
    "WHERE f.fence_token <= EXCLUDED.fence_token "
    "RETURNING fence_token"
)
SEEN_FENCE = "SELECT fence_token FROM {table} WHERE resource = $1"


async def fenced_upsert(
    conn: Conn,
    *,
    table: str,
    key: Mapping[str, Any],
    values: Mapping[str, Any],
    token: int,
    token_column: str = "fence_token",  # noqa: S107 - a column name, not a secret
) -> Row:
    """Insert or update the row of ``table`` at ``key`` unless it already carries a higher token.

    ``key``'s columns must be exactly the columns of a unique index or primary key on ``table``
    (PostgreSQL's ON CONFLICT needs one). An equal token overwrites, so a claimer may repeat its
    own write. Runs in the caller's transaction; returns the row as written.

    Raises:
        FenceRejected: the row carries a token higher than ``token``; nothing was written.
        InvalidIdentifier: a table or column name is not a plain identifier.
    """
    if not key:
        raise ValueError("key needs at least one column")
    overlap = set(key) & set(values)
    if overlap or token_column in key or token_column in values:
        raise ValueError(f"key, values and the token column must not overlap: {sorted(overlap)}")
    quoted_table = quote_table(table)
    quoted_token = quote_identifier(token_column)
    key_columns = [quote_identifier(c) for c in key]
    value_columns = [quote_identifier(c) for c in values]
    columns = [*key_columns, *value_columns, quoted_token]
    params = [*key.values(), *values.values(), token]
    placeholders = ", ".join(f"${i}" for i in range(1, len(params) + 1))
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in [*value_columns, quoted_token])
    upsert = compose(
        FENCED_UPSERT,
        table=quoted_table,
        columns=", ".join(columns),
        placeholders=placeholders,
        key_columns=", ".join(key_columns),
        updates=updates,
        token=quoted_token,
    )
    row = await conn.fetchrow(upsert, *params)
    if row is not None:
        return row
    where = " AND ".join(f"{c} = ${i}" for i, c in enumerate(key_columns, start=1))
    current = await conn.fetchval(
        compose(CURRENT_FENCE_VALUE, token=quoted_token, table=quoted_table, where=where), *key.values()
    )
    resource = f"{table}[{', '.join(f'{k}={v!r}' for k, v in key.items())}]"
    raise FenceRejected(resource, token, int(current) if current is not None else -1)


async def advance_fence(conn: Conn, resource: str, token: int, *, table: str = FENCES_TABLE) -> None:
    """Move ``resource``'s fence to ``token`` in the caller's transaction, or refuse a stale token.

    Call it first in the transaction that writes the resource's effects: the fence row stays locked
    until commit, so a concurrent writer with another token waits and is then judged against the
    token this one left. An equal token passes (a claimer repeating its own writes).

    Raises:
        FenceRejected: the resource has already seen a higher token; roll the transaction back.
    """
    quoted = quote_table(table)
    current = await conn.fetchval(compose(ADVANCE_FENCE, table=quoted), resource, token)
    if current is not None:
        return
    seen = await conn.fetchval(compose(SEEN_FENCE, table=quoted), resource)
    raise FenceRejected(resource, token, int(seen) if seen is not None else -1)
