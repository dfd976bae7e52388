"""The DLQ's writes: park a dead letter, redrive or discard a selection. Each runs in the caller's
transaction and stages its events in the outbox (and redriven records in the redrive table) there,
so a state change and what it announces commit or vanish together.
"""

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic_core import from_json

from slotflow.contracts import (
    CommandAccepted,
    CommandRejected,
    DeadLettered,
    DeadLetterFilter,
    DeadLetterStatusChanged,
    DiscardDeadLetters,
    Envelope,
    RedriveDeadLetters,
    wrap,
)
from slotflow.contracts.dlq import REDRIVE_OF_HEADER
from slotflow.contracts.envelope import REDRIVE_COUNT_HEADER, TYPE_HEADER, fit_id
from slotflow.contracts.topics import DLQ_EVENTS, SIGNING_KEYS
from slotflow.core.nul import jsonb_text, pg_text
from slotflow.pg.outbox import Staged, append_many
from slotflow.pg.pool import Conn
from slotflow.pg.statements import compose, sql, sql_with
from slotflow.settings import KafkaSettings
from slotflow_dlq.queries import selection_sql

SOURCE = "dlq"
#: Values larger than this are not parsed into `decoded` (inspection shows the raw bytes).
_DECODE_LIMIT = 4 * 1024 * 1024
_EVENT_ERROR_CHARS = 2000


def pg_text_or_none(value: str | None) -> str | None:
    return None if value is None else pg_text(value)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def letter_headers(letter: DeadLettered) -> list[tuple[str, bytes]]:
    """The original record's headers, byte-exact when the sender included them so."""
    if letter.headers_b64:
        return [(name, base64.b64decode(value)) for name, value in letter.headers_b64.items()]
    return [(name, value.encode()) for name, value in letter.headers.items()]


def encode_headers(headers: list[tuple[str, bytes]]) -> str:
    """Headers as stored: a JSON list of [name base64, value base64] (names may hold anything)."""
    return json.dumps([[_b64(name.encode()), _b64(value)] for name, value in headers])


def decode_headers(stored: str) -> list[tuple[str, bytes]]:
    pairs: list[list[str]] = json.loads(stored)
    return [
        (base64.b64decode(name).decode(errors="replace"), base64.b64decode(value)) for name, value in pairs
    ]


def _header_text(headers: list[tuple[str, bytes]], name: str) -> str | None:
    found = None
    for key, value in headers:
        if key == name:
            found = value.decode("utf-8", errors="replace")
    return found


def _decoded_json(value: bytes) -> str | None:
    """The value as JSON text for the `decoded` column, when it is JSON PostgreSQL can hold."""
    if not value or len(value) > _DECODE_LIMIT:
        return None
    try:
        parsed: Any = from_json(value)
        # jsonb refuses NaN and Infinity (a foreign producer's JSON may hold them, and the letter
        # about it must still be stored): such a value is inspected raw, like one with a NUL.
        text = json.dumps(parsed, allow_nan=False)
    except ValueError:
        return None
    # jsonb refuses \u0000 anywhere; such a value is inspected raw.
    return None if "\\u0000" in text else text


def _prior_redrives(headers: list[tuple[str, bytes]]) -> int:
    raw = _header_text(headers, REDRIVE_COUNT_HEADER)
    try:
        return max(int(raw or "0"), 0)
    except ValueError:
        return 0


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Parked:
    """What parking one letter did."""

    dead_letter_id: str
    new: bool
    count: int
    reason: str
    notify: bool
    event: Staged


