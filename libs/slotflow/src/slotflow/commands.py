"""Publish a command to the topic its type belongs to: the one helper the api, the CLI and tests share.

A command's id is its envelope id. Consumers (the ticker, the orchestrator, the dlq service) record
it in their inbox, so publishing the same command id twice applies the command once: a client that
retries after a lost acknowledgement passes the same id (HTTP `Idempotency-Key`, CLI `--command-id`).
"""

import unicodedata
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from slotflow.contracts import (
    Backfill,
    CancelTimer,
    CancelWorkflow,
    CloseDownstream,
    ConfigureDownstream,
    CreateSchedule,
    DeleteSchedule,
    DiscardDeadLetters,
    Envelope,
    MarkSlots,
    Message,
    OpenDownstream,
    PauseSchedule,
    RedriveDeadLetters,
    RerunSlots,
    ResumeSchedule,
    RetryActivity,
    SignalWorkflow,
    StartTimer,
    StartWorkflow,
    TerminateWorkflow,
    TriggerNow,
    UpdateSchedule,
    wrap,
)
from slotflow.contracts.acceptance import id_refusal
from slotflow.contracts.catalogue import COMMAND_TYPES as COMMAND_TYPES
from slotflow.contracts.catalogue import DLQ_COMMAND_TYPES as DLQ_COMMAND_TYPES
from slotflow.contracts.catalogue import DOWNSTREAM_COMMAND_TYPES as DOWNSTREAM_COMMAND_TYPES
from slotflow.contracts.catalogue import SCHEDULE_COMMAND_TYPES as SCHEDULE_COMMAND_TYPES
from slotflow.contracts.catalogue import TIMER_COMMAND_TYPES as TIMER_COMMAND_TYPES
from slotflow.contracts.catalogue import WORKFLOW_COMMAND_TYPES as WORKFLOW_COMMAND_TYPES
from slotflow.contracts.topics import (
    DLQ_COMMANDS,
    DOWNSTREAM_COMMANDS,
    SCHEDULE_COMMANDS,
    TIMER_COMMANDS,
    WORKFLOW_COMMANDS,
    TopicSpec,
)
from slotflow.errors import PermanentError
from slotflow.kafka.producer import Producer
from slotflow.principals.signing import Signer
from slotflow.settings import KafkaSettings

#: Longest command id accepted (the envelope id limit).
MAX_COMMAND_ID_LENGTH = 1000


class NotACommand(PermanentError):
    """The message is not a command slotflow knows how to route."""


class InvalidCommandId(PermanentError):
    """A command id must be 1 to 1000 printable characters."""


@dataclass(frozen=True, slots=True)
class CommandRoute:
    """Where a command goes and what it is keyed by (ordering holds per key)."""

    topic: TopicSpec
    key: str


def command_route(message: Message) -> CommandRoute:
    """The topic and record key for ``message``.

    Schedule commands are keyed by schedule id; timer commands by timer id, on the internal timer
    topic only the claimer and the orchestrator may write (both go to the ticker); workflow commands by workflow id; downstream commands by downstream name (the
    claimers); a DLQ command by its single selected id, or by the command id when it selects by
    filter (see `build_command`).

    Raises:
        NotACommand: ``message`` is an event or an unknown type.
    """
    if isinstance(
        message,
        CreateSchedule
        | UpdateSchedule
        | PauseSchedule
        | ResumeSchedule
        | DeleteSchedule
        | TriggerNow
        | Backfill
        | RerunSlots
        | MarkSlots,
    ):
        return CommandRoute(SCHEDULE_COMMANDS, message.schedule_id)
    if isinstance(message, StartTimer | CancelTimer):
        return CommandRoute(TIMER_COMMANDS, message.timer_id)
    if isinstance(
        message, StartWorkflow | SignalWorkflow | CancelWorkflow | TerminateWorkflow | RetryActivity
    ):
        return CommandRoute(WORKFLOW_COMMANDS, message.workflow_id)
    if isinstance(message, RedriveDeadLetters | DiscardDeadLetters):
        ids = message.selection.ids
        return CommandRoute(DLQ_COMMANDS, ids[0] if len(ids) == 1 else "")
    if isinstance(message, OpenDownstream | CloseDownstream | ConfigureDownstream):
        return CommandRoute(DOWNSTREAM_COMMANDS, message.downstream)
    raise NotACommand(f"{type(message).__name__} ({message.message_type}) is not a command")


def new_command_id() -> str:
    """A fresh, unguessable command id."""
    return f"cmd-{uuid.uuid4().hex}"


def check_command_id(command_id: str) -> str:
    """``command_id`` if usable as an envelope id.

    Raises:
        InvalidCommandId: empty, too long (in characters, or in UTF-8 bytes for the indexes it
            keys), or containing control characters.
    """
    if not command_id or len(command_id) > MAX_COMMAND_ID_LENGTH:
        raise InvalidCommandId(f"command id must be 1 to {MAX_COMMAND_ID_LENGTH} characters")
    if any(unicodedata.category(ch) == "Cc" for ch in command_id):
        raise InvalidCommandId("command id must not contain control characters")
    too_long = id_refusal(command_id, "command id")
    if too_long is not None:
        raise InvalidCommandId(too_long)
    return command_id


def build_command(
    message: Message,
    *,
    command_id: str | None = None,
    source: str,
    occurred_at: datetime | None = None,
    principal: str | None = None,
) -> tuple[TopicSpec, Envelope]:
    """The envelope for ``message`` (id = command id) and the topic spec it goes to.

    ``occurred_at`` is informational (when the client asked); no consumer decides time from it.
    ``principal`` names who issued the command (the api's authenticated caller); the read model
    records it beside the command, so the audit can say who paused or redrove what.

    Raises:
        NotACommand: ``message`` is not a command.
        InvalidCommandId: ``command_id`` is unusable.
    """
    # What its consumers could not store (a NUL, a value nested too deep) the message model has
    # already refused when ``message`` was built (`slotflow.contracts.acceptance`).
    route = command_route(message)
    chosen = check_command_id(command_id) if command_id is not None else new_command_id()
    envelope = wrap(
        message,
        id=chosen,
        key=route.key or chosen,
        source=source,
        occurred_at=occurred_at or datetime.now(UTC),
        principal=principal,
    )
    return route.topic, envelope


async def publish_command(
    producer: Producer,
    settings: KafkaSettings,
    message: Message,
    *,
    command_id: str | None = None,
    source: str,
    principal: str | None = None,
    signer: Signer | None = None,
    signed_at: datetime | None = None,
) -> str:
    """Publish ``message`` to its command topic and wait for the broker; return the command id.

    With ``signer`` the command is signed for its topic (this deployment's name of it): its
    principal is then the signer's, or, for the api's signer, ``principal`` (the caller the api
    authenticated). Without one it goes unsigned, which a deployment requiring signatures rejects.
    ``signed_at`` dates the signature (default: this host's clock; a service passes its database's).

    Raises:
        NotACommand: ``message`` is not a command.
        InvalidCommandId: ``command_id`` is unusable.
        TransientStorageError: Kafka did not acknowledge (retry with the same command id).
    """
    spec, envelope = build_command(message, command_id=command_id, source=source, principal=principal)
    topic = settings.topic(spec)
    if signer is not None:
        envelope = signer.sign(envelope, topic=topic, signed_at=signed_at)
    await producer.send(topic, envelope)
    return envelope.id
