"""The topic table: every Kafka topic slotflow uses, who writes it and who reads it.

This table is the single source for topic creation (devstack, services at start-up) and for the
generated ``contracts/topics.json`` and ``contracts/topics.md``.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DAY_MS = 24 * 60 * 60 * 1000
FOREVER = -1
MIB = 1024 * 1024

#: Largest record (batch) a slotflow topic accepts. Above the broker's ~1 MiB default on purpose:
#: an oversize record from any producer lands on the topic, where its consumer refuses it by its
#: own, smaller limit (`KafkaSettings.max_message_bytes`) and parks it in the DLQ. Refused at the
#: broker instead, it would be an error in a sender's log that no operator ever sees.
MAX_RECORD_BYTES = 4 * MIB
#: The DLQ topic carries the original record base64-encoded (4/3 of its size) plus the reason and
#: origin, so it accepts more than any other topic: a record as large as MAX_RECORD_BYTES still
#: parks whole.
DLQ_MAX_RECORD_BYTES = 8 * MIB
#: The broker's own `message.max.bytes` default, for a topic that sets no limit of its own.
BROKER_DEFAULT_MAX_RECORD_BYTES = 1_048_588


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
    #: Further topic-level broker configuration (e.g. `max.message.bytes`), applied at creation.
    extra_config: dict[str, str] = Field(default_factory=dict)

    def config(self) -> dict[str, str]:
        """Topic-level broker configuration for creation."""
        return {
            "retention.ms": str(self.retention_ms),
            "cleanup.policy": self.cleanup_policy,
            **self.extra_config,
        }

    @property
    def max_record_bytes(self) -> int:
        """The largest record this topic accepts (its `max.message.bytes`)."""
        return int(self.extra_config.get("max.message.bytes", BROKER_DEFAULT_MAX_RECORD_BYTES))


SCHEDULE_COMMANDS = TopicSpec(
    name="slotflow.schedules.commands.v1",
    key="schedule id",
    partitions=6,
    retention_ms=7 * DAY_MS,
    cleanup_policy="delete",
    producers=("api", "cli", "any client"),
    consumers=("ticker", "api"),
    purpose="CreateSchedule, UpdateSchedule, Pause/Resume/Delete, TriggerNow, Backfill, RerunSlots, MarkSlots (the ticker refuses timer commands here)",
    extra_config={"max.message.bytes": str(MAX_RECORD_BYTES)},
)
#: Internal: a StartTimer fires whatever it carries (a whole JobDue, another workflow's TimerFired),
#: so timer commands travel apart from the public command topic, writable only by their two issuers
#: (the ACLs follow from `producers`; docs/security.md).
TIMER_COMMANDS = TopicSpec(
    name="slotflow.timers.commands.v1",
    key="timer id",
    partitions=6,
    retention_ms=7 * DAY_MS,
    cleanup_policy="delete",
    producers=("claimer", "orchestrator"),
    consumers=("ticker", "api"),
    purpose="StartTimer, CancelTimer: retry back-offs (claimer), sleeps, deadlines and execution timeouts (orchestrator); internal",
    extra_config={"max.message.bytes": str(MAX_RECORD_BYTES)},
)
SCHEDULE_EVENTS = TopicSpec(
    name="slotflow.schedules.events.v1",
    key="schedule id",
    partitions=6,
    retention_ms=FOREVER,
    cleanup_policy="delete",
    producers=("ticker",),
    consumers=("api",),
    purpose="schedule lifecycle, SlotSkipped, SlotsRerun/SlotsMarked, CommandAccepted/CommandRejected",
    extra_config={"max.message.bytes": str(MAX_RECORD_BYTES)},
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
    extra_config={"max.message.bytes": str(MAX_RECORD_BYTES)},
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
    extra_config={"max.message.bytes": str(MAX_RECORD_BYTES)},
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
    extra_config={"max.message.bytes": str(MAX_RECORD_BYTES)},
)
WORKFLOW_COMMANDS = TopicSpec(
    name="slotflow.workflows.commands.v1",
    key="workflow id",
    partitions=6,
    retention_ms=7 * DAY_MS,
    cleanup_policy="delete",
    producers=("api", "cli", "orchestrator", "any client"),
    consumers=("orchestrator", "api"),
    purpose="StartWorkflow, SignalWorkflow, CancelWorkflow, TerminateWorkflow (child workflows too)",
    extra_config={"max.message.bytes": str(MAX_RECORD_BYTES)},
)
WORKFLOW_HISTORY = TopicSpec(
    name="slotflow.workflows.history.v1",
    key="workflow id",
    partitions=6,
    retention_ms=FOREVER,
    cleanup_policy="delete",
    producers=("orchestrator",),
    consumers=("orchestrator", "api"),
    purpose=(
        "every workflow decision and result, in order; kept forever, never compacted (the ledger replay "
        "reads, and what `slotflow-orchestrator rebuild` restores the orchestrator from)"
    ),
    extra_config={"max.message.bytes": str(MAX_RECORD_BYTES)},
)
WORKFLOW_EVENTS = TopicSpec(
    name="slotflow.workflows.events.v1",
    key="workflow id",
    partitions=6,
    retention_ms=30 * DAY_MS,
    cleanup_policy="delete",
    producers=("orchestrator",),
    consumers=("api",),
    purpose="CommandAccepted/CommandRejected for workflow commands (read-your-writes)",
    extra_config={"max.message.bytes": str(MAX_RECORD_BYTES)},
)
DLQ_MESSAGES = TopicSpec(
    name="slotflow.dlq.messages.v1",
    key="original record key",
    partitions=3,
    retention_ms=FOREVER,
    cleanup_policy="delete",
    producers=("every consumer",),
    consumers=("dlq",),
    purpose="DeadLettered: poison messages and runs out of attempts, with reason and origin; "
    "RedriveOutcome: an owner's answer to a redrive request",
    extra_config={"max.message.bytes": str(DLQ_MAX_RECORD_BYTES)},
)
DLQ_COMMANDS = TopicSpec(
    name="slotflow.dlq.commands.v1",
    key="dead letter id",
    partitions=3,
    retention_ms=7 * DAY_MS,
    cleanup_policy="delete",
    producers=("api", "cli"),
    consumers=("dlq", "api"),
    purpose="RedriveDeadLetters, DiscardDeadLetters",
    extra_config={"max.message.bytes": str(MAX_RECORD_BYTES)},
)
DLQ_EVENTS = TopicSpec(
    name="slotflow.dlq.events.v1",
    key="dead letter id",
    partitions=3,
    retention_ms=FOREVER,
    cleanup_policy="delete",
    producers=("dlq",),
    consumers=("api",),
    purpose="DeadLetterStatusChanged (parked, redriving, redriven, redrive_failed, discarded), CommandAccepted/CommandRejected",
    extra_config={"max.message.bytes": str(MAX_RECORD_BYTES)},
)
#: Internal: a redrive is a request to the owner of a letter's record, never a republication of the
#: letter's bytes (docs/decisions/0009). Only the dlq writes it; the owners read it and answer with
#: RedriveOutcome on the DLQ topic.
DLQ_REDRIVES = TopicSpec(
    name="slotflow.dlq.redrives.v1",
    key="dead letter id",
    partitions=3,
    retention_ms=7 * DAY_MS,
    cleanup_policy="delete",
    producers=("dlq",),
    consumers=("ticker", "claimer", "orchestrator", "dlq"),
    purpose="RedriveRequested: reopen a run, retry a parked activity, re-read a poison record; internal",
)
#: Internal: the orchestrator asks the claimers to cancel an activity's run its workflow abandoned
#: (cancelled, ended, or the code cancelled the activity). Only the orchestrator writes it (the ACLs
#: follow from `producers`); the claimer acts only as the orchestrator's own record backs it.
ACTIVITY_CANCELS = TopicSpec(
    name="slotflow.activities.cancels.v1",
    key="workflow id",
    partitions=6,
    retention_ms=7 * DAY_MS,
    cleanup_policy="delete",
    producers=("orchestrator",),
    consumers=("claimer",),
    purpose="CancelActivity: stop an activity's run its workflow no longer waits on; internal",
)

CLAIMERS = TopicSpec(
    name="slotflow.claimers.v1",
    key="claimer id",
    partitions=1,
    retention_ms=FOREVER,
    # The newest announcement per claimer is all anyone needs.
    cleanup_policy="compact",
    producers=("claimer",),
    consumers=("api",),
    purpose="ClaimerAnnounced: which handlers each live claimer serves",
)

DOWNSTREAM_COMMANDS = TopicSpec(
    name="slotflow.downstreams.commands.v1",
    key="downstream name",
    partitions=3,
    retention_ms=7 * DAY_MS,
    cleanup_policy="delete",
    producers=("api", "cli", "any client"),
    consumers=("claimer", "api"),
    purpose="OpenDownstream, CloseDownstream, ConfigureDownstream: an operator's hand on a breaker",
)
DOWNSTREAM_EVENTS = TopicSpec(
    name="slotflow.downstreams.events.v1",
    key="downstream name",
    partitions=3,
    retention_ms=30 * DAY_MS,
    cleanup_policy="delete",
    producers=("claimer",),
    consumers=("api",),
    purpose="DownstreamChanged (every breaker change), DownstreamReported, CommandAccepted/CommandRejected",
)

SIGNING_KEYS = TopicSpec(
    name="slotflow.keys.v1",
    key="key id",
    partitions=1,
    retention_ms=FOREVER,
    # The newest record of a key is its whole state (registered, or revoked): compaction keeps it.
    cleanup_policy="compact",
    producers=("api",),
    consumers=("ticker", "claimer", "orchestrator", "dlq"),
    purpose="SigningKey: the principals' public keys and revocations, written by the api only",
)

TOPICS: tuple[TopicSpec, ...] = (
    SCHEDULE_COMMANDS,
    TIMER_COMMANDS,
    SCHEDULE_EVENTS,
    JOBS_DUE,
    RUN_EVENTS,
    TIMER_EVENTS,
    WORKFLOW_COMMANDS,
    WORKFLOW_HISTORY,
    WORKFLOW_EVENTS,
    DLQ_MESSAGES,
    DLQ_COMMANDS,
    DLQ_EVENTS,
    DLQ_REDRIVES,
    ACTIVITY_CANCELS,
    CLAIMERS,
    DOWNSTREAM_COMMANDS,
    DOWNSTREAM_EVENTS,
    SIGNING_KEYS,
)