_PARK = """
-- The DLQ record itself is recorded first: delivered again after a crash (same position), it
-- parks nothing and counts nothing.
WITH first_sight AS (
    INSERT INTO {schema}.inbox (event_id, topic) VALUES ($25, $26)
    ON CONFLICT (event_id) DO NOTHING
    RETURNING 1
)
INSERT INTO {schema}.dead_letters AS d (
    id, reason, error_type, error, traceback, source_service, seen_by, topic, "partition", "offset",
    record_key, key_text, headers, value, value_size, value_truncated, record_time, original_type,
    decoded, run_id, job_id, tags, history, redrive_of, prior_redrives)
SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, ARRAY[$6::text], $7::text, $8::int,
    $9::bigint, $10::bytea, $11::text, $12::jsonb, $13::bytea, $14::bigint, $15::boolean, $16::timestamptz,
    $17::text, $18::jsonb, $19::text, $20::text, $21::text[], $22::jsonb, $23::text, $24::int
 WHERE EXISTS (SELECT 1 FROM first_sight)
-- The same origin seen again (a consumer re-sent it, or another consumer group refused it too):
-- one entry, counted, never a second row.
ON CONFLICT (id) DO UPDATE SET
    count = d.count + 1,
    last_seen = now(),
    seen_by = CASE WHEN EXCLUDED.source_service = ANY (d.seen_by) THEN d.seen_by
                   ELSE d.seen_by || EXCLUDED.source_service END
RETURNING id, (xmax = 0) AS inserted, status, reason, error_type, error, source_service, topic,
    "partition", "offset", key_text, original_type, run_id, job_id, tags, count, redrive_count,
    first_seen, last_seen, status_changed_at, note, redrive_of
"""


# At most one notification per entry (primary key), staged in the parking transaction.
_QUEUE_NOTIFICATION = (
    "INSERT INTO {schema}.notifications (dead_letter_id, payload) VALUES ($1, $2::jsonb) "
    "ON CONFLICT DO NOTHING"
)


async def park(
    conn: Conn,
    *,
    schema: str,
    kafka: KafkaSettings,
    envelope: Envelope,
    letter: DeadLettered,
    notify_tag: str | None,
    dlq_record: str,
    dlq_topic: str,
) -> Parked | None:
    """Park ``letter`` (or count another sighting of its origin); None when the DLQ record at
    position ``dlq_record`` was handled before.

    The status event is returned for the caller to stage (one outbox write per batch).
    ``notify_tag``: when the letter is a run carrying this tag, a webhook notification is staged.
    """
    value = base64.b64decode(letter.value_b64)
    headers = letter_headers(letter)
    record_time = (
        datetime.fromtimestamp(letter.timestamp_ms / 1000, tz=UTC)
        if letter.timestamp_ms is not None
        else None
    )
    original_type = _header_text(headers, TYPE_HEADER)
    decoded = None if letter.value_truncated else _decoded_json(value)
    if original_type is None and decoded is not None:
        loaded = json.loads(decoded)
        if isinstance(loaded, dict) and isinstance(loaded.get("type"), str):
            original_type = loaded["type"]
    row = await conn.fetchrow(
        sql(_PARK, schema),
        pg_text(envelope.id),
        pg_text(letter.reason),
        pg_text(letter.error_type),
        pg_text(letter.error),
        pg_text(letter.traceback),
        pg_text(letter.source_service),
        pg_text(letter.topic),
        letter.partition,
        letter.offset,
        base64.b64decode(letter.key_b64) if letter.key_b64 is not None else None,
        pg_text_or_none(letter.key),
        encode_headers(headers),
        value,
        letter.value_size if letter.value_size is not None else len(value),
        letter.value_truncated,
        record_time,
        pg_text_or_none(original_type[:200] if original_type else None),
        decoded,
        pg_text_or_none(letter.run_id),
        pg_text_or_none(letter.job_id),
        [pg_text(t) for t in letter.tags],
        pg_text(json.dumps([h.model_dump(mode="json") for h in letter.history])),
        pg_text_or_none(_header_text(headers, REDRIVE_OF_HEADER)),
        _prior_redrives(headers),
        dlq_record,
        dlq_topic,
    )
    if row is None:
        return None
    new = bool(row["inserted"])
    # The letter id may take the whole id limit already (a long origin topic): fitted, the suffix
    # stays whole and the id within the limit (a longer one failed every park of that letter).
    event_id = fit_id(row["id"], "/parked") if new else fit_id(row["id"], f"/seen/{row['count']}")
    event = Staged(kafka.topic(DLQ_EVENTS), _status_event(row, event_id=event_id, at=row["last_seen"]))
    notify = bool(new and notify_tag is not None and letter.run_id is not None and notify_tag in letter.tags)
    if notify:
        await conn.execute(
            sql(_QUEUE_NOTIFICATION, schema),
            row["id"],
            json.dumps(notification_payload(row, letter)),
        )
    return Parked(row["id"], new, int(row["count"]), str(row["reason"]), notify, event)


