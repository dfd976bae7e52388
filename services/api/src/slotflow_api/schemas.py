"""Response and request bodies of the HTTP API (v1), separate from the event contracts.

Requests that carry a command reuse the contract models for their parts (ScheduleDefinition,
DeadLetterFilter), so the API refuses exactly what the consumer would.
"""

from datetime import datetime
from typing import Annotated, Any, Generic, Literal, Self, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from slotflow.contracts import (
    CreateSchedule,
    DeadLetterFilter,
    Message,
    PauseSchedule,
    ScheduleDefinition,
    UpdateSchedule,
)
from slotflow.contracts.dlq import RedriveDefinition
from slotflow.contracts.envelope import IDENTIFIER_PATTERN, SCHEDULE_ID_PATTERN
from slotflow.contracts.examples import EXAMPLES
from slotflow.contracts.policies import OverlapPolicy
from slotflow.contracts.search import (
    MAX_MEMO_BYTES,
    MAX_SEARCH_ATTRIBUTES,
    SearchAttribute,
    check_memo,
    typed_search_attributes,
)
from slotflow.contracts.workflows import IdReusePolicy, WorkflowId

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """One page of a list; pass `next_cursor` back as `cursor` for the next one (null: no more)."""

    items: list[T]
    next_cursor: str | None


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    kafka: str
    postgres: str
    #: `ok` while every loop of the process (projector, purge, relay) runs; once one crashed, the
    #: crash: the read model is no longer updated, so the process is not ready whatever it serves.
    loops: str = "ok"


class SlotPreview(BaseModel):
    at: datetime
    local: str = Field(description="the wall-clock time it fires at, in the schedule's zone, with the offset")
    dst: str | None = None
    nominal: str | None = Field(
        default=None,
        description="for a slot the DST jump shifted (dst `shifted`): the local time it stands for, "
        "which did not exist that day",
    )


class LastRun(BaseModel):
    run_id: str
    slot: datetime
    state: str
    finished_at: datetime | None


class Schedule(BaseModel):
    schedule_id: str
    spec: dict[str, Any]
    handler: str
    status: Literal["active", "paused", "finished", "deleted"] = Field(
        description="finished: no slot is left to fire (a fired one-shot, a passed end_at)"
    )
    paused: bool
    pause_reason: str | None
    resume_at: datetime | None = Field(description="a paused schedule resumes by itself at this instant")
    tags: list[str]
    next_fire_at: datetime | None = Field(
        description="when it next fires, computed at read time from the spec, the pause and "
        "resume_at, start_at/end_at and a one-shot's completion (null: nothing will fire)"
    )
    catch_up_at_resume: bool = Field(
        default=False,
        description="always false: the slots that pass while paused are skipped (reason `paused`), "
        "and an automatic resume never catches up on them (kept for clients that read it)",
    )
    created_at: datetime
    updated_at: datetime
    deleted: bool
    definition: dict[str, Any]
    last_run: LastRun | None = Field(default=None, description="its newest run by slot, and how it stands")
    failure_streak: int = Field(
        default=0,
        description="runs that ended dead-lettered or failed since its newest completed run (0: healthy)",
    )


class ScheduleDetail(Schedule):
    next_slots: list[SlotPreview] = Field(description="the grid's next slots that will fire")
    runs_by_state: dict[str, int]


class CalendarEntry(BaseModel):
    fire_at: datetime = Field(description="when it fires: the slot plus the schedule's jitter")
    slot: datetime
    local: str = Field(description="the slot's wall-clock time in the schedule's zone")
    schedule_id: str
    handler: str
    run_id: str
    status: str = Field(description="the schedule's status: active, or paused with a resume_at")


class Calendar(BaseModel):
    start: datetime = Field(alias="from")
    end: datetime = Field(alias="to")
    items: list[CalendarEntry] = Field(description="every firing in [from, to), soonest first")
    truncated: bool = Field(description="more firings fall in the window than `limit`")

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)


class Attempt(BaseModel):
    attempt: int
    fence_token: int
    owner: str
    started_at: datetime | None
    finished_at: datetime | None
    outcome: str
    error: dict[str, Any] | None
    retry_at: datetime | None = None


class AttemptDetail(Attempt):
    traceback: str | None = Field(default=None, description="where the handler raised (failed attempts)")
    logs: list[str] = Field(
        default_factory=list, description="what the handler logged during this attempt (bounded)"
    )


class Timings(BaseModel):
    due_at: datetime | None = Field(description="when the JobDue was staged (first attempt)")
    produced_at: datetime | None = Field(description="Kafka timestamp of the first JobDue")
    fire_at: datetime | None = Field(description="slot plus jitter, when set")
    started_at: datetime | None
    finished_at: datetime | None
    lateness_ms: float | None = Field(description="produced_at minus fire time (or slot)")
    duration_ms: float | None = Field(description="finished_at minus started_at")


