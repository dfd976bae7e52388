"""An envelope's identity is checked, never trusted: the one rule every consumer applies.

Ids are dedupe keys, so a record whose id does not follow from its own content could collapse
someone else's record (issue 24). The rule per message (a JobDue's run id and kind, a run event's
and a history event's envelope id, a dead letter's origin) is in the checks below and in
docs/claimer.md, "A run's identity is checked, not trusted"; a violation is an `InvalidPayload`
(reason `invalid_payload`) whose message says which rule.
"""

from slotflow.contracts.acceptance import ID_CONTROL
from slotflow.contracts.dlq import DeadLettered
from slotflow.contracts.envelope import Envelope, Message, fit_id
from slotflow.contracts.runs import JobDue, RunEvent
from slotflow.contracts.workflows import HistoryEvent, history_event_id
from slotflow.core.identity import NaiveDatetime, activity_run_id, job_due_event_id, run_id
from slotflow.errors import InvalidPayload

_SHOWN = 200


def _shown(text: str) -> str:
    return repr(text[:_SHOWN] + ("..." if len(text) > _SHOWN else ""))


def identity_violation(envelope: Envelope, message: Message) -> str | None:
    """Why ``envelope`` may not carry ``message`` under its id, or None when it may."""
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
        return f"run id {_shown(job.run_id)} is not {_shown(wanted)} (its job and slot)"
    if (job.kind == "retry") != (job.attempt > 1):
        return f"kind {job.kind} with attempt {job.attempt}: only a retry is past the first attempt"
    event_id = job_due_event_id(job.run_id, job.attempt)
    if envelope_id != event_id:
        return f"envelope id {_shown(envelope_id)} is not {_shown(event_id)} (run id and attempt)"
    return None


def check_identity(envelope: Envelope, message: Message) -> None:
    """Refuse ``envelope`` when its id does not follow from ``message``.

    Raises:
        InvalidPayload: the rule it breaks.
    """
    violation = identity_violation(envelope, message)
    if violation is not None:
        raise InvalidPayload(f"forged or malformed identity: {violation}")