def notification_payload(row: Any, letter: DeadLettered) -> dict[str, Any]:
    """The webhook's JSON body: enough for a person to act, and the id to find the rest."""
    return {
        "event": "dead_lettered_run",
        "dead_letter_id": row["id"],
        "run_id": row["run_id"],
        "job_id": row["job_id"],
        "reason": row["reason"],
        "error_type": row["error_type"],
        "error": str(row["error"])[:_EVENT_ERROR_CHARS],
        "source_service": row["source_service"],
        "topic": row["topic"],
        "tags": list(row["tags"]),
        "attempts": len(letter.history),
        "first_seen": row["first_seen"].isoformat(),
    }


def _status_event(row: Any, *, event_id: str, at: datetime, command_id: str | None = None) -> Envelope:
    event = DeadLetterStatusChanged(
        dead_letter_id=row["id"],
        status=row["status"],
        reason=row["reason"],
        topic=row["topic"],
        source_service=row["source_service"],
        job_id=row["job_id"],
        count=row["count"],
        redrive_count=row["redrive_count"],
        at=at,
        run_id=row["run_id"],
        partition=row["partition"],
        offset=row["offset"],
        key=row["key_text"],
        original_type=row["original_type"],
        error_type=row["error_type"],
        error=str(row["error"])[:_EVENT_ERROR_CHARS],
        tags=tuple(row["tags"]),
        first_seen=row["first_seen"],
        last_seen=row["last_seen"],
        note=row["note"],
        command_id=command_id,
        redrive_of=row["redrive_of"],
    )
    return wrap(event, id=event_id, key=row["id"], source=SOURCE, occurred_at=at)


_EVENT_COLUMNS = """id, status, reason, error_type, error, source_service, topic, "partition", "offset",
    key_text, original_type, run_id, job_id, tags, count, redrive_count, first_seen, last_seen,
    status_changed_at, note, redrive_of"""
#: The same columns of the updated row `d`.
_D_EVENT_COLUMNS = ", ".join("d." + c.strip() for c in _EVENT_COLUMNS.split(","))


@dataclass(frozen=True, slots=True)
class Applied:
    """What a command did: the entries it changed (none when it was seen before)."""

    command_id: str
    repeated: bool
    changed: tuple[str, ...]
    skipped_truncated: int = 0


# Recorded in the command's own transaction; the primary key is the command id, so
# `_COMMAND_SEEN` finds a redelivered command and it is applied once.
_RECORD_COMMAND = (
    "INSERT INTO {schema}.commands (command_id, kind, selection, note, matched) "
    "VALUES ($1, $2, $3::jsonb, $4, $5)"
)


async def _record_command(
    conn: Conn,
    schema: str,
    envelope: Envelope,
    kind: str,
    selection: DeadLetterFilter,
    note: str,
    matched: int,
) -> None:
    await conn.execute(
        sql(_RECORD_COMMAND, schema),
        pg_text(envelope.id),
        kind,
        # The selection was matched with NUL replaced anyway (selection_sql).
        jsonb_text(selection.model_dump(mode="json")),
        pg_text(note),
        matched,
    )


_COMMAND_SEEN = "SELECT true FROM {schema}.commands WHERE command_id = $1"


async def _seen_command(conn: Conn, schema: str, command_id: str) -> bool:
    found = await conn.fetchval(sql(_COMMAND_SEEN, schema), pg_text(command_id))
    return found is True


def _accepted(kafka: KafkaSettings, envelope: Envelope, kind: str, subject: str, at: datetime) -> Staged:
    event = CommandAccepted(command_id=envelope.id, command_type=envelope.type, subject=subject)
    return Staged(
        kafka.topic(DLQ_EVENTS),
        wrap(event, id=fit_id(envelope.id, "/accepted"), key=envelope.key, source=SOURCE, occurred_at=at),
    )


