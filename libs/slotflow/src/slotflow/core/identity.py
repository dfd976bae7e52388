"""Run identities: a run is named by its scheduled slot, the same on every machine and retry.

Naming a run by the instant a machine picked it up would give two machines two names for one
payout; naming it by the slot makes their writes collapse into one.
"""

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


def activity_run_id(workflow_id: str, sequence: int) -> str:
    """An activity's run id: `"{workflow_id}/{history sequence}"`."""
    return f"{workflow_id}/{sequence}"


def job_due_event_id(run: str, attempt: int, redrive: int = 0) -> str:
    """The JobDue envelope id: the run id for the first attempt, suffixed for retries, and for a
    redrive's re-issue with its redrive number (a JobDue of its own, never a copy of the first)."""
    base = run if attempt == 1 else f"{run}#{attempt}"
    return base if redrive == 0 else f"{base}/redrive/{redrive}"
