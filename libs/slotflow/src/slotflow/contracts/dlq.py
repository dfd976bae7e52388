"""Dead letters: what every consumer sends to the DLQ, and the DLQ's commands and events."""

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from slotflow.contracts.acceptance import INT4_MAX, INT8_MAX, TIMESTAMP_MS_MAX
from slotflow.contracts.envelope import IdText, IndexedText, Int4, Int8, Message
from slotflow.contracts.runs import AttemptRecord

#: Set on a record the DLQ sends back to its topic: the id of the dead letter it came from, so a
#: redriven record that fails again can be linked to its earlier entry.
REDRIVE_OF_HEADER = "slotflow-redrive-of"

#: `parked` until someone acts; `redriving` once a redrive request went to the letter's owner, then
#: `redriven` (the owner carried it out) or `redrive_failed` (the owner, or the dlq itself, refused,
#: the reason in the note); `discarded` by an operator. A redriven letter seen again (its record
#: failed again at its consumer) is `parked` again.
DeadLetterStatus = Literal["parked", "redriving", "redriven", "redrive_failed", "discarded"]
#: What a redrive of a schedule's dead-lettered run re-issues: the JobDue the claimer stored for the
#: run (`as_run`), or the slot under the schedule's current definition (`current`: a fixed handler
#: name, payload or retry policy). Letters of other kinds are redriven the one way they can be.
RedriveDefinition = Literal["as_run", "current"]
#: What a redrive request asks its owner to do (docs/decisions/0009): reopen a schedule's run
#: (`run`), retry a workflow's parked activity (`activity`), or read a record back from its topic and
#: handle it again (`record`).
RedriveKind = Literal["run", "activity", "record"]

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
        "unproven_cancel",
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
    workflow_id: IndexedText | None = Field(
        default=None, description="a parked activity's workflow: the letter is retried through it"
    )
    sequence: Int4 | None = Field(
        default=None, description="the parked activity's ActivityScheduled sequence"
    )
    redrives: int = Field(
        default=0,
        ge=0,
        le=INT4_MAX,
        description="a dead-lettered run's: how often the run was redriven before this letter",
    )


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
    workflow_id: str | None = None

    def narrows(self) -> bool:
        """Whether the selection names which letters it means: ids, or what a letter is (its source,
        topic, reason, job, run or workflow). A status or a time range alone is another spelling of
        "everything" (`{}`, `{"since": "1970-01-01T00:00:00Z"}`, `{"status": "parked"}`): a redrive
        or discard of it must say `all` (the guard of the api, the CLI, the client and the dlq)."""
        named = (self.source_service, self.topic, self.reason, self.job_id, self.run_id, self.workflow_id)
        return bool(self.ids) or any(value is not None for value in named)


class RedriveDeadLetters(Message):
    """Ask each selected letter's owner to carry its record through again (docs/dlq.md, "Redriving").

    The dlq sends each owner a RedriveRequested; a letter of a workflow's parked activity is
    redriven only when the selection names it by id (a bulk redrive leaves it out and says so).
    """

    message_type = "dlq.redrive"
    selection: DeadLetterFilter
    limit: int = Field(default=1000, ge=1, le=100_000)
    definition: RedriveDefinition = "as_run"
    #: A selection that does not narrow (`DeadLetterFilter.narrows`) is refused unless this says so.
    all: bool = False


class DiscardDeadLetters(Message):
    """Mark the selected parked messages discarded, with a reason."""

    message_type = "dlq.discard"
    selection: DeadLetterFilter
    reason: str = Field(min_length=1, max_length=1000)
    limit: int = Field(default=1000, ge=1, le=100_000)
    #: A selection that does not narrow (`DeadLetterFilter.narrows`) is refused unless this says so.
    all: bool = False


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
    #: A parked activity's letter: the workflow and sequence it is retried through.
    workflow_id: IndexedText | None = None
    sequence: Int4 | None = None
    #: The service asked to carry out the latest redrive (`redriving`, `redriven`, `redrive_failed`).
    redrive_target: str | None = Field(default=None, max_length=100)


class RedriveRequested(Message):
    """The dlq asks the owner of a letter's record to carry it through again (docs/decisions/0009).

    On the internal topic `dlq.redrives`, which only the dlq writes: the letter is only a pointer
    (`topic`/`partition`/`offset`, the run it names); the owner re-issues from its own state (a
    run row, a schedule, a workflow's history, the record read back from its topic) and answers
    with a RedriveOutcome. The envelope id is `redrive:{request_id}`, the key the letter's id.
    """

    message_type = "dlq.redrive_requested"
    #: Random, 32 hex digits: the answer names it, and the dlq takes answers only for its requests.
    request_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    dead_letter_id: DeadLetterId
    command_id: IdText
    #: The service that carries it out: claimer, ticker, orchestrator, dlq.
    target: str = Field(min_length=1, max_length=100)
    kind: RedriveKind
    definition: RedriveDefinition = "as_run"
    topic: Annotated[IndexedText, Field(min_length=1, max_length=1000)]
    partition: Int4
    offset: Int8
    run_id: Annotated[IndexedText, Field(max_length=1000)] | None = None
    job_id: Annotated[IndexedText, Field(max_length=1000)] | None = None
    slot: AwareDatetime | None = None
    workflow_id: Annotated[IndexedText, Field(max_length=1000)] | None = None
    sequence: int | None = Field(default=None, ge=1, le=INT4_MAX)
    #: A run's redrive number: the redrives it had before this letter plus this letter's own.
    redrive: int = Field(default=1, ge=1, le=INT4_MAX)


RedriveOutcomeKind = Literal["done", "refused"]


class RedriveOutcome(Message):
    """An owner's answer to one RedriveRequested: done, or refused with the reason.

    Sent on the DLQ topic (every consumer may write it); the dlq takes it only for a request it
    staged, for that letter, from the service it asked. The envelope id is
    `redrive:{request_id}/outcome`, the key the letter's id.
    """

    message_type = "dlq.redrive_outcome"
    request_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    dead_letter_id: DeadLetterId
    service: str = Field(min_length=1, max_length=100)
    outcome: RedriveOutcomeKind
    #: Why it was refused, or what was done ("reopened run r as attempt 4").
    reason: str = Field(default="", max_length=2000)


def redrive_request_id(request_id: str) -> str:
    """The envelope id of the RedriveRequested ``request_id``."""
    return f"redrive:{request_id}"


def redrive_outcome_id(request_id: str) -> str:
    """The envelope id of the answer to the RedriveRequested ``request_id``."""
    return f"redrive:{request_id}/outcome"
