"""Inputs the orchestrator writes for itself: a child's end, for its parent's next decision.

A child and its parent may belong to different shards (different orchestrators), so the child's
decision does not touch the parent's history: it stages this input for the parent in the same
transaction that appends the child's end (the shared `inputs` table is every workflow's inbox).
It never travels on Kafka; `INPUT_MESSAGES` decodes stored inputs of every kind.
"""

from typing import Any, Literal

from pydantic import Field

from slotflow.contracts import REGISTRY, Message, MessageRegistry


class ChildOutcome(Message):
    """The child started at the parent's `parent_sequence` ended (or could not start)."""

    message_type = "orchestrator.child_outcome"
    parent_workflow_id: str
    parent_sequence: int = Field(ge=1)
    child_workflow_id: str
    outcome: Literal["completed", "failed", "cancelled"]
    result: Any = None
    error_type: str = ""
    message: str = ""


#: Every message a stored input may hold: the contract's, and the orchestrator's own.
INPUT_MESSAGES = MessageRegistry([*REGISTRY, ChildOutcome])