class Run(BaseModel):
    run_id: str
    job_id: str
    slot: datetime
    state: str
    kind: str | None
    handler: str | None
    tags: list[str]
    attempt: int
    fence_token: int | None
    owner: str | None
    workflow_id: str | None
    sequence: int | None
    result: Any = None
    error: dict[str, Any] | None
    completions: int
    timings: Timings
    attempts: list[Attempt]


class RunDetail(Run):
    """One run with what its page shows: the payload, and per attempt the traceback and log lines."""

    payload: dict[str, Any] | None = Field(description="what the run was given (its JobDue's payload)")
    attempts: list[AttemptDetail]  # type: ignore[assignment]


class Timer(BaseModel):
    timer_id: str
    owner: str
    action: str
    sequence: int | None
    fire_at: datetime | None
    status: str
    fired_at: datetime | None
    signal: str | None = Field(default=None, description="the signal a timed wait_signal waits for")


class Workflow(BaseModel):
    workflow_id: str
    workflow_type: str | None
    status: str = Field(
        description="requested (a StartWorkflow seen, no history yet) | rejected (its start was "
        "refused: `rejection` says why) | running | compensating | completed | failed | terminated "
        "(a TerminateWorkflow ended it: no code, no compensation) | cancelled | stuck (an open "
        "non-determinism)"
    )
    rejection: str | None = Field(default=None, description="why the orchestrator refused its start")
    waiting_for: str | None = Field(
        default=None,
        description="while only a signal can move it: `signal NAME` (a timed wait_signal), or "
        "`signal` (an untimed wait)",
    )
    waiting_since: datetime | None = Field(default=None, description="since when it waits (waiting_for)")
    cancel_requested: bool
    cancel_reason: str | None
    input: dict[str, Any] | None
    requested_at: datetime | None
    updated_at: datetime
    current_step: str | None
    last_sequence: int | None = Field(
        default=None, description="the last history sequence folded into this row (null: no history yet)"
    )
    started_at: datetime | None = None
    ended_at: datetime | None = None
    memo: dict[str, Any] = Field(
        default_factory=dict, description="the start's memo: any JSON object, shown, never searched"
    )
    search_attributes: dict[str, SearchAttribute] = Field(
        default_factory=dict,
        description='the typed search attributes a `query` finds it by (`{"Stage": {"type": "keyword", '
        '"value": "paid"}}`): the start\'s, then its upserts\'',
    )


class HistoryEntry(BaseModel):
    entry_id: str
    at: datetime
    origin: str = Field(description="command | history | activity | timer")
    type: str
    version: int = 1
    sequence: int | None
    data: dict[str, Any]


class PendingActivity(BaseModel):
    sequence: int | None
    handler: str | None = Field(description="the activity (registered handler)")
    run_id: str
    state: str = Field(description="the run's state as the claimers report it, or scheduled")
    attempt: int
    compensation: bool = False
    compensates: int | None = None
    scheduled_at: datetime | None = None


class WorkflowStep(BaseModel):
    """An activity the history scheduled, with its recorded outcome."""

    sequence: int
    activity: str
    run_id: str
    compensation: bool
    compensates: int | None
    state: Literal["scheduled", "parked", "completed", "failed", "abandoned"] = Field(
        description="parked: the claimers gave up on its run and the workflow waits on it (error has "
        "the reason); a retry (RetryActivity) tries it again. abandoned: its run continued as new "
        "before an outcome, which no longer counts"
    )
    retries: int = Field(default=0, description="how often an operator retried it while parked")
    run_state: str | None = Field(default=None, description="the run's state in the runs read model")
    scheduled_at: datetime
    finished_at: datetime | None
    finished_sequence: int | None
    result: Any = None
    error: dict[str, Any] | None


class WorkflowChild(BaseModel):
    """A child workflow the history started, with its recorded outcome."""

    sequence: int = Field(description="sequence of its ChildWorkflowScheduled")
    child_workflow_id: str
    workflow_type: str
    parent_close_policy: str
    status: Literal["pending", "completed", "failed", "cancelled", "abandoned"]
    scheduled_at: datetime
    finished_at: datetime | None
    finished_sequence: int | None
    result: Any = None
    error: dict[str, Any] | None


class Compensation(BaseModel):
    """A registered compensation, listed in the order it runs (the newest registration first)."""

    for_step: int = Field(description="sequence of the forward step it undoes")
    step_activity: str | None
    activity: str
    payload: dict[str, Any]
    registered_sequence: int
    registered_at: datetime
    state: Literal["registered", "running", "done", "failed"]
    scheduled_sequence: int | None
    run_id: str | None
    error: dict[str, Any] | None


