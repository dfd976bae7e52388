"""Which instant(s) a local wall-clock reading means in an IANA zone.

zoneinfo answers "what offset applies" but leaves the two awkward cases implicit in `fold`: a
wall time that happens twice (clocks go back) and one that never happens (clocks go forward).
Cron slots are computed as naive wall times and mapped here, so each DST policy is an explicit
choice rather than whatever `fold=0` happens to do (for a gap, fold=0 lands *after* the jump by
the size of the gap, which is neither "the next valid instant" nor "skip").
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class WallTime:
    """The instants one naive local time stands for.

    `unique`: `first` is the instant (and `second` equals it). `repeated` (clocks went back):
    `first` is the earlier occurrence, `second` the later. `nonexistent` (clocks jumped over it):
    `first` and `second` are both the transition instant, the first valid instant after the gap.
    """

    kind: Literal["unique", "repeated", "nonexistent"]
    first: datetime
    second: datetime
    #: Offset in force before the transition (equal to `after` for unique times).
    before: timedelta
    #: Offset in force after the transition.
    after: timedelta


def offset_at(zone: ZoneInfo, instant: datetime) -> timedelta:
    """The zone's UTC offset at an aware instant."""
    offset = instant.astimezone(zone).utcoffset()
    # zoneinfo always answers for an aware datetime of its own zone; None would be a broken zone.
    return offset if offset is not None else timedelta(0)


def first_change_after(zone: ZoneInfo, low: datetime, high: datetime) -> datetime:
    """The first whole-second instant in (low, high] whose offset differs from the one at `low`.

    The caller knows the offset changes in that interval (it saw different offsets at both ends).
    TZif transitions are whole seconds, so bisecting on seconds finds the exact instant. This
    assumes one transition in the interval; the intervals used here are one DST jump wide.
    """
    start = offset_at(zone, low)
    lo = (low - _EPOCH) // _SECOND
    hi = -((_EPOCH - high) // _SECOND)  # ceiling
    # Invariant: offset at lo is `start`, offset at hi differs.
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offset_at(zone, _EPOCH + mid * _SECOND) == start:
            lo = mid
        else:
            hi = mid
    return _EPOCH + hi * _SECOND


def resolve(naive: datetime, zone: ZoneInfo) -> WallTime:
    """Classify a naive local time in `zone` and give its UTC instant(s)."""
    early = naive.replace(tzinfo=zone, fold=0)
    late = naive.replace(tzinfo=zone, fold=1)
    before = early.utcoffset()
    after = late.utcoffset()
    if before is None or after is None:  # pragma: no cover - zoneinfo always has an offset
        raise ValueError(f"zone {zone.key} gives no offset for {naive.isoformat()}")
    at_before = (naive - before).replace(tzinfo=UTC)
    if before == after:
        return WallTime("unique", at_before, at_before, before, after)
    at_after = (naive - after).replace(tzinfo=UTC)
    if before > after:
        # Clocks went back: with the earlier (larger) offset the reading comes first.
        return WallTime("repeated", at_before, at_after, before, after)
    # Clocks jumped forward over this reading: the jump happened between these two instants.
    jump = first_change_after(zone, at_after, at_before)
    return WallTime("nonexistent", jump, jump, before, after)


def local_naive(instant: datetime, offset: timedelta) -> datetime:
    """The naive wall time an aware instant reads at a given offset."""
    return (instant.astimezone(UTC) + offset).replace(tzinfo=None)


@dataclass(frozen=True, slots=True)
class Transition:
    """An instant at which the zone's offset changes."""

    at: datetime
    before: timedelta
    after: timedelta


#: Sampling step when looking for transitions. Two transitions closer together than this that
#: cancel out (there and back) would be missed; no zone has had such a pair since the 1940s.
_PROBE = timedelta(hours=6)


def transitions_between(zone: ZoneInfo, low: datetime, high: datetime) -> list[Transition]:
    """Every offset change in (low, high], ascending, found by sampling and bisecting."""
    found: list[Transition] = []
    point = low
    offset = offset_at(zone, point)
    while point < high:
        probe = min(point + _PROBE, high)
        probe_offset = offset_at(zone, probe)
        # Several changes may sit in one step; peel them off one at a time.
        while probe_offset != offset:
            jump = first_change_after(zone, point, probe)
            new = offset_at(zone, jump)
            found.append(Transition(jump, offset, new))
            point, offset = jump, new
        point, offset = probe, probe_offset
    return found
