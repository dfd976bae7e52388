"""The DLQ's writes: park a dead letter, redrive or discard a selection, record an owner's answer
to a redrive. Each runs in the caller's transaction and stages its events (and redrive requests)
in the outbox there, so a state change and what it announces commit or vanish together.
"""

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass, field
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
    RedriveOutcome,
    RedriveRequested,
    wrap,
)
from slotflow.contracts.dlq import REDRIVE_OF_HEADER, RedriveDefinition, redrive_request_id
from slotflow.contracts.envelope import REDRIVE_COUNT_HEADER, TYPE_HEADER, fit_id, fit_key
from slotflow.contracts.topics import DLQ_EVENTS, DLQ_REDRIVES, JOBS_DUE
from slotflow.core.nul import jsonb_text, pg_text
from slotflow.errors import PoisonMessage
from slotflow.pg.outbox import Staged, append_many
from slotflow.pg.pool import Conn
from slotflow.pg.statements import sql, sql_with
from slotflow.redrive import RUN_REASONS, LetterFacts, Unroutable, route
from slotflow.settings import KafkaSettings
from slotflow_dlq.queries import selection_sql
from slotflow_dlq.sql import (
    CHOOSE,
    COMMAND_SEEN,
    COUNT_WORKFLOW_OWNED,
    DISCARD,
    MARK,
    PARK,
    QUEUE_NOTIFICATION,
    RECORD_ANSWER,
    RECORD_COMMAND,
    RECORD_REQUESTS,
    REQUEST_OF_ANSWER,
    SETTLE,
)

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


def _workflow_marks(letter: DeadLettered, decoded: str | None) -> tuple[str | None, int | None]:
    """The workflow and sequence of a parked activity's letter: its own marks, or, for a letter an
    older claimer parked, its JobDue's (a run's letter only: a poison JobDue is the claimer's)."""
    if letter.workflow_id is not None and letter.sequence is not None:
        return letter.workflow_id, letter.sequence
    if letter.source_service != "claimer" or letter.reason not in RUN_REASONS or decoded is None:
        return None, None
    loaded = json.loads(decoded)
    data = loaded.get("data") if isinstance(loaded, dict) else None
    if not isinstance(data, dict) or loaded.get("type") != "job.due":
        return None, None
    workflow_id, sequence = data.get("workflow_id"), data.get("sequence")
    if isinstance(workflow_id, str) and isinstance(sequence, int) and not isinstance(sequence, bool):
        return workflow_id, sequence
    return None, None


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
    workflow_id, sequence = _workflow_marks(letter, decoded)
    row = await conn.fetchrow(
        sql(PARK, schema),
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
        max(_prior_redrives(headers), letter.redrives),
        dlq_record,
        dlq_topic,
        pg_text_or_none(workflow_id),
        sequence,
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
            sql(QUEUE_NOTIFICATION, schema),
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
        note=row["note"][:_EVENT_ERROR_CHARS],
        command_id=command_id,
        redrive_of=row["redrive_of"],
        workflow_id=row["workflow_id"],
        sequence=row["sequence"],
        redrive_target=row["redrive_target"],
    )
    return wrap(event, id=event_id, key=row["id"], source=SOURCE, occurred_at=at)


@dataclass(frozen=True, slots=True)
class Applied:
    """What a command did: the entries it changed (none when it was seen before or refused)."""

    command_id: str
    repeated: bool
    changed: tuple[str, ...]
    #: Redrive requests staged, by the service asked (for the caller's metrics and wake-ups).
    requested: dict[str, int] = field(default_factory=dict)
    #: Letters refused at staging (no owner for them): `redrive_failed` at once.
    refused: int = 0
    #: Why the whole command was rejected (nothing changed), or None.
    rejected: str | None = None


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
        sql(RECORD_COMMAND, schema),
        pg_text(envelope.id),
        kind,
        # The selection was matched with NUL replaced anyway (selection_sql).
        jsonb_text(selection.model_dump(mode="json")),
        pg_text(note),
        matched,
    )


async def _seen_command(conn: Conn, schema: str, command_id: str) -> bool:
    found = await conn.fetchval(sql(COMMAND_SEEN, schema), pg_text(command_id))
    return found is True


