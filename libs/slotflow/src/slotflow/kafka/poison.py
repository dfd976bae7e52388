"""Decode a consumed record into a message, or explain why it is poison and park it in the DLQ.

Every consumer decodes through `decode_record`; anything it raises is a `PoisonMessage` that goes
to the DLQ topic with the reason and the original bytes, and the partition moves on.

A dead letter carries the original key, value and headers byte-exact (base64), so the DLQ service
can send the very same record back. It never carries more than the DLQ topic accepts: a record too
large to park whole is parked with a prefix of its value and `value_truncated` set, which names
where the whole record still lies (topic, partition, offset) while its retention lasts.

The path is total: whatever bytes arrive as key, value and headers, `decode_record` raises only
`PoisonMessage`, `guess_ids` and `dead_letter_envelope` return, and every text they echo is cut
to its limit and made storable (no NUL, no lone surrogate). Should a full letter still fail to
build or send for any reason but an outage, `minimal_dead_letter` parks the record's position,
reason and error without its bytes (the record itself stays on its topic while its retention
lasts); `UnparkableRecord` is raised only when even that is refused.
"""

import base64
import logging
import traceback
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic_core import from_json

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
from slotflow.contracts.envelope import Message, fit_id, fit_key
from slotflow.contracts.identity import check_identity
from slotflow.contracts.routing import NotACommand, command_route
from slotflow.contracts.topics import DLQ_MAX_RECORD_BYTES
from slotflow.core.nul import storable
from slotflow.errors import (
    KeyMismatch,
    PoisonMessage,
    TransientError,
    UndecodableMessage,
    UnexpectedMessageType,
    UnparkableRecord,
)
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Delivered, Record

