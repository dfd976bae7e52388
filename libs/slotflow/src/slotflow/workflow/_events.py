"""How the runtime sees history events: inputs or decisions, what identifies a decision, and how
the non-determinism error names them."""

from collections.abc import Mapping
from typing import Any

from slotflow.contracts.search import SearchAttribute, compact, dump_search_attributes
from slotflow.contracts.workflows import (
    WORKFLOW_TERMINATED,
    ActivityCompleted,
    ActivityFailed,
    ActivityParked,
    ActivityRetried,
    ActivityScheduled,
    CancelRequested,
    ChildWorkflowCompleted,
    ChildWorkflowFailed,
    ChildWorkflowScheduled,
    CompensationRegistered,
    HistoryEvent,
    MarkerRecorded,
    MemoUpserted,
    NonDeterminismDetected,
    SearchAttributesUpserted,
    SignalReceived,
    TimerCancelled,
    TimerStarted,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowStarted,
    WorkflowTimerFired,
)
from slotflow.workflow.errors import HistoryLimitExceeded

INPUT, DECISION, IGNORED = 0, 1, 2
KIND: dict[type[HistoryEvent], int] = {
    WorkflowStarted: INPUT,
    ActivityCompleted: INPUT,
    ActivityFailed: INPUT,
    WorkflowTimerFired: INPUT,
    SignalReceived: INPUT,
    CancelRequested: INPUT,
    ChildWorkflowCompleted: INPUT,
    ChildWorkflowFailed: INPUT,
    ActivityScheduled: DECISION,
    TimerStarted: DECISION,
    TimerCancelled: DECISION,
    CompensationRegistered: DECISION,
    MarkerRecorded: DECISION,
    ChildWorkflowScheduled: DECISION,
    WorkflowCompleted: DECISION,
    WorkflowFailed: DECISION,
    WorkflowCancelled: DECISION,
    WorkflowContinuedAsNew: DECISION,
    SearchAttributesUpserted: DECISION,
    MemoUpserted: DECISION,
    NonDeterminismDetected: IGNORED,
    # Markers for operators: the code is still awaiting the activity (on_dead_letter="park"), and
    # an operator retried it; its outcome is what the code sees.
    ActivityParked: IGNORED,
    ActivityRetried: IGNORED,
}
#: The error type of the failure the runtime records when a run outgrows its history ceiling.
HISTORY_LIMIT_ERROR = HistoryLimitExceeded.__name__
#: Failures recorded for a run from outside its code (the ceiling, an operator's TerminateWorkflow,
#: the run's execution timeout): a replay that reaches one stops there instead of reporting the code
#: as non-deterministic for not having failed.
ENDED_OUTSIDE_THE_CODE = frozenset({HISTORY_LIMIT_ERROR, WORKFLOW_TERMINATED, "WorkflowTimedOut"})
SCHEDULE_TO_CLOSE_TIMEOUT = "ScheduleToCloseTimeout"


def decision_key(event: HistoryEvent) -> Any:
    """What must be equal for the code's decision to match a recorded one (beside the type)."""
    if type(event) is ActivityScheduled:
        return (event.activity, event.compensates)
    if type(event) is CompensationRegistered:
        return (event.activity, event.for_step)
    if type(event) is MarkerRecorded:
        return (event.kind, event.patch_id)
    if type(event) is TimerCancelled:
        return event.started_sequence
    if type(event) is ChildWorkflowScheduled:
        return event.workflow_type
    if type(event) is SearchAttributesUpserted:
        return upsert_key(event.search_attributes)
    if type(event) is MemoUpserted:
        return memo_key(event.memo)
    return None


def upsert_key(updates: Mapping[str, SearchAttribute | None]) -> str:
    """What identifies an upsert for replay: its names and typed values, as compact sorted JSON."""
    return compact(dump_search_attributes(updates)).decode()


def memo_key(updates: Mapping[str, Any]) -> str:
    """What identifies a memo upsert for replay: its fields and values, as compact sorted JSON."""
    return compact(updates).decode()


def describe_event(event: HistoryEvent) -> str:
    """`workflow.activity_scheduled payments.charge`: a recorded event as the error shows it."""
    if KIND.get(type(event)) != DECISION:
        return event.message_type
    return f"{event.message_type} {describe_decision(type(event), decision_key(event))}"


def describe_decision(kind: type[HistoryEvent], key: Any) -> str:
    """`activity payments.authorize`: what the code asked for, as the error shows it."""
    if kind is ActivityScheduled:
        activity, compensates = key
        return f"activity {activity}" + (f" (compensating step {compensates})" if compensates else "")
    if kind is CompensationRegistered:
        return f"compensation {key[0]} for step {key[1]}"
    if kind is MarkerRecorded:
        return f"patch {key[1]}" if key[0] == "patch" else f"workflow.{key[0]}() marker"
    if kind is TimerStarted:
        return "timer"
    if kind is TimerCancelled:
        return f"cancel of the timer started at {key}"
    if kind is ChildWorkflowScheduled:
        return f"child workflow {key}"
    if kind is SearchAttributesUpserted:
        return f"upsert_search_attributes {key}"
    if kind is MemoUpserted:
        return f"upsert_memo {key}"
    return {
        WorkflowCompleted: "completion",
        WorkflowFailed: "failure",
        WorkflowCancelled: "cancellation",
        WorkflowContinuedAsNew: "continue-as-new",
    }.get(kind, kind.__name__)


def forced_end(event: HistoryEvent) -> bool:
    """Whether ``event`` ended the run from outside its code (see `ENDED_OUTSIDE_THE_CODE`)."""
    return type(event) is WorkflowFailed and event.error_type in ENDED_OUTSIDE_THE_CODE
