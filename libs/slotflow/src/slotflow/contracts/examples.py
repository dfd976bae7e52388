"""One example message per registered type: seeds for `contracts/examples/` and docs."""

from datetime import UTC, datetime, timedelta

from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityParked,
    ActivityRetried,
    ActivityScheduled,
    AttemptRecord,
    Backfill,
    CancelActivity,
    CancelRequested,
    CancelTimer,
    CancelWorkflow,
    ChildWorkflowCompleted,
    ChildWorkflowFailed,
    ChildWorkflowScheduled,
    ClaimerAnnounced,
    CloseDownstream,
    CommandAccepted,
    CommandRejected,
    CompensationRegistered,
    ConfigureDownstream,
    CreateSchedule,
    CronSpec,
    DeadLettered,
    DeadLetterFilter,
    DeadLetterStatusChanged,
    DeleteSchedule,
    DiscardDeadLetters,
    DownstreamChanged,
    DownstreamReported,
    DownstreamSettings,
    Envelope,
    FireJobDue,
    HistoryEvent,
    JobDue,
    MarkerRecorded,
    MarkSlots,
    MemoUpserted,
    Message,
    MisfirePolicy,
    NonDeterminismDetected,
    OpenDownstream,
    PauseSchedule,
    RedriveDeadLetters,
    RedriveOutcome,
    RedriveRequested,
    RerunSlots,
    ResumeSchedule,
    RetryActivity,
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
    SearchAttribute,
    SearchAttributesUpserted,
    SignalReceived,
    SignalWorkflow,
    SigningKey,
    SlotRerun,
    SlotSkipped,
    SlotsMarked,
    SlotsRerun,
    StartTimer,
    StartWorkflow,
    TerminateWorkflow,
    TimerCancelled,
    TimerFired,
    TimerStarted,
    TriggerNow,
    UpdateSchedule,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowStarted,
    WorkflowTimerFired,
    history_event_id,
    wrap,
)
from slotflow.core.identity import activity_run_id, job_due_event_id, run_id

