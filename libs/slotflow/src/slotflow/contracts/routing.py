"""Where a command goes: its topic, its key, its id and its envelope (pure; `slotflow.commands` publishes).

Every side of a command topic agrees on these: the api, the CLI and the client build commands with
them, and a consumer's poison path (`slotflow.kafka.poison`) uses the route to tell a command from
an event. A command's id is its envelope id: consumers record it in their inbox, so the same
command id twice is applied once (`slotflow.commands` says more).
"""

import unicodedata
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from slotflow.contracts.acceptance import id_refusal
from slotflow.contracts.dlq import DiscardDeadLetters, RedriveDeadLetters
from slotflow.contracts.downstreams import CloseDownstream, ConfigureDownstream, OpenDownstream
from slotflow.contracts.envelope import Envelope, Message, wrap
from slotflow.contracts.schedules import (
    Backfill,
    CreateSchedule,
    DeleteSchedule,
    MarkSlots,
    PauseSchedule,
    RerunSlots,
    ResumeSchedule,
    TriggerNow,
    UpdateSchedule,
)
from slotflow.contracts.timers import CancelTimer, StartTimer
from slotflow.contracts.topics import (
    DLQ_COMMANDS,
    DOWNSTREAM_COMMANDS,
    SCHEDULE_COMMANDS,
    TIMER_COMMANDS,
    WORKFLOW_COMMANDS,
    TopicSpec,
)
from slotflow.contracts.workflows import (
    CancelWorkflow,
    RetryActivity,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
)
from slotflow.errors import PermanentError

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
