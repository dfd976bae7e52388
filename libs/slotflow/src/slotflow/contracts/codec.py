"""Bytes to envelope and back. The one place that knows the wire encoding (UTF-8 JSON)."""

from pydantic import ValidationError

from slotflow.contracts.envelope import Envelope
from slotflow.contracts.registry import _summarise
from slotflow.errors import MessageTooLarge, UndecodableMessage

DEFAULT_MAX_BYTES = 1_048_576


def encode(envelope: Envelope) -> bytes:
    """Serialise an envelope as compact UTF-8 JSON."""
    return envelope.model_dump_json().encode()


def decode(raw: bytes | None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Envelope:
    """Parse a record value into an envelope.

    Raises:
        MessageTooLarge: ``raw`` is longer than ``max_bytes``.
        UndecodableMessage: empty, not UTF-8, not JSON, or not shaped like an envelope.
    """
    if raw is None or len(raw) == 0:
        raise UndecodableMessage("empty record value (tombstone or missing payload)")
    if len(raw) > max_bytes:
        raise MessageTooLarge(f"record of {len(raw)} bytes exceeds the {max_bytes}-byte limit")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UndecodableMessage(f"record value is not UTF-8: {err}") from err
    try:
        return Envelope.model_validate_json(text)
    except ValidationError as err:
        raise UndecodableMessage(f"record value is not a slotflow envelope: {_summarise(err)}") from err
