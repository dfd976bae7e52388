"""A hierarchical timing wheel: in-memory timers with O(1) add and cancel (Varghese & Lauck).

The ticker keeps the slots due in the next few minutes here, so firing is precise without
rescanning the schedule table every tick; the table stays the durable truth. A heap would give
O(log n) add and needs lazy deletion for cancel (a paused or edited schedule); the wheel does
both in constant time whatever the number of pending timers, as Kafka's purgatory does.

Time is counted in ticks since `start`. Level 0 has `wheel_size` buckets of one tick; level L has
buckets of `tick * wheel_size**L`, created when a deadline first needs it. A timer sits at the
level of the highest base-`wheel_size` digit in which its tick differs from the current tick, in
the bucket named by that digit. When the current tick moves, every level below the highest
changed digit has wholly expired, the buckets passed over on that level have expired, and the
one bucket the new tick lands in is spread down to lower levels. Each timer is moved at most
once per level, so expiring costs O(levels) per timer, never O(pending).

Timers of the current tick wait in a small heap, so `advance(now)` returns exactly the timers with
`deadline <= now`: never early, never late by more than the caller's own call spacing.
"""

import heapq
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from slotflow.core.identity import NaiveDatetime

K = TypeVar("K", bound=Hashable)

_MICROSECOND = timedelta(microseconds=1)
#: A timer's `level` while it waits in the current-tick heap, and once it has been cancelled.
_DUE = -1
_GONE = -2


class _Timer(Generic[K]):
    __slots__ = ("bucket", "deadline", "key", "level", "seq", "us")

    def __init__(self, key: K, deadline: datetime, us: int, seq: int) -> None:
        self.key = key
        self.deadline = deadline
        self.us = us  # microseconds since the wheel's start
        self.seq = seq  # breaks ties between equal deadlines: first added, first returned
        self.level = _DUE
        self.bucket = 0


@dataclass(frozen=True)
class WheelStats:
    """Counters of the work a wheel has done (for tests, benchmarks and metrics)."""

    #: Timers added (re-adds included).
    added: int
    #: Timers removed by `cancel` or by being replaced.
    cancelled: int
    #: Timers returned by `advance`.
    expired: int
    #: Timers moved from a coarser level to a finer one.
    cascaded: int
    #: Non-empty buckets emptied or split by `advance`.
    buckets_visited: int
    #: Digit comparisons made to place timers (at most the number of levels per placement).
    placement_steps: int

    @property
    def operations(self) -> int:
        """Every unit of work above, summed."""
        return (
            self.added
            + self.cancelled
            + self.expired
            + self.cascaded
            + self.buckets_visited
            + self.placement_steps
        )