_AT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
_SCHEDULE = "merchant-payouts"
_RUN = run_id(_SCHEDULE, _AT)
_REQUEST = "5f1c0d2e9a7b4c3d8e6f1a2b3c4d5e6f"
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
    RerunSlots: (
        "cmd-0008",
        _SCHEDULE,
        RerunSlots(
            schedule_id=_SCHEDULE,
            slots=(_AT - timedelta(days=1),),
            forced=(_AT,),
            reason="payouts.pay_merchants was misspelt; fixed by the update",
        ),
    ),
    MarkSlots: (
        "cmd-0009",
        _SCHEDULE,
        MarkSlots(schedule_id=_SCHEDULE, slots=(_AT,), mark="done", reason="paid by hand: ticket FIN-212"),
    ),
    SlotsRerun: (
        "cmd-0008/rerun",
        _SCHEDULE,
        SlotsRerun(
            schedule_id=_SCHEDULE,
            reruns=(
                SlotRerun(
                    slot=_AT - timedelta(days=1),
                    run_id=run_id(_SCHEDULE, _AT - timedelta(days=1)),
                    number=1,
                    forced=False,
                ),
                SlotRerun(slot=_AT, run_id=f"{_RUN}#rerun-1", number=1, forced=True),
            ),
            handler="payouts.pay_merchants",
            principal="alice",
            reason="payouts.pay_merchants was misspelt; fixed by the update",
        ),
    ),
    SlotsMarked: (
        "cmd-0009/marked",
        _SCHEDULE,
        SlotsMarked(
            schedule_id=_SCHEDULE,
            slots=(_AT,),
            mark="done",
            principal="alice",
            reason="paid by hand: ticket FIN-212",
        ),
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
        f"{_RUN}/7/skipped",
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
        f"{_RUN}/7/started",
        _SCHEDULE,
        RunStarted.model_validate({**_RUN_FIELDS, "started_at": _AT}),
    ),
    RunCompleted: (
        f"{_RUN}/7/completed",
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
        f"{_RUN}/7/failed",
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
        f"{_RUN}/7/retrying",
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
        f"{_RUN}/7/dead_lettered",
        _SCHEDULE,
        RunDeadLettered.model_validate({**_RUN_FIELDS, "reason": "attempts_exhausted", "history": _HISTORY}),
    ),
    RunSkipped: (
        f"{_RUN}/7/skipped",
        _SCHEDULE,
        RunSkipped.model_validate({**_RUN_FIELDS, "reason": "previous run still running"}),
    ),
    SigningKey: (
        "k_b9d7ff1498a8667a15160e32a049da91/registered",
        "k_b9d7ff1498a8667a15160e32a049da91",
        SigningKey(
            key_id="k_b9d7ff1498a8667a15160e32a049da91",
            name="oncall-alice",
            principal="key:oncall-alice",
            scope="operate",
            public_key="L2e7dpootntESin40fwOn3gRTosQiS1B7nzCjeFIwFY",
            created_at=_AT,
            created_by="token:admin-bob",
        ),
    ),
    ClaimerAnnounced: (
        "claimer-a@2026-03-01T02:00:00Z",
        "claimer-a",
        ClaimerAnnounced(
            claimer_id="claimer-a",
            handlers=("payouts.pay_merchants", "reports.build"),
            interval=timedelta(seconds=30),
            started_at=_AT,
        ),
    ),
    OpenDownstream: (
        "ds-cmd-0001",
        "bank-api",
        OpenDownstream(downstream="bank-api", reason="bank maintenance window, INC-4411"),
    ),
    CloseDownstream: (
        "ds-cmd-0002",
        "bank-api",
        CloseDownstream(downstream="bank-api", reason="bank confirmed recovery"),
    ),
    ConfigureDownstream: (
        "ds-cmd-0003",
        "bank-api",
        ConfigureDownstream(
            downstream="bank-api", settings=DownstreamSettings(cooldown_seconds=60.0, failure_rate=0.3)
        ),
    ),
    DownstreamChanged: (
        "bank-api/17",
        "bank-api",
        DownstreamChanged(
            downstream="bank-api",
            from_state="closed",
            to_state="open",
            cause="failures",
            reason="8 of 10 calls failed in the last 10 s",
            by="claimer-a",
            at=_AT,
        ),
    ),
    DownstreamReported: (
        "bank-api/reported/2026-03-01T02:00:00Z",
        "bank-api",
        DownstreamReported(
            downstream="bank-api",
            state="open",
            window_seconds=10.0,
            first_attempts=40,
            retries=9,
            retry_allowance=18,
            successes=2,
            failures=38,
            held=212,
            changed_at=_AT,
            at=_AT + timedelta(seconds=5),
        ),
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
        StartWorkflow(
            workflow_id="order-17",
            workflow_type="process_order",
            input={"order_id": 17},
            memo={"note": "gift wrap"},
            search_attributes={
                "Customer": SearchAttribute(type="keyword", value="acme"),
                "AmountCents": SearchAttribute(type="int", value=9990),
            },
        ),
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
    TerminateWorkflow: (
        "wf-cmd-0004",
        "order-17",
        TerminateWorkflow(workflow_id="order-17", reason="stuck on a carrier outage"),
    ),
    RetryActivity: (
        "wf-cmd-0005",
        "order-17",
        RetryActivity(workflow_id="order-17", sequence=8, reason="carrier API back"),
    ),
    CancelActivity: (
        "order-17/8/cancel",
        "order-17",
        CancelActivity(
            workflow_id="order-17",
            sequence=8,
            run_id="order-17/8",
            handler="shipping.book_carrier",
            reason="workflow order-17 was cancelled: customer cancelled",
        ),
    ),
    RedriveRequested: (
        f"redrive:{_REQUEST}",
        "slotflow.jobs.due.v1:3:1042",
        RedriveRequested(
            request_id=_REQUEST,
            dead_letter_id="slotflow.jobs.due.v1:3:1042",
            command_id="dlq-cmd-0001",
            target="claimer",
            kind="run",
            topic="slotflow.jobs.due.v1",
            partition=3,
            offset=1042,
            run_id=_RUN,
            job_id=_SCHEDULE,
            slot=_AT,
            redrive=1,
        ),
    ),
    RedriveOutcome: (
        f"redrive:{_REQUEST}/outcome",
        "slotflow.jobs.due.v1:3:1042",
        RedriveOutcome(
            request_id=_REQUEST,
            dead_letter_id="slotflow.jobs.due.v1:3:1042",
            service="claimer",
            outcome="done",
            reason=f"reopened run {_RUN} as attempt 4 (redrive 1)",
        ),
    ),
}

