"""Every message type, grouped by what it is: the one list the registry, the command router and
each consumer's accept list are built from. A new message is added here (and to its topic's
consumers' groups) and nowhere else.
"""

from slotflow.contracts.dlq import (
    DeadLettered,
    DeadLetterStatusChanged,
    DiscardDeadLetters,
    RedriveDeadLetters,
    RedriveOutcome,
    RedriveRequested,
)
from slotflow.contracts.downstreams import (
    CloseDownstream,
    ConfigureDownstream,
    DownstreamChanged,
    DownstreamReported,
    OpenDownstream,
)
from slotflow.contracts.envelope import Message
from slotflow.contracts.keys import SigningKey
from slotflow.contracts.runs import (
    CancelActivity,
    ClaimerAnnounced,
    JobDue,
    RunCompleted,
    RunDeadLettered,
    RunFailed,
    RunRetrying,
    RunSkipped,
    RunStarted,
)
from slotflow.contracts.schedules import (
    Backfill,
    CommandAccepted,
    CommandRejected,
    CreateSchedule,
    DeleteSchedule,
    MarkSlots,
    PauseSchedule,
    RerunSlots,
    ResumeSchedule,
    ScheduleCreated,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleResumed,
    ScheduleUpdated,
    SlotSkipped,
    SlotsMarked,
    SlotsRerun,
    TriggerNow,
    UpdateSchedule,
)
from slotflow.contracts.timers import CancelTimer, StartTimer, TimerFired
from slotflow.contracts.workflows import (
    HISTORY_EVENTS,
    CancelWorkflow,
    RetryActivity,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
)

Messages = tuple[type[Message], ...]

#: Schedule commands (the ticker's, keyed by schedule id).
SCHEDULE_COMMAND_TYPES: Messages = (
    CreateSchedule,
    UpdateSchedule,
    PauseSchedule,
    ResumeSchedule,
    DeleteSchedule,
    TriggerNow,
    Backfill,
    RerunSlots,
    MarkSlots,
)
#: Durable one-shot timers (the ticker's too, on the internal timer commands topic, keyed by timer id).
TIMER_COMMAND_TYPES: Messages = (StartTimer, CancelTimer)
#: Every command the ticker consumes.
TICKER_COMMAND_TYPES: Messages = (*SCHEDULE_COMMAND_TYPES, *TIMER_COMMAND_TYPES)
#: Workflow commands (the orchestrator's, keyed by workflow id).
WORKFLOW_COMMAND_TYPES: Messages = (
    StartWorkflow,
    SignalWorkflow,
    CancelWorkflow,
    TerminateWorkflow,
    RetryActivity,
)
#: DLQ commands (the dlq service's).
DLQ_COMMAND_TYPES: Messages = (RedriveDeadLetters, DiscardDeadLetters)
#: Downstream commands (the claimers', keyed by downstream name).
DOWNSTREAM_COMMAND_TYPES: Messages = (OpenDownstream, CloseDownstream, ConfigureDownstream)
COMMAND_TYPES: Messages = (
    *TICKER_COMMAND_TYPES,
    *WORKFLOW_COMMAND_TYPES,
    *DLQ_COMMAND_TYPES,
    *DOWNSTREAM_COMMAND_TYPES,
)

#: Run events (the claimer's).
RUN_EVENT_TYPES: Messages = (RunStarted, RunCompleted, RunFailed, RunRetrying, RunDeadLettered, RunSkipped)
#: Activity cancel requests (the orchestrator's, on the internal activities.cancels topic).
ACTIVITY_CANCEL_TYPES: Messages = (CancelActivity,)
#: Events and facts, by their producer.
EVENT_TYPES: Messages = (
    ScheduleCreated,
    ScheduleUpdated,
    SchedulePaused,
    ScheduleResumed,
    ScheduleDeleted,
    SlotSkipped,
    SlotsRerun,
    SlotsMarked,
    CommandAccepted,
    CommandRejected,
    JobDue,
    *RUN_EVENT_TYPES,
    ClaimerAnnounced,
    DownstreamChanged,
    DownstreamReported,
    TimerFired,
    DeadLettered,
    DeadLetterStatusChanged,
    SigningKey,
    RedriveRequested,
    RedriveOutcome,
    *ACTIVITY_CANCEL_TYPES,
    *HISTORY_EVENTS,
)
#: What the DLQ topic carries: letters, and the owners' answers to redrive requests.
DLQ_MESSAGE_TYPES: Messages = (DeadLettered, RedriveOutcome)

ALL_MESSAGE_TYPES: Messages = (*COMMAND_TYPES, *EVENT_TYPES)
