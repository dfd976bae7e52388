"""The transactional outbox: the table services stage their events in.

Services stage events with `append`/`append_many` inside the transaction that changes their state,
so an event exists if and only if the change committed. `slotflow.relay.OutboxRelay` then publishes
pending rows to Kafka with an idempotent producer and marks them published (the relay sits above
both `pg` and `kafka`: docs/development.md, "Layers").

Why a row may carry many events: staging and marking cost PostgreSQL per row (a heap tuple and
three index entries each time), so a caller whose events are staged at most once (each under a
claim or a fence) stages a transaction's events with `append_grouped`: one row per topic and shard,
the events in arrays in staging order. The relay sends a row's events in that order, and bounds a
pass by events, not rows. The `outbox_events` view shows one row per event either way.
"""

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import TYPE_HEADER, VERSION_HEADER, Envelope, envelope_headers
from slotflow.errors import SlotflowError
from slotflow.pg.pool import Conn
from slotflow.pg.statements import compose, sql
from slotflow.tracing import TRACEPARENT, headers_for
from slotflow.tracing import enabled as tracing_enabled

SHARDS = 8


@dataclass(frozen=True)
class Staged:
    """One event to stage: where it goes and the envelope itself."""

    topic: str
    envelope: Envelope
    headers: Mapping[str, bytes] | None = None


class Encoded(NamedTuple):
    """An event already encoded for the outbox (a hot path that builds its bytes itself).

    A NamedTuple rather than a frozen dataclass: hot paths build one per event, and a tuple is
    built in C (a frozen dataclass sets each field through object.__setattr__).

    `value` must be the envelope's encoding (`slotflow.contracts.codec.encode`) and `headers`
    the JSON `headers_json` gives; `encoded(staged)` turns a `Staged` into one.
    """

    topic: str
    event_id: str
    key: str
    value: bytes
    headers: str


def headers_json(envelope_type: str, version: int, extra: Mapping[str, bytes] | None = None) -> str:
    """The outbox's stored header JSON for an envelope of this type and version."""
    headers = {
        TYPE_HEADER: envelope_type.encode(),
        VERSION_HEADER: str(version).encode(),
        **(extra or {}),
    }
    return json.dumps({k: v.decode("latin-1") for k, v in headers.items()})


def encoded(item: Staged) -> Encoded:
    """``item`` as the row the outbox stores.

    While tracing is on, the row keeps the trace context it was staged in (unless the item brings
    its own): the relay publishes it with the context of the transaction that wrote it.
    """
    headers = {**envelope_headers(item.envelope), **(item.headers or {})}
    if tracing_enabled() and TRACEPARENT not in headers:
        headers.update(headers_for())
    return Encoded(
        item.topic,
        item.envelope.id,
        item.envelope.key,
        encode(item.envelope),
        json.dumps({k: v.decode("latin-1") for k, v in headers.items()}),
    )


def traced(item: Staged, extra: Mapping[str, bytes] | None = None) -> Staged:
    """``item`` carrying ``extra`` headers, by default the current trace context (tracing on),
    for an item staged later than the span it belongs to."""
    headers = headers_for() if extra is None else extra
    if not headers or (item.headers and TRACEPARENT in item.headers):
        return item
    return Staged(item.topic, item.envelope, {**(item.headers or {}), **headers})


def with_headers(row: Encoded, extra: Mapping[str, bytes]) -> Encoded:
    """``row`` with ``extra`` headers added (a trace context for a row its caller encoded)."""
    if not extra:
        return row
    headers = {**json.loads(row.headers), **{k: v.decode("latin-1") for k, v in extra.items()}}
    return row._replace(headers=json.dumps(headers))


def _row(item: Staged) -> tuple[str, str, str, bytes, str]:
    row = encoded(item)
    return (row.topic, row.event_id, row.key, row.value, row.headers)