def _subject(envelope: Envelope, selection: DeadLetterFilter) -> str:
    return envelope.key or (selection.ids[0] if len(selection.ids) == 1 else envelope.id)


def _accepted(kafka: KafkaSettings, envelope: Envelope, summary: str, at: datetime) -> Staged:
    # The subject says what the command did ("redrove 3 dead letter(s); ..."): the CLI prints it.
    event = CommandAccepted(command_id=envelope.id, command_type=envelope.type, subject=summary)
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
    await append_many(conn, schema=schema, items=[_rejected(kafka, envelope, envelope.key, reason, now)])
    await _record_command(conn, schema, envelope, "rejected", command.selection, pg_text(reason), 0)
    return Applied(envelope.id, False, (), rejected=reason)


def _rejected(kafka: KafkaSettings, envelope: Envelope, subject: str, reason: str, at: datetime) -> Staged:
    event = CommandRejected(
        command_id=envelope.id, command_type=envelope.type, subject=subject, reason=reason
    )
    return Staged(
        kafka.topic(DLQ_EVENTS),
        wrap(event, id=fit_id(envelope.id, "/rejected"), key=envelope.key, source=SOURCE, occurred_at=at),
    )


#: Why a selection that does not narrow is refused (`DeadLetterFilter.narrows`).
EVERYTHING = (
    "the selection names no ids and none of source, topic, reason, job, run or workflow: it would take "
    "every dead letter (a status or a time range alone still does); narrow it, or say all to mean every one"
)
NOTHING = "no dead letter matches the selection"


async def _reject(
    conn: Conn,
    *,
    schema: str,
    kafka: KafkaSettings,
    envelope: Envelope,
    kind: str,
    selection: DeadLetterFilter,
    reason: str,
) -> Applied:
    """Refuse the whole command: nothing changes, the sender reads why (CommandRejected)."""
    now = await conn.fetchval("SELECT now()")
    await append_many(
        conn, schema=schema, items=[_rejected(kafka, envelope, _subject(envelope, selection), reason, now)]
    )
    await _record_command(conn, schema, envelope, kind, selection, f"rejected: {reason}", 0)
    return Applied(envelope.id, False, (), rejected=reason)


