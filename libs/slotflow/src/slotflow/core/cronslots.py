"""Slots of a schedule: which instants it fires at, what DST does to them, what a misfire costs.

Pure code, no clock and no I/O: the ticker passes the database's `now()` and the last slot it
fired, and gets back instants in UTC. A slot is the identity of a run (`run_id(job_id, slot.at)`),
so every function here is deterministic: two tickers asking the same question get the same slots.

Cron is matched in naive local wall time (`slotflow.core._cronfields`, which sees no time zone at
all) and each wall time is then mapped to UTC by `slotflow.core._walltime`, so a DST change applies
the schedule's `DstPolicy` explicitly. A cron with `H` takes its values from the schedule id, so
every function here takes `schedule_id` (and refuses such a cron without one). See
docs/scheduling.md for the semantics with worked examples.
"""

import hashlib
import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal, Protocol
from zoneinfo import ZoneInfo

from slotflow.core._cronfields import MAX_YEARS_BETWEEN_MATCHES as MAX_YEARS_BETWEEN_MATCHES
from slotflow.core._cronfields import CronFields, parse_expression
from slotflow.core._walltime import first_change_after, local_naive, resolve, transitions_between
from slotflow.core.identity import NaiveDatetime

# What the slot functions read of a schedule's spec and policies. The schedule contracts
# (`slotflow.contracts.CronSpec`, `IntervalSpec`, `OnceSpec`, `DstPolicy`, `MisfirePolicy`) are
# these shapes; they are protocols here because core knows no message, so the contracts build on
# core (their cron grammar is `_cronfields`) without an import cycle (docs/development.md, "Layers").


class CronShape(Protocol):
    """A cron spec: the expression, matched in the wall time of ``timezone``."""

    @property
    def kind(self) -> Literal["cron"]: ...
    @property
    def expression(self) -> str: ...
    @property
    def timezone(self) -> str: ...


class IntervalShape(Protocol):
    """A fixed interval: slots at ``anchor + k * every``."""

    @property
    def kind(self) -> Literal["interval"]: ...
    @property
    def every(self) -> timedelta: ...
    @property
    def anchor(self) -> datetime: ...


class OnceShape(Protocol):
    """One slot, at ``at``."""

    @property
    def kind(self) -> Literal["once"]: ...
    @property
    def at(self) -> datetime: ...


class DstShape(Protocol):
    """Which instant(s) a repeated or nonexistent wall time means."""

    @property
    def repeated(self) -> Literal["first", "last", "both"]: ...
    @property
    def nonexistent(self) -> Literal["shift", "skip"]: ...


class MisfireShape(Protocol):
    """What happens to slots that passed unfired."""

    @property
    def policy(self) -> Literal["fire_all", "fire_once", "skip"]: ...
    @property
    def max_catch_up(self) -> int: ...
    @property
    def catch_up_window(self) -> timedelta: ...
    @property
    def grace(self) -> timedelta: ...


Spec = CronShape | IntervalShape | OnceShape
DstMark = Literal["repeated-first", "repeated-second", "shifted"]
SkipReason = Literal["misfire", "outside_catch_up_window", "dst_nonexistent", "paused"]

_SECOND = timedelta(seconds=1)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, order=True)
class Slot:
    """One firing of a schedule."""

    #: The instant it fires, aware and in UTC; the run's identity is `run_id(job_id, at)`.
    at: datetime
    #: The local wall time it stands for, ISO-8601 with the offset in force at `at`. For a
    #: shifted slot this is the nominal time that did not exist (so it does not parse back to `at`).
    local: str
    #: None, or how DST changed it: "repeated-first" / "repeated-second" (a wall time that
    #: happened twice, and which occurrence this is) or "shifted" (a wall time that never
    #: happened, moved to the first valid instant after the jump).
    dst: DstMark | None = None

    @property
    def fires_local(self) -> str:
        """The wall time it fires at, ISO-8601 with the offset in force at `at`: `local` for every
        slot but a shifted one, whose `local` is the nominal time that never happened (a preview
        showing that read "02:30 local" for a slot firing at 03:00)."""
        if self.dst != "shifted":
            return self.local
        offset = datetime.fromisoformat(self.local).utcoffset()
        if offset is None:
            return self.local
        return self.at.astimezone(timezone(offset)).isoformat()


