"""Whether a well-formed command may apply to the current state: pure rules, one sentence each.

Schema-level problems (a bad cron, an unknown zone, a missing field, an unknown version) never get
here: the consume loop refuses them while decoding. These are the rules that need the state.
"""

from datetime import datetime

from slotflow.contracts import Backfill, ScheduleDefinition
from slotflow.contracts.schedules import CronSpec, OnceSpec
from slotflow.core.cronslots import MAX_YEARS_BETWEEN_MATCHES, SkippedSlot, Slot
from slotflow.errors import PermanentError
from slotflow_ticker.planning import backfill_dst_skips, backfill_slots, start_position
from slotflow_ticker.rows import ScheduleRow


class CommandRefused(PermanentError):
    """A command that cannot apply to the current state; the message says what to fix."""


def require_new(row: ScheduleRow | None, schedule_id: str) -> None:
    """CreateSchedule needs an id that is free (never used, or deleted)."""
    if row is not None and not row.deleted:
        raise CommandRefused(f"schedule {schedule_id} already exists; use UpdateSchedule to change it")


def require_live(row: ScheduleRow | None, schedule_id: str) -> ScheduleRow:
    """Every other schedule command needs a schedule that exists and is not deleted."""
    if row is None or row.deleted:
        raise CommandRefused(f"schedule {schedule_id} does not exist")
    return row


def require_fireable(definition: ScheduleDefinition, schedule_id: str) -> None:
    """A one-shot cannot be redefined into a window that excludes its own instant."""
    spec = definition.spec
    if isinstance(spec, OnceSpec) and (
        (definition.start_at is not None and spec.at < definition.start_at)
        or (definition.end_at is not None and spec.at > definition.end_at)
    ):
        raise CommandRefused(f"schedule {schedule_id}: the one-shot instant lies outside start_at/end_at")


def require_some_slot(definition: ScheduleDefinition, schedule_id: str, *, now: datetime) -> None:
    """A recurring schedule must have a next slot, unless its own end_at has already passed.

    `0 0 30 2 *` (30 February) matches no date, and an interval of 999,999,999 days has its next
    slot past the year 9999: both were accepted and silently never fired (issue 23). A one-shot
    whose instant passed is left to its misfire policy, and a schedule whose end_at is past has
    simply finished.
    """
    spec = definition.spec
    if isinstance(spec, OnceSpec) or (definition.end_at is not None and definition.end_at <= now):
        return
    if start_position(schedule_id, definition, after=now).next_slot is not None:
        return
    if isinstance(spec, CronSpec):
        why = (
            f"the cron expression {spec.expression!r} matches no date that exists in the next "
            f"{MAX_YEARS_BETWEEN_MATCHES} years (like 30 February)"
        )
    else:
        why = f"an interval of {spec.every} puts its next slot past the year 9999"
    if definition.start_at is not None or definition.end_at is not None:
        why += " within its start_at/end_at window"
    raise CommandRefused(f"schedule {schedule_id} can never fire: {why}")


def backfill_plan(
    command: Backfill, definition: ScheduleDefinition, *, now: datetime, cap: int | None = None
) -> list[Slot]:
    """The slots a Backfill emits: every slot of the spec in [start, end), at most max_slots (and
    at most ``cap``, the ticker's own bound, `SLOTFLOW_TICKER_MAX_BACKFILL_SLOTS`).

    Future slots are refused rather than clipped: they fire on their own when due, and firing them
    early would break "never before the slot".
    """
    if command.end > now:
        raise CommandRefused(
            f"backfill end {command.end.isoformat()} is after the current time; future slots fire on their own"
        )
    if cap is not None and command.max_slots > cap:
        # Asked for more than this ticker emits at once: the range decides, within the cap.
        slots = backfill_slots(
            command.schedule_id, definition, start=command.start, end=command.end, max_slots=cap
        )
        if slots is None:
            raise CommandRefused(
                f"backfill of schedule {command.schedule_id} covers more than {cap} slots, the most "
                "one backfill may emit here (SLOTFLOW_TICKER_MAX_BACKFILL_SLOTS); split the range"
            )
        return slots
    slots = backfill_slots(
        command.schedule_id, definition, start=command.start, end=command.end, max_slots=command.max_slots
    )
    if slots is None:
        raise CommandRefused(
            f"backfill of schedule {command.schedule_id} covers more than max_slots={command.max_slots} slots; "
            "split the range or raise max_slots"
        )
    return slots


def backfill_skips(
    command: Backfill, definition: ScheduleDefinition, *, cap: int | None = None
) -> list[SkippedSlot]:
    """The local times in [start, end) the schedule's DST policy skips (`nonexistent="skip"`).

    A backfill records each as SlotSkipped, as the claims do: a backfill across a spring-forward
    night says which wall times did not exist instead of leaving them out. Bounded like the slots
    (max_slots, and the ticker's ``cap``); more is refused, never cut.
    """
    bound = command.max_slots if cap is None else min(command.max_slots, cap)
    skips = backfill_dst_skips(
        command.schedule_id, definition, start=command.start, end=command.end, max_skips=bound
    )
    if skips is None:
        raise CommandRefused(
            f"backfill of schedule {command.schedule_id} covers more than {bound} local times that "
            "its DST policy skips; split the range"
        )
    return skips
