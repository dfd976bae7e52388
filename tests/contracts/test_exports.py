"""What other packages import from slotflow.contracts is pinned: removing a name is a breaking change."""

import slotflow.contracts

PINNED = {
    "REGISTRY", "AttemptRecord", "Backfill", "CancelActivity", "CancelTimer", "CancelWorkflow", "ClaimerAnnounced", "CommandAccepted",
    "CommandRejected", "CreateSchedule", "CronSpec", "DeadLetterFilter", "DeadLetterStatusChanged",
    "DeadLettered", "DeleteSchedule", "DiscardDeadLetters", "DstPolicy", "Envelope", "FireJobDue",
    "FireTimerFired", "IntervalSpec", "JobDue", "Message", "MessageRegistry", "MisfirePolicy",
    "OnceSpec", "OverlapPolicy", "PauseSchedule", "RedriveDeadLetters", "ResumeSchedule",
    "RetryPolicy", "RunCompleted", "RunDeadLettered", "RunFailed", "RunRetrying", "RunSkipped",
    "RunStarted", "ScheduleCreated", "ScheduleDefinition", "ScheduleDeleted", "SchedulePaused",
    "ScheduleResumed", "ScheduleSpec", "ScheduleUpdated", "SignalWorkflow", "SlotSkipped", "SlotRerun", "SlotsMarked", "SlotsRerun", "MarkSlots", "RerunSlots",
    "StartTimer", "StartWorkflow", "TerminateWorkflow", "TimerFired", "TriggerNow", "UpdateSchedule", "wrap",
    # the workflow-history topic
    "HISTORY_EVENTS", "HistoryEvent", "history_event_id", "WorkflowStarted", "ActivityScheduled",
    "ActivityCompleted", "ActivityFailed", "TimerStarted", "WorkflowTimerFired", "SignalReceived",
    "CompensationRegistered", "CancelRequested", "WorkflowCompleted", "WorkflowFailed",
    "WorkflowCancelled", "NonDeterminismDetected", "MarkerRecorded", "TimerCancelled",
    "ChildWorkflowScheduled", "ChildWorkflowCompleted", "ChildWorkflowFailed", "WorkflowContinuedAsNew",
    "SearchAttribute", "SearchAttributesUpserted", "MemoUpserted",
    # the downstream topics
    "OpenDownstream", "CloseDownstream", "ConfigureDownstream", "DownstreamChanged", "DownstreamReported",
    "DownstreamSettings",
    "ActivityParked",
    # signed commands and the keys topic
    "CommandProof", "SigningKey",
    # redrives through the owners (docs/decisions/0009)
    "ActivityRetried", "RetryActivity", "RedriveRequested", "RedriveOutcome",
}  # fmt: skip


def test_pinned_names_are_still_exported() -> None:
    missing = PINNED - set(slotflow.contracts.__all__)
    assert not missing, f"removed from slotflow.contracts: {sorted(missing)}"


def test_new_exports_are_pinned() -> None:
    unpinned = set(slotflow.contracts.__all__) - PINNED
    assert not unpinned, f"pin these new exports in this test: {sorted(unpinned)}"