@dataclass(frozen=True)
class SkippedSlot:
    """A slot that will not fire, and why; the ticker records each as `SlotSkipped`.

    For `dst_nonexistent`, `at` is the instant the wall time would have been shifted to (the
    transition instant), so several nominal times in one gap share it; `detail` names each one.
    """

    at: datetime
    reason: SkipReason
    detail: str = ""


@dataclass(frozen=True)
class MisfirePlan:
    """What to do with due slots that were not fired: both tuples ascending, together exactly the input."""

    fire: tuple[Slot, ...]
    skip: tuple[SkippedSlot, ...]


def _require_aware(value: datetime, name: str) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise NaiveDatetime(f"{name} {value.isoformat()} has no time zone")


# --- cron ---------------------------------------------------------------------------------------


class _Cron:
    """A cron expression walking naive wall times (no zone, so no DST surprises)."""

    __slots__ = ("_fields",)

    def __init__(self, fields: CronFields) -> None:
        self._fields = fields

    def walk(self, start: datetime, *, inclusive: bool) -> Iterator[datetime]:
        """Matches after `start` (or at it, when inclusive), ascending, until there are none.

        Matches are whole seconds, so "after start" equals "after start rounded down".
        """
        current = start.replace(microsecond=0)
        if inclusive and start.microsecond == 0:
            current -= _SECOND
        next_after = self._fields.next_after
        while (found := next_after(current)) is not None:
            yield found
            current = found

    def matches(self, naive: datetime) -> bool:
        return self._fields.matches(naive)


def _cron(spec: CronShape, schedule_id: str | None) -> _Cron:
    """The expression's walker, `H` drawn from ``schedule_id``.

    Raises:
        CronNeedsScheduleId: the expression uses `H` (or `R`) and no schedule id was given.
    """
    return _Cron(parse_expression(spec.expression).fields(schedule_id))


def _label(at: datetime, zone: ZoneInfo) -> str:
    return at.astimezone(zone).isoformat()


def _start_point(zone: ZoneInfo, after: datetime, fold: int) -> tuple[datetime, bool]:
    """Where the walk for one occurrence (`fold`) must start so it yields every slot > `after`.

    For a fixed fold the map wall time -> instant is monotone, so starting at `after`'s own wall
    time is right, except inside a repeated hour when `after` is on the other pass: on the first
    pass the second-pass slots start at the repeated hour's beginning; on the second pass the
    first-pass slots are all in the past and the walk resumes where the repeated hour ends.
    """
    local = after.astimezone(zone)
    naive = local.replace(tzinfo=None)
    wall = resolve(naive, zone)
    if wall.kind != "repeated" or local.fold == fold:
        return naive, False
    if local.fold == 0:
        jump = first_change_after(zone, after, wall.second)
        return local_naive(jump, wall.after), True
    jump = first_change_after(zone, wall.first, after)
    return local_naive(jump, wall.before), True


def _fold_slots(cron: _Cron, zone: ZoneInfo, dst: DstShape, fold: int, after: datetime) -> Iterator[Slot]:
    """Slots > `after` taking the `fold` occurrence of repeated wall times, ascending."""
    start, inclusive = _start_point(zone, after, fold)
    walk = cron.walk(start, inclusive=inclusive)
    last_year = start.year
    while (naive := next(walk, None)) is not None:
        # Skipping nonexistent times can leave matches that never fire (the last Sunday of March
        # at 02:30 in Berlin); give up like the field search does, after years without a slot.
        if naive.year > last_year + MAX_YEARS_BETWEEN_MATCHES:
            return
        wall = resolve(naive, zone)
        if wall.kind != "nonexistent":
            last_year = naive.year
        if wall.kind == "unique":
            yield Slot(wall.first, _label(wall.first, zone))
        elif wall.kind == "repeated":
            at = wall.first if fold == 0 else wall.second
            yield Slot(at, _label(at, zone), "repeated-first" if fold == 0 else "repeated-second")
        else:
            landing = local_naive(wall.first, wall.after)
            if dst.nonexistent == "shift":
                # Every nominal time in the gap lands on the same instant: one slot for all of
                # them, and if the schedule also fires at the landing wall time, that real slot
                # is the one recorded (its local time is true).
                if cron.matches(landing):
                    yield Slot(wall.first, _label(wall.first, zone))
                else:
                    nominal = naive.replace(tzinfo=timezone(wall.after)).isoformat()
                    yield Slot(wall.first, nominal, "shifted")
                walk = cron.walk(landing, inclusive=False)
            else:
                walk = cron.walk(landing, inclusive=True)