def _slot(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


@dataclass(frozen=True, slots=True)
class _Choice:
    """What the redrive does with one chosen letter."""

    dead_letter_id: str
    request_id: str
    status: str
    note: str
    target: str
    kind: str
    redrive: int
    reason: str | None = None
    request: Envelope | None = None


def _choose(
    row: Any,
    *,
    kafka: KafkaSettings,
    envelope: Envelope,
    definition: RedriveDefinition,
    topics: dict[str, Any],
    at: datetime,
) -> _Choice:
    facts = LetterFacts(
        topic=row["topic"],
        partition=row["partition"],
        source_service=row["source_service"],
        reason=row["reason"],
        run_id=row["run_id"],
        workflow_id=row["workflow_id"],
        sequence=row["sequence"],
    )
    request_id = secrets.token_hex(16)
    # The run's redrive number: the redrives it had before this letter, and this letter's, this one
    # included (the claimer reopens a run once per number).
    number = row["prior_redrives"] + row["redrive_count"] + 1
    routed = route(facts, definition=definition, topics=topics, jobs_due=kafka.topic(JOBS_DUE))
    if isinstance(routed, Unroutable):
        reason = f"refused by the dlq: {routed.reason}"
        return _Choice(row["id"], request_id, "redrive_failed", reason, "dlq", "none", number, reason)
    request = RedriveRequested(
        request_id=request_id,
        dead_letter_id=row["id"],
        command_id=envelope.id[:1000],
        target=routed.target,
        kind=routed.kind,
        definition=definition,
        topic=row["topic"],
        partition=row["partition"],
        offset=row["offset"],
        run_id=row["run_id"],
        job_id=row["job_id"],
        slot=_slot(row["slot_text"]),
        workflow_id=row["workflow_id"],
        sequence=row["sequence"],
        redrive=number,
    )
    wrapped = wrap(
        request,
        id=redrive_request_id(request_id),
        key=fit_key(row["id"]),
        source=SOURCE,
        occurred_at=at,
    )
    note = f"redrive asked of the {routed.target} by {envelope.id}"[:1000]
    return _Choice(
        row["id"], request_id, "redriving", note, routed.target, routed.kind, number, request=wrapped
    )


def _redrive_summary(touched: int, requested: dict[str, int], refused: int, left_out: int) -> str:
    parts = [f"redrove {touched} dead letter(s)"]
    if requested:
        owners = ", ".join(f"{target} {count}" for target, count in sorted(requested.items()))
        parts.append(f"{sum(requested.values())} asked of their owners ({owners}); they answer each")
    if refused:
        parts.append(f"{refused} refused: no owner can redrive them (see each letter's note)")
    if left_out:
        parts.append(
            f"{left_out} left out: workflows' parked activities, retried only through their workflow "
            "(RetryActivity, or a redrive naming the letter by id)"
        )
    return "; ".join(parts)


async def redrive(
    conn: Conn, *, schema: str, kafka: KafkaSettings, envelope: Envelope, command: RedriveDeadLetters
) -> Applied:
    """Ask each selected letter's owner to redrive it (docs/decisions/0009), once per command.

    Every chosen letter is `redriving` with a RedriveRequested staged for its owner, or
    `redrive_failed` with the reason when no owner can take it. A selection without ids (a bulk
    redrive) leaves workflows' parked activities out. Refused whole (CommandRejected, nothing
    changes): a selection that does not narrow without `all`, and one that matches nothing.
    """
    if await _seen_command(conn, schema, envelope.id):
        return Applied(envelope.id, True, ())
    selection = command.selection
    if not selection.narrows() and not command.all:
        return await _reject(
            conn,
            schema=schema,
            kafka=kafka,
            envelope=envelope,
            kind="redrive",
            selection=selection,
            reason=EVERYTHING,
        )
    bulk = not selection.ids
    left_out = 0
    if bulk:
        alone, alone_params = selection_sql(selection, default_status="parked", first=1)
        left_out = int(
            await conn.fetchval(sql_with(COUNT_WORKFLOW_OWNED, schema, where=alone), *alone_params)
        )
    where, params = selection_sql(selection, default_status="parked", first=3)
    rows = await conn.fetch(sql_with(CHOOSE, schema, where=where), command.limit, bulk, *params)
    if not rows:
        reason = NOTHING
        if left_out:
            reason += f" but {left_out} workflows' parked activities, which a bulk redrive leaves out (name them by id)"
        return await _reject(
            conn,
            schema=schema,
            kafka=kafka,
            envelope=envelope,
            kind="redrive",
            selection=selection,
            reason=reason,
        )
    now: datetime = await conn.fetchval("SELECT now()")
    topics = {spec.name: spec for spec in kafka.topics()}
    choices = [
        _choose(row, kafka=kafka, envelope=envelope, definition=command.definition, topics=topics, at=now)
        for row in rows
    ]
    changed = await conn.fetch(
        sql(MARK, schema),
        [c.dead_letter_id for c in choices],
        [c.status for c in choices],
        [pg_text(c.note) for c in choices],
        [c.request_id for c in choices],
        [c.target for c in choices],
    )
    await conn.execute(
        sql(RECORD_REQUESTS, schema),
        pg_text(envelope.id),
        command.definition,
        [c.request_id for c in choices],
        [c.dead_letter_id for c in choices],
        [c.target for c in choices],
        [c.kind for c in choices],
        [c.redrive for c in choices],
        ["refused" if c.reason is not None else None for c in choices],
        [pg_text(c.reason or "") for c in choices],
    )
    requested: dict[str, int] = {}
    for choice in choices:
        if choice.request is not None:
            requested[choice.target] = requested.get(choice.target, 0) + 1
    refused = sum(1 for c in choices if c.reason is not None)
    tag = _short(envelope.id)
    items = [
        Staged(kafka.topic(DLQ_REDRIVES), choice.request) for choice in choices if choice.request is not None
    ]
    items += [
        Staged(
            kafka.topic(DLQ_EVENTS),
            _status_event(
                row,
                # The letter id may take the whole id limit already (a long origin topic).
                event_id=fit_id(row["id"], f"/{row['status']}/{row['redrive_count']}/{tag}"),
                at=now,
                command_id=envelope.id,
            ),
        )
        for row in changed
    ]
    summary = _redrive_summary(len(changed), requested, refused, left_out)
    items.append(_accepted(kafka, envelope, summary, now))
    await append_many(conn, schema=schema, items=items)
    await _record_command(conn, schema, envelope, "redrive", selection, "", len(changed))
    return Applied(envelope.id, False, tuple(row["id"] for row in changed), requested, refused)


async def discard(
    conn: Conn, *, schema: str, kafka: KafkaSettings, envelope: Envelope, command: DiscardDeadLetters
) -> Applied:
    """Mark the selection discarded with the command's reason (kept for the record, never sent).

    Refused whole, as a redrive is: a selection that does not narrow without `all`, and one that
    matches nothing.
    """
    if await _seen_command(conn, schema, envelope.id):
        return Applied(envelope.id, True, ())
    selection = command.selection
    if not selection.narrows() and not command.all:
        return await _reject(
            conn,
            schema=schema,
            kafka=kafka,
            envelope=envelope,
            kind="discard",
            selection=selection,
            reason=EVERYTHING,
        )
    where, params = selection_sql(selection, default_status="parked", first=3)
    note = pg_text(command.reason)
    rows = await conn.fetch(
        sql_with(DISCARD, schema, where=where),
        command.limit,
        note,
        *params,
    )
    if not rows:
        return await _reject(
            conn,
            schema=schema,
            kafka=kafka,
            envelope=envelope,
            kind="discard",
            selection=selection,
            reason=NOTHING,
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
    summary = f"discarded {len(rows)} dead letter(s)"
    items.append(_accepted(kafka, envelope, summary, now))
    await append_many(conn, schema=schema, items=items)
    await _record_command(conn, schema, envelope, "discard", selection, note, len(rows))
    return Applied(envelope.id, False, tuple(row["id"] for row in rows))


class UnprovenAnswer(PoisonMessage):
    """A RedriveOutcome that names no request this service staged, or another letter, or comes from
    another service than the one asked: parked as the dlq's own poison, nothing changes."""

    reason = "unproven_outcome"


@dataclass(frozen=True, slots=True)
class Answered:
    """What an owner's answer did: the letter's status event, when it moved it."""

    request_id: str
    outcome: str
    event: Staged | None


async def answer(
    conn: Conn, *, schema: str, kafka: KafkaSettings, envelope: Envelope, outcome: RedriveOutcome
) -> Answered | None:
    """Record an owner's answer; None when the request was answered before.

    Raises:
        UnprovenAnswer: the answer names no request staged here, another letter, or comes from
            another service than the one asked.
    """
    row = await conn.fetchrow(sql(REQUEST_OF_ANSWER, schema), outcome.request_id)
    if row is None:
        raise UnprovenAnswer(f"no redrive request {outcome.request_id} was staged by this dlq")
    if row["dead_letter_id"] != outcome.dead_letter_id:
        raise UnprovenAnswer(
            f"redrive request {outcome.request_id} is about {row['dead_letter_id']!r}, not {outcome.dead_letter_id!r}"
        )
    if outcome.service != row["target"] or envelope.source != row["target"]:
        raise UnprovenAnswer(
            f"redrive request {outcome.request_id} was asked of the {row['target']}, "
            f"answered by {outcome.service!r} (source {envelope.source!r})"
        )
    if row["answered_at"] is not None:
        return None
    reason = pg_text(outcome.reason)
    await conn.execute(sql(RECORD_ANSWER, schema), outcome.request_id, outcome.outcome, reason)
    status = "redriven" if outcome.outcome == "done" else "redrive_failed"
    said = f"{outcome.service}: {reason}" if reason else outcome.service
    note = (f"redriven by the {said}" if status == "redriven" else f"refused by the {said}")[:2000]
    settled = await conn.fetchrow(
        sql(SETTLE, schema), row["dead_letter_id"], status, note, outcome.request_id
    )
    if settled is None:
        return Answered(outcome.request_id, outcome.outcome, None)
    event = Staged(
        kafka.topic(DLQ_EVENTS),
        _status_event(
            settled,
            event_id=fit_id(settled["id"], f"/{status}/{outcome.request_id}"),
            at=settled["status_changed_at"],
        ),
    )
    return Answered(outcome.request_id, outcome.outcome, event)
