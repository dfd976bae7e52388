"""Claim planning: which slots of one claimed schedule fire, which are recorded as skipped, and
where its grid resumes. Pure: the caller passes the database clock's `now`.

The grid position is three instants (see the schedules table): `covered_until` (every slot at or
before it is handled), `next_slot` (the first unhandled slot) and `next_fire_at` (when the row is
next due). The next position is always computed from the slot grid, never from the time a claim
ran, so a slow claim never drifts a schedule off its grid.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import NamedTuple
from zoneinfo import ZoneInfo

from slotflow.contracts.policies import MisfirePolicy
from slotflow.contracts.schedules import CronSpec, OnceSpec, ScheduleDefinition
from slotflow.core.cronslots import (
    SkippedSlot,
    Slot,
    draws_from_schedule_id,
    dst_skips_between,
    jitter_offset,
    next_slot,
    plan_misfire,
    slots_between,
)
from slotflow.core.identity import run_id
from slotflow_ticker.memo import IdentityMemo

#: Slot instants are whole microseconds, so "just before a slot" is one microsecond earlier.
EPSILON = timedelta(microseconds=1)


# The values a claim builds per row (Firing, Position, ScheduleState, ClaimPlan) are NamedTuples:
# as immutable as frozen dataclasses, but built in C, where a frozen dataclass's __init__ sets each
# field through object.__setattr__ (about twice the cost; docs/benchmarks/ticker.md), and a claim
# builds five of them for every row.


class Firing(NamedTuple):
    """A slot to emit as JobDue: its instant (the run's identity) and when it was meant to fire."""

    at: datetime
    fire_at: datetime


class Position(NamedTuple):
    """Where a schedule's grid stands; the three columns the claim advances."""

    next_slot: datetime | None
    next_fire_at: datetime | None
    covered_until: datetime


@dataclass(frozen=True, slots=True)
class PauseWindow:
    """The last pause. Its slots are paused slots: once it ended, each is recorded as skipped
    (`paused`) and never fires, unless the operator resumed with ``catch_up``; then they meet the
    misfire policy like any missed slot, and one it skips is still reported as `paused`.

    Firing them late by default surprised operators: a pause shorter than the misfire grace fired
    every paused slot at once on resume, and the overlap policy then skipped all but the oldest.
    """

    started: datetime | None = None
    ended: datetime | None = None
    reason: str = ""
    catch_up: bool = False

    def contains(self, at: datetime) -> bool:
        if self.started is None or at < self.started:
            return False
        return self.ended is None or at < self.ended

    def holds(self, at: datetime) -> bool:
        """Whether ``at`` is a paused slot to skip: inside the window, resumed without catch-up."""
        return self.ended is not None and not self.catch_up and self.contains(at)

    @property
    def detail(self) -> str:
        return f"passed while paused: {self.reason}" if self.reason else "passed while paused"


class ScheduleState(NamedTuple):
    """One schedule as the claim sees it."""

    schedule_id: str
    definition: ScheduleDefinition
    position: Position
    pause: PauseWindow = PauseWindow()


class ClaimPlan(NamedTuple):
    """What one claim does to one schedule."""

    fire: tuple[Firing, ...]
    skip: tuple[SkippedSlot, ...]
    position: Position
    #: A backlog longer than one claim's share remains due; the row stays claimable at once.
    more: bool


def fire_time(schedule_id: str, definition: ScheduleDefinition, slot_at: datetime) -> datetime:
    """The instant slot ``slot_at`` is meant to fire: the slot plus its own deterministic jitter."""
    if not definition.jitter:
        return slot_at
    return slot_at + jitter_offset(run_id(schedule_id, slot_at), definition.jitter)


def lookahead(policy: MisfirePolicy) -> int:
    """How many newer missed slots decide that an older one is skipped whatever else is missed."""
    if policy.policy == "fire_all":
        return policy.max_catch_up
    if policy.policy == "fire_once":
        return 1
    return 0


def manual_slot(schedule_id: str, definition: ScheduleDefinition, now: datetime) -> datetime:
    """The slot a manual trigger at ``now`` names: ``now`` to the whole second.

    Its run id reads `payouts@2026-12-02T11:35:12Z`, as a person would write it. Two triggers in
    one second name one run (a double click runs once). The fraction is kept only when the whole
    second is a slot of the schedule's own grid, so a trigger never shares a run id with (and is
    never swallowed by) the scheduled run of that slot.
    """
    whole = now.replace(microsecond=0)
    if whole == now:
        return now
    on_grid = next_slot(
        definition.spec, definition.dst, after=whole - timedelta(microseconds=1), schedule_id=schedule_id
    )
    return now if on_grid is not None and on_grid.at == whole else whole


def start_position(schedule_id: str, definition: ScheduleDefinition, *, after: datetime) -> Position:
    """The grid of a schedule (re)defined at ``after``: its slots strictly after that instant.

    A one-shot whose instant already passed still has its slot, so the misfire policy decides
    whether it runs late or is recorded as skipped: a one-shot is never dropped silently.
    """
    spec = definition.spec
    if isinstance(spec, OnceSpec):
        covered = min(after, spec.at - EPSILON)
    else:
        covered = after
        if definition.start_at is not None:
            covered = max(covered, definition.start_at - EPSILON)
    first = _bounded_next(schedule_id, definition, after=covered)
    return _position(schedule_id, definition, covered=covered, first=first)


def plan_due(state: ScheduleState, *, now: datetime, max_slots: int, force_skip: bool = False) -> ClaimPlan:
    """Plan a claimed schedule at database time ``now``.

    Due slots (fire time at or before ``now``) are enumerated from `next_slot`, at most
    ``max_slots`` plus the misfire policy's lookahead. When the backlog is longer than that, only
    the oldest ``max_slots`` are settled (they are skipped whatever the rest turns out to be, since
    enough newer missed slots exist) and `more` says the row is due again at once.

    ``force_skip`` settles a paused schedule's grid before its definition is replaced or deleted:
    every slot up to ``now`` (jitter ignored) is recorded as skipped with reason `paused`.
    """
    definition = state.definition
    position = state.position
    # Jitter delays a slot by up to `jitter`; widening the grace by that much keeps a slot that
    # fires on its jittered time from being mistaken for a missed one.
    grace = definition.misfire.grace + definition.jitter
    next_at = position.next_slot
    if not force_skip and next_at is not None and next_at <= now and state.pause.holds(next_at):
        # Only a passed slot: a row can be due before its next slot (a DST skip to record), and
        # a paused slot still ahead is planned when it passes.
        return _plan_paused(state, now=now, max_slots=max_slots)
    if not force_skip and position.next_slot is not None:
        single = _plan_single(state, position.next_slot, now=now, grace=grace)
        if single is not None:
            return single
    policy = definition.misfire
    if definition.jitter:
        policy = policy.model_copy(update={"grace": grace})
    limit = max_slots if force_skip else max_slots + lookahead(policy)

    def due_at(slot: Slot) -> datetime:
        return slot.at if force_skip else fire_time(state.schedule_id, definition, slot.at)

    due: list[Slot] = []
    cursor = _slot_at(definition, position.next_slot) if position.next_slot is not None else None
    while cursor is not None and len(due) < limit and due_at(cursor) <= now:
        due.append(cursor)
        cursor = _bounded_next(state.schedule_id, definition, after=cursor.at)

    if not force_skip:
        for index, slot in enumerate(due):
            if state.pause.holds(slot.at):
                # Paused slots are never the misfire policy's (unless resumed with catch-up): the
                # ones before them are planned here, and the next claim, due at once, skips them.
                due, cursor = due[:index], slot
                break

    first_unhandled = cursor
    fire: Sequence[Slot]
    skip: list[SkippedSlot]
    if force_skip:
        fire = []
        skip = [SkippedSlot(at=s.at, reason="paused", detail=state.pause.detail) for s in due]
    elif not due or due[0].at >= now - grace:
        # Nothing is older than the grace: every due slot is merely late and fires.
        fire, skip = due, []
    else:
        misfire = plan_misfire(policy, due, now=now)
        fire, skip = misfire.fire, list(misfire.skip)
        if (
            cursor is not None
            and len(due) == limit
            and due_at(cursor) <= now
            and due[-1].at < now - policy.grace
        ):
            # Every slot of due[:max_slots] has at least lookahead() newer missed slots after it,
            # so the policy skips it under any longer list as well: settle those, leave the rest.
            first_unhandled = due[max_slots] if len(due) > max_slots else cursor
            fire = [s for s in fire if s.at < first_unhandled.at]
            skip = [s for s in skip if s.at < first_unhandled.at]

    if first_unhandled is not None and first_unhandled.at <= now:
        covered = first_unhandled.at - EPSILON
    else:
        covered = now
    covered = max(covered, position.covered_until)
    skip.extend(_dst_skips(state.schedule_id, definition, after=position.covered_until, until=covered))
    skip = [_relabel_paused(s, state.pause) for s in skip]
    skip.sort(key=lambda s: s.at)

    new_position = _position(state.schedule_id, definition, covered=covered, first=first_unhandled)
    more = first_unhandled is not None and due_at(first_unhandled) <= now
    return ClaimPlan(
        fire=tuple(Firing(s.at, fire_time(state.schedule_id, definition, s.at)) for s in fire),
        skip=tuple(skip),
        position=new_position,
        more=more,
    )


def _plan_paused(state: ScheduleState, *, now: datetime, max_slots: int) -> ClaimPlan:
    """The slots of a pause resumed without catch-up: each recorded as skipped (`paused`).

    The caller checked that the next slot lies in the pause. The slots after the pause are then
    planned as usual in the same claim (one late by less than the grace still fires); a pause
    longer than ``max_slots`` slots is settled over several claims, the row staying due at once.
    """
    definition = state.definition
    pause = state.pause
    held: list[SkippedSlot] = []
    cursor = _slot_at(definition, state.position.next_slot) if state.position.next_slot is not None else None
    while cursor is not None and len(held) < max_slots and pause.holds(cursor.at) and cursor.at <= now:
        held.append(SkippedSlot(at=cursor.at, reason="paused", detail=pause.detail))
        cursor = _bounded_next(state.schedule_id, definition, after=cursor.at)
    covered = cursor.at - EPSILON if cursor is not None and cursor.at <= now else now
    covered = max(covered, state.position.covered_until)
    skip = held + _dst_skips(state.schedule_id, definition, after=state.position.covered_until, until=covered)
    skip.sort(key=lambda s: s.at)
    position = _position(state.schedule_id, definition, covered=covered, first=cursor)
    if cursor is not None and pause.holds(cursor.at) and cursor.at <= now:
        # More paused slots than one claim settles: the row is due again at once for the rest.
        return ClaimPlan((), tuple(skip), position, True)
    rest = plan_due(state._replace(position=position), now=now, max_slots=max_slots)
    return ClaimPlan(rest.fire, tuple(skip) + rest.skip, rest.position, rest.more)


def _plan_single(state: ScheduleState, at: datetime, *, now: datetime, grace: timedelta) -> ClaimPlan | None:
    """The everyday claim, planned without building lists: exactly one slot due and merely late.

    None when the case is anything else (a backlog, a missed slot, a DST skip to record); the
    general path then decides, with the same result this would have given.
    """
    definition = state.definition
    stored = state.position.next_fire_at
    records_skips = _records_dst_skips(definition)
    # Without DST skips to record, the stored due instant is this slot's fire time (computed by
    # `_position` when the grid last moved), which spares hashing the run id again.
    if stored is not None and not records_skips:
        fire_at = stored
    else:
        fire_at = fire_time(state.schedule_id, definition, at)
    if fire_at > now or at < now - grace:
        return None
    following = _bounded_next(state.schedule_id, definition, after=at)
    following_fire = fire_time(state.schedule_id, definition, following.at) if following is not None else None
    if following_fire is not None and following_fire <= now:
        return None
    covered = following.at - EPSILON if following is not None and following.at <= now else now
    covered = max(covered, state.position.covered_until)
    if records_skips and _dst_skips(
        state.schedule_id, definition, after=state.position.covered_until, until=covered
    ):
        return None
    position = _position(
        state.schedule_id, definition, covered=covered, first=following, first_fire=following_fire
    )
    return ClaimPlan((Firing(at, fire_at),), (), position, False)


def backfill_slots(
    schedule_id: str, definition: ScheduleDefinition, *, start: datetime, end: datetime, max_slots: int
) -> list[Slot] | None:
    """Every slot of the spec in [start, end), or None when there are more than ``max_slots``."""
    slots = slots_between(
        definition.spec,
        definition.dst,
        after=start - EPSILON,
        until=end - EPSILON,
        limit=max_slots + 1,
        schedule_id=schedule_id,
    )
    return None if len(slots) > max_slots else slots


def backfill_dst_skips(
    schedule_id: str, definition: ScheduleDefinition, *, start: datetime, end: datetime, max_skips: int
) -> list[SkippedSlot] | None:
    """Local times in [start, end) that `nonexistent="skip"` drops, or None when more than ``max_skips``.

    Like `backfill_slots`, the schedule's start_at/end_at do not apply: a backfill names its range.
    """
    if not _records_dst_skips(definition):
        return []
    skips = dst_skips_between(
        definition.spec,
        definition.dst,
        after=start - EPSILON,
        until=end - EPSILON,
        limit=max_skips + 1,
        schedule_id=schedule_id,
    )
    return None if len(skips) > max_skips else skips


def _position(
    schedule_id: str,
    definition: ScheduleDefinition,
    *,
    covered: datetime,
    first: Slot | None,
    first_fire: datetime | None = None,
) -> Position:
    fire_at = first_fire
    if fire_at is None and first is not None:
        fire_at = fire_time(schedule_id, definition, first.at)
    # A local time skipped by the DST policy is recorded when its instant passes, so the row is
    # due then even if the next real slot is much later.
    until = first.at if first is not None else definition.end_at
    if until is not None and _records_dst_skips(definition):
        pending = _dst_skips(schedule_id, definition, after=covered, until=until)
        if pending and (fire_at is None or pending[0].at < fire_at):
            fire_at = pending[0].at
    return Position(first.at if first is not None else None, fire_at, covered)


def _bounded_next(schedule_id: str, definition: ScheduleDefinition, *, after: datetime) -> Slot | None:
    # Schedules sharing a definition share their slots, unless its cron draws H from the id.
    slot = _NEXT_SLOTS.get(definition, (schedule_id if _hashed(definition) else "", after))
    if slot is None or not _in_window(definition, slot.at):
        return None
    return slot


def _compute_next_slot(definition: ScheduleDefinition, key: tuple[str, datetime]) -> Slot | None:
    schedule_id, after = key
    return next_slot(definition.spec, definition.dst, after=after, schedule_id=schedule_id)


#: Pure and deterministic, and schedules sharing a definition share their slots: a claim of a
#: thousand rows defined alike computes the next slot once. The key's id is "" for every cron
#: without H (and interval or one-shot), so only H schedules are computed one by one.
_NEXT_SLOTS: IdentityMemo[ScheduleDefinition, tuple[str, datetime], Slot | None] = IdentityMemo(
    _compute_next_slot, limit=65_536
)


def _hashed(definition: ScheduleDefinition) -> bool:
    return draws_from_schedule_id(definition.spec)


def _records_dst_skips(definition: ScheduleDefinition) -> bool:
    return definition.dst.nonexistent == "skip" and isinstance(definition.spec, CronSpec)


def _in_window(definition: ScheduleDefinition, at: datetime) -> bool:
    if definition.start_at is not None and at < definition.start_at:
        return False
    return definition.end_at is None or at <= definition.end_at


def _dst_skips(
    schedule_id: str, definition: ScheduleDefinition, *, after: datetime, until: datetime
) -> list[SkippedSlot]:
    spec = definition.spec
    if definition.dst.nonexistent != "skip" or not isinstance(spec, CronSpec) or until <= after:
        return []
    skips = dst_skips_between(spec, definition.dst, after=after, until=until, schedule_id=schedule_id)
    return [s for s in skips if _in_window(definition, s.at)]


def _relabel_paused(skipped: SkippedSlot, pause: PauseWindow) -> SkippedSlot:
    if skipped.reason != "misfire" or not pause.contains(skipped.at):
        return skipped
    return replace(skipped, reason="paused", detail=pause.detail)


def _slot_at(definition: ScheduleDefinition, at: datetime) -> Slot:
    # The stored next slot is already on the grid; rebuilding its Slot without re-running the cron
    # keeps a claim to one grid step per fired slot. The DST mark only matters to previews.
    return Slot(at=at, local=at.astimezone(_zone(definition)).isoformat())


def _zone(definition: ScheduleDefinition) -> ZoneInfo:
    spec = definition.spec
    return _zone_named(spec.timezone if isinstance(spec, CronSpec) else "UTC")


@lru_cache(maxsize=1024)
def _zone_named(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def utc(value: datetime) -> datetime:
    """``value`` in UTC (asyncpg hands back timestamptz in UTC already; this keeps it explicit)."""
    return value.astimezone(UTC)
