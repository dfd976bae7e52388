"""The JSON envelope every slotflow record carries, and the Message base for its `data`.

Wire rules: within a version only additive changes (new optional fields); anything else is a new
version. Consumers ignore unknown fields (tolerant reader), so producers can add fields first.
Trace context travels in Kafka headers (`traceparent`), never inside the envelope.
"""

from datetime import datetime
from typing import Any, ClassVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

TRACEPARENT_HEADER = "traceparent"
TYPE_HEADER = "slotflow-type"
VERSION_HEADER = "slotflow-version"
REDRIVE_COUNT_HEADER = "slotflow-redrive-count"

#: Identifiers users choose (schedule ids, workflow ids, handler names): printable, bounded.
IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$"


class Message(BaseModel):
    """Base of every command and event payload (the envelope's `data`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    message_type: ClassVar[str]
    message_version: ClassVar[int] = 1


class Envelope(BaseModel):
    """What goes on the wire: routing facts plus the message as `data`."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: str = Field(min_length=1, max_length=200)
    version: int = Field(ge=1)
    #: Deterministic where it can be (a run's slot label, a command's id): duplicates collapse on it.
    id: str = Field(min_length=1, max_length=1000)
    key: str = Field(max_length=1000)
    occurred_at: AwareDatetime
    source: str = Field(min_length=1, max_length=200)
    data: dict[str, Any]


def wrap(message: Message, *, id: str, key: str, source: str, occurred_at: datetime) -> Envelope:
    """Put ``message`` into an envelope named by its own type and version."""
    return Envelope(
        type=message.message_type,
        version=message.message_version,
        id=id,
        key=key,
        occurred_at=occurred_at,
        source=source,
        data=message.model_dump(mode="json"),
    )