class Signal(BaseModel):
    sequence: int
    signal: str
    payload: dict[str, Any]
    at: datetime


class NonDeterminism(BaseModel):
    sequence: int
    at_sequence: int
    expected: str
    got: str
    at: datetime
    open: bool = Field(description="true while nothing has been recorded after it: the workflow is stopped")


class WorkflowAction(BaseModel):
    """An operator's action on a workflow, as a request to send."""

    action: Literal["retry_activity"]
    sequence: int
    activity: str
    method: Literal["POST"] = "POST"
    path: str


class WorkflowDetail(Workflow):
    history_length: int
    start_command_id: str | None = Field(
        default=None,
        description="the command id of the StartWorkflow that began the run shown (a continued run "
        "keeps its start's); null before the history is typed",
    )
    runs: int | None = Field(
        default=None,
        description="how many runs StartWorkflows began under this id (a reuse after close adds "
        "one, a continue-as-new does not); the row shows the newest unless `start_command_id` asked",
    )
    activities: list[Run] = Field(
        description="runs of the workflow's activities, as the claimers report them"
    )
    steps: list[WorkflowStep]
    pending_activities: list[PendingActivity]
    timers: list[Timer]
    pending_timers: list[Timer]
    children: list[WorkflowChild] = Field(default_factory=list)
    compensations: list[Compensation]
    signals: list[Signal]
    result: Any = None
    error: dict[str, Any] | None
    compensated: bool | None
    non_determinism: NonDeterminism | None
    gap_at: int | None = Field(description="first missing sequence while later events wait for it")
    anomalies: list[str] = Field(description="history events that break the contract (ignored by the fold)")
    waiting: str | None = Field(
        default=None,
        description='what an open workflow waits on that needs a person: "activity parked: shipping.book '
        '#2 (attempts_exhausted)"',
    )
    actions: list[WorkflowAction] = Field(
        default_factory=list, description="what an operator can do about it"
    )


class DeadLetter(BaseModel):
    dead_letter_id: str
    status: str = Field(
        description="parked; redriving (its owner was asked, no answer yet: `status_at` is when); "
        "redriven (its owner did it); redrive_failed (refused: `note` says why); discarded"
    )
    reason: str
    topic: str
    source_service: str
    partition: int | None
    offset: int | None
    key: str | None
    job_id: str | None
    run_id: str | None
    original_type: str | None
    error_type: str
    error: str
    tags: list[str]
    count: int
    redrive_count: int
    first_seen: datetime | None
    last_seen: datetime | None
    status_at: datetime
    note: str = Field(description="the discard reason; for a redrive, who was asked and what they answered")
    command_id: str | None
    redrive_of: str | None
    changed_by: str | None = Field(
        default=None, description="who redrove or discarded it (the principal of `command_id`), when known"
    )
    workflow_id: str | None = Field(
        default=None, description="a workflow's parked activity: retried only through its workflow"
    )
    sequence: int | None = Field(default=None, description="the parked activity's sequence in its workflow")
    redrive_target: str | None = Field(default=None, description="the service asked to carry out its redrive")


class DeadLetterDetail(DeadLetter):
    """One dead letter; a dead-lettered run's letter adds its run's attempts and last traceback."""

    attempts: list[AttemptDetail] = Field(
        default_factory=list, description="the run's attempts, oldest first (run letters only)"
    )
    traceback: str | None = Field(default=None, description="where the last failed attempt raised")


class AuditRepair(BaseModel):
    """An operator's re-run or mark of the slot (who, when, why)."""

    at: datetime
    action: Literal["rerun", "forced_rerun", "marked_done", "marked_skipped"]
    by: str | None = Field(description="the principal that asked (the command's)")
    reason: str
    run_id: str | None = Field(
        default=None, description="a re-run's run: the slot's own, or a forced re-run's `#rerun-n`"
    )
    run_state: str | None = Field(default=None, description="a forced re-run's state, when recorded")
    said: str = Field(description="`marked done by alice: paid by hand`")


class AuditSlot(BaseModel):
    slot: datetime
    run_id: str | None
    status: Literal["fired", "missed", "skipped_by_policy", "late", "held", "duplicated_effect"]
    detail: str
    kind: str | None = Field(default=None, description="the run's kind: scheduled, backfill, ...")
    run_state: str | None = Field(default=None, description="the run's state, when one is recorded")
    outcome: Literal["succeeded", "failed", "in_flight", "held", "missed", "skipped", "duplicated_effect"] = (
        Field(
            description="what became of the slot: a fired or late slot's run completed (succeeded), failed or "
            "dead-lettered (failed), or is still running (in_flight); otherwise its status"
        )
    )
    repairs: list[AuditRepair] = Field(
        default_factory=list, description="what operators did to the slot (re-runs, marks), oldest first"
    )


