"""Decode a consumed record into a message, or explain why it is poison and park it in the DLQ.

Every consumer decodes through `decode_record`; anything it raises is a `PoisonMessage` that goes
to the DLQ topic with the reason and the original bytes, and the partition moves on.

A dead letter carries the original key, value and headers byte-exact (base64), so the DLQ service
can send the very same record back. It never carries more than the DLQ topic accepts: a record too
large to park whole is parked with a prefix of its value and `value_truncated` set, which names
where the whole record still lies (topic, partition, offset) while its retention lasts.
"""

import base64
import traceback
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic_core import from_json

from slotflow.commands import NotACommand, command_route
from slotflow.contracts import (
    REGISTRY,
    AttemptRecord,
    DeadLettered,
    Envelope,
    JobDue,
    MessageRegistry,
    wrap,
)
from slotflow.contracts.codec import DEFAULT_MAX_BYTES, decode, encode
from slotflow.contracts.envelope import Message
from slotflow.contracts.topics import DLQ_MAX_RECORD_BYTES
from slotflow.errors import KeyMismatch, MessageTooLarge, PoisonMessage, UnexpectedMessageType
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Delivered, Record

#: Room left under the DLQ topic's limit for the record batch framing and headers.
_FRAMING = 64 * 1024
#: The largest DLQ envelope `send_to_dlq` produces by default.
DLQ_MAX_ENVELOPE_BYTES = DLQ_MAX_RECORD_BYTES - _FRAMING
#: How much of a value a truncated dead letter keeps, for a person to recognise it.
TRUNCATED_PREFIX_BYTES = 16 * 1024
#: Readable renderings (the key, header values) are cut here; the base64 fields stay exact.
_READABLE_CHARS = 1000
_ERROR_CHARS = 8000
_TRACEBACK_CHARS = 16000
#: The envelope's key is limited to this many characters (see `Envelope.key`).
_ENVELOPE_KEY_CHARS = 1000


def expected_key(envelope: Envelope, message: Message) -> str | None:
    """The key ``message`` must travel under, or None when its type does not fix one.

    Commands follow their route (schedule id, timer id, workflow id, a DLQ command's single id or
    else its command id); a JobDue is keyed by its job id. Per-key ordering is what the consumers
    rely on, so a record under another key is refused rather than processed out of order.
    """
    if isinstance(message, JobDue):
        return message.job_id
    try:
        route = command_route(message)
    except NotACommand:
        return None
    return route.key or envelope.id


def decode_record(
    record: Record,
    *,
    accept: tuple[type[Message], ...] | None = None,
    registry: MessageRegistry = REGISTRY,
    max_bytes: int = DEFAULT_MAX_BYTES,
    check_payload_key: bool = True,
) -> tuple[Envelope, Message]:
    """Validate ``record`` all the way to its model.

    Raises:
        PoisonMessage: a subclass naming the reason (undecodable, too_large, unknown_type,
            invalid_payload, key_mismatch, unexpected_type).
    """
    envelope = decode(record.value, max_bytes=max_bytes)
    message = registry.parse(envelope)
    if accept is not None and not isinstance(message, accept):
        names = ", ".join(m.message_type for m in accept)
        raise UnexpectedMessageType(f"{envelope.type} is not handled here (expected {names})")
    if record.key is not None and record.key != envelope.key.encode():
        shown = record.key.decode("utf-8", errors="replace")[:_READABLE_CHARS]
        raise KeyMismatch(f"record key {shown!r} differs from envelope key {envelope.key!r}")
    if check_payload_key:
        wanted = expected_key(envelope, message)
        if wanted is not None and wanted != envelope.key:
            raise KeyMismatch(f"{envelope.type} keyed {envelope.key!r} but its payload names {wanted!r}")
    return envelope, message