#: Stages rows in the caller's transaction; returns how many were new. The shard is the key's hash,
#: so one key's rows share a shard and leave in seq order.
APPEND_ROWS = compose(
    """
    WITH staged AS (
        INSERT INTO {schema}.outbox (topic, event_id, key, shard, value, headers)
        SELECT t, i, k, hashtext(k) & {shard_mask}, v, h::json
          FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[]) AS u(t, i, k, v, h)
        ON CONFLICT (topic, event_id) DO NOTHING   -- unique (topic, event_id): duplicates collapse
        RETURNING 1
    )
    SELECT count(*) FROM staged
    """,
    shard_mask=str(SHARDS - 1),
)
#: `APPEND_ROWS` with each row's shard taken from a key of the caller's choosing ($6) instead of its
#: record key: rows that must leave in staging order though their record keys differ (a workflow's
#: history and the JobDue, timers and commands its decision sends) share a shard, and so one relay
#: pass, in seq order. Per-key order holds as long as every row of one record key is staged under
#: the same shard key (the orchestrator's: the workflow's id).
APPEND_ROWS_BY = compose(
    """
    WITH staged AS (
        INSERT INTO {schema}.outbox (topic, event_id, key, shard, value, headers)
        SELECT t, i, k, hashtext(s) & {shard_mask}, v, h::json
          FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::text[])
               AS u(t, i, k, v, h, s)
        ON CONFLICT (topic, event_id) DO NOTHING   -- unique (topic, event_id): duplicates collapse
        RETURNING 1
    )
    SELECT count(*) FROM staged
    """,
    shard_mask=str(SHARDS - 1),
)
#: Stages a transaction's events as one row per topic and shard, in the caller's transaction; the
#: events keep their staging order inside each row, and rows are numbered in the order of their
#: first event. A group is named by its first event's id and its size: the (topic, event_id)
#: collapse applies to the whole group, not to each event, so only events the caller stages at
#: most once (under a claim or a fence) belong here.
APPEND_GROUPED = compose(
    """
    INSERT INTO {schema}.outbox (topic, event_id, key, shard, value, event_ids, event_keys,
                                 event_values, event_headers, event_count)
    SELECT t, (array_agg(i ORDER BY n))[1] || '+' || count(*), (array_agg(k ORDER BY n))[1],
           hashtext(k) & {shard_mask}, ''::bytea, array_agg(i ORDER BY n), array_agg(k ORDER BY n),
           array_agg(v ORDER BY n), array_agg(h ORDER BY n), count(*)
      FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[])
           WITH ORDINALITY AS u(t, i, k, v, h, n)
     GROUP BY t, hashtext(k) & {shard_mask}
     ORDER BY min(n)
    ON CONFLICT (topic, event_id) DO NOTHING   -- unique (topic, event_id): a group staged twice collapses
    """,
    shard_mask=str(SHARDS - 1),
)
#: Published rows older than the keep period ($1 seconds); pending rows are never touched.
PURGE_PUBLISHED = "DELETE FROM {schema}.outbox WHERE published_at < now() - make_interval(secs => $1)"
#: Events (not rows) staged and not yet published.
COUNT_PENDING = "SELECT coalesce(sum(event_count), 0) FROM {schema}.outbox WHERE published_at IS NULL"


async def append(
    conn: Conn, *, schema: str, topic: str, envelope: Envelope, headers: Mapping[str, bytes] | None = None
) -> bool:
    """Stage one event in the caller's transaction; False when (topic, id) was already staged."""
    return await append_many(conn, schema=schema, items=[Staged(topic, envelope, headers)]) == 1


async def append_many(conn: Conn, *, schema: str, items: Iterable[Staged]) -> int:
    """Stage events in the caller's transaction with one statement; returns how many were new."""
    return await append_encoded(conn, schema=schema, rows=[encoded(item) for item in items])


async def append_encoded(
    conn: Conn, *, schema: str, rows: Iterable[Encoded], shard_keys: Sequence[str] | None = None
) -> int:
    """`append_many` for events encoded by the caller; returns how many were new.

    ``shard_keys`` (one per row) place rows in the outbox shard of that key instead of their own
    record key's (`APPEND_ROWS_BY`): rows staged under one shard key leave in staging order."""
    columns = _columns(rows)
    if not columns[0]:
        return 0
    if shard_keys is None:
        inserted = await conn.fetchval(sql(APPEND_ROWS, schema), *columns)
    else:
        if len(shard_keys) != len(columns[0]):
            raise SlotflowError(f"{len(shard_keys)} shard keys for {len(columns[0])} rows")
        inserted = await conn.fetchval(sql(APPEND_ROWS_BY, schema), *columns, list(shard_keys))
    return int(inserted)


def _columns(rows: Iterable[Encoded]) -> tuple[list[str], list[str], list[str], list[bytes], list[str]]:
    """The rows as the five arrays the staging statements unnest: topics, ids, keys, values, headers."""
    topics: list[str] = []
    ids: list[str] = []
    keys: list[str] = []
    values: list[bytes] = []
    headers: list[str] = []
    for row in rows:
        topics.append(row.topic)
        ids.append(row.event_id)
        keys.append(row.key)
        values.append(row.value)
        headers.append(row.headers)
    return topics, ids, keys, values, headers


async def append_grouped(conn: Conn, *, schema: str, rows: Sequence[Encoded]) -> None:
    """Stage events as one outbox row per topic and shard (APPEND_GROUPED), in the caller's
    transaction: for events staged at most once, each under a claim or a fence.

    Example (the claimer's outcome transaction, whose fenced write makes each event once-only):

        async with pool.acquire() as conn, conn.transaction():
            applied = await store.record_outcomes(conn, schema, writes)
            await append_grouped(conn, schema=schema, rows=[events.completed_row(r, at) for r in applied])
    """
    if rows:
        await conn.execute(sql(APPEND_GROUPED, schema), *_columns(rows))