class TimingWheel(Generic[K]):
    """Timers keyed by `K`; `advance(now)` returns those whose deadline has come, in order."""

    def __init__(self, *, tick: timedelta, wheel_size: int, start: datetime) -> None:
        """
        Args:
            tick: the width of a level-0 bucket; smaller ticks cost more cascading, not precision.
            wheel_size: buckets per level (at least 2).
            start: the wheel's time origin (aware); the first `advance` may not go back before it.

        Raises:
            ValueError: `tick` is not positive or `wheel_size` is below 2.
            NaiveDatetime: `start` has no time zone.
        """
        if tick < _MICROSECOND:
            raise ValueError("tick must be at least one microsecond")
        if wheel_size < 2:
            raise ValueError("wheel_size must be at least 2")
        if start.tzinfo is None or start.utcoffset() is None:
            raise NaiveDatetime(f"start {start.isoformat()} has no time zone")
        self._tick_us = tick // _MICROSECOND
        self._size = wheel_size
        # Bits per digit when the size is a power of two (placement then needs no loop), else 0.
        self._bits = wheel_size.bit_length() - 1 if wheel_size & (wheel_size - 1) == 0 else 0
        self._every_bucket = (1 << wheel_size) - 1
        self._start = start
        self._now_us = 0
        self._current = 0  # the tick `_now_us` falls in
        self._levels: list[list[dict[K, _Timer[K]]]] = []
        self._masks: list[int] = []  # bit b set when bucket b of that level is not empty
        self._due: list[tuple[int, int, _Timer[K]]] = []  # timers whose tick <= _current
        self._timers: dict[K, _Timer[K]] = {}
        self._seq = 0
        self._added = self._cancelled = self._expired = 0
        self._cascaded = self._buckets_visited = self._placement_steps = 0

    def __len__(self) -> int:
        return len(self._timers)

    def __contains__(self, key: object) -> bool:
        return key in self._timers

    @property
    def now(self) -> datetime:
        """The latest time the wheel was advanced to (or its start)."""
        return self._start + self._now_us * _MICROSECOND

    @property
    def stats(self) -> WheelStats:
        return WheelStats(
            added=self._added,
            cancelled=self._cancelled,
            expired=self._expired,
            cascaded=self._cascaded,
            buckets_visited=self._buckets_visited,
            placement_steps=self._placement_steps,
        )

    def add(self, key: K, deadline: datetime) -> None:
        """Arm a timer; re-adding a key replaces its deadline. A past deadline fires on the next advance."""
        old = self._timers.get(key)
        if old is not None:
            self._remove(old)
        self._seq += 1
        timer = _Timer(key, deadline, (deadline - self._start) // _MICROSECOND, self._seq)
        self._timers[key] = timer
        self._added += 1
        self._place(timer)

    def cancel(self, key: K) -> bool:
        """Disarm a timer; False when there was none for this key."""
        timer = self._timers.get(key)
        if timer is None:
            return False
        self._remove(timer)
        return True

    def deadline_of(self, key: K) -> datetime | None:
        """The pending deadline for `key`, if any."""
        timer = self._timers.get(key)
        return None if timer is None else timer.deadline

    def next_deadline(self) -> datetime | None:
        """The earliest pending deadline: O(levels) plus the size of one bucket."""
        due = self._due
        while due and due[0][2].level == _GONE:
            heapq.heappop(due)
        if due:
            return due[0][2].deadline
        for level, mask in enumerate(self._masks):
            if mask:
                bucket = self._levels[level][(mask & -mask).bit_length() - 1]
                return min(bucket.values(), key=lambda timer: (timer.us, timer.seq)).deadline
        return None

    def advance(self, now: datetime) -> list[tuple[K, datetime]]:
        """Move time to `now` and return every timer with deadline <= `now`, in deadline order.

        Going backwards is ignored (time does not rewind; nothing un-expires).
        """
        now_us = (now - self._start) // _MICROSECOND
        if now_us > self._now_us:
            self._now_us = now_us
        target = self._now_us // self._tick_us
        due = self._due
        if target == self._current and not (due and due[0][0] <= self._now_us):
            return []  # the common call: nothing new is due within the current tick
        passed: list[_Timer[K]] = []
        if target > self._current:
            # Everything waiting in the heap belongs to ticks before `target`: all of it is due.
            passed.extend(timer for _, _, timer in self._due if timer.level == _DUE)
            self._due = []
            self._move_to(target, passed)
            passed.sort(key=lambda timer: (timer.us, timer.seq))
            due = self._due
        while due and (due[0][2].level == _GONE or due[0][0] <= self._now_us):
            _, _, timer = heapq.heappop(due)
            if timer.level != _GONE:
                passed.append(timer)
        for timer in passed:
            timer.level = _GONE
            del self._timers[timer.key]
        self._expired += len(passed)
        return [(timer.key, timer.deadline) for timer in passed]

    # --- internals ------------------------------------------------------------------------------

    def _place(self, timer: _Timer[K]) -> None:
        tick = timer.us // self._tick_us
        if tick <= self._current:
            timer.level = _DUE
            heapq.heappush(self._due, (timer.us, timer.seq, timer))
            return
        level, bucket, _ = self._highest_difference(tick, self._current)
        self._placement_steps += level + 1
        while level >= len(self._levels):
            self._levels.append([{} for _ in range(self._size)])
            self._masks.append(0)
        self._levels[level][bucket][timer.key] = timer
        self._masks[level] |= 1 << bucket
        timer.level = level
        timer.bucket = bucket

    def _highest_difference(self, tick: int, current: int) -> tuple[int, int, int]:
        """The highest base-`size` digit where `tick` > `current` differ: (level, their digits there)."""
        size, bits = self._size, self._bits
        if bits:
            # A power-of-two size: the digits are bit fields, found without a loop.
            level = ((tick ^ current).bit_length() - 1) // bits
            shift = level * bits
            return level, (tick >> shift) & (size - 1), (current >> shift) & (size - 1)
        level = 0
        while tick // size != current // size:
            tick //= size
            current //= size
            level += 1
        return level, tick % size, current % size

    def _remove(self, timer: _Timer[K]) -> None:
        del self._timers[timer.key]
        self._cancelled += 1
        if timer.level >= 0:
            bucket = self._levels[timer.level][timer.bucket]
            del bucket[timer.key]
            if not bucket:
                self._masks[timer.level] &= ~(1 << timer.bucket)
        # A timer in the heap is left there marked; popping skips it.
        timer.level = _GONE

    def _take(self, level: int, bucket_mask: int, taken: list[_Timer[K]]) -> None:
        """Empty the non-empty buckets of `level` selected by `bucket_mask` into `taken`."""
        buckets = self._levels[level]
        selected = self._masks[level] & bucket_mask
        self._masks[level] &= ~bucket_mask
        while selected:
            lowest = selected & -selected
            index = lowest.bit_length() - 1
            taken.extend(buckets[index].values())
            buckets[index] = {}
            selected ^= lowest
            self._buckets_visited += 1

    def _move_to(self, target: int, passed: list[_Timer[K]]) -> None:
        """Advance the current tick to `target`, collecting into `passed` the timers of earlier ticks."""
        top, new_digit, old_digit = self._highest_difference(target, self._current)
        levels = len(self._levels)
        # Below the highest changed digit, every timer shared the old prefix: all earlier than target.
        for level in range(min(top, levels)):
            self._take(level, self._every_bucket, passed)
        self._current = target
        if top >= levels:
            return
        between = ((1 << new_digit) - 1) & ~((1 << (old_digit + 1)) - 1)
        self._take(top, between, passed)
        # The bucket the target lands in mixes timers of the target tick, earlier ones and later.
        landing: list[_Timer[K]] = []
        self._take(top, 1 << new_digit, landing)
        tick_us, due = self._tick_us, self._due
        for timer in landing:
            tick = timer.us // tick_us
            if tick < target:
                passed.append(timer)
            elif tick == target:
                timer.level = _DUE
                heapq.heappush(due, (timer.us, timer.seq, timer))
            else:
                self._cascaded += 1
                self._place(timer)