class UnscheduledRun(BaseModel):
    slot: datetime
    run_id: str
    kind: str | None
    state: str


class AuditSummary(BaseModel):
    fired: int
    missed: int
    skipped_by_policy: int
    late: int
    held: int = Field(default=0, description="fired, waiting for a downstream (not missed, not run yet)")
    duplicated_effect: int


class AuditOutcomes(BaseModel):
    """The audit's headline: one count per outcome, adding up to `expected`."""

    succeeded: int = Field(description="fired (on time or late) and its run completed")
    failed: int = Field(description="fired and its run failed, was dead-lettered or cancelled")
    in_flight: int = Field(description="fired and its run has not ended yet")
    held: int = Field(description="fired, waiting for a downstream")
    missed: int
    skipped: int = Field(description="skipped by a policy (misfire, overlap, DST, paused)")
    duplicated_effect: int = Field(description="completed by more than one claim")


class AuditChange(BaseModel):
    at: datetime
    change: Literal["created", "updated", "paused", "resumed", "deleted"]
    by: str | None = Field(
        description="who asked (the command's principal: token:<name>, oidc:<subject>, bootstrap, "
        "anonymous); null when the command was not published through the api"
    )
    command_id: str | None = Field(description="the command that made the change, when known")


class Audit(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    schedule_id: str
    from_: datetime = Field(alias="from", serialization_alias="from")
    to: datetime
    expected: int = Field(description="slots judged (due before as_of minus the late threshold, or recorded)")
    pending: int = Field(description="slots too recent to judge and not yet recorded")
    as_of: datetime = Field(description="the database clock when the audit ran")
    late_threshold_seconds: float
    slots: list[AuditSlot]
    outcomes: AuditOutcomes = Field(
        description="what became of the judged slots (the headline: a slot that fired is not a success "
        "until its run completed)"
    )
    summary: AuditSummary = Field(
        description="how the judged slots fired (on time, late, ...), not how they ended"
    )
    unscheduled: list[UnscheduledRun] = Field(
        description="runs of the schedule off its grid (manual triggers, off-grid backfills)"
    )
    dead_lettered: list[UnscheduledRun] = Field(
        default_factory=list,
        description="runs in the window that ended dead-lettered: their slot fired, their work failed",
    )
    audited_from: datetime = Field(
        description=(
            "where the audit starts: `from`, or the schedule's creation or the retention horizon (runs"
            " before it purged) when later"
        )
    )
    note: str | None = Field(default=None, description="what a reader should know about the window")
    changes: list[AuditChange] = Field(
        default_factory=list,
        description="the schedule's changes in [from, to): created, updated, paused, resumed, deleted, by whom",
    )


class CommandStatus(BaseModel):
    command_id: str
    status: Literal["unknown", "pending", "published", "accepted", "rejected"] = Field(
        description="unknown: not seen on its topic yet; pending: seen, awaiting its consumer's "
        "acknowledgement; published: seen, and its consumer does not acknowledge commands; "
        "accepted/rejected: acknowledged"
    )
    reason: str | None = None
    command_type: str | None = None
    subject: str | None = None
    published_at: datetime | None = None
    acknowledged_at: datetime | None = None
    principal: str | None = Field(
        default=None,
        description="who issued it (token:<name>, oidc:<subject>, bootstrap, anonymous when auth is off)",
    )
    summary: str | None = Field(
        default=None,
        description='what its consumer said it did, for a DLQ command: "redrove 3 dead letter(s); ..."',
    )


class CommandRecord(BaseModel):
    command_id: str
    command_type: str | None
    subject: str | None
    status: str
    reason: str | None
    principal: str | None = Field(description="who issued it; null for a command published without the api")
    source: str | None
    published_at: datetime | None
    acknowledged_at: datetime | None


class CommandPublished(BaseModel):
    command_id: str


# -- request bodies ------------------------------------------------------------------------------

Identifier = Field(pattern=IDENTIFIER_PATTERN)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _examples(*bodies: dict[str, Any]) -> ConfigDict:
    """A request body's config with ``bodies`` as its OpenAPI examples (what Swagger's "Try it out"
    fills in, instead of `"expression": "string"`); tests/integration/api/test_api_examples.py
    sends each one to its endpoint and checks the api takes it."""
    return ConfigDict(extra="forbid", json_schema_extra={"examples": list(bodies)})


def _contract_example(model: type[Message], *path_fields: str) -> dict[str, Any]:
    """The contract's own golden example (slotflow.contracts.examples) as a request body: the
    fields the URL carries left out."""
    message = EXAMPLES[model][2]
    data: dict[str, Any] = message.model_dump(mode="json", exclude_defaults=True)
    for name in path_fields:
        data.pop(name, None)
    return data


class CreateScheduleBody(_Body):
    model_config = _examples(
        _contract_example(CreateSchedule),
        {
            "schedule_id": "hourly-fx-rates",
            "definition": {"spec": {"kind": "interval", "every": "PT1H"}, "handler": "fx.refresh_rates"},
        },
    )

    #: One URL path segment: no `/` (every schedule route names it as `/v1/schedules/{id}/...`).
    schedule_id: str = Field(pattern=SCHEDULE_ID_PATTERN)
    definition: ScheduleDefinition
    paused: bool = False


class UpdateScheduleBody(_Body):
    model_config = _examples(_contract_example(UpdateSchedule, "schedule_id"))
    definition: ScheduleDefinition


class PauseBody(_Body):
    model_config = _examples(_contract_example(PauseSchedule, "schedule_id"), {"reason": "bank maintenance"})
    reason: str = Field(default="", max_length=1000)
    resume_at: AwareDatetime | None = None


_CATCH_UP = Field(
    default=False,
    description="run the slots that passed while paused under the misfire policy; without it "
    "(the default) each is recorded as skipped with reason `paused` and never fires",
)


class ResumeBody(_Body):
    model_config = _examples({"catch_up": False}, {"catch_up": True})
    catch_up: bool = _CATCH_UP


class BulkBody(_Body):
    #: Each one URL path segment, like every schedule id; a repeated id is one command.
    schedule_ids: list[Annotated[str, Field(pattern=SCHEDULE_ID_PATTERN)]] = Field(
        min_length=1, max_length=500
    )


class BulkPauseBody(BulkBody):
    model_config = _examples(
        {"schedule_ids": ["merchant-payouts", "hourly-fx-rates"], "reason": "year-end freeze"}
    )
    reason: str = Field(default="", max_length=1000)
    resume_at: AwareDatetime | None = None


class BulkResumeBody(BulkBody):
    model_config = _examples({"schedule_ids": ["merchant-payouts", "hourly-fx-rates"], "catch_up": False})
    catch_up: bool = _CATCH_UP


class BulkCommand(BaseModel):
    schedule_id: str
    command_id: str
    status: str | None = Field(default=None, description="with ?wait=: the command's status")
    reason: str | None = Field(default=None, description="with ?wait=: why it was rejected")


class BulkAnswer(BaseModel):
    commands: list[BulkCommand]


_REPAIR_FROM = Field(alias="from", description="the first slot of the range (inclusive)")
_REPAIR_TO = Field(
    default=None, alias="to", description="the last slot of the range (inclusive); default: `from` alone"
)
_REPAIR_DRY_RUN = Field(
    default=False, description="answer what it would touch (200) without publishing anything"
)


class RerunBody(_Body):
    """Re-run the schedule's slots in [from, to] with its current definition."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "from": "2026-12-02T02:00:00Z",
                    "to": "2026-12-02T04:00:00Z",
                    "reason": "payouts.pay_merchants was misspelt; fixed by the update",
                },
                {"from": "2026-12-02T02:00:00Z", "reason": "check what it would touch", "dry_run": True},
                {
                    "from": "2026-12-02T02:00:00Z",
                    "force": True,
                    "reason": "the bank lost the transfer: pay it again (ticket FIN-233)",
                },
            ]
        },
    )
    start: AwareDatetime = _REPAIR_FROM
    end: AwareDatetime | None = _REPAIR_TO
    force: bool = Field(
        default=False,
        description="also re-run completed slots: each runs its effect again as a new run `{run id}#rerun-n`",
    )
    reason: str = Field(
        min_length=1, max_length=1000, description="why: recorded with the re-run, shown in the audit"
    )
    dry_run: bool = _REPAIR_DRY_RUN


class MarkBody(_Body):
    """Mark the schedule's slots in [from, to] done or skipped; no effect runs."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {"from": "2026-12-02T02:00:00Z", "mark": "done", "reason": "paid by hand: ticket FIN-212"},
                {
                    "from": "2026-12-02T02:00:00Z",
                    "to": "2026-12-02T04:00:00Z",
                    "mark": "skipped",
                    "reason": "bank holiday",
                    "dry_run": True,
                },
            ]
        },
    )
    start: AwareDatetime = _REPAIR_FROM
    end: AwareDatetime | None = _REPAIR_TO
    mark: Literal["done", "skipped"]
    reason: str = Field(
        min_length=1, max_length=1000, description="why: recorded with the mark, shown in the audit"
    )
    dry_run: bool = _REPAIR_DRY_RUN