def _unique_instants(slots: Iterable[Slot]) -> Iterator[Slot]:
    last: datetime | None = None
    for slot in slots:
        if slot.at != last:
            last = slot.at
            yield slot


def _cron_slots(spec: CronShape, dst: DstShape, after: datetime, schedule_id: str | None) -> Iterator[Slot]:
    zone = ZoneInfo(spec.timezone)
    cron = _cron(spec, schedule_id)
    if dst.repeated == "first":
        return _fold_slots(cron, zone, dst, 0, after)
    if dst.repeated == "last":
        return _fold_slots(cron, zone, dst, 1, after)
    both = heapq.merge(_fold_slots(cron, zone, dst, 0, after), _fold_slots(cron, zone, dst, 1, after))
    return _unique_instants(both)


# --- interval and once --------------------------------------------------------------------------


def _interval_slots(spec: IntervalShape, after: datetime) -> Iterator[Slot]:
    # Integer arithmetic on the grid: slot k is anchor + k * every, never accumulated.
    k = (after - spec.anchor) // spec.every + 1
    zone = spec.anchor.tzinfo
    while True:
        try:
            at = (spec.anchor + k * spec.every).astimezone(UTC)
        except OverflowError:
            return
        yield Slot(at, at.astimezone(zone).isoformat())
        k += 1


def _once_slots(spec: OnceShape, after: datetime) -> Iterator[Slot]:
    if spec.at > after:
        yield Slot(spec.at.astimezone(UTC), spec.at.isoformat())


# --- public -------------------------------------------------------------------------------------


def iter_slots(
    spec: Spec, dst: DstShape, *, after: datetime, schedule_id: str | None = None
) -> Iterator[Slot]:
    """Every slot strictly after `after`, ascending, lazily (an interval never ends).

    ``schedule_id`` is the schedule whose slots these are: a cron with `H` draws its values from
    it. Every caller that knows the schedule passes it, so every process computes the same slots.

    Raises:
        NaiveDatetime: `after` has no time zone.
        CronNeedsScheduleId: the cron uses `H` (or `R`) and ``schedule_id`` is None.
    """
    _require_aware(after, "after")
    if spec.kind == "cron":
        return _cron_slots(spec, dst, after, schedule_id)
    if spec.kind == "interval":
        return _interval_slots(spec, after)
    return _once_slots(spec, after)


def draws_from_schedule_id(spec: Spec) -> bool:
    """Whether the spec's slots depend on the schedule id: a cron with `H` (or `R`, read as `H`).

    Every other spec has the same slots whatever schedule it belongs to, so they can be shared.
    """
    return spec.kind == "cron" and parse_expression(spec.expression).hashed


def next_slot(spec: Spec, dst: DstShape, *, after: datetime, schedule_id: str | None = None) -> Slot | None:
    """The first slot strictly after `after`; None when the spec has no more."""
    return next(iter_slots(spec, dst, after=after, schedule_id=schedule_id), None)


def slots_between(
    spec: Spec,
    dst: DstShape,
    *,
    after: datetime,
    until: datetime,
    limit: int,
    schedule_id: str | None = None,
) -> list[Slot]:
    """Slots with `after < at <= until`, ascending, at most `limit` (the oldest ones)."""
    _require_aware(until, "until")
    if limit < 0:
        raise ValueError("limit cannot be negative")
    slots = iter_slots(spec, dst, after=after, schedule_id=schedule_id)
    within = itertools.takewhile(lambda slot: slot.at <= until, slots)
    return list(itertools.islice(within, limit))


def preview(
    spec: Spec, dst: DstShape, *, after: datetime, count: int, schedule_id: str | None = None
) -> list[Slot]:
    """The next `count` firings after `after`, with their DST marks."""
    if count < 0:
        raise ValueError("count cannot be negative")
    return list(itertools.islice(iter_slots(spec, dst, after=after, schedule_id=schedule_id), count))


