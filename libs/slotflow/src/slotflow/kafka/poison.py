"""Decode a consumed record into a message, or explain why it is poison and park it in the DLQ.

Every consumer decodes through `decode_record`; anything it raises is a `PoisonMessage` that goes
to the DLQ topic with the reason and the original bytes, and the partition moves on.
"""

import base64
import traceback
from datetime import datetime

from slotflow.contracts import REGISTRY, DeadLettered, Envelope, MessageRegistry, wrap
from slotflow.contracts.codec import DEFAULT_MAX_BYTES, decode
from slotflow.contracts.envelope import Message
from slotflow.errors import KeyMismatch, PoisonMessage, UnexpectedMessageType
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Delivered, Record


def decode_record(
    record: Record,
    *,
    accept: tuple[type[Message], ...] | None = None,
    registry: MessageRegistry = REGISTRY,
    max_bytes: int = DEFAULT_MAX_BYTES,
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
        shown = record.key.decode("utf-8", errors="replace")
        raise KeyMismatch(f"record key {shown!r} differs from envelope key {envelope.key!r}")
    return envelope, message


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
) -> Envelope:
    """The DLQ envelope for ``record``; its id is the record's position, so parking is idempotent."""
    chosen = reason or (error.reason if isinstance(error, PoisonMessage) else "handler_error")
    key_text = record.key.decode("utf-8", errors="replace") if record.key is not None else None
    letter = DeadLettered(
        reason=chosen,
        error_type=type(error).__name__,
        error="".join(traceback.format_exception_only(error)).strip()[:8000],
        source_service=source_service,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        key=key_text,
        key_b64=base64.b64encode(record.key).decode() if record.key is not None else None,
        headers={k: v.decode("utf-8", errors="replace") for k, v in record.headers},
        value_b64=base64.b64encode(record.value or b"").decode(),
        timestamp_ms=record.timestamp_ms,
        run_id=run_id,
        job_id=job_id,
        tags=tags,
    )
    return wrap(
        letter,
        id=record.position,
        key=key_text or record.position,
        source=source_service,
        occurred_at=occurred_at,
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
) -> Delivered:
    """Park ``record`` in the DLQ topic and wait for the broker's acknowledgement.

    Callers commit the record's offset only after this returns: nothing is lost.
    """
    envelope = dead_letter_envelope(
        record, error, source_service=source_service, occurred_at=occurred_at, reason=reason
    )
    return await producer.send(dlq_topic, envelope)