class RepairSlot(BaseModel):
    slot: datetime
    run_id: str | None = Field(description="the slot's run, when one is recorded")
    state: str = Field(description="the run's state, or what the audit found (missed, skipped_by_policy)")
    action: Literal["rerun", "forced_rerun", "mark"] | None = Field(
        default=None, description="what the command does to it (left out: null)"
    )
    reason: str | None = Field(default=None, description="why it is left out")


class RepairAnswer(BaseModel):
    """What a re-run or a mark touches (the dry run: would touch) and what it leaves out, and why."""

    dry_run: bool
    count: int = Field(description="slots the command touches (or would)")
    slots: list[RepairSlot] = Field(description="the first of them")
    left_out_count: int
    left_out: list[RepairSlot] = Field(
        description="the first slots of the range it leaves out, with the reason"
    )
    pending: int = Field(description="slots of the range too recent to judge: not touched")
    command_id: str | None = Field(default=None, description="the published command (not for a dry run)")
    status: str | None = Field(default=None, description="with ?wait=: the command's reflected status")
    reason: str | None = Field(default=None, description="with ?wait=: a rejection's reason")


class BackfillBody(_Body):
    model_config = _examples(
        {"start": "2026-12-01T00:00:00Z", "end": "2026-12-02T00:00:00Z"},
        {
            "start": "2026-12-01T00:00:00Z",
            "end": "2026-12-02T00:00:00Z",
            "overlap": "allow",
            "max_concurrent": 4,
        },
    )
    start: AwareDatetime
    end: AwareDatetime
    max_slots: int = Field(default=1000, ge=1, le=100_000)
    overlap: OverlapPolicy = Field(
        default="buffer_all",
        description="the backfill's own overlap policy (not the schedule's): buffer_all runs the "
        "slots one after another in slot order",
    )
    max_concurrent: int = Field(default=1, ge=1, le=1000, description="with buffer_all: runs at once")


