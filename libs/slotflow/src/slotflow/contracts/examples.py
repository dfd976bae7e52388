"""One example message per registered type: seeds for `contracts/examples/` and docs."""

from datetime import UTC, datetime, timedelta

from slotflow.contracts import (
    AttemptRecord,
    Backfill,
    CancelTimer,
    CancelWorkflow,
    CommandAccepted,
    CommandRejected,
    CreateSchedule,
    CronSpec,
    DeadLettered,
    DeadLetterFilter,
    DeadLetterStatusChanged,
    DeleteSchedule,
    DiscardDeadLetters,
    Envelope,
    FireJobDue,
    JobDue,
    Message,
    MisfirePolicy,
    PauseSchedule,
    RedriveDeadLetters,
    ResumeSchedule,
    RetryPolicy,
    RunCompleted,
    RunDeadLettered,
    RunFailed,
    RunRetrying,
    RunSkipped,
    RunStarted,
    ScheduleCreated,
    ScheduleDefinition,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleResumed,
    ScheduleUpdated,
    SignalWorkflow,
    SlotSkipped,
    StartTimer,
    StartWorkflow,
    TimerFired,
    TriggerNow,
    UpdateSchedule,
    wrap,
)
from slotflow.core.identity import job_due_event_id, run_id

_AT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
_SCHEDULE = "merchant-payouts"
_RUN = run_id(_SCHEDULE, _AT)
_DEFINITION = ScheduleDefinition(
    spec=CronSpec(expression="0 2 * * *", timezone="Europe/Berlin"),
    handler="payouts.pay_merchants",
    payload={"currency": "EUR"},
    misfire=MisfirePolicy(policy="fire_once"),
    retry=RetryPolicy(max_attempts=5, non_retryable=("CardDeclined",)),
    tags=("money-moving",),
)
_RUN_FIELDS = {
    "run_id": _RUN,
    "job_id": _SCHEDULE,
    "slot": _AT,
    "attempt": 1,
    "fence_token": 7,
    "owner": "claimer-1",
}
_JOB = JobDue(
    run_id=_RUN,
    job_id=_SCHEDULE,
    slot=_AT,
    handler="payouts.pay_merchants",
    payload={"currency": "EUR"},
    retry=_DEFINITION.retry,
    overlap="skip",
    tags=("money-moving",),
    fire_at=_AT,
)
_HISTORY = (
    AttemptRecord(
        attempt=1,
        fence_token=7,
        owner="claimer-1",
        error_type="TimeoutError",
        message="bank API timed out",
        started_at=_AT,
        finished_at=_AT + timedelta(seconds=30),
    ),
)