def _readable(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")[:_READABLE_CHARS]


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def guess_ids(
    record: Record, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[str | None, str | None, tuple[str, ...]]:
    """Best-effort (run_id, job_id, tags) from a record that may not validate, for filtering.

    Reads the envelope's `data` as plain JSON; anything that is not there or not a string is None.
    """
    value = record.value
    if not value or len(value) > max_bytes:
        return None, None, ()
    try:
        # jiter, not json.loads: a hostile 50,000-deep nesting is a ValueError, not a RecursionError.
        parsed: Any = from_json(value)
    except (ValueError, RecursionError):
        return None, None, ()
    data = parsed.get("data") if isinstance(parsed, dict) else None
    if not isinstance(data, dict):
        return None, None, ()

    def text(name: str) -> str | None:
        found = data.get(name)
        return found[:_READABLE_CHARS] if isinstance(found, str) and found else None

    job = text("job_id") or text("schedule_id") or text("workflow_id")
    raw_tags = data.get("tags")
    tags: tuple[str, ...] = ()
    if isinstance(raw_tags, list):
        tags = tuple(t[:100] for t in raw_tags if isinstance(t, str))[:50]
    return text("run_id"), job, tags


def dead_letter_envelope(
    record: Record,
    error: BaseException,
    *,
    source_service: str,
    occurred_at: datetime,
    reason: str | None = None,
    run_id: str | None = None,
    job_id: str | None = None,
    tags: tuple[str, ...] = (),
    history: tuple[AttemptRecord, ...] = (),
    max_bytes: int = DLQ_MAX_ENVELOPE_BYTES,
) -> Envelope:
    """The DLQ envelope for ``record``; its id is the record's position, so parking is idempotent.

    The envelope never encodes larger than ``max_bytes``: past that the value is cut to a prefix
    and `value_truncated` is set.
    """
    chosen = reason or (error.reason if isinstance(error, PoisonMessage) else "handler_error")
    value = record.value or b""
    key_text = _readable(record.key) if record.key is not None else None
    stack = ""
    if not isinstance(error, PoisonMessage) and error.__traceback__ is not None:
        stack = "".join(traceback.format_exception(error))[-_TRACEBACK_CHARS:]
    fields: dict[str, Any] = {
        "reason": chosen,
        "error_type": type(error).__name__,
        "error": "".join(traceback.format_exception_only(error)).strip()[:_ERROR_CHARS],
        "source_service": source_service,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key": key_text,
        "key_b64": _b64(record.key) if record.key is not None else None,
        "headers": {k: _readable(v) for k, v in record.headers},
        "headers_b64": {k: _b64(v) for k, v in record.headers},
        "value_b64": _b64(value),
        "value_size": len(value),
        "timestamp_ms": record.timestamp_ms,
        "run_id": run_id,
        "job_id": job_id,
        "history": history,
        "tags": tags,
        "traceback": stack,
    }
    # A record key as envelope key keeps one origin key's letters in order on the DLQ topic. No NUL:
    # services stage letters in their outbox, whose text key column refuses it (key_b64 is exact).
    envelope_key = (key_text or record.position)[:_ENVELOPE_KEY_CHARS].replace("\x00", "\ufffd")

    def build(updates: Mapping[str, Any]) -> Envelope:
        letter = DeadLettered.model_validate({**fields, **updates})
        return wrap(
            letter, id=record.position, key=envelope_key, source=source_service, occurred_at=occurred_at
        )

    envelope = build({})
    if len(encode(envelope)) <= max_bytes:
        return envelope
    # Too large to park whole: keep a recognisable prefix, and drop exact headers if they are
    # what does not fit (the readable ones stay).
    truncated = build({"value_b64": _b64(value[:TRUNCATED_PREFIX_BYTES]), "value_truncated": True})
    if len(encode(truncated)) <= max_bytes:
        return truncated
    return build(
        {
            "value_b64": "",
            "value_truncated": True,
            "headers": {k: v[:100] for k, v in list(fields["headers"].items())[:100]},
            "headers_b64": {},
            "traceback": stack[-2000:],
            "error": fields["error"][:2000],
        }
    )


async def send_to_dlq(
    producer: Producer,
    record: Record,
    error: BaseException,
    *,
    dlq_topic: str,
    source_service: str,
    occurred_at: datetime,
    reason: str | None = None,
    run_id: str | None = None,
    job_id: str | None = None,
    tags: tuple[str, ...] = (),
    max_bytes: int = DLQ_MAX_ENVELOPE_BYTES,
) -> Delivered:
    """Park ``record`` in the DLQ topic and wait for the broker's acknowledgement.

    Callers commit the record's offset only after this returns: nothing is lost. If the topic
    still refuses the envelope for its size (a topic created with a smaller limit), the record is
    parked truncated rather than not at all.

    Raises:
        TransientStorageError: the broker did not acknowledge; try again.
    """
    envelope = dead_letter_envelope(
        record,
        error,
        source_service=source_service,
        occurred_at=occurred_at,
        reason=reason,
        run_id=run_id,
        job_id=job_id,
        tags=tags,
        max_bytes=max_bytes,
    )
    try:
        return await producer.send(dlq_topic, envelope)
    except MessageTooLarge:
        small = dead_letter_envelope(
            record,
            error,
            source_service=source_service,
            occurred_at=occurred_at,
            reason=reason,
            run_id=run_id,
            job_id=job_id,
            tags=tags,
            max_bytes=256 * 1024,
        )
        return await producer.send(dlq_topic, small)
