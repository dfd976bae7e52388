"""Dead letters: what every consumer sends to the DLQ, and the DLQ's commands and events."""

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from slotflow.contracts.envelope import Message
from slotflow.contracts.runs import AttemptRecord


class DeadLettered(Message):
    """A message that could not be processed, with everything needed to inspect and redrive it.

    The envelope id is `"{topic}:{partition}:{offset}"`, so parking is idempotent on the origin.
    """

    message_type = "dlq.dead_lettered"
    reason: str = Field(description="machine-readable: undecodable, invalid_payload, attempts_exhausted, ...")
    error_type: str
    error: str
    source_service: str
    topic: str
    partition: int
    offset: int
    key: str | None = Field(default=None, description="record key as UTF-8 (replacement chars if not)")
    key_b64: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    value_b64: str = Field(description="the original record value, base64")
    timestamp_ms: int | None = None
    run_id: str | None = None
    job_id: str | None = None
    history: tuple[AttemptRecord, ...] = ()
    tags: tuple[str, ...] = ()


DeadLetterId = Annotated[str, Field(min_length=1, max_length=2000)]


class DeadLetterFilter(BaseModel):
    """Select parked messages; every given field must match."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ids: tuple[DeadLetterId, ...] = ()
    source_service: str | None = None
    topic: str | None = None
    reason: str | None = None
    job_id: str | None = None
    since: AwareDatetime | None = None
    until: AwareDatetime | None = None


class RedriveDeadLetters(Message):
    """Send the selected parked messages back to their original topics."""

    message_type = "dlq.redrive"
    selection: DeadLetterFilter
    limit: int = Field(default=1000, ge=1, le=100_000)


class DiscardDeadLetters(Message):
    """Mark the selected parked messages discarded, with a reason."""

    message_type = "dlq.discard"
    selection: DeadLetterFilter
    reason: str = Field(min_length=1, max_length=1000)
    limit: int = Field(default=1000, ge=1, le=100_000)


class DeadLetterStatusChanged(Message):
    """A dead letter was parked, redriven or discarded."""

    message_type = "dlq.status_changed"
    dead_letter_id: DeadLetterId
    status: Literal["parked", "redriven", "discarded"]
    reason: str
    topic: str
    source_service: str
    job_id: str | None = None
    count: int = 1
    redrive_count: int = 0
    at: AwareDatetime