def dst_skips_between(
    spec: Spec,
    dst: DstShape,
    *,
    after: datetime,
    until: datetime,
    limit: int | None = None,
    schedule_id: str | None = None,
) -> list[SkippedSlot]:
    """Nominal wall times skipped by `DstPolicy(nonexistent="skip")` whose instant is in (after, until].

    One entry per nominal time (a cron firing every 15 minutes loses four in a one-hour gap), each
    at the transition instant (see `SkippedSlot`). Empty for other policies and non-cron specs.
    """
    _require_aware(after, "after")
    _require_aware(until, "until")
    if spec.kind != "cron" or dst.nonexistent != "skip":
        return []
    zone = ZoneInfo(spec.timezone)
    cron = _cron(spec, schedule_id)
    skipped: list[SkippedSlot] = []
    for change in transitions_between(zone, after, until):
        if change.after <= change.before:
            continue
        gap_start = local_naive(change.at, change.before)
        gap_end = local_naive(change.at, change.after)
        for naive in cron.walk(gap_start, inclusive=True):
            if naive >= gap_end or (limit is not None and len(skipped) >= limit):
                break
            detail = (
                f"local time {naive.isoformat()} does not exist in {spec.timezone}: clocks jump from "
                f"{gap_start.time().isoformat()} to {gap_end.time().isoformat()} on {gap_start.date().isoformat()}"
            )
            skipped.append(SkippedSlot(change.at.astimezone(UTC), "dst_nonexistent", detail))
    return skipped


def plan_misfire(policy: MisfireShape, missed: Sequence[Slot], *, now: datetime) -> MisfirePlan:
    """Decide which due-but-unfired slots still fire.

    A slot within `policy.grace` of `now` is merely late and always fires. Older ones are missed:
    those before `now - catch_up_window` are skipped (`outside_catch_up_window`); of the rest,
    `fire_all` fires the newest `max_catch_up`, `fire_once` the newest one, `skip` none, and every
    missed slot not fired is skipped with reason `misfire`. The caps count missed slots only.

    Raises:
        NaiveDatetime: `now` has no time zone.
        ValueError: a slot is after `now` (not due) or two slots share an instant.
    """
    _require_aware(now, "now")
    ordered = sorted(missed, key=lambda slot: slot.at)
    for earlier, later in itertools.pairwise(ordered):
        if earlier.at == later.at:
            raise ValueError(f"slot {later.at.isoformat()} appears twice")
    if ordered and ordered[-1].at > now:
        raise ValueError(f"slot {ordered[-1].at.isoformat()} is not due at {now.isoformat()}")

    late_from = now - policy.grace
    window_from = now - policy.catch_up_window
    late = [slot for slot in ordered if slot.at >= late_from]
    overdue = [slot for slot in ordered if slot.at < late_from]
    too_old = [slot for slot in overdue if slot.at < window_from]
    eligible = [slot for slot in overdue if slot.at >= window_from]

    keep_count = {"fire_all": policy.max_catch_up, "fire_once": 1, "skip": 0}[policy.policy]
    cut = max(len(eligible) - keep_count, 0)
    kept, dropped = eligible[cut:], eligible[:cut]

    skip = [
        SkippedSlot(
            slot.at,
            "outside_catch_up_window",
            f"{now - slot.at} late, older than the catch-up window of {policy.catch_up_window}",
        )
        for slot in too_old
    ]
    skip += [
        SkippedSlot(slot.at, "misfire", f"{now - slot.at} late; misfire policy {policy.policy}")
        for slot in dropped
    ]
    return MisfirePlan(fire=tuple(kept + late), skip=tuple(skip))


def jitter_offset(run_id: str, max_jitter: timedelta) -> timedelta:
    """A delay in [0, max_jitter) fixed by the run id, so every ticker fires a slot at the same time.

    Uses SHA-256, not `hash()`, which is salted per process.
    """
    if max_jitter < timedelta(0):
        raise ValueError("max_jitter cannot be negative")
    span = max_jitter // _MICROSECOND
    if span == 0:
        return timedelta(0)
    draw = int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:8], "big")
    # (draw * span) >> 64 maps 64 uniform bits onto [0, span) without modulo bias.
    return (draw * span >> 64) * _MICROSECOND
