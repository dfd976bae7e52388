"""An envelope's identity is checked, never trusted: the one rule every consumer applies.

Ids are dedupe keys, so a record whose id does not follow from its own content could collapse
someone else's record (issue 24). The rule per message (a JobDue's run id and kind, a run event's
and a history event's envelope id, a dead letter's origin, a timer's id) is in the checks below and
in docs/claimer.md, "A run's identity is checked, not trusted", and docs/ticker.md, "Timer ids"; a
violation is an `InvalidPayload` (reason `invalid_payload`) whose message says which rule.
"""

import re

from slotflow.contracts.acceptance import ID_CONTROL
from slotflow.contracts.dlq import (
    DeadLettered,
    RedriveOutcome,
    RedriveRequested,
    redrive_outcome_id,
    redrive_request_id,
)
from slotflow.contracts.envelope import Envelope, Message, fit_id, fit_key
from slotflow.contracts.runs import CancelActivity, JobDue, RunEvent, cancel_activity_id
from slotflow.contracts.timers import (
    DEADLINE_SUFFIX,
    EXECUTION_TIMEOUT_SUFFIX,
    RESUME_PREFIX,
    RETRY_PREFIX,
    CancelTimer,
    FireJobDue,
    StartTimer,
    deadline_timer_id,
    execution_timer_id,
    resume_timer_id,
    retry_timer_id,
    sleep_timer_id,
)
from slotflow.contracts.workflows import HistoryEvent, history_event_id
from slotflow.core.identity import NaiveDatetime, activity_run_id, job_due_event_id, rerun_number, run_id
from slotflow.errors import InvalidPayload

_SHOWN = 200
#: Message fields that envelope ids are built from (a run's, a job's, a workflow's).
_ID_FIELDS = ("run_id", "job_id", "workflow_id")


def _shown(text: str) -> str:
    return repr(text[:_SHOWN] + ("..." if len(text) > _SHOWN else ""))


def identity_violation(envelope: Envelope, message: Message) -> str | None:
    """Why ``envelope`` may not carry ``message`` under its id, or None when it may."""
    # The ids an envelope id is made of, named first: a refusal names the field the sender wrote.
    for field in _ID_FIELDS:
        value = getattr(message, field, None)
        if isinstance(value, str) and ID_CONTROL.search(value):
            return f"{field} {_shown(value)} holds a control character (NUL, newline, ...)"
    if ID_CONTROL.search(envelope.id):
        return f"envelope id {_shown(envelope.id)} holds a control character (NUL, newline, ...)"
    if "\x00" in envelope.key:
        return f"envelope key {_shown(envelope.key)} holds a NUL"
    if isinstance(message, JobDue):
        return job_due_violation(envelope.id, message)
    if isinstance(message, RunEvent):
        prefix = f"{message.run_id}/{message.fence_token}/"
        if not envelope.id.startswith(prefix):
            return f"{envelope.type} id {_shown(envelope.id)} is not its run's ({_shown(prefix)}...)"
        return None
    if isinstance(message, HistoryEvent):
        wanted = history_event_id(message.workflow_id, message.sequence)
        if envelope.id != wanted:
            return f"{envelope.type} id {_shown(envelope.id)} is not its position {_shown(wanted)}"
        return None
    if isinstance(message, DeadLettered):
        wanted = fit_id(f"{message.topic}:{message.partition}:{message.offset}")
        if envelope.id != wanted:
            return f"dead letter id {_shown(envelope.id)} is not its origin {_shown(wanted)}"
    if isinstance(message, RedriveRequested | RedriveOutcome):
        # A request and its answer are named by the request id, keyed by the letter they are about.
        wanted = (
            redrive_request_id(message.request_id)
            if isinstance(message, RedriveRequested)
            else redrive_outcome_id(message.request_id)
        )
        if envelope.id != wanted:
            return f"{envelope.type} id {_shown(envelope.id)} is not {_shown(wanted)}"
        if envelope.key != fit_key(message.dead_letter_id):
            return f"{envelope.type} keyed {_shown(envelope.key)}, not by its dead letter id"
        return None
    if isinstance(message, CancelActivity):
        return cancel_activity_violation(envelope, message)
    if isinstance(message, StartTimer):
        return timer_id_violation(message)
    if isinstance(message, CancelTimer):
        return cancel_timer_violation(message.timer_id)
    return None


