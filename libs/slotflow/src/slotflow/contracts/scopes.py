"""Who may issue which command: the scopes, and the one table of the scope each command needs.

Written once, read by both doors: the api's routes take their scope from it
(`slotflow_api.auth.ROUTE_SCOPES` names the command each route publishes), and every service that
consumes commands checks a signed command's key against it (`slotflow.principals.verify`). So a
`read` token cannot trigger over HTTP, and a `read` key cannot trigger over Kafka, by the same rule.

Scopes nest: `admin` implies `operate`, which implies `read`. No command needs only `read`.
"""

from collections.abc import Mapping
from typing import Literal, get_args

from slotflow.contracts.dlq import DiscardDeadLetters, RedriveDeadLetters
from slotflow.contracts.downstreams import CloseDownstream, ConfigureDownstream, OpenDownstream
from slotflow.contracts.envelope import Message
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
from slotflow.contracts.workflows import (
    CancelWorkflow,
    RetryActivity,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
)

Scope = Literal["read", "operate", "admin"]
SCOPES: tuple[Scope, ...] = get_args(Scope)
_RANK: dict[str, int] = {scope: rank for rank, scope in enumerate(SCOPES)}


def grants(held: Scope, needed: Scope) -> bool:
    """Whether a holder of ``held`` may do what needs ``needed`` (admin > operate > read)."""
    return _RANK[held] >= _RANK[needed]


#: The scope each command needs. Operating what exists (pause, resume, trigger, backfill, workflow
#: start/signal/cancel/terminate, a parked activity's retry, redrive, discard, a breaker's open and
#: close) needs `operate`;
#: defining what runs (schedules, a downstream's settings) needs `admin`. A timer's `on_fire` is a
#: JobDue or a TimerFired of the sender's choosing (any handler, any payload): the power to define
#: what runs, so `admin`; the services that set timers (the claimer's retries, the orchestrator's
#: sleeps) hold keys with that scope.
COMMAND_SCOPES: Mapping[type[Message], Scope] = {
    CreateSchedule: "admin",
    UpdateSchedule: "admin",
    DeleteSchedule: "admin",
    PauseSchedule: "operate",
    ResumeSchedule: "operate",
    TriggerNow: "operate",
    Backfill: "operate",
    RerunSlots: "operate",
    MarkSlots: "operate",
    StartTimer: "admin",
    CancelTimer: "admin",
    StartWorkflow: "operate",
    SignalWorkflow: "operate",
    CancelWorkflow: "operate",
    TerminateWorkflow: "operate",
    RetryActivity: "operate",
    RedriveDeadLetters: "operate",
    DiscardDeadLetters: "operate",
    OpenDownstream: "operate",
    CloseDownstream: "operate",
    ConfigureDownstream: "admin",
}

_BY_TYPE: dict[str, Scope] = {model.message_type: scope for model, scope in COMMAND_SCOPES.items()}


def scope_needed(command_type: str) -> Scope:
    """The scope a command of ``command_type`` (the envelope's `type`) needs; `admin` for a type
    the table does not name (closed by default, as the api's routes are)."""
    return _BY_TYPE.get(command_type, "admin")