class BackfillSlot(BaseModel):
    slot: datetime
    run_id: str
    local: str
    state: str | None = Field(description="its run's state, null while no run is recorded")


class BackfillReport(BaseModel):
    """A backfill's slots in [from, to) of the current definition, and how their runs stand."""

    schedule_id: str
    start: datetime = Field(serialization_alias="from")
    end: datetime = Field(serialization_alias="to")
    expected: int = Field(description="slots the backfill creates (runs one per slot)")
    refused: str | None = Field(description="why the ticker would refuse this backfill, if it would")
    slots: list[BackfillSlot]
    completed: int
    skipped: int
    failed: int = Field(description="dead-lettered runs")
    in_progress: int = Field(description="runs due, waiting their turn, running or retrying")
    not_started: int = Field(description="slots with no run recorded yet")
    finished: bool = Field(description="every slot's run is completed, skipped or dead-lettered")


class StartWorkflowBody(_Body):
    model_config = _examples(
        {
            "workflow_id": "order-1042",
            "workflow_type": "orders.checkout",
            "input": {"order_id": "1042", "amount_cents": 4999, "currency": "EUR"},
            "execution_timeout_seconds": 3600,
        },
        {
            "workflow_id": "order-1043",
            "workflow_type": "orders.checkout",
            "input": {"order_id": "1043", "amount_cents": 12999, "currency": "EUR"},
            "memo": {"note": "gift wrap"},
            "search_attributes": {
                "Customer": "acme",
                "AmountCents": 12999,
                "PromisedBy": {"type": "datetime", "value": "2026-12-24T18:00:00Z"},
            },
        },
    )
    workflow_id: str = Identifier
    workflow_type: str = Identifier
    input: dict[str, Any] = Field(default_factory=dict)
    id_reuse_policy: IdReusePolicy = "reject_duplicate"
    #: The whole run's deadline from its start; none by default.
    execution_timeout_seconds: float | None = Field(default=None, gt=0, le=366 * 86_400)
    memo: dict[str, Any] = Field(
        default_factory=dict,
        description=f"any JSON object shown with the workflow, never searched (at most {MAX_MEMO_BYTES} bytes)",
    )
    search_attributes: dict[str, Any] = Field(
        default_factory=dict,
        description='typed values a `query` finds the workflow by: `{"type": "keyword", "value": "acme"}`, '
        "or a bare JSON value typed by its form (a string is a keyword, an integer an int, a number a float, "
        "true/false a bool, a list of strings a keyword_list; a datetime or text needs the typed form). "
        f"At most {MAX_SEARCH_ATTRIBUTES}, names a letter then letters, digits or _.",
    )

    @field_validator("search_attributes")
    @classmethod
    def _typed(cls, value: dict[str, Any]) -> dict[str, Any]:
        typed_search_attributes(value)  # a ValueError here is the 422 naming the attribute
        return value

    @field_validator("memo")
    @classmethod
    def _memo(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_memo(value)
        return value


#: The run a signal, cancel or terminate is meant for (`SignalWorkflow.start_command_id`).
RunOfStart = Field(
    default=None,
    min_length=1,
    max_length=1000,
    description="the command id of the StartWorkflow whose run this is meant for; rejected (409, or "
    "by the orchestrator) when the id's current run is another: a handle kept from an earlier run of a "
    "reused id never reaches a new one. Omitted: whichever run is current",
)


class SignalBody(_Body):
    model_config = _examples({"signal": "approved", "payload": {"by": "ops"}})
    signal: str = Identifier
    payload: dict[str, Any] = Field(default_factory=dict)
    start_command_id: str | None = RunOfStart


class QueryBody(_Body):
    model_config = _examples({"query": "progress"}, {"query": "has_line", "arg": "mug"})
    query: str = Identifier
    arg: Any = Field(default=None, description="the handler's one argument, if it takes one (any JSON)")
    start_command_id: str | None = RunOfStart
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=60,
        description="how long to wait for an answer at most (SLOTFLOW_API_QUERY_TIMEOUT_SECONDS when shorter)",
    )