log = logging.getLogger(__name__)

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
            invalid_payload, key_mismatch, unexpected_type), and nothing else: a check that
            itself fails on hostile input (a key that is not UTF-8, say) still means poison.
    """
    try:
        return _decode_record(
            record, accept=accept, registry=registry, max_bytes=max_bytes, check_payload_key=check_payload_key
        )
    except PoisonMessage:
        raise
    except Exception as err:
        raise UndecodableMessage(f"record could not be read: {_render(err)}") from err


def _decode_record(
    record: Record,
    *,
    accept: tuple[type[Message], ...] | None,
    registry: MessageRegistry,
    max_bytes: int,
    check_payload_key: bool,
) -> tuple[Envelope, Message]:
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
    # Ids are dedupe keys downstream: one that does not follow from the content is refused here,
    # before any inbox or unique key can collapse a genuine record on it (issue 24).
    check_identity(envelope, message)
    return envelope, message


def _readable(raw: bytes) -> str:
    return storable(raw.decode("utf-8", errors="replace")[:_READABLE_CHARS])


def _render(error: BaseException, limit: int = _ERROR_CHARS) -> str:
    """``error`` as one storable line; an exception whose own str() fails still renders."""
    try:
        text = "".join(traceback.format_exception_only(error)).strip()
    except Exception:  # noqa: BLE001 - the error path must not fail on a hostile exception
        text = type(error).__name__
    return storable(text[:limit])


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def guess_ids(
    record: Record, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[str | None, str | None, tuple[str, ...]]:
    """Best-effort (run_id, job_id, tags) from a record that may not validate, for filtering.

    Reads the envelope's `data` as plain JSON; anything that is not there or not a string is None.
    Never raises: these are hints for filtering, and a letter without them is still a letter.
    """
    try:
        return _guess_ids(record, max_bytes=max_bytes)
    except Exception:  # noqa: BLE001 - see above
        return None, None, ()


def _guess_ids(record: Record, *, max_bytes: int) -> tuple[str | None, str | None, tuple[str, ...]]:
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
        # A hint the dlq indexes: storable, and within an index entry's bytes (`fit_id`).
        found = data.get(name)
        return fit_id(found[:_READABLE_CHARS]) if isinstance(found, str) and found else None

    job = text("job_id") or text("schedule_id") or text("workflow_id")
    raw_tags = data.get("tags")
    tags: tuple[str, ...] = ()
    if isinstance(raw_tags, list):
        tags = tuple(storable(t[:100]) for t in raw_tags[:50] if isinstance(t, str))
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
    workflow_id: str | None = None,
    sequence: int | None = None,
    redrives: int = 0,
) -> Envelope:
    """The DLQ envelope for ``record``; its id is the record's position, so parking is idempotent.

    ``workflow_id`` and ``sequence`` mark a workflow's parked activity (retried through it);
    ``redrives`` is how often a dead-lettered run was redriven before (docs/decisions/0009).

    The envelope never encodes larger than ``max_bytes``: past that the value is cut to a prefix
    and `value_truncated` is set. Never raises: should the full letter fail to build, the
    `minimal_dead_letter` stands in for it.
    """
    chosen = reason or (error.reason if isinstance(error, PoisonMessage) else "handler_error")
    try:
        return _dead_letter_envelope(
            record,
            error,
            reason=chosen,
            source_service=source_service,
            occurred_at=occurred_at,
            run_id=run_id,
            job_id=job_id,
            tags=tags,
            history=history,
            max_bytes=max_bytes,
            marks={"workflow_id": workflow_id, "sequence": sequence, "redrives": redrives},
        )
    except Exception as err:  # noqa: BLE001 - the path that reports bad input must not fail on it
        log.error("dead letter for %s could not be built (%s); parking a minimal one", record.position, err)
        return minimal_dead_letter(
            record, error, source_service=source_service, occurred_at=occurred_at, reason=chosen
        )


def minimal_dead_letter(
    record: Record, error: BaseException, *, source_service: str, occurred_at: datetime, reason: str
) -> Envelope:
    """A letter naming only where the record lies, why, and the error, without its bytes.

    Built from values that are always valid and storable (the position is ASCII), so it is what a
    consumer parks when a full letter cannot be built or sent; the record itself stays on its
    topic while the topic's retention lasts.
    """
    letter = DeadLettered(
        reason=storable(reason[:100]),
        error_type=storable(type(error).__name__[:200]),
        error=_render(error, 2000),
        source_service=source_service,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        value_b64="",
        value_size=len(record.value or b""),
        value_truncated=True,
        timestamp_ms=record.timestamp_ms,
    )
    return wrap(
        letter,
        id=fit_id(record.position),
        key=fit_key(record.position),
        source=source_service,
        occurred_at=occurred_at,
    )


def _dead_letter_envelope(
    record: Record,
    error: BaseException,
    *,
    reason: str,
    source_service: str,
    occurred_at: datetime,
    run_id: str | None,
    job_id: str | None,
    tags: tuple[str, ...],
    history: tuple[AttemptRecord, ...],
    max_bytes: int,
    marks: Mapping[str, Any],
) -> Envelope:
    value = record.value or b""
    key_text = _readable(record.key) if record.key is not None else None
    stack = ""
    if not isinstance(error, PoisonMessage) and error.__traceback__ is not None:
        stack = storable("".join(traceback.format_exception(error))[-_TRACEBACK_CHARS:])
    fields: dict[str, Any] = {
        "reason": reason,
        "error_type": storable(type(error).__name__[:200]),
        "error": _render(error),
        "source_service": source_service,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key": key_text,
        "key_b64": _b64(record.key) if record.key is not None else None,
        "headers": {storable(k[:_READABLE_CHARS]): _readable(v) for k, v in record.headers},
        "headers_b64": {storable(k[:_READABLE_CHARS]): _b64(v) for k, v in record.headers},
        "value_b64": _b64(value),
        "value_size": len(value),
        "timestamp_ms": record.timestamp_ms,
        "run_id": run_id,
        "job_id": job_id,
        "history": history,
        "tags": tags,
        "traceback": stack,
        **marks,
    }
    # A record key as envelope key keeps one origin key's letters in order on the DLQ topic. No NUL:
    # services stage letters in their outbox, whose text key column refuses it (key_b64 is exact).
    envelope_key = fit_key(key_text or record.position)
    letter_id = fit_id(record.position)

    def build(updates: Mapping[str, Any]) -> Envelope:
        letter = DeadLettered.model_validate({**fields, **updates})
        return wrap(letter, id=letter_id, key=envelope_key, source=source_service, occurred_at=occurred_at)

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
    parked truncated rather than not at all; if it refuses that for any reason but an outage, the
    `minimal_dead_letter` is sent.

    Raises:
        TransientError: the broker did not acknowledge (`TransientStorageError`); try again.
        UnparkableRecord: even the minimal letter was refused; the caller skips the record.
    """

    def letter(limit: int) -> Envelope:
        return dead_letter_envelope(
            record,
            error,
            source_service=source_service,
            occurred_at=occurred_at,
            reason=reason,
            run_id=run_id,
            job_id=job_id,
            tags=tags,
            max_bytes=limit,
        )

    def minimal(_: int) -> Envelope:
        chosen = reason or (error.reason if isinstance(error, PoisonMessage) else "handler_error")
        return minimal_dead_letter(
            record, error, source_service=source_service, occurred_at=occurred_at, reason=chosen
        )

    refusal: BaseException | None = None
    # The whole letter, a smaller one (a topic created with a smaller limit), then the minimal.
    for build, limit in ((letter, max_bytes), (letter, 256 * 1024), (minimal, 0)):
        try:
            return await producer.send(dlq_topic, build(limit))
        except TransientError:
            raise
        except Exception as err:  # noqa: BLE001 - refused for this letter: try a smaller one
            refusal = err
    raise UnparkableRecord(f"{dlq_topic} refused every letter for {record.position}: {refusal}")
