"""What one decision step returns: the new history events and the commands that act on them.

`WorkflowRuntime.replay` returns a `Decision`. The caller (the orchestrator, or
`slotflow.workflow.testing.WorkflowEnvironment`) appends `events` to the history and only then
sends `commands`: a command is the outward side of an event already recorded, so a crash between
the two is repaired by replaying (the runtime hands the same commands back for the same history;
the orchestrator resends those of events whose outcome has not arrived).

Commands are plain frozen dataclasses, not wire messages: the orchestrator turns each into its
contract message (a JobDue for the claimers, a StartTimer for the ticker, a StartWorkflow, ...).
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from slotflow.contracts.policies import RetryPolicy
from slotflow.contracts.search import SearchAttribute
from slotflow.contracts.workflows import DeadLetterPolicy, HistoryEvent, ParentClosePolicy


@dataclass(frozen=True, slots=True)
class ScheduleActivity:
    """Run handler `activity` with `payload` as run `run_id` (`{workflow_id}/{sequence}`)."""

    workflow_id: str
    #: The ActivityScheduled event's sequence.
    sequence: int
    run_id: str
    activity: str
    payload: dict[str, Any]
    retry: RetryPolicy
    #: Give up (ActivityFailed `ScheduleToCloseTimeout`) when no attempt finished by then.
    schedule_to_close_deadline: datetime | None = None
    #: A saga compensation: `compensates` is the forward step's ActivityScheduled sequence.
    compensates: int | None = None
    #: What the claimers giving up does: fail the step, or park it until a redrive.
    on_dead_letter: DeadLetterPolicy = "fail"


@dataclass(frozen=True, slots=True)
class StartTimer:
    """Start durable timer `timer_id` firing at `fire_at`; its firing comes back as WorkflowTimerFired."""

    workflow_id: str
    #: The TimerStarted event's sequence.
    sequence: int
    timer_id: str
    fire_at: datetime


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """Stop timer `timer_id` (started at `started_sequence`); a late firing is ignored anyway."""

    workflow_id: str
    timer_id: str
    started_sequence: int


@dataclass(frozen=True, slots=True)
class CancelActivity:
    """The code cancelled its wait for the activity scheduled at `sequence` before its outcome
    came: the activity's run (`run_id`) is to be cancelled, and its outcome is not awaited."""

    workflow_id: str
    sequence: int
    run_id: str
    activity: str


@dataclass(frozen=True, slots=True)
class StartChildWorkflow:
    """Start `workflow_type` as `child_workflow_id`; its WorkflowStarted names the parent."""

    parent_workflow_id: str
    #: The parent's ChildWorkflowScheduled sequence (the child's `parent_sequence`).
    sequence: int
    child_workflow_id: str
    workflow_type: str
    input: dict[str, Any]
    parent_close_policy: ParentClosePolicy
    memo: dict[str, Any] = field(default_factory=dict)
    search_attributes: dict[str, SearchAttribute] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RequestCancelWorkflow:
    """Ask workflow `workflow_id` to cancel (a child, when its parent ended first)."""

    workflow_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class ContinueAsNew:
    """Start the next run of `workflow_id` at `next_sequence` with `input` (and the same parent)."""

    workflow_id: str
    workflow_type: str
    input: dict[str, Any]
    #: Sequence of the new run's WorkflowStarted (`continued_from` = `next_sequence - 1`).
    next_sequence: int
    parent_workflow_id: str | None = None
    parent_sequence: int | None = None
    parent_close_policy: ParentClosePolicy = "request_cancel"


@dataclass(frozen=True, slots=True)
class NotifyParent:
    """A child's run ended: append ChildWorkflowCompleted / ChildWorkflowFailed to the parent."""

    parent_workflow_id: str
    #: The parent's ChildWorkflowScheduled sequence (`initiated_sequence` of the parent's event).
    parent_sequence: int
    child_workflow_id: str
    outcome: Literal["completed", "failed", "cancelled"]
    result: Any = None
    error_type: str = ""
    message: str = ""


Command = (
    ScheduleActivity
    | StartTimer
    | CancelTimer
    | CancelActivity
    | StartChildWorkflow
    | RequestCancelWorkflow
    | ContinueAsNew
    | NotifyParent
)


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one `replay`: append `events` (sequences n+1, ...), then send `commands`."""

    events: list[HistoryEvent] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    #: True once `events` end the run (completed, failed, cancelled or continued as new).
    closed: bool = False
    #: Sequences of the activities the replayed part of the run had stopped waiting on without an
    #: outcome: their CancelActivity went out with the decision that abandoned them, and a rebuilt
    #: orchestrator, which lost its record of it, asks the claimers again.
    abandoned_earlier: list[int] = field(default_factory=list)
