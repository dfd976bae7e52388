"""Workflow commands consumed by the orchestrator, and the events of the workflow-history topic."""

import hashlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from slotflow.contracts.acceptance import INT4_MAX
from slotflow.contracts.envelope import IDENTIFIER_PATTERN, IdText, Message
from slotflow.contracts.policies import DeadLetterPolicy as DeadLetterPolicy
from slotflow.contracts.policies import RetryPolicy
from slotflow.contracts.schedules import HandlerName
from slotflow.contracts.search import (
    SearchAttribute,
    SearchAttributeName,
    check_memo,
    check_search_attributes,
    merged,
    name_problem,
)
from slotflow.core.identity import activity_run_id

WorkflowId = Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
#: A workflow's memo: any JSON object, shown and never indexed (`slotflow.contracts.search`).
Memo = dict[str, Any]
#: A workflow's typed search attributes, by name (`slotflow.contracts.search`).
SearchAttributes = dict[SearchAttributeName, SearchAttribute]


def _check_memo_and_attributes(memo: Memo, attributes: SearchAttributes) -> None:
    check_memo(memo)
    check_search_attributes(attributes)


def _without_empty_memo_and_attributes(dumped: dict[str, Any]) -> dict[str, Any]:
    # A start without a memo or search attributes serialises as it did before they existed, so
    # its bytes (and a signed command's canonical form) do not change with the release.
    for name in ("memo", "search_attributes"):
        if dumped.get(name) == {}:
            dumped.pop(name)
    return dumped


def _without_unscoped_run(dumped: dict[str, Any]) -> dict[str, Any]:
    # A signal, cancel or terminate for whichever run is current serialises as it did before
    # commands could name a run: its bytes (and a signed command's canonical form) do not change
    # with the release, and a consumer of the previous release still takes it.
    if dumped.get("start_command_id", "") is None:
        dumped.pop("start_command_id")
    return dumped


#: What happens to a running child workflow when its parent ends first.
ParentClosePolicy = Literal["request_cancel", "abandon"]


#: What a StartWorkflow does when its workflow id is taken (docs/orchestrator.md):
#: `reject_duplicate` refuses it whatever the other run's state; `allow_after_close` starts a new
#: run once the last one closed and refuses it while that run is open; `terminate_running` ends an
#: open run first (WorkflowFailed `WorkflowTerminated`) and starts the new one. A new run of a taken
#: id starts in the same history at the next sequence (`WorkflowStarted.reused_after`), so every
#: `{workflow_id}#{sequence}` id stays unique.
IdReusePolicy = Literal["reject_duplicate", "allow_after_close", "terminate_running"]


class StartWorkflow(Message):
    """Start `workflow_type` with `input`; a second start with the same command id is a no-op."""

    message_type = "workflow.start"
    workflow_id: WorkflowId
    workflow_type: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    input: dict[str, Any] = Field(default_factory=dict)
    id_reuse_policy: IdReusePolicy = "reject_duplicate"
    #: The whole run's deadline from its start (a durable timer); none by default.
    execution_timeout: timedelta | None = Field(default=None, gt=timedelta(0))
    #: Set when a workflow starts this one as its child: the parent and the sequence of its
    #: ChildWorkflowScheduled, where the orchestrator reports this workflow's end.
    parent_workflow_id: WorkflowId | None = None
    parent_sequence: int | None = Field(default=None, ge=1, le=INT4_MAX)
    parent_close_policy: ParentClosePolicy = "request_cancel"
    #: Shown with the workflow, never indexed (at most `MAX_MEMO_BYTES` as JSON).
    memo: Memo = Field(default_factory=dict)
    #: Indexed by the read model for `list_workflows(query=...)` (names, types and limits in
    #: `slotflow.contracts.search`).
    search_attributes: SearchAttributes = Field(default_factory=dict)

    @model_validator(mode="after")
    def _parent_named_whole(self) -> "StartWorkflow":
        if (self.parent_workflow_id is None) != (self.parent_sequence is None):
            raise ValueError("a child's start names both its parent and the parent's sequence")
        _check_memo_and_attributes(self.memo, self.search_attributes)
        return self

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_empty_memo_and_attributes(handler(self))


