"""Recognise redelivered events: record an event id in the caller's transaction, once."""

from slotflow.pg.pool import Conn
from slotflow.pg.statements import sql

# unique (event_id): a redelivered event inserts nothing, so its effect is skipped.
RECORD_EVENT_ONCE = (
    "INSERT INTO {schema}.inbox (event_id, topic) VALUES ($1, $2) "
    "ON CONFLICT (event_id) DO NOTHING RETURNING true"
)


async def record_once(conn: Conn, *, schema: str, event_id: str, topic: str) -> bool:
    """Record ``event_id`` as processed; False when it already was (skip the effect).

    Runs inside the caller's transaction, so the record and the effect commit or vanish together.
    """
    inserted = await conn.fetchval(
        sql(RECORD_EVENT_ONCE, schema),
        event_id,
        topic,
    )
    return inserted is True