EXAMPLES: dict[type[Message], tuple[str, str, Message]] = {
    # model: (envelope id, key, message)
    CreateSchedule: ("cmd-0001", _SCHEDULE, CreateSchedule(schedule_id=_SCHEDULE, definition=_DEFINITION)),
    UpdateSchedule: ("cmd-0002", _SCHEDULE, UpdateSchedule(schedule_id=_SCHEDULE, definition=_DEFINITION)),
    PauseSchedule: (
        "cmd-0003",
        _SCHEDULE,
        PauseSchedule(schedule_id=_SCHEDULE, reason="bank maintenance", resume_at=_AT + timedelta(hours=4)),
    ),
    ResumeSchedule: ("cmd-0004", _SCHEDULE, ResumeSchedule(schedule_id=_SCHEDULE)),
    DeleteSchedule: ("cmd-0005", _SCHEDULE, DeleteSchedule(schedule_id=_SCHEDULE)),
    TriggerNow: ("cmd-0006", _SCHEDULE, TriggerNow(schedule_id=_SCHEDULE)),
    Backfill: (
        "cmd-0007",
        _SCHEDULE,
        Backfill(schedule_id=_SCHEDULE, start=_AT - timedelta(days=3), end=_AT),
    ),
    ScheduleCreated: (
        "cmd-0001/created",
        _SCHEDULE,
        ScheduleCreated(schedule_id=_SCHEDULE, definition=_DEFINITION, paused=False, next_fire_at=_AT),
    ),
    ScheduleUpdated: (
        "cmd-0002/updated",
        _SCHEDULE,
        ScheduleUpdated(schedule_id=_SCHEDULE, definition=_DEFINITION, next_fire_at=_AT),
    ),
    SchedulePaused: (
        "cmd-0003/paused",
        _SCHEDULE,
        SchedulePaused(schedule_id=_SCHEDULE, reason="bank maintenance", resume_at=None),
    ),
    ScheduleResumed: (
        "cmd-0004/resumed",
        _SCHEDULE,
        ScheduleResumed(schedule_id=_SCHEDULE, next_fire_at=_AT),
    ),
    ScheduleDeleted: ("cmd-0005/deleted", _SCHEDULE, ScheduleDeleted(schedule_id=_SCHEDULE)),
    SlotSkipped: (
        f"{_RUN}/skipped",
        _SCHEDULE,
        SlotSkipped(schedule_id=_SCHEDULE, run_id=_RUN, slot=_AT, reason="misfire", detail="fire_once"),
    ),
    CommandAccepted: (
        "cmd-0001/accepted",
        _SCHEDULE,
        CommandAccepted(command_id="cmd-0001", command_type="schedule.create", subject=_SCHEDULE),
    ),
    CommandRejected: (
        "cmd-0009/rejected",
        _SCHEDULE,
        CommandRejected(
            command_id="cmd-0009",
            command_type="schedule.create",
            subject=_SCHEDULE,
            reason="schedule merchant-payouts already exists",
        ),
    ),
    JobDue: (job_due_event_id(_RUN, 1), _SCHEDULE, _JOB),
    RunStarted: (
        f"{_RUN}/1/started",
        _SCHEDULE,
        RunStarted.model_validate({**_RUN_FIELDS, "started_at": _AT}),
    ),
    RunCompleted: (
        f"{_RUN}/1/completed",
        _SCHEDULE,
        RunCompleted.model_validate(
            {
                **_RUN_FIELDS,
                "result": {"paid": 42},
                "started_at": _AT,
                "finished_at": _AT + timedelta(seconds=3),
            }
        ),
    ),
    RunFailed: (
        f"{_RUN}/1/failed",
        _SCHEDULE,
        RunFailed.model_validate(
            {
                **_RUN_FIELDS,
                "error_type": "TimeoutError",
                "message": "bank API timed out",
                "retryable": True,
                "finished_at": _AT + timedelta(seconds=30),
            }
        ),
    ),
    RunRetrying: (
        f"{_RUN}/1/retrying",
        _SCHEDULE,
        RunRetrying.model_validate(
            {
                **_RUN_FIELDS,
                "next_attempt": 2,
                "retry_at": _AT + timedelta(seconds=31),
                "delay": timedelta(seconds=1),
            }
        ),
    ),
    RunDeadLettered: (
        f"{_RUN}/dead-lettered",
        _SCHEDULE,
        RunDeadLettered.model_validate({**_RUN_FIELDS, "reason": "attempts_exhausted", "history": _HISTORY}),
    ),
    RunSkipped: (
        f"{_RUN}/skipped",
        _SCHEDULE,
        RunSkipped.model_validate({**_RUN_FIELDS, "reason": "previous run still running"}),
    ),
    StartTimer: (
        "timer-0001",
        f"retry:{_RUN}#2",
        StartTimer(
            timer_id=f"retry:{_RUN}#2",
            fire_at=_AT + timedelta(seconds=31),
            on_fire=FireJobDue(job=_JOB.model_copy(update={"attempt": 2, "kind": "retry"})),
        ),
    ),
    CancelTimer: ("timer-0002", f"retry:{_RUN}#2", CancelTimer(timer_id=f"retry:{_RUN}#2")),
    TimerFired: (
        "order-17/sleep/4/fired",
        "order-17",
        TimerFired(timer_id="order-17/sleep/4", owner="order-17", sequence=4, fire_at=_AT, fired_at=_AT),
    ),
    DeadLettered: (
        "slotflow.jobs.due.v1:3:1042",
        _SCHEDULE,
        DeadLettered(
            reason="attempts_exhausted",
            error_type="TimeoutError",
            error="TimeoutError: bank API timed out",
            source_service="claimer",
            topic="slotflow.jobs.due.v1",
            partition=3,
            offset=1042,
            key=_SCHEDULE,
            value_b64="",
            run_id=_RUN,
            job_id=_SCHEDULE,
            history=_HISTORY,
            tags=("money-moving",),
        ),
    ),
    RedriveDeadLetters: (
        "dlq-cmd-0001",
        "slotflow.jobs.due.v1:3:1042",
        RedriveDeadLetters(selection=DeadLetterFilter(ids=("slotflow.jobs.due.v1:3:1042",))),
    ),
    DiscardDeadLetters: (
        "dlq-cmd-0002",
        "slotflow.jobs.due.v1:3:1042",
        DiscardDeadLetters(
            selection=DeadLetterFilter(reason="invalid_payload"), reason="sender fixed; data obsolete"
        ),
    ),
    DeadLetterStatusChanged: (
        "slotflow.jobs.due.v1:3:1042/parked",
        "slotflow.jobs.due.v1:3:1042",
        DeadLetterStatusChanged(
            dead_letter_id="slotflow.jobs.due.v1:3:1042",
            status="parked",
            reason="attempts_exhausted",
            topic="slotflow.jobs.due.v1",
            source_service="claimer",
            job_id=_SCHEDULE,
            at=_AT,
        ),
    ),
    StartWorkflow: (
        "wf-cmd-0001",
        "order-17",
        StartWorkflow(workflow_id="order-17", workflow_type="process_order", input={"order_id": 17}),
    ),
    SignalWorkflow: (
        "wf-cmd-0002",
        "order-17",
        SignalWorkflow(workflow_id="order-17", signal="address_changed", payload={"zip": "10115"}),
    ),
    CancelWorkflow: (
        "wf-cmd-0003",
        "order-17",
        CancelWorkflow(workflow_id="order-17", reason="customer cancelled"),
    ),
}


def example_envelope(model: type[Message]) -> Envelope:
    """The example for ``model`` wrapped as it travels."""
    id_, key, message = EXAMPLES[model]
    return wrap(message, id=id_, key=key, source="example", occurred_at=_AT)