class SignalWorkflow(Message):
    """Deliver a named signal to a running workflow."""

    message_type = "workflow.signal"
    workflow_id: WorkflowId
    signal: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    payload: dict[str, Any] = Field(default_factory=dict)
    #: The run it is meant for: the one the StartWorkflow with this command id began (and the runs
    #: continued from it). Rejected when the id's current run is another, so a handle kept from an
    #: earlier run of a reused id never reaches a new one; None: whichever run is current.
    start_command_id: IdText | None = None

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unscoped_run(handler(self))


class CancelWorkflow(Message):
    """Ask a workflow to stop; it runs its compensations before it ends."""

    message_type = "workflow.cancel"
    workflow_id: WorkflowId
    reason: str = Field(default="", max_length=1000)
    #: The run it is meant for: the one the StartWorkflow with this command id began (and the runs
    #: continued from it). Rejected when the id's current run is another, so a handle kept from an
    #: earlier run of a reused id never reaches a new one; None: whichever run is current.
    start_command_id: IdText | None = None

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unscoped_run(handler(self))


#: The error type of the WorkflowFailed a TerminateWorkflow (or a `terminate_running` start) appends:
#: the run ended from outside its code (the read model shows it `terminated`, not `failed`).
WORKFLOW_TERMINATED = "WorkflowTerminated"


class TerminateWorkflow(Message):
    """End a workflow now, without running its code or its compensations (an operator's last resort).

    Recorded as `WorkflowFailed` with error type `WorkflowTerminated` and the reason as its message.
    """

    message_type = "workflow.terminate"
    workflow_id: WorkflowId
    reason: str = Field(default="", max_length=1000)
    #: The run it is meant for: the one the StartWorkflow with this command id began (and the runs
    #: continued from it). Rejected when the id's current run is another, so a handle kept from an
    #: earlier run of a reused id never reaches a new one; None: whichever run is current.
    start_command_id: IdText | None = None

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unscoped_run(handler(self))


class RetryActivity(Message):
    """Retry the activity scheduled at `sequence`, parked in the DLQ (`on_dead_letter="park"`).

    Accepted only while the workflow still waits on that exact activity and it is parked: the
    orchestrator records ActivityRetried and re-issues the activity's JobDue from its own history,
    and the claimer reopens the run with a fresh attempt budget. Otherwise it is rejected with the
    reason (the workflow closed, the activity finished or is running).
    """

    message_type = "workflow.retry_activity"
    workflow_id: WorkflowId
    sequence: int = Field(ge=1, le=INT4_MAX)
    reason: str = Field(default="", max_length=1000)


# -- the workflow-history topic ------------------------------------------------------------------
#
# The orchestrator appends one of these per decision or result, keyed by workflow id, and replays a
# workflow from them. Rules every producer keeps (docs/workflows-history.md has the whole contract):
#
# - `sequence` is the event's position in its workflow's history: 1 for WorkflowStarted, then +1
#   per event, gap-free. The envelope id is `history_event_id(workflow_id, sequence)`, so appending
#   the same event twice (a retry after a lost acknowledgement) collapses for every consumer.
# - Nothing follows WorkflowCompleted, WorkflowFailed or WorkflowCancelled.
# - An activity's run id is `{workflow_id}/{sequence of its ActivityScheduled}` (docs/design.md).


def history_event_id(workflow_id: str, sequence: int) -> str:
    """The envelope id of history event ``sequence`` of ``workflow_id``: `{workflow_id}#{sequence}`."""
    return f"{workflow_id}#{sequence}"


class HistoryEvent(Message):
    """Fields every workflow-history event carries."""

    workflow_id: WorkflowId
    #: Position in the workflow's history, from 1, gap-free.
    sequence: int = Field(ge=1, le=INT4_MAX)