def cancel_activity_violation(envelope: Envelope, message: CancelActivity) -> str | None:
    """Why a CancelActivity cannot be what it says it is: its run id is its workflow's activity at
    its sequence, its envelope id `{run_id}/cancel`, its key the workflow id; or None."""
    wanted = activity_run_id(message.workflow_id, message.sequence)
    if message.run_id != wanted:
        return f"run id {_shown(message.run_id)} is not {_shown(wanted)} (its workflow and sequence)"
    if envelope.id != fit_id(cancel_activity_id(wanted)):
        return f"{envelope.type} id {_shown(envelope.id)} is not {_shown(cancel_activity_id(wanted))}"
    if envelope.key != fit_key(message.workflow_id):
        return f"{envelope.type} keyed {_shown(envelope.key)}, not by its workflow id"
    return None


def job_due_violation(envelope_id: str, job: JobDue) -> str | None:
    """Why a JobDue cannot be what it says it is, or None (see the module docstring)."""
    workflow = job.workflow_id is not None
    if workflow != (job.sequence is not None):
        return "an activity's JobDue sets both workflow_id and sequence, any other JobDue neither"
    if workflow:
        wanted = activity_run_id(str(job.workflow_id), int(job.sequence or 0))
        if job.kind not in ("activity", "retry"):
            return f"a workflow activity's JobDue has kind activity or retry, not {job.kind}"
    else:
        if job.kind == "activity":
            return "kind activity needs the workflow_id and sequence the run belongs to"
        try:
            wanted = run_id(job.job_id, job.slot)
        except NaiveDatetime:
            return "the slot has no time zone"
    if job.run_id != wanted:
        # A forced re-run (an operator's RerunSlots of a completed slot) is a run of its own,
        # `{job and slot}#rerun-{n}`; whether the ticker issued re-run n is the claimer's check.
        forced = None if workflow else rerun_number(job.run_id, wanted)
        if forced is None:
            return f"run id {_shown(job.run_id)} is not {_shown(wanted)} (its job and slot)"
        if job.attempt == 1 and job.rerun != forced:
            return (
                f"run id {_shown(job.run_id)} is re-run {forced}, but the JobDue carries re-run {job.rerun}"
            )
    if (job.kind == "retry") != (job.attempt > 1):
        return f"kind {job.kind} with attempt {job.attempt}: only a retry is past the first attempt"
    if job.rerun and (workflow or job.kind != "manual" or job.redrive):
        return "a re-run's JobDue is a schedule's first attempt, kind manual, no redrive"
    event_id = job_due_event_id(job.run_id, job.attempt, job.redrive, job.rerun)
    if envelope_id != event_id:
        return f"envelope id {_shown(envelope_id)} is not {_shown(event_id)} (run id, attempt and redrive)"
    return None


