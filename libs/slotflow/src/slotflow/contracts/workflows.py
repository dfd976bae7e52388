"""Workflow commands consumed by the orchestrator."""

from typing import Annotated, Any

from pydantic import Field

from slotflow.contracts.envelope import IDENTIFIER_PATTERN, Message

WorkflowId = Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]


class StartWorkflow(Message):
    """Start `workflow_type` with `input`; a second start with the same id is a no-op."""

    message_type = "workflow.start"
    workflow_id: WorkflowId
    workflow_type: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    input: dict[str, Any] = Field(default_factory=dict)


class SignalWorkflow(Message):
    """Deliver a named signal to a running workflow."""

    message_type = "workflow.signal"
    workflow_id: WorkflowId
    signal: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    payload: dict[str, Any] = Field(default_factory=dict)


class CancelWorkflow(Message):
    """Ask a workflow to stop; it runs its compensations before it ends."""

    message_type = "workflow.cancel"
    workflow_id: WorkflowId
    reason: str = Field(default="", max_length=1000)