class WorkflowStarted(HistoryEvent):
    """A run begins: sequence 1 of every history, the orchestrator accepted a StartWorkflow.

    A second StartWorkflow with the same command id appends nothing. A later run in the same
    history follows a continue-as-new (`continued_from`) or reuses the id of a closed run
    (`reused_after`, by the StartWorkflow's `id_reuse_policy`).
    """

    message_type = "workflow.started"
    workflow_type: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    input: dict[str, Any] = Field(default_factory=dict)
    #: Envelope id of the StartWorkflow command that started it.
    command_id: IdText
    #: A run continued from the previous run's WorkflowContinuedAsNew at this sequence; the new run
    #: starts right after it (same workflow id, sequences carry on, so every id stays unique).
    continued_from: int | None = Field(default=None, ge=1, le=INT4_MAX)
    #: A new run of a workflow id whose previous run ended (completed, failed, cancelled, or was
    #: terminated for this start) at this sequence; it starts right after that terminal event.
    reused_after: int | None = Field(default=None, ge=1, le=INT4_MAX)
    #: A child workflow names its parent and the parent's ChildWorkflowScheduled sequence, so the
    #: orchestrator can report the child's outcome back into the parent's history.
    parent_workflow_id: WorkflowId | None = None
    parent_sequence: int | None = Field(default=None, ge=1, le=INT4_MAX)
    #: What the parent asked to happen to this child when the parent ends first.
    parent_close_policy: ParentClosePolicy = "request_cancel"
    #: When the execution timeout of the chain of runs this start begins passes (the StartWorkflow's
    #: `execution_timeout` from the decision that appended it), if it set one. Recorded so the
    #: history alone says which execution-timeout firing counts: an orchestrator rebuilt from the
    #: topic takes it from here. Absent on continued runs (the chain's deadline is the start's)
    #: and in histories recorded before it existed.
    execution_deadline: AwareDatetime | None = None
    #: The StartWorkflow's memo and search attributes; a continued run carries its chain's on (the
    #: memo, and the search attributes as the previous run's upserts left them). Empty in
    #: histories recorded before they existed.
    memo: Memo = Field(default_factory=dict)
    search_attributes: SearchAttributes = Field(default_factory=dict)

    @model_validator(mode="after")
    def _first(self) -> "WorkflowStarted":
        if self.continued_from is not None and self.reused_after is not None:
            raise ValueError("a run either continues the previous one or reuses its closed id, not both")
        after = self.continued_from if self.continued_from is not None else self.reused_after
        if after is None and self.sequence != 1:
            raise ValueError("WorkflowStarted is sequence 1 unless it continues a run or reuses a closed id")
        if self.continued_from is not None and self.sequence != self.continued_from + 1:
            raise ValueError("a continued run starts right after its WorkflowContinuedAsNew")
        if self.reused_after is not None and self.sequence != self.reused_after + 1:
            raise ValueError("a run reusing a closed id starts right after the previous run's end")
        if (self.parent_workflow_id is None) != (self.parent_sequence is None):
            raise ValueError("a child names both its parent and the parent's sequence")
        _check_memo_and_attributes(self.memo, self.search_attributes)
        return self

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_empty_memo_and_attributes(handler(self))