async def reject(
    conn: Conn,
    *,
    schema: str,
    kafka: KafkaSettings,
    envelope: Envelope,
    command: RedriveDeadLetters | DiscardDeadLetters,
    reason: str,
) -> Applied:
    """Answer a command that may not be applied (its principal is not proven) with CommandRejected,
    once per command id, and change no letter. It is recorded like an applied command (kind
    `rejected`, the reason as its note, nothing matched), so a redelivery is recognised."""
    if await _seen_command(conn, schema, envelope.id):
        return Applied(envelope.id, True, ())
    now = await conn.fetchval("SELECT now()")
    event = CommandRejected(
        command_id=envelope.id, command_type=envelope.type, subject=envelope.key, reason=reason
    )
    rejected = Staged(
        kafka.topic(DLQ_EVENTS),
        wrap(event, id=fit_id(envelope.id, "/rejected"), key=envelope.key, source=SOURCE, occurred_at=now),
    )
    await append_many(conn, schema=schema, items=[rejected])
    await _record_command(conn, schema, envelope, "rejected", command.selection, pg_text(reason), 0)
    return Applied(envelope.id, False, ())


def redrivable_topics(kafka: KafkaSettings) -> list[str]:
    """The topics a redrive may send a record back to: this deployment's own, but the keys topic.

    Only the api writes the keys topic (a registered key proves a principal), and no consumer parks
    a record of it; a letter naming it is forged, and redriven it would have the dlq write a key
    record (plaintext: a key nobody registered; secured: no ACL for it, the relay stopped)."""
    keys = kafka.topic(SIGNING_KEYS)
    return [spec.name for spec in kafka.topics() if spec.name != keys]


# One row per (entry, redrive number) (primary key): the bytes the redrive relay sends, copied
# inside the database so a large selection never passes through memory.
_RECORD_REDRIVES = """
INSERT INTO {schema}.redrives (dead_letter_id, redrive_number, command_id, topic, record_key, value, headers)
SELECT d.id, d.redrive_count, $1, d.topic, d.record_key, d.value, u.headers::jsonb
  FROM unnest($2::text[], $3::text[]) AS u(id, headers)
  JOIN {schema}.dead_letters d ON d.id = u.id
ON CONFLICT (dead_letter_id, redrive_number) DO NOTHING
"""


# A redrive's selection (`{where}`, the clause of `selection_sql`) is counted in three parts.
# Entries parked truncated: their bytes are incomplete, so they stay parked (counted, not sent).
_COUNT_TRUNCATED = "SELECT count(*) FROM {schema}.dead_letters WHERE {where} AND value_truncated"
# Entries naming a topic that is not one of this deployment's ($1): refused, and stay parked.
_COUNT_FOREIGN = """
SELECT count(*) FROM {schema}.dead_letters
 WHERE {where} AND NOT value_truncated AND topic <> ALL ($1::text[])
"""
# The rest, oldest first and at most $1, become `redriven` with their count raised by one. FOR
# UPDATE serialises two commands over the same entries: the second re-reads them once the first
# commits and, selecting parked entries (the default), finds them redriven already.
_REDRIVE = compose(
    """
WITH chosen AS (
    SELECT id FROM {schema}.dead_letters
     WHERE {where} AND NOT value_truncated AND topic = ANY ($3::text[])
     ORDER BY first_seen, id
     LIMIT $1
       FOR UPDATE
)
UPDATE {schema}.dead_letters d
   SET status = 'redriven', redrive_count = d.redrive_count + 1, status_changed_at = now(),
       note = $2
  FROM chosen WHERE d.id = chosen.id
RETURNING {event_columns}, d.headers::text AS headers, d.prior_redrives
""",
    event_columns=_D_EVENT_COLUMNS,
)


