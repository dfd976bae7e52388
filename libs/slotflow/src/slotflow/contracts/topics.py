"""The topic table: every Kafka topic slotflow uses, who writes it and who reads it.

This table is the single source for topic creation (devstack, services at start-up) and for the
generated ``contracts/topics.json`` and ``contracts/topics.md``.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DAY_MS = 24 * 60 * 60 * 1000
FOREVER = -1


class TopicSpec(BaseModel):
    """One Kafka topic and the rules it lives by."""

    model_config = ConfigDict(frozen=True)

    name: str
    key: str = Field(description="what the Kafka record key is; ordering holds per key")
    partitions: int = Field(ge=1)
    retention_ms: int = Field(description="-1 keeps records forever")
    cleanup_policy: Literal["delete", "compact"]
    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    purpose: str

    def config(self) -> dict[str, str]:
        """Topic-level broker configuration for creation."""
        return {"retention.ms": str(self.retention_ms), "cleanup.policy": self.cleanup_policy}


SCHEDULE_COMMANDS = TopicSpec(
    name="slotflow.schedules.commands.v1",
    key="schedule id (timer id for StartTimer/CancelTimer)",
    partitions=6,
    retention_ms=7 * DAY_MS,
    cleanup_policy="delete",
    producers=("api", "cli", "claimer", "orchestrator", "any client"),
    consumers=("ticker",),
    purpose="CreateSchedule, UpdateSchedule, Pause/Resume/Delete, TriggerNow, Backfill, StartTimer, CancelTimer",
)
SCHEDULE_EVENTS = TopicSpec(
    name="slotflow.schedules.events.v1",
    key="schedule id",
    partitions=6,
    retention_ms=FOREVER,
    cleanup_policy="delete",
    producers=("ticker",),
    consumers=("api",),
    purpose="schedule lifecycle, SlotSkipped, CommandAccepted/CommandRejected",
)
JOBS_DUE = TopicSpec(
    name="slotflow.jobs.due.v1",
    key="job id (schedule id, or workflow id for activities)",
    partitions=12,
    retention_ms=7 * DAY_MS,
    cleanup_policy="delete",
    producers=("ticker", "orchestrator"),
    consumers=("claimer", "api"),
    purpose="JobDue: one per slot and attempt; the claimer's work queue",
)
RUN_EVENTS = TopicSpec(
    name="slotflow.runs.events.v1",
    key="job id",
    partitions=12,
    retention_ms=30 * DAY_MS,
    cleanup_policy="delete",
    producers=("claimer",),
    consumers=("orchestrator", "api"),
    purpose="RunStarted, RunCompleted, RunFailed, RunRetrying, RunDeadLettered, RunSkipped",
)
TIMER_EVENTS = TopicSpec(
    name="slotflow.timers.events.v1",
    key="timer owner (workflow id)",
    partitions=6,
    retention_ms=30 * DAY_MS,
    cleanup_policy="delete",
    producers=("ticker",),
    consumers=("orchestrator", "api"),
    purpose="TimerFired for durable workflow timers",
)
WORKFLOW_COMMANDS = TopicSpec(
    name="slotflow.workflows.commands.v1",
    key="workflow id",
    partitions=6,
    retention_ms=7 * DAY_MS,
    cleanup_policy="delete",
    producers=("api", "cli", "any client"),
    consumers=("orchestrator",),
    purpose="StartWorkflow, SignalWorkflow, CancelWorkflow",
)
WORKFLOW_HISTORY = TopicSpec(
    name="slotflow.workflows.history.v1",
    key="workflow id",
    partitions=6,
    retention_ms=FOREVER,
    cleanup_policy="delete",
    producers=("orchestrator",),
    consumers=("orchestrator", "api"),
    purpose="every workflow decision and result, in order; kept forever (the ledger replay reads)",
)
DLQ_MESSAGES = TopicSpec(
    name="slotflow.dlq.messages.v1",
    key="original record key",
    partitions=3,
    retention_ms=FOREVER,
    cleanup_policy="delete",
    producers=("every consumer",),
    consumers=("dlq",),
    purpose="DeadLettered: poison messages and runs out of attempts, with reason and origin",
)
DLQ_COMMANDS = TopicSpec(
    name="slotflow.dlq.commands.v1",
    key="dead letter id",
    partitions=3,
    retention_ms=7 * DAY_MS,
    cleanup_policy="delete",
    producers=("api", "cli"),
    consumers=("dlq",),
    purpose="RedriveDeadLetters, DiscardDeadLetters",
)
DLQ_EVENTS = TopicSpec(
    name="slotflow.dlq.events.v1",
    key="dead letter id",
    partitions=3,
    retention_ms=FOREVER,
    cleanup_policy="delete",
    producers=("dlq",),
    consumers=("api",),
    purpose="DeadLetterParked, DeadLetterRedriven, DeadLetterDiscarded",
)

TOPICS: tuple[TopicSpec, ...] = (
    SCHEDULE_COMMANDS,
    SCHEDULE_EVENTS,
    JOBS_DUE,
    RUN_EVENTS,
    TIMER_EVENTS,
    WORKFLOW_COMMANDS,
    WORKFLOW_HISTORY,
    DLQ_MESSAGES,
    DLQ_COMMANDS,
    DLQ_EVENTS,
)