class ActivityScheduled(HistoryEvent):
    """The workflow code called an activity; appended before its JobDue goes to the claimers.

    Its run id is `{workflow_id}/{sequence}`: every attempt of the activity, on any claimer, carries
    it, and the claimer's result comes back under it. A compensation is an activity too: it names
    the forward step it undoes (`compensates`, the forward step's ActivityScheduled sequence).
    """

    message_type = "workflow.activity_scheduled"
    #: The registered handler that runs the activity.
    activity: HandlerName
    run_id: IdText
    payload: dict[str, Any] = Field(default_factory=dict)
    retry: RetryPolicy = RetryPolicy()
    compensation: bool = False
    compensates: int | None = Field(default=None, ge=1, le=INT4_MAX)
    #: Schedule-to-close: past this instant no further attempt starts and the activity fails with
    #: error type `ScheduleToCloseTimeout` (the decision's time plus the code's timeout).
    schedule_to_close_deadline: AwareDatetime | None = None
    #: What its run being dead-lettered does: fail the step, or park it until a redrive.
    on_dead_letter: DeadLetterPolicy = "fail"

    @model_validator(mode="after")
    def _consistent(self) -> "ActivityScheduled":
        if self.run_id != activity_run_id(self.workflow_id, self.sequence):
            raise ValueError("run_id must be `{workflow_id}/{sequence}`")
        if self.compensation != (self.compensates is not None):
            raise ValueError("a compensation names the step it compensates, and only a compensation does")
        if self.compensates is not None and self.compensates >= self.sequence:
            raise ValueError("a compensation undoes an earlier step")
        return self


class ActivityCompleted(HistoryEvent):
    """The activity scheduled at `scheduled_sequence` returned `result` (the claimer's RunCompleted).

    On replay this result is handed back to the code instead of running the activity again.
    """

    message_type = "workflow.activity_completed"
    scheduled_sequence: int = Field(ge=1, le=INT4_MAX)
    result: Any = None


class ActivityFailed(HistoryEvent):
    """The activity scheduled at `scheduled_sequence` gave up: its error is raised in the code.

    Appended once, when the claimer stops trying: `permanent` for a non-retryable error, otherwise
    its attempts ran out. Attempts that are retried are the claimer's business, not history.
    """

    message_type = "workflow.activity_failed"
    scheduled_sequence: int = Field(ge=1, le=INT4_MAX)
    error_type: str = Field(min_length=1, max_length=400)
    message: str = Field(default="", max_length=10_000)
    permanent: bool = False


class TimerStarted(HistoryEvent):
    """The code slept: a durable timer `timer_id` (kept by the ticker) fires at `fire_at`.

    `signal` names the signal a `workflow.wait_signal(name, timeout=...)` waits for when the timer
    is that wait's timeout (the read model shows the workflow waiting on that signal, not on a
    timer); None for a sleep or another wait's timeout. Not part of what a replay matches.
    """

    message_type = "workflow.timer_started"
    timer_id: IdText
    fire_at: AwareDatetime
    signal: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)] | None = None


class WorkflowTimerFired(HistoryEvent):
    """The timer started at `started_sequence` fired (the ticker's TimerFired, recorded here)."""

    message_type = "workflow.timer_fired"
    started_sequence: int = Field(ge=1, le=INT4_MAX)
    timer_id: IdText
    fired_at: AwareDatetime


class SignalReceived(HistoryEvent):
    """A SignalWorkflow was delivered to the code at this point of its history."""

    message_type = "workflow.signal_received"
    signal: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    payload: dict[str, Any] = Field(default_factory=dict)
    command_id: IdText | None = None


class CompensationRegistered(HistoryEvent):
    """The forward step `for_step` succeeded; `activity(payload)` undoes it if the saga fails.

    Appended right after that step's ActivityCompleted, so the list of what to undo is durable
    before the workflow moves on. Compensations run in reverse order of registration.
    """

    message_type = "workflow.compensation_registered"
    #: Sequence of the forward step's ActivityScheduled.
    for_step: int = Field(ge=1, le=INT4_MAX)
    activity: HandlerName
    payload: dict[str, Any] = Field(default_factory=dict)
    retry: RetryPolicy = RetryPolicy()


class CancelRequested(HistoryEvent):
    """A CancelWorkflow reached the code; it stops and runs its compensations."""

    message_type = "workflow.cancel_requested"
    reason: str = Field(default="", max_length=1000)
    command_id: IdText | None = None


class WorkflowCompleted(HistoryEvent):
    """The code returned `result`. Terminal: nothing is appended after it."""

    message_type = "workflow.completed"
    result: Any = None


