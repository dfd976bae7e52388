"""The commands a run's last event carries: the next run, the parent's answer, the children's fate."""

import asyncio
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from slotflow.contracts.workflows import (
    HistoryEvent,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowStarted,
)
from slotflow.workflow.commands import Command, ContinueAsNew, NotifyParent, RequestCancelWorkflow


class ClosingRun(Protocol):
    """What the closing commands read of the run that ends (`_execution.Execution` is one): a
    protocol, so this module does not import the execution that calls it (no import cycle)."""

    @property
    def started(self) -> WorkflowStarted: ...
    @property
    def workflow_id(self) -> str: ...
    @property
    def children(self) -> Mapping[int, tuple[str, str]]: ...
    @property
    def futures(self) -> Mapping[int, "asyncio.Future[Any]"]: ...


def closing_commands(execution: ClosingRun, event: HistoryEvent) -> list[Command]:
    """What to send once ``event`` (new, run-ending) is appended."""
    started = execution.started
    commands: list[Command] = []
    for sequence, (child_id, policy) in execution.children.items():
        future = execution.futures.get(sequence)
        if policy == "request_cancel" and future is not None and not future.done():
            commands.append(RequestCancelWorkflow(child_id, reason=f"parent {execution.workflow_id} closed"))
    if isinstance(event, WorkflowContinuedAsNew):
        commands.append(
            ContinueAsNew(
                workflow_id=execution.workflow_id,
                workflow_type=event.workflow_type,
                input=event.input,
                next_sequence=event.sequence + 1,
                parent_workflow_id=started.parent_workflow_id,
                parent_sequence=started.parent_sequence,
                parent_close_policy=started.parent_close_policy,
            )
        )
        return commands
    if started.parent_workflow_id is not None and started.parent_sequence is not None:
        commands.append(parent_notice(started.parent_workflow_id, started.parent_sequence, event))
    return commands


def parent_notice(parent_id: str, parent_sequence: int, event: HistoryEvent) -> NotifyParent:
    outcome: Literal["completed", "failed", "cancelled"]
    if isinstance(event, WorkflowCompleted):
        return NotifyParent(parent_id, parent_sequence, event.workflow_id, "completed", result=event.result)
    if isinstance(event, WorkflowCancelled):
        outcome, error_type, message = "cancelled", "WorkflowCancelled", event.reason
    elif isinstance(event, WorkflowFailed):
        outcome, error_type, message = "failed", event.error_type, event.message
    else:  # pragma: no cover - only run-ending events reach here
        raise TypeError(f"{type(event).__name__} does not end a run")
    return NotifyParent(
        parent_id, parent_sequence, event.workflow_id, outcome, error_type=error_type, message=message
    )
