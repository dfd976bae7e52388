"""What a schedule will do next, computed from its definition and state at read time. Pure.

The read model cannot store a next fire time: the ticker advances its own `next_fire_at` on every
claim without announcing it (one event per slot would double the traffic), so a stored copy goes
stale the moment its slot passes. Instead every read derives it from what the read model does
know, with the ticker's own rules: the grid of the spec after the database clock's `now`, inside
`start_at`/`end_at`, nothing while paused, the grid resuming at `resume_at` (the slots that pass
during the pause are recorded as skipped, `paused`: an automatic resume never catches up), and a one-shot finished once its slot was fired or
recorded as skipped.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from slotflow.contracts.schedules import OnceSpec, ScheduleDefinition
from slotflow.core.cronslots import Slot, iter_slots, jitter_offset
from slotflow.core.identity import run_id

Status = Literal["active", "paused", "finished", "deleted"]


@dataclass(frozen=True, slots=True)
class Outlook:
    """A schedule's status, the instant it next fires (null: never, as things stand) and the
    slots it will fire next, each already past `start_at`, before `end_at` and after any pause."""

    status: Status
    next_fire_at: datetime | None
    next_slots: list[Slot]


def fire_time(schedule_id: str, definition: ScheduleDefinition, at: datetime) -> datetime:
    """The slot plus its deterministic jitter: the same instant the ticker fires it at."""
    if not definition.jitter:
        return at
    return at + jitter_offset(run_id(schedule_id, at), definition.jitter)


def _upcoming(schedule_id: str, definition: ScheduleDefinition, *, after: datetime, count: int) -> list[Slot]:
    out: list[Slot] = []
    for slot in iter_slots(definition.spec, definition.dst, after=after, schedule_id=schedule_id):
        if definition.end_at is not None and slot.at > definition.end_at:
            break
        if definition.start_at is not None and slot.at < definition.start_at:
            continue
        out.append(slot)
        if len(out) >= count:
            break
    return out


def outlook(
    schedule_id: str,
    definition: ScheduleDefinition,
    *,
    paused: bool,
    resume_at: datetime | None,
    deleted: bool,
    once_handled: bool,
    now: datetime,
    count: int = 5,
) -> Outlook:
    """The outlook of one schedule at database time ``now``.

    ``once_handled`` says the read model holds a run or a recorded skip for a one-shot's slot.
    """
    if deleted:
        return Outlook("deleted", None, [])
    spec = definition.spec
    if isinstance(spec, OnceSpec) and once_handled:
        return Outlook("finished", None, [])
    if paused and resume_at is None:
        # Paused until someone resumes it: nothing will fire, so no slot is promised.
        return Outlook("paused", None, [])
    status: Status = "paused" if paused else "active"
    if isinstance(spec, OnceSpec) and not paused and spec.at <= now:
        # Its instant passed unhandled: still due, the ticker's next claim fires it (or records
        # it as skipped under the misfire policy). Never silently "finished".
        slot = Slot(spec.at, spec.at.isoformat())
        return Outlook(status, fire_time(schedule_id, definition, spec.at), [slot])
    # Just before `now`: a slot due this instant that the ticker has not claimed yet still fires.
    after = now - _EPSILON
    if paused and resume_at is not None and resume_at > now:
        # An automatic resume never catches up: the slots passing during the pause are recorded
        # as skipped (`paused`), so the next fire is the first slot at or after resume_at.
        after = resume_at - _EPSILON
    slots = _upcoming(schedule_id, definition, after=after, count=count)
    if not slots:
        return Outlook("finished" if not paused or resume_at is not None else "paused", None, [])
    return Outlook(status, fire_time(schedule_id, definition, slots[0].at), slots)


_EPSILON = timedelta(microseconds=1)