class WorkflowFailed(HistoryEvent):
    """The code raised. Terminal. `compensated`: every registered compensation ran and succeeded."""

    message_type = "workflow.failed"
    error_type: str = Field(min_length=1, max_length=400)
    message: str = Field(default="", max_length=10_000)
    compensated: bool = False


class WorkflowCancelled(HistoryEvent):
    """The workflow stopped on a cancel request. Terminal."""

    message_type = "workflow.cancelled"
    reason: str = Field(default="", max_length=1000)
    compensated: bool = False


class NonDeterminismDetected(HistoryEvent):
    """A replay went another way than the history at `at_sequence`: the workflow is stopped.

    The orchestrator appends this instead of acting on the diverging decision, so the history up to
    here stays exactly as recorded (nothing is rewritten or scheduled). It is a marker, not a
    decision: a replay skips it. The workflow stays stuck until code that matches the history is
    deployed and the orchestrator appends its next event.
    """

    message_type = "workflow.non_determinism_detected"
    at_sequence: int = Field(ge=1, le=INT4_MAX)
    #: What the history recorded at `at_sequence`, e.g. `workflow.activity_scheduled payments.charge`.
    expected: str = Field(max_length=2000)
    #: What the replayed code did instead, e.g. `activity payments.authorize`.
    got: str = Field(max_length=2000)


class MarkerRecorded(HistoryEvent):
    """A value the code must see again on replay: `workflow.now()`, `random()`, `uuid4()`, a patch.

    `kind` says which; `value` is what the first run saw (an ISO-8601 instant, a float in [0, 1),
    a UUID string). A `patch` marker (`workflow.patched` / `deprecate_patch`) names `patch_id`: new
    runs record it, replays of histories without it take the old code path. `deprecated` markers
    are skipped by code that no longer asks for the patch.
    """

    message_type = "workflow.marker_recorded"
    kind: Literal["now", "random", "uuid", "patch"]
    value: Any = None
    patch_id: str | None = Field(default=None, min_length=1, max_length=200)
    deprecated: bool = False

    @model_validator(mode="after")
    def _patch_named(self) -> "MarkerRecorded":
        if (self.kind == "patch") != (self.patch_id is not None):
            raise ValueError("a patch marker names its patch_id, and only a patch marker does")
        return self


class TimerCancelled(HistoryEvent):
    """The code stopped waiting for the timer started at `started_sequence` (a cancel, or a
    `wait_condition` that came true first); a WorkflowTimerFired for it afterwards is ignored."""

    message_type = "workflow.timer_cancelled"
    started_sequence: int = Field(ge=1, le=INT4_MAX)
    timer_id: IdText


class ChildWorkflowScheduled(HistoryEvent):
    """The code started a child workflow; the orchestrator starts it as `child_workflow_id`.

    The child's WorkflowStarted names this workflow and this sequence; its outcome comes back
    here as ChildWorkflowCompleted or ChildWorkflowFailed with `initiated_sequence` = this one.
    """

    message_type = "workflow.child_scheduled"
    child_workflow_id: WorkflowId
    workflow_type: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    input: dict[str, Any] = Field(default_factory=dict)
    parent_close_policy: ParentClosePolicy = "request_cancel"
    #: The child's memo and search attributes, as its StartWorkflow carries them (left out of the
    #: JSON while empty).
    memo: Memo = Field(default_factory=dict)
    search_attributes: SearchAttributes = Field(default_factory=dict)

    @model_validator(mode="after")
    def _limits(self) -> "ChildWorkflowScheduled":
        _check_memo_and_attributes(self.memo, self.search_attributes)
        return self

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_empty_memo_and_attributes(handler(self))


class ChildWorkflowCompleted(HistoryEvent):
    """The child started at `initiated_sequence` returned `result`."""

    message_type = "workflow.child_completed"
    initiated_sequence: int = Field(ge=1, le=INT4_MAX)
    child_workflow_id: WorkflowId
    result: Any = None