class QueryAnswerOut(BaseModel):
    workflow_id: str
    query: str
    #: What the handler returned, as JSON.
    result: Any = None
    #: The workflow's status when it was answered (`running`, `completed`, ...).
    status: str


class CancelBody(_Body):
    model_config = _examples({"reason": "customer asked"})
    reason: str = Field(default="", max_length=1000)
    start_command_id: str | None = RunOfStart


#: A workflow's status as the api shows it (`requested` and `rejected` are the api's own).
WorkflowStatus = Literal[
    "requested",
    "running",
    "compensating",
    "stuck",
    "completed",
    "failed",
    "terminated",
    "cancelled",
    "rejected",
]
#: The most workflows one bulk cancel or terminate takes (one command each).
BULK_WORKFLOWS_MAX = 500


class BulkWorkflowsBody(_Body):
    """Cancel or terminate every workflow the selection takes: `workflow_ids` (any of them), `type`
    and `status`, ANDed. One that names no ids and no type (a status alone is another spelling of
    everything) must say `all: true`; the route refuses it otherwise, with the count it would take."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {"type": "order_saga", "status": "running", "reason": "carrier outage", "dry_run": True},
                {"workflow_ids": ["order-1042", "order-1043"], "reason": "customer asked", "dry_run": True},
                {"status": "stuck", "all": True, "reason": "bad deploy rolled back", "dry_run": True},
            ]
        },
    )
    workflow_ids: list[WorkflowId] = Field(default_factory=list, max_length=BULK_WORKFLOWS_MAX)
    workflow_type: str | None = Field(default=None, alias="type", min_length=1, max_length=200)
    status: WorkflowStatus | None = None
    all: bool = Field(default=False, description="select every workflow (of `status`, when given)")
    reason: str = Field(
        min_length=1, max_length=1000, description="why: recorded with each command and in its history"
    )
    limit: int = Field(
        default=BULK_WORKFLOWS_MAX,
        ge=1,
        le=BULK_WORKFLOWS_MAX,
        description="at most this many workflows, oldest request first",
    )
    dry_run: bool = Field(default=False, description="answer what it would touch (200) and publish nothing")

    @model_validator(mode="after")
    def _not_both(self) -> Self:
        if self.all and (self.workflow_ids or self.workflow_type is not None):
            raise ValueError(
                '"all": true selects every workflow, but the selection narrows it (workflow_ids or '
                "type): send one or the other"
            )
        return self


class BulkWorkflowItem(BaseModel):
    workflow_id: str
    workflow_type: str | None
    status: str | None
    command_id: str | None = Field(default=None, description="the command published for it")
    reason: str | None = Field(default=None, description="left out: why")


class BulkWorkflowsAnswer(BaseModel):
    """What a bulk cancel or terminate touches (the dry run: would touch) and leaves out, and why."""

    action: Literal["cancel", "terminate"]
    dry_run: bool
    count: int = Field(description="workflows it publishes a command to (or would)")
    workflows: list[BulkWorkflowItem] = Field(description="the first of them (every one when not a dry run)")
    more: int = Field(description="open workflows the selection also matches, beyond `limit`: not touched")
    left_out_count: int
    left_out: dict[str, int] = Field(description="what it leaves out, by reason, with the count")
    left_out_workflows: list[BulkWorkflowItem] = Field(
        default_factory=list, description="the first workflows it leaves out, each with its reason"
    )
    compensating: int = Field(
        description="selected workflows compensating already: a cancel leaves them out (their "
        "compensations run), a terminate ends them with their compensations unfinished"
    )


class _Selecting(_Body):
    """A redrive or discard selects by `selection`; one that does not narrow (no ids, and none of
    source, topic, reason, job, run or workflow: a status or a time range alone is another spelling
    of everything) must say so with `all: true` (the route refuses it otherwise, with the count it
    would take)."""

    selection: DeadLetterFilter = Field(default_factory=DeadLetterFilter)
    all: bool = Field(
        default=False, description="select every dead letter (of `selection.status`, parked by default)"
    )
    limit: int = Field(default=1000, ge=1, le=100_000)

    @model_validator(mode="after")
    def _not_both(self) -> Self:
        if self.all and self.selection.narrows():
            raise ValueError(
                '"all": true selects every dead letter, but "selection" narrows it: send one or the other'
            )
        return self


class RedriveBody(_Selecting):
    definition: RedriveDefinition = Field(
        default="as_run",
        description="a schedule's run: as_run re-issues the JobDue the claimer stored for it; current "
        "re-issues the slot from the schedule's current definition (a fixed handler name)",
    )


class DiscardBody(_Selecting):
    reason: str = Field(min_length=1, max_length=1000)


class PreviewItem(DeadLetter):
    owner: str | None = Field(default=None, description="the service a redrive would ask (none: refused)")
    kind: str | None = Field(default=None, description="run, activity or record")
    refusal: str | None = Field(default=None, description="why no service can redrive it")


class DeadLetterPreview(BaseModel):
    """What a redrive or discard would do (`?dry_run=true`); nothing is published."""

    action: Literal["redrive", "discard"]
    dry_run: bool = True
    would_touch: int = Field(description="letters the command would change (at most `limit`)")
    matching: int = Field(description="letters the selection matches (a bulk redrive without the left-out)")
    limit: int
    definition: str | None
    owners: dict[str, int] = Field(
        description="a redrive: how many letters each owner would be asked to redrive"
    )
    refused: int = Field(description="a redrive: letters no owner can take (redrive_failed at once)")
    left_out: int = Field(description="a bulk redrive: workflows' parked activities it leaves out")
    left_out_reason: str | None
    items: list[PreviewItem] = Field(description="the first letters it would touch, oldest first")


class ServedHandler(BaseModel):
    name: str
    claimers: list[str] = Field(description="the live claimers that serve it")


class ClaimerInfo(BaseModel):
    claimer_id: str
    handlers: list[str]
    interval_ms: int
    started_at: datetime
    announced_at: datetime
    live: bool = Field(description="announced within the last three intervals (database clock)")


class Handlers(BaseModel):
    handlers: list[ServedHandler]
    claimers: list[ClaimerInfo]
    warnings: list[str] = Field(
        default_factory=list,
        description="with ?handler=: why that handler may never run (the warnings a create or update "
        "naming it answers with, and `--strict` refuses on); empty when a live claimer serves it",
    )


class Downstream(BaseModel):
    """A downstream as its claimers last reported it (DownstreamChanged, DownstreamReported)."""

    name: str
    state: Literal["closed", "open", "half_open"]
    manual: bool = Field(description="opened by an operator: stays open until one closes it")
    settings: dict[str, Any] = Field(description="its own settings over the claimers' defaults")
    held: int = Field(description="runs waiting for it (attempts kept), as its claimers last reported")
    held_runs_count: int = Field(
        default=0,
        description="runs the read model holds as held for it: the rows `held_runs` lists (the count "
        "a view shows beside them)",
    )
    window_seconds: float | None
    first_attempts: int | None = Field(description="first attempts admitted over the window")
    retries: int | None = Field(description="retries admitted over the window")
    retry_allowance: int | None = Field(description="retries the budget allows over the window")
    budget_used: float | None = Field(description="retries / retry_allowance (1.0: spent)")
    successes: int | None
    failures: int | None
    changed_at: datetime
    reported_at: datetime | None


class DownstreamChange(BaseModel):
    from_state: str
    to_state: str
    cause: str
    reason: str
    manual: bool
    by_claimer: str
    command_id: str | None
    held: int
    at: datetime


class HeldRun(BaseModel):
    run_id: str
    job_id: str
    slot: datetime
    attempt: int
    held_reason: str | None
    retry_at: datetime | None


class DownstreamDetail(Downstream):
    changes: list[DownstreamChange] = Field(description="newest first (at most 50)")
    held_runs: list[HeldRun] = Field(description="held runs in slot order (at most 100)")


class DownstreamReasonBody(_Body):
    model_config = _examples({"reason": "bank maintenance, INC-9"})
    reason: str = Field(min_length=1, max_length=1000, description="why, for the audit of the change")