# One order saga's history, an event per type (ids are `{workflow_id}#{sequence}`).
_WF = "order-17"
_HISTORY_EXAMPLES: tuple[HistoryEvent, ...] = (
    WorkflowStarted(
        workflow_id=_WF,
        sequence=1,
        workflow_type="process_order",
        input={"order_id": 17},
        command_id="wf-cmd-0001",
        memo={"note": "gift wrap"},
        search_attributes={
            "Customer": SearchAttribute(type="keyword", value="acme"),
            "AmountCents": SearchAttribute(type="int", value=9990),
        },
    ),
    ActivityScheduled(
        workflow_id=_WF,
        sequence=2,
        activity="payments.charge",
        run_id=activity_run_id(_WF, 2),
        payload={"amount": "99.90", "currency": "EUR"},
        retry=RetryPolicy(max_attempts=3, non_retryable=("CardDeclined",)),
    ),
    ActivityCompleted(workflow_id=_WF, sequence=3, scheduled_sequence=2, result={"charge_id": "ch_1"}),
    CompensationRegistered(
        workflow_id=_WF, sequence=4, for_step=2, activity="payments.refund", payload={"charge_id": "ch_1"}
    ),
    TimerStarted(workflow_id=_WF, sequence=5, timer_id=f"{_WF}/timer/5", fire_at=_AT + timedelta(hours=1)),
    WorkflowTimerFired(
        workflow_id=_WF,
        sequence=6,
        started_sequence=5,
        timer_id=f"{_WF}/timer/5",
        fired_at=_AT + timedelta(hours=1),
    ),
    SignalReceived(
        workflow_id=_WF,
        sequence=7,
        signal="address_changed",
        payload={"zip": "10115"},
        command_id="wf-cmd-0002",
    ),
    ActivityFailed(
        workflow_id=_WF,
        sequence=9,
        scheduled_sequence=8,
        error_type="NoCarrier",
        message="no carrier for 10115",
        permanent=True,
    ),
    ActivityParked(
        workflow_id=_WF,
        sequence=9,
        scheduled_sequence=8,
        reason="attempts_exhausted",
        error_type="CarrierUnavailable",
        message="carrier API answered 503",
    ),
    ActivityRetried(workflow_id=_WF, sequence=10, scheduled_sequence=8, redrive=1, command_id="wf-cmd-0005"),
    CancelRequested(workflow_id=_WF, sequence=10, reason="customer cancelled", command_id="wf-cmd-0003"),
    WorkflowCompleted(workflow_id=_WF, sequence=11, result={"shipped": True}),
    WorkflowFailed(
        workflow_id=_WF, sequence=14, error_type="NoCarrier", message="no carrier for 10115", compensated=True
    ),
    WorkflowCancelled(workflow_id=_WF, sequence=14, reason="customer cancelled", compensated=True),
    NonDeterminismDetected(
        workflow_id=_WF,
        sequence=12,
        at_sequence=8,
        expected="workflow.activity_scheduled shipping.book",
        got="activity shipping.book_express",
    ),
    MarkerRecorded(workflow_id=_WF, sequence=15, kind="patch", patch_id="express-shipping"),
    TimerCancelled(workflow_id=_WF, sequence=16, started_sequence=5, timer_id=f"{_WF}/timer/5"),
    ChildWorkflowScheduled(
        workflow_id=_WF,
        sequence=17,
        child_workflow_id=f"{_WF}/invoice",
        workflow_type="invoices.issue",
        input={"order_id": 17},
    ),
    ChildWorkflowCompleted(
        workflow_id=_WF,
        sequence=18,
        initiated_sequence=17,
        child_workflow_id=f"{_WF}/invoice",
        result={"invoice": "INV-17"},
    ),
    ChildWorkflowFailed(
        workflow_id=_WF,
        sequence=18,
        initiated_sequence=17,
        child_workflow_id=f"{_WF}/invoice",
        error_type="TaxServiceDown",
        message="no tax rate for 10115",
    ),
    WorkflowContinuedAsNew(
        workflow_id=_WF, sequence=19, workflow_type="process_order", input={"order_id": 17, "page": 2}
    ),
    SearchAttributesUpserted(
        workflow_id=_WF,
        sequence=20,
        search_attributes={
            "Stage": SearchAttribute(type="keyword", value="shipped"),
            "ShippedAt": SearchAttribute(type="datetime", value=_AT),
            "AmountCents": None,
        },
    ),
    MemoUpserted(
        workflow_id=_WF, sequence=21, memo={"tracking": {"carrier": "dhl", "number": "JD0146"}, "note": None}
    ),
)
for _event in _HISTORY_EXAMPLES:
    EXAMPLES[type(_event)] = (history_event_id(_WF, _event.sequence), _WF, _event)


def example_envelope(model: type[Message]) -> Envelope:
    """The example for ``model`` wrapped as it travels."""
    id_, key, message = EXAMPLES[model]
    return wrap(message, id=id_, key=key, source="example", occurred_at=_AT)