class ChildWorkflowFailed(HistoryEvent):
    """The child started at `initiated_sequence` failed, was cancelled, or could not start."""

    message_type = "workflow.child_failed"
    initiated_sequence: int = Field(ge=1, le=INT4_MAX)
    child_workflow_id: WorkflowId
    error_type: str = Field(min_length=1, max_length=400)
    message: str = Field(default="", max_length=10_000)
    cancelled: bool = False


class WorkflowContinuedAsNew(HistoryEvent):
    """The run ended with `workflow.continue_as_new(input)`: a fresh run of the same workflow id
    starts at the next sequence with a WorkflowStarted(continued_from=this sequence, input).

    It ends the run (nothing but that WorkflowStarted follows); the workflow itself goes on.
    """

    message_type = "workflow.continued_as_new"
    workflow_type: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    input: dict[str, Any] = Field(default_factory=dict)


class ActivityParked(HistoryEvent):
    """The claimers dead-lettered the run of an activity scheduled with `on_dead_letter="park"`:
    the run is parked in the DLQ with `reason`, and the step shows failed with it.

    The step stays pending: the outcome of a redrive of the parked run (ActivityCompleted, or
    ActivityParked again) is its outcome. A marker, not an input: a replay skips it, and the
    code, still awaiting the activity, sees nothing until that outcome.
    """

    message_type = "workflow.activity_parked"
    scheduled_sequence: int = Field(ge=1, le=INT4_MAX)
    #: The DLQ reason the claimer gave (`permanent_error`, `attempts_exhausted`).
    reason: str = Field(min_length=1, max_length=400)
    #: The last attempt's error.
    error_type: str = Field(min_length=1, max_length=400)
    message: str = Field(default="", max_length=10_000)


class SearchAttributesUpserted(HistoryEvent):
    """The code called `workflow.upsert_search_attributes(...)`: each named attribute is set to its
    value, or removed where the value is null; the others keep theirs.

    A decision: a replay must call it again with the same values at this point of the history.
    The read model indexes the workflow's attributes as the run's start and its upserts leave them.
    """

    message_type = "workflow.search_attributes_upserted"
    search_attributes: dict[SearchAttributeName, SearchAttribute | None] = Field(min_length=1)

    @model_validator(mode="after")
    def _limits(self) -> "SearchAttributesUpserted":
        for name in self.search_attributes:
            problem = name_problem(name)
            if problem is not None:
                raise ValueError(problem)
        check_search_attributes({k: v for k, v in self.search_attributes.items() if v is not None})
        return self


class MemoUpserted(HistoryEvent):
    """The code called `workflow.upsert_memo(...)`: each named memo field is set to its value, or
    removed where the value is null; the others keep theirs.

    A decision: a replay must call it again with the same values at this point of the history.
    The read model shows the memo as the run's start and its upserts leave it (shown, never
    searched); a continued run carries it on.
    """

    message_type = "workflow.memo_upserted"
    memo: dict[Annotated[str, Field(min_length=1, max_length=200)], Any] = Field(min_length=1)

    @model_validator(mode="after")
    def _limits(self) -> "MemoUpserted":
        check_memo(self.memo)
        return self


class ActivityRetried(HistoryEvent):
    """An operator retried the parked activity scheduled at `scheduled_sequence` (a RetryActivity
    command, or a redrive of its letter routed to the workflow): its JobDue went to the claimers
    again with redrive number `redrive`, under which the claimer reopens the dead-lettered run.

    The step is pending and no longer parked; its outcome (ActivityCompleted, or ActivityParked
    again) follows. A marker, not an input: a replay skips it.
    """

    message_type = "workflow.activity_retried"
    scheduled_sequence: int = Field(ge=1, le=INT4_MAX)
    redrive: int = Field(ge=1, le=INT4_MAX)
    #: The RetryActivity command, or the DLQ's redrive request, that asked for it.
    command_id: IdText