async def redrive(
    conn: Conn, *, schema: str, kafka: KafkaSettings, envelope: Envelope, command: RedriveDeadLetters
) -> Applied:
    """Mark the selection redriven and stage each record for its original topic, once per command.

    The record goes back byte-exact, with `slotflow-redrive-count` raised by one and
    `slotflow-redrive-of` naming this entry. Entries parked truncated cannot be redriven (their
    bytes are incomplete) and are left parked.
    """
    if await _seen_command(conn, schema, envelope.id):
        return Applied(envelope.id, True, ())
    # Only this deployment's own topics are redriven to: a letter is a claim by whoever sent it,
    # and one naming a foreign topic (issue 23) made the relay publish there, loop on it, and
    # block every later redrive. Such entries stay parked and the acknowledgement says so.
    own = redrivable_topics(kafka)
    alone, alone_params = selection_sql(command.selection, default_status="parked", first=1)
    skipped = await conn.fetchval(sql_with(_COUNT_TRUNCATED, schema, where=alone), *alone_params)
    after_own, after_params = selection_sql(command.selection, default_status="parked", first=2)
    foreign = await conn.fetchval(
        sql_with(_COUNT_FOREIGN, schema, where=after_own),
        own,
        *after_params,
    )
    where, params = selection_sql(command.selection, default_status="parked", first=4)
    rows = await conn.fetch(
        sql_with(_REDRIVE, schema, where=where),
        command.limit,
        pg_text(f"redriven by {envelope.id}"[:1000]),
        own,
        *params,
    )
    ids: list[str] = []
    new_headers: list[str] = []
    for row in rows:
        headers = [
            (name, value)
            for name, value in decode_headers(row["headers"])
            if name not in (REDRIVE_COUNT_HEADER, REDRIVE_OF_HEADER)
        ]
        headers.append((REDRIVE_COUNT_HEADER, str(row["prior_redrives"] + row["redrive_count"]).encode()))
        headers.append((REDRIVE_OF_HEADER, row["id"].encode()))
        ids.append(row["id"])
        new_headers.append(encode_headers(headers))
    if ids:
        await conn.execute(
            sql(_RECORD_REDRIVES, schema),
            pg_text(envelope.id),
            ids,
            new_headers,
        )
    now = await conn.fetchval("SELECT now()")
    tag = _short(envelope.id)
    items = [
        Staged(
            kafka.topic(DLQ_EVENTS),
            _status_event(
                row,
                event_id=fit_id(row["id"], f"/redriven/{row['redrive_count']}/{tag}"),
                at=now,
                command_id=envelope.id,
            ),
        )
        for row in rows
    ]
    subject = f"redrove {len(rows)} dead letter(s)"
    if skipped:
        subject += f"; {skipped} parked truncated cannot be redriven"
    if foreign:
        subject += f"; {foreign} refused: their topic is not one of this deployment's"
    items.append(_accepted(kafka, envelope, "redrive", subject, now))
    await append_many(conn, schema=schema, items=items)
    await _record_command(conn, schema, envelope, "redrive", command.selection, "", len(rows))
    return Applied(envelope.id, False, tuple(ids), int(skipped))


# Discarded entries keep their bytes (for the record) and are never sent; locked as in _REDRIVE.
_DISCARD = compose(
    """
WITH chosen AS (
    SELECT id FROM {schema}.dead_letters WHERE {where}
     ORDER BY first_seen, id LIMIT $1 FOR UPDATE
)
UPDATE {schema}.dead_letters d
   SET status = 'discarded', status_changed_at = now(), note = $2
  FROM chosen WHERE d.id = chosen.id
RETURNING {event_columns}
""",
    event_columns=_D_EVENT_COLUMNS,
)


async def discard(
    conn: Conn, *, schema: str, kafka: KafkaSettings, envelope: Envelope, command: DiscardDeadLetters
) -> Applied:
    """Mark the selection discarded with the command's reason (kept for the record, never sent)."""
    if await _seen_command(conn, schema, envelope.id):
        return Applied(envelope.id, True, ())
    where, params = selection_sql(command.selection, default_status="parked", first=3)
    note = pg_text(command.reason)
    rows = await conn.fetch(
        sql_with(_DISCARD, schema, where=where),
        command.limit,
        note,
        *params,
    )
    now = await conn.fetchval("SELECT now()")
    tag = _short(envelope.id)
    items = [
        Staged(
            kafka.topic(DLQ_EVENTS),
            _status_event(
                row, event_id=fit_id(row["id"], f"/discarded/{tag}"), at=now, command_id=envelope.id
            ),
        )
        for row in rows
    ]
    items.append(_accepted(kafka, envelope, "discard", f"discarded {len(rows)} dead letter(s)", now))
    await append_many(conn, schema=schema, items=items)
    await _record_command(conn, schema, envelope, "discard", command.selection, note, len(rows))
    return Applied(envelope.id, False, tuple(row["id"] for row in rows))
