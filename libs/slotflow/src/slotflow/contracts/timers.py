"""Durable one-shot timers kept by the ticker: workflow sleeps and run retry back-offs."""

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from slotflow.contracts.envelope import IdText, IndexedText, Int4, Message
from slotflow.contracts.runs import JobDue


class FireJobDue(BaseModel):
    """On firing, emit this JobDue (a retry's next attempt)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: Literal["job_due"] = "job_due"
    job: JobDue


class FireTimerFired(BaseModel):
    """On firing, emit TimerFired to the owner (a workflow's `sleep`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: Literal["timer_fired"] = "timer_fired"
    owner: str = Field(min_length=1, max_length=400)
    sequence: Int4 | None = None


TimerAction = Annotated[FireJobDue | FireTimerFired, Field(discriminator="action")]


class StartTimer(Message):
    """Fire `on_fire` at `fire_at` (database clock). Idempotent on `timer_id`."""

    message_type = "timer.start"
    timer_id: IdText
    fire_at: AwareDatetime
    on_fire: TimerAction


class CancelTimer(Message):
    """Drop a pending timer; cancelling a fired or unknown timer is a no-op."""

    message_type = "timer.cancel"
    timer_id: IdText


class TimerFired(Message):
    """A durable timer reached its time."""

    message_type = "timer.fired"
    timer_id: IdText
    owner: IndexedText
    sequence: Int4 | None = None
    fire_at: AwareDatetime
    fired_at: AwareDatetime