def timer_id_violation(timer: StartTimer) -> str | None:
    """Why ``timer``'s id is not the one its action implies, or None (docs/ticker.md, "Timer ids").

    The ticker keeps the first StartTimer of an id, so the id must name what fires: a retry's
    JobDue is timer `retry:{run id}#{attempt}` (or `resume:...` for a held run brought forward),
    and only of a JobDue that is itself what it says (a retry, with its run's own id); a workflow's
    TimerFired is one of its own workflow's timers, at the sequence it carries.
    """
    action, timer_id = timer.on_fire, timer.timer_id
    if isinstance(action, FireJobDue):
        job = action.job
        if job.kind != "retry":
            return f"a timer fires a retry's JobDue (kind retry, attempt 2 or more), not kind {job.kind}"
        if job.redrive or job.rerun:
            return "a timer fires a retry's JobDue, never a redrive's or a re-run's re-issue"
        forged = job_due_violation(job_due_event_id(job.run_id, job.attempt), job)
        if forged is not None:
            return f"the JobDue the timer fires is not what it says: {forged}"
        wanted = (retry_timer_id(job.run_id, job.attempt), resume_timer_id(job.run_id, job.attempt))
        if timer_id not in wanted:
            return (
                f"timer id {_shown(timer_id)} does not fit its action: attempt {job.attempt} of run "
                f"{_shown(job.run_id)} is timer {_shown(wanted[0])} (or {_shown(wanted[1])})"
            )
        return None
    owner, sequence = action.owner, action.sequence
    if sequence is None:
        if timer_id == execution_timer_id(owner) or _continued_execution_timer(timer_id, owner):
            return None
        return (
            f"timer id {_shown(timer_id)} does not fit its action: a TimerFired without a sequence "
            f"for workflow {_shown(owner)} is its execution timeout, {_shown(execution_timer_id(owner))} "
            f"or {_shown(execution_timer_id(owner, 2))} with the sequence its run started at"
        )
    wanted = (sleep_timer_id(owner, sequence), deadline_timer_id(activity_run_id(owner, sequence)))
    if timer_id not in wanted:
        return (
            f"timer id {_shown(timer_id)} does not fit its action: a TimerFired for workflow "
            f"{_shown(owner)} at sequence {sequence} is its sleep {_shown(wanted[0])} or its "
            f"activity's deadline {_shown(wanted[1])}"
        )
    return None


def _continued_execution_timer(timer_id: str, owner: str) -> bool:
    """``timer_id`` is `{owner}#{n}/execution-timeout` for some run start ``n`` past the first."""
    head, tail = f"{owner}#", f"/{EXECUTION_TIMEOUT_SUFFIX}"
    if not (timer_id.startswith(head) and timer_id.endswith(tail)):
        return False
    start = timer_id[len(head) : len(timer_id) - len(tail)]
    # The round trip refuses what int() would read anyway: "+3", " 3", "03", other scripts' digits.
    return start.isdigit() and execution_timer_id(owner, int(start)) == timer_id


#: The forms of every timer id an issuer uses (see `timer_id_violation`), as patterns: a CancelTimer
#: carries only the id, so its shape is all there is to check.
_TIMER_ID_FORMS = (
    re.compile(rf"(?:{re.escape(RETRY_PREFIX)}|{re.escape(RESUME_PREFIX)}).+#[0-9]+", re.DOTALL),
    re.compile(r".+/timer/[0-9]+", re.DOTALL),
    re.compile(rf".+/[0-9]+{re.escape(DEADLINE_SUFFIX)}", re.DOTALL),
    re.compile(rf".+#(?:[0-9]+/)?{re.escape(EXECUTION_TIMEOUT_SUFFIX)}", re.DOTALL),
)


def cancel_timer_violation(timer_id: str) -> str | None:
    """Why no issuer could have started timer ``timer_id``, or None when one could."""
    if any(form.fullmatch(timer_id) for form in _TIMER_ID_FORMS):
        return None
    return (
        f"timer id {_shown(timer_id)} is none an issuer starts (retry:<run>#<attempt>, "
        "resume:<run>#<attempt>, <workflow>/timer/<sequence>, <run>#deadline, <workflow>#execution-timeout)"
    )


def check_identity(envelope: Envelope, message: Message) -> None:
    """Refuse ``envelope`` when its id does not follow from ``message``.

    Raises:
        InvalidPayload: the rule it breaks.
    """
    violation = identity_violation(envelope, message)
    if violation is not None:
        raise InvalidPayload(f"forged or malformed identity: {violation}")
