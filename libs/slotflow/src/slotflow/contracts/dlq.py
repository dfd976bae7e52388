"""Dead letters: what every consumer sends to the DLQ, and the DLQ's commands and events."""

from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from slotflow.contracts.acceptance import INT8_MAX, TIMESTAMP_MS_MAX
from slotflow.contracts.envelope import IdText, IndexedText, Int4, Int8, Message
from slotflow.contracts.runs import AttemptRecord

#: Set on a record the DLQ sends back to its topic: the id of the dead letter it came from, so a
#: redriven record that fails again can be linked to its earlier entry.
REDRIVE_OF_HEADER = "slotflow-redrive-of"

DeadLetterStatus = Literal["parked", "redriven", "discarded"]

#: Every reason a slotflow consumer parks a record with (docs/dlq.md, "Reasons"). A letter may
#: carry any text; metrics label only these, and any other as `other`, so forged reasons cannot
#: create unbounded label values (issue 23: 300 letters made 900 new series).
KNOWN_REASONS = frozenset(
    {
        "undecodable",
        "too_large",
        "unknown_type",
        "invalid_payload",
        "key_mismatch",
        "unexpected_type",
        "permanent_error",
        "attempts_exhausted",
        "unknown_handler",
        "command_rejected",
        "unprocessable",
        "handler_error",
        "poison",
        "unproven_outcome",
        "unproven_timer",
    }
)


def reason_label(reason: str) -> str:
    """``reason`` as a metric label: itself when known, else `other` (a bounded set)."""
    return reason if reason in KNOWN_REASONS else "other"


class DeadLettered(Message):
    """A message that could not be processed, with everything needed to inspect and redrive it.

    The envelope id is `"{topic}:{partition}:{offset}"`, so parking is idempotent on the origin.
    """

    message_type = "dlq.dead_lettered"
    # The dlq indexes reason, source service, topic, run id and job id: each fits an index entry.
    reason: IndexedText = Field(
        description="machine-readable: undecodable, invalid_payload, attempts_exhausted, ..."
    )
    error_type: str
    error: str
    source_service: IndexedText
    topic: IndexedText
    partition: Int4
    offset: Int8
    key: str | None = Field(default=None, description="record key as UTF-8 (replacement chars if not)")
    key_b64: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    value_b64: str = Field(description="the original record value, base64")
    timestamp_ms: int | None = Field(default=None, ge=-1, le=TIMESTAMP_MS_MAX)
    run_id: IndexedText | None = None
    job_id: IndexedText | None = None
    history: tuple[AttemptRecord, ...] = ()
    tags: tuple[str, ...] = ()
    headers_b64: dict[str, str] = Field(
        default_factory=dict, description="header values byte-exact, base64 (headers is for reading)"
    )
    value_size: int | None = Field(
        default=None, ge=0, le=INT8_MAX, description="length of the original value in bytes"
    )
    value_truncated: bool = Field(
        default=False,
        description="value_b64 holds only a prefix: the record was too large for the DLQ topic; "
        "the whole record stays at topic/partition/offset while its retention lasts",
    )
    traceback: str = Field(default="", description="where a handler raised, when it did")


#: A dead letter's id is its origin (`{topic}:{partition}:{offset}`), fitted to the id limit.
DeadLetterId = IdText


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
    #: None selects `parked` entries for redrive and discard, and every status for listing.
    status: DeadLetterStatus | None = None
    run_id: str | None = None


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
    status: DeadLetterStatus
    reason: IndexedText
    topic: IndexedText
    source_service: IndexedText
    job_id: IndexedText | None = None
    count: Int4 = 1
    redrive_count: Int4 = 0
    at: AwareDatetime
    # What a list view shows without asking the DLQ service (all optional, for tolerant readers).
    run_id: IndexedText | None = None
    partition: Int4 | None = None
    offset: Int8 | None = None
    key: str | None = None
    original_type: str | None = Field(default=None, description="the original envelope type, when known")
    error_type: str = ""
    error: str = Field(default="", description="the error, cut to 2000 characters")
    tags: tuple[str, ...] = ()
    first_seen: AwareDatetime | None = None
    last_seen: AwareDatetime | None = None
    #: The discard reason, or for a redrive the command that asked for it.
    note: str = ""
    command_id: IdText | None = None
    #: The entry this one was redriven from, when it failed again after a redrive.
    redrive_of: IdText | None = None
