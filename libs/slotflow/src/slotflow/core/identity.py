"""Run identities: a run is named by its scheduled slot, the same on every machine and retry.

Naming a run by the instant a machine picked it up would give two machines two names for one
payout; naming it by the slot makes their writes collapse into one.
"""

import re
from datetime import UTC, datetime

from slotflow.errors import SlotflowError


class NaiveDatetime(SlotflowError):
    """A datetime without a time zone reached code that names runs; it would be ambiguous."""


def slot_label(slot: datetime) -> str:
    """The slot as UTC ISO-8601 with a `Z`, microseconds only when present.

    >>> slot_label(datetime(2026, 12, 2, 2, 0, tzinfo=UTC))
    '2026-12-02T02:00:00Z'
    """
    if slot.tzinfo is None or slot.utcoffset() is None:
        raise NaiveDatetime(f"slot {slot.isoformat()} has no time zone")
    utc = slot.astimezone(UTC)
    # Formatted by hand: strftime's %Y does not zero-pad years before 1000 on every platform.
    label = f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
    if utc.microsecond:
        label += f".{utc.microsecond:06d}"
    return label + "Z"


def run_id(job_id: str, slot: datetime) -> str:
    """`"{job_id}@{slot as UTC ISO-8601}"`: the run's idempotency key for every attempt."""
    return f"{job_id}@{slot_label(slot)}"


#: What marks a forced re-run's run id: `{job_id}@{slot}#rerun-{n}` (an operator's `RerunSlots`).
RERUN_MARK = "#rerun-"
_RERUN_SUFFIX = re.compile(r"#rerun-([1-9][0-9]{0,9})")


def rerun_run_id(job_id: str, slot: datetime, number: int) -> str:
    """A forced re-run's run id: the slot's run id and the re-run number the ticker recorded, so a
    handler keyed by run id sees the deliberate second effect as new."""
    return f"{run_id(job_id, slot)}{RERUN_MARK}{number}"


def rerun_number(run: str, slot_run: str) -> int | None:
    """The re-run number of ``run`` when it is ``slot_run`` (a slot's run id) followed by
    `#rerun-{n}` with n a positive integer written plainly (no sign, no leading zero); else None."""
    if not run.startswith(slot_run):
        return None
    match = _RERUN_SUFFIX.fullmatch(run, len(slot_run))
    return int(match.group(1)) if match is not None else None


def activity_run_id(workflow_id: str, sequence: int) -> str:
    """An activity's run id: `"{workflow_id}/{history sequence}"`."""
    return f"{workflow_id}/{sequence}"


def job_due_event_id(run: str, attempt: int, redrive: int = 0, rerun: int = 0) -> str:
    """The JobDue envelope id: the run id for the first attempt, suffixed for retries, for a
    redrive's re-issue with its redrive number and for an operator's re-run with its re-run number
    (each a JobDue of its own, never a copy of the first)."""
    base = run if attempt == 1 else f"{run}#{attempt}"
    if redrive:
        base = f"{base}/redrive/{redrive}"
    return base if rerun == 0 else f"{base}/rerun/{rerun}"
