"""JobDue (ticker/orchestrator to claimer) and the run lifecycle events the claimer emits."""

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from slotflow.contracts.acceptance import INT4_MAX, INT8_MAX
from slotflow.contracts.envelope import IdText, IndexedText, Int4, Int8, Message
from slotflow.contracts.policies import DeadLetterPolicy, OverlapPolicy, RetryPolicy
from slotflow.contracts.schedules import HandlerName


class JobDue(Message):
    """A run should start now. Keyed by `job_id`; the envelope id is the run id (+ attempt)."""

    message_type = "job.due"
    run_id: IdText
    job_id: Annotated[IndexedText, Field(min_length=1, max_length=400)]
    slot: AwareDatetime
    attempt: int = Field(default=1, ge=1, le=INT4_MAX)
    kind: Literal["scheduled", "manual", "backfill", "retry", "activity"] = "scheduled"
    handler: HandlerName
    payload: dict[str, Any] = Field(default_factory=dict)
    retry: RetryPolicy = RetryPolicy()
    overlap: OverlapPolicy = "allow"
    #: Under `buffer_all`, how many runs of the job may run at once; the rest wait in slot order.
    max_concurrent: int = Field(default=1, ge=1, le=1000)
    tags: tuple[str, ...] = ()
    #: When the ticker meant it to fire (slot plus jitter); lateness is measured against this.
    fire_at: AwareDatetime | None = None
    #: Set for workflow activities: where the result goes.
    workflow_id: IndexedText | None = None
    sequence: Int4 | None = None
    #: An activity's: whether its workflow parks the run's letter in the DLQ when the claimers give
    #: up (`park`), or takes the failure as history it handles (`fail`: no letter is parked).
    on_dead_letter: DeadLetterPolicy = "fail"
    #: Above 0 on a redrive's JobDue (the ticker re-issuing a slot, the orchestrator retrying a
    #: parked activity): the run's redrive number. The claimer reopens a dead-lettered run only for
    #: a number above its row's, and never creates a run for such a JobDue (docs/decisions/0009).
    redrive: int = Field(default=0, ge=0, le=INT4_MAX)
    #: Above 0 on an operator's re-run (`RerunSlots`): the slot's re-run number the ticker recorded.
    #: Under the slot's own run id it reopens a dead-lettered, retrying, skipped or cancelled run
    #: (or starts a missed one); under `{run id}#rerun-{n}` it is a forced re-run, a run of its own.
    #: The claimer takes it only when the ticker's record holds that number for that slot.
    rerun: int = Field(default=0, ge=0, le=INT4_MAX)


class CancelActivity(Message):
    """The orchestrator no longer waits on a workflow activity's run: the claimer cancels it.

    Staged by the orchestrator when a pending activity is abandoned (its workflow was cancelled,
    terminated, timed out or otherwise ended, or its workflow code cancelled the activity), on
    the internal topic `activities.cancels` that only the orchestrator writes. The claimer acts on
    it only as far as the orchestrator's own record backs it (`slotflow.issuers.cancel_verdict`):
    a run not yet started never starts, a running attempt's handler gets `asyncio.CancelledError`.
    Keyed by `workflow_id`; the envelope id is `{run_id}/cancel` (`cancel_activity_id`).
    """

    message_type = "activity.cancel"
    workflow_id: Annotated[IndexedText, Field(min_length=1, max_length=400)]
    sequence: int = Field(ge=1, le=INT4_MAX)
    #: `{workflow_id}/{sequence}` (`slotflow.core.identity.activity_run_id`), checked on decode.
    run_id: IdText
    #: The activity's handler, as the workflow scheduled it.
    handler: HandlerName
    #: Why the workflow no longer waits on it ("workflow order-17 was cancelled: customer cancelled").
    reason: str = Field(default="", max_length=1000)


def cancel_activity_id(run_id: str) -> str:
    """The envelope id of the CancelActivity of the activity run ``run_id``."""
    return f"{run_id}/cancel"


class AttemptRecord(BaseModel):
    """One failed attempt, kept in a dead-lettered run's history."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    attempt: Int4
    fence_token: Int8
    owner: str
    error_type: str
    message: str
    started_at: AwareDatetime | None
    finished_at: AwareDatetime


class RunEvent(Message):
    """Fields every run lifecycle event carries."""

    run_id: IdText
    job_id: IndexedText
    slot: AwareDatetime
    attempt: int = Field(ge=1, le=INT4_MAX)
    fence_token: int = Field(ge=1, le=INT8_MAX)
    owner: str
    workflow_id: IndexedText | None = None
    sequence: Int4 | None = None
    #: The handler this run ran (its JobDue's), so statistics count each run under its own
    #: handler, not under whatever its job names today. Absent in records written before the
    #: field existed.
    handler: HandlerName | None = None


class RunStarted(RunEvent):
    """A claimer holds the run's lease with `fence_token` and is running the handler."""

    message_type = "run.started"
    started_at: AwareDatetime


class RunCompleted(RunEvent):
    """The handler returned; its result was recorded with the current fencing token."""

    message_type = "run.completed"
    result: Any = None
    started_at: AwareDatetime
    finished_at: AwareDatetime
    #: What the handler logged during this attempt (bounded by the claimer; empty if nothing).
    logs: tuple[str, ...] = ()


class RunFailed(RunEvent):
    """An attempt raised. `retryable` is the error's kind: true for a transient error, also one
    that ran out of attempts (a redrive may succeed); the RunRetrying or RunDeadLettered that
    follows says whether it is retried."""

    message_type = "run.failed"
    error_type: str
    message: str
    traceback: str = ""
    retryable: bool
    finished_at: AwareDatetime
    #: What the handler logged during this attempt (bounded by the claimer; empty if nothing).
    logs: tuple[str, ...] = ()


class RunRetrying(RunEvent):
    """The next attempt is scheduled as a durable timer in the ticker."""

    message_type = "run.retrying"
    next_attempt: Int4
    retry_at: AwareDatetime
    delay: timedelta
    #: Set when nothing ran: the run waits for a downstream (`circuit_open:bank-api`), its attempt
    #: kept; None for a retry after a failure.
    held_reason: str | None = Field(default=None, max_length=400)


class RunDeadLettered(RunEvent):
    """The run gave up: a permanent error or out of attempts. The DLQ holds the details."""

    message_type = "run.dead_lettered"
    reason: Literal["permanent_error", "attempts_exhausted"]
    history: tuple[AttemptRecord, ...] = ()


class RunSkipped(RunEvent):
    """The overlap policy kept this run from starting while another run of its job was live."""

    message_type = "run.skipped"
    reason: str


class ClaimerAnnounced(Message):
    """A claimer is alive and serves these handlers: sent at start-up and every `interval`.

    Keyed by the claimer id on a compacted topic, so the newest announcement of each claimer is
    what the api reads: a schedule whose handler no live claimer serves gets a warning.
    """

    message_type = "claimer.announced"
    claimer_id: str = Field(min_length=1, max_length=400)
    handlers: tuple[Annotated[str, Field(max_length=400)], ...] = Field(max_length=10_000)
    #: The next announcement comes within this; three missed ones mean the claimer is gone.
    interval: timedelta = Field(gt=timedelta(0))
    started_at: AwareDatetime
