"""Durable one-shot timers kept by the ticker: workflow sleeps and run retry back-offs.

A timer's id is not free text: it follows from what the timer fires, one form per issuer
(`timer_id_violation` in `slotflow.contracts.identity` holds each StartTimer to it). The ticker keeps
the first StartTimer of an id, so an id anyone may choose is an id anyone may take first, with a
different action or an earlier cancel; an id bound to its action can only be taken by a command
that fires that very action. The issuers build their ids with the functions below, the ticker
checks them with the same functions.
"""

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


#: What the claimer's timers fire: the next attempt of a run.
RETRY_PREFIX = "retry:"
#: A held run's next attempt brought forward when its downstream closes (the claimer).
RESUME_PREFIX = "resume:"
#: The end of an activity's schedule-to-close deadline timer (the orchestrator).
DEADLINE_SUFFIX = "#deadline"
#: The end of a workflow run's execution-timeout timer (the orchestrator).
EXECUTION_TIMEOUT_SUFFIX = "execution-timeout"


def retry_timer_id(run_id: str, next_attempt: int) -> str:
    """The claimer's timer that fires attempt ``next_attempt`` of ``run_id`` (a retry's back-off)."""
    return f"{RETRY_PREFIX}{run_id}#{next_attempt}"


def resume_timer_id(run_id: str, next_attempt: int) -> str:
    """The claimer's timer that brings a held run's ``next_attempt`` forward (its downstream closed)."""
    return f"{RESUME_PREFIX}{run_id}#{next_attempt}"


def sleep_timer_id(workflow_id: str, sequence: int) -> str:
    """The timer of `workflow.sleep` recorded as TimerStarted at ``sequence`` (the workflow SDK)."""
    return f"{workflow_id}/timer/{sequence}"


def deadline_timer_id(run_id: str) -> str:
    """The ticker timer that enforces an activity's schedule-to-close deadline (run `{wf}/{seq}`)."""
    return f"{run_id}{DEADLINE_SUFFIX}"


def execution_timer_id(workflow_id: str, chain_start: int = 1) -> str:
    """The ticker timer that enforces a run's execution timeout (`#` never occurs in a workflow id).

    ``chain_start`` is the sequence of the WorkflowStarted the StartWorkflow appended (runs continued
    from it share its deadline); a run reusing a closed id gets its own timer, since the first one's
    StartTimer and CancelTimer ids are taken for good at the ticker.
    """
    if chain_start == 1:
        return f"{workflow_id}#{EXECUTION_TIMEOUT_SUFFIX}"
    return f"{workflow_id}#{chain_start}/{EXECUTION_TIMEOUT_SUFFIX}"
