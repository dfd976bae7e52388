"""The processor's tables, copied to PostgreSQL (schema `stats`) for the api to read.

The faust tables (and their changelog topics) are the state; these rows are a copy of it, written
a second or so behind. A row is always a whole window value, never a delta, so writing it twice
is harmless. `events` is how many records the value has applied: it only grows for one key, so an
upsert that would lower it is a stale copy (from a worker that lost the partition in a rebalance,
say) and is refused by the WHERE clause.
"""

import functools
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from importlib import resources
from typing import Any, NamedTuple

import asyncpg

from slotflow_stats.windows import Value

Row = tuple[Any, ...]
#: A connection or a pooled one (both run the same statements).
Conn = asyncpg.Connection | asyncpg.pool.PoolConnectionProxy

# Serialises the DDL of several workers starting at once (CREATE ... IF NOT EXISTS is not safe
# against a concurrent CREATE of the same name). The number is this service's, arbitrary.
_DDL_LOCK = 0x5F57A75
# Created only when missing: even CREATE SCHEMA IF NOT EXISTS needs CREATE on the database, which
# the stats role does not hold where its schema was made for it (docs/security.md).
_SCHEMA_EXISTS = "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)"
_CREATE_SCHEMA = "CREATE SCHEMA IF NOT EXISTS {schema}"


class WindowRow(NamedTuple):
    """One window of one subject, as stored."""

    size_s: int
    window_start: float
    family: str
    subject: str
    partition: int
    value: Value


async def create_schema(conn: Conn, schema: str) -> None:
    """Create the sink's tables when they are missing (idempotent)."""
    ddl = resources.files("slotflow_stats").joinpath("schema.sql").read_text(encoding="utf-8")
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _DDL_LOCK)
        if not await conn.fetchval(_SCHEMA_EXISTS, schema):
            await conn.execute(sql(_CREATE_SCHEMA, schema))
        await conn.execute(sql(ddl, schema))


@functools.lru_cache(maxsize=64)
def sql(statement: str, schema: str) -> str:
    """``statement`` with `{schema}` filled in, once per pair. The worker does not import
    `slotflow` (decision 0005), so this is the sink's own copy of `slotflow.pg.statements.sql`;
    ``schema`` is a plain lower-case name (the `db_schema` setting's pattern)."""
    return statement.replace("{schema}", schema)


def _instant(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


# A stored value is replaced only by one that has applied at least as many records (`events`
# never goes down for a key): a stale copy from a worker that lost the partition is refused.
_MERGE_WINDOW = """
INSERT INTO {schema}.windows
    (size_s, window_start, family, subject, part, events, counts, duration, lateness)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9::jsonb)
ON CONFLICT (size_s, window_start, family, subject, part) DO UPDATE
   SET events = EXCLUDED.events, counts = EXCLUDED.counts,
       duration = EXCLUDED.duration, lateness = EXCLUDED.lateness
 WHERE {schema}.windows.events <= EXCLUDED.events
"""


# The handler a job's newest JobDue named wins (`seen_at` never goes back).
_UPSERT_JOB_HANDLER = """
INSERT INTO {schema}.job_handlers (job_id, handler, seen_at) VALUES ($1, $2, $3)
ON CONFLICT (job_id) DO UPDATE SET handler = EXCLUDED.handler, seen_at = EXCLUDED.seen_at
 WHERE {schema}.job_handlers.seen_at <= EXCLUDED.seen_at
"""


async def write(
    conn: Conn,
    schema: str,
    windows: Iterable[WindowRow],
    handlers: Mapping[str, tuple[str, float]],
) -> None:
    """Upsert ``windows`` and the job-to-handler map ``handlers`` (job id to handler, seen at)."""
    rows = [
        (
            w.size_s,
            _instant(w.window_start),
            w.family,
            w.subject,
            w.partition,
            int(w.value["n"]),
            w.value["counts"],
            w.value["duration"],
            w.value["lateness"],
        )
        for w in windows
    ]
    async with conn.transaction():
        if rows:
            await conn.executemany(
                sql(_MERGE_WINDOW, schema),
                [(*r[:6], _json(r[6]), _json(r[7]), _json(r[8])) for r in rows],
            )
        if handlers:
            await conn.executemany(
                sql(_UPSERT_JOB_HANDLER, schema),
                [(job, handler, _instant(at)) for job, (handler, at) in handlers.items()],
            )


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