#: Every history event type, in the order the docs list them.
HISTORY_EVENTS: tuple[type[HistoryEvent], ...] = (
    WorkflowStarted,
    ActivityScheduled,
    ActivityCompleted,
    ActivityFailed,
    TimerStarted,
    WorkflowTimerFired,
    SignalReceived,
    CompensationRegistered,
    CancelRequested,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowCancelled,
    NonDeterminismDetected,
    MarkerRecorded,
    TimerCancelled,
    ChildWorkflowScheduled,
    ChildWorkflowCompleted,
    ChildWorkflowFailed,
    WorkflowContinuedAsNew,
    ActivityParked,
    ActivityRetried,
    SearchAttributesUpserted,
    MemoUpserted,
)


def current_memo(events: Sequence[HistoryEvent]) -> dict[str, Any]:
    """The memo of the newest run of ``events``: its WorkflowStarted's, then each MemoUpserted
    after it in order (a value sets, a null removes). Empty before any start."""
    memo: dict[str, Any] = {}
    for event in events:
        if isinstance(event, WorkflowStarted):
            memo = dict(event.memo)
        elif isinstance(event, MemoUpserted):
            memo = merged(memo, event.memo)
    return memo


def current_search_attributes(events: Sequence[HistoryEvent]) -> dict[str, SearchAttribute]:
    """The search attributes of the newest run of ``events``: its WorkflowStarted's, then each
    SearchAttributesUpserted after it in order (a value sets, a null removes). Empty before any start."""
    attributes: dict[str, SearchAttribute] = {}
    for event in events:
        if isinstance(event, WorkflowStarted):
            attributes = dict(event.search_attributes)
        elif isinstance(event, SearchAttributesUpserted):
            attributes = merged(attributes, event.search_attributes)
    return attributes


#: Events after which the orchestrator appends nothing.
TERMINAL_EVENTS: tuple[type[HistoryEvent], ...] = (WorkflowCompleted, WorkflowFailed, WorkflowCancelled)
#: Events that end a run: the terminal ones, and a continue-as-new (the next run's start follows).
RUN_ENDING_EVENTS: tuple[type[HistoryEvent], ...] = (*TERMINAL_EVENTS, WorkflowContinuedAsNew)

# -- payload references --------------------------------------------------------------------------
#
# A payload field larger than the orchestrator's threshold (64 KiB by default) travels as a
# reference `{"$slotflow_payload": "sha256:<hex>", "bytes": N}` to its compact JSON, stored once,
# content-addressed, in the payload store (slotflow.workflow.payloads). Readers that need the value
# resolve it; readers that do not (most of the read model) show the reference.

PAYLOAD_REF_KEY = "$slotflow_payload"

#: The fields of each event that may carry a payload reference instead of their value.
PAYLOAD_FIELDS: dict[type[HistoryEvent], tuple[str, ...]] = {
    WorkflowStarted: ("input",),
    ActivityScheduled: ("payload",),
    ActivityCompleted: ("result",),
    SignalReceived: ("payload",),
    CompensationRegistered: ("payload",),
    WorkflowCompleted: ("result",),
    ChildWorkflowScheduled: ("input",),
    ChildWorkflowCompleted: ("result",),
    WorkflowContinuedAsNew: ("input",),
}


def payload_ref(ref: str, size: int) -> dict[str, Any]:
    """The value that stands in for a stored payload: its content address and its size in bytes."""
    return {PAYLOAD_REF_KEY: ref, "bytes": size}


def content_ref(data: bytes) -> str:
    """The content address of ``data``: `"sha256:<64 lowercase hex digits>"` (what a reference names)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_payload_ref(value: object) -> bool:
    """Whether ``value`` is a payload reference (see `payload_ref`) rather than a payload."""
    return isinstance(value, dict) and len(value) == 2 and isinstance(value.get(PAYLOAD_REF_KEY), str)
