"""The timing wheel: exact expiry, cancel and replace, work independent of the pending count."""

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from slotflow.core.identity import NaiveDatetime
from slotflow.core.timing_wheel import TimingWheel

START = datetime(2026, 6, 1, tzinfo=UTC)
MS = timedelta(milliseconds=1)


def wheel(tick: timedelta = MS, size: int = 8) -> TimingWheel[str]:
    return TimingWheel(tick=tick, wheel_size=size, start=START)


# --- examples -----------------------------------------------------------------------------------


def test_timers_fire_at_their_deadline_not_before() -> None:
    w = wheel(tick=timedelta(milliseconds=10))
    w.add("a", START + timedelta(milliseconds=25))
    assert w.advance(START + timedelta(milliseconds=24, microseconds=999)) == []
    assert w.advance(START + timedelta(milliseconds=25)) == [("a", START + timedelta(milliseconds=25))]
    assert len(w) == 0
    assert w.advance(START + timedelta(seconds=1)) == []


def test_expired_timers_come_back_in_deadline_order() -> None:
    w = wheel(size=4)
    deadlines = {f"k{i}": START + timedelta(milliseconds=(i * 37) % 101) for i in range(50)}
    for key, deadline in deadlines.items():
        w.add(key, deadline)
    fired = w.advance(START + timedelta(seconds=1))
    assert [d for _, d in fired] == sorted(deadlines.values())
    assert dict(fired) == deadlines


def test_far_deadlines_cascade_through_many_levels() -> None:
    w = wheel(tick=MS, size=2)  # a level per power of two: 2**35 ms is a year
    far = START + timedelta(days=365, milliseconds=3)
    w.add("year", far)
    w.add("soon", START + 5 * MS)
    assert w.advance(START + timedelta(days=364)) == [("soon", START + 5 * MS)]
    assert w.next_deadline() == far
    assert w.advance(far - timedelta(microseconds=1)) == []
    assert w.advance(far) == [("year", far)]


def test_deadlines_in_the_past_fire_on_the_next_advance() -> None:
    w = wheel()
    w.advance(START + timedelta(seconds=10))
    w.add("late", START + timedelta(seconds=3))
    w.add("before-start", START - timedelta(days=1))
    assert w.advance(START + timedelta(seconds=10)) == [
        ("before-start", START - timedelta(days=1)),
        ("late", START + timedelta(seconds=3)),
    ]


def test_re_adding_replaces_and_cancel_disarms() -> None:
    w = wheel()
    w.add("a", START + 5 * MS)
    w.add("a", START + 50 * MS)
    w.add("b", START + 6 * MS)
    assert len(w) == 2
    assert w.deadline_of("a") == START + 50 * MS
    assert w.cancel("b") is True
    assert w.cancel("b") is False
    assert w.advance(START + 20 * MS) == []
    assert w.advance(START + 60 * MS) == [("a", START + 50 * MS)]


def test_cancel_of_a_timer_already_due_in_the_current_tick() -> None:
    w = wheel(tick=timedelta(seconds=1))
    w.add("a", START + timedelta(milliseconds=700))
    w.add("b", START + timedelta(milliseconds=800))
    assert w.advance(START + timedelta(milliseconds=600)) == []
    assert w.cancel("a")
    assert w.next_deadline() == START + timedelta(milliseconds=800)
    assert w.advance(START + timedelta(seconds=2)) == [("b", START + timedelta(milliseconds=800))]
    assert w.next_deadline() is None


def test_time_does_not_go_back() -> None:
    w = wheel()
    w.advance(START + timedelta(seconds=5))
    w.add("a", START + timedelta(seconds=4))
    assert w.advance(START) == [("a", START + timedelta(seconds=4))]
    assert w.now == START + timedelta(seconds=5)


def test_bad_construction_is_refused() -> None:
    with pytest.raises(ValueError, match="tick"):
        TimingWheel[str](tick=timedelta(0), wheel_size=8, start=START)
    with pytest.raises(ValueError, match="wheel_size"):
        TimingWheel[str](tick=MS, wheel_size=1, start=START)
    with pytest.raises(NaiveDatetime):
        TimingWheel[str](tick=MS, wheel_size=8, start=datetime(2026, 1, 1))  # noqa: DTZ001


# --- work does not depend on how many timers are pending ----------------------------------------


def _near_workload(pending: int) -> int:
    """Operations spent adding and expiring 1000 timers over one second, with `pending` far timers."""
    background, near = random.Random(7), random.Random(8)
    w = TimingWheel[int](tick=MS, wheel_size=64, start=START)
    for i in range(pending):
        w.add(-1 - i, START + timedelta(days=2) + background.random() * timedelta(days=1))
    before = w.stats.operations
    for i in range(1000):
        w.add(i, START + near.random() * timedelta(seconds=1))
    fired = 0
    for step in range(1, 1001):
        fired += len(w.advance(START + step * MS))
    assert fired == 1000
    assert len(w) == pending
    return w.stats.operations - before


def test_add_and_expire_work_is_the_same_with_10_or_100k_pending() -> None:
    assert _near_workload(10) == _near_workload(100_000)


def _hold_workload(pending: int, rounds: int = 5000) -> tuple[float, float]:
    """Steady state: every round adds one timer within the next hour and expires about one.

    Returns the operations per add and per expired timer (cascades included).
    """
    rng = random.Random(11)
    horizon = timedelta(hours=1)
    w = TimingWheel[int](tick=MS, wheel_size=64, start=START)
    for i in range(pending):
        w.add(i, START + rng.random() * horizon)
    step = horizon / pending
    now = START
    add_work = expire_work = expired = 0
    for i in range(rounds):
        now += step
        before = w.stats.operations
        w.add(pending + i, now + rng.random() * horizon)
        between = w.stats.operations
        expired += len(w.advance(now))
        add_work += between - before
        expire_work += w.stats.operations - between
    return add_work / rounds, expire_work / max(expired, 1)


def test_work_per_timer_does_not_grow_with_the_pending_count() -> None:
    small_add, small_expire = _hold_workload(1_000)
    large_add, large_expire = _hold_workload(100_000)
    # An add is one count plus one digit step per level. An hour of 1 ms ticks is under 64**4, so
    # a deadline differs from the current tick in digit 4 at most: five levels, six units.
    assert small_add <= 6
    assert large_add <= 6
    # A heap would pay log2(n) comparisons: 10 at 1e3, 17 at 1e5. The wheel's work per timer is
    # bounded by the number of levels; here the larger wheel does no more work per timer.
    assert large_expire <= small_expire * 1.25 + 1, (small_expire, large_expire)
    assert large_expire < 20, large_expire


# --- model-based: the wheel against a dict of deadlines -----------------------------------------


class WheelAgainstModel(RuleBasedStateMachine):
    """Every timer fires exactly once, never before its deadline, and on the first advance past it.

    Keys come from a small pool, so re-adding and cancelling live, fired and unknown keys all happen.
    """

    def __init__(self) -> None:
        super().__init__()
        self.tick_us = 1000
        self.wheel: TimingWheel[int] = TimingWheel(tick=MS, wheel_size=2, start=START)
        self.model: dict[int, datetime] = {}
        self.now = START

    @initialize(
        tick_us=st.sampled_from([1, 7, 1000, 250_000]),
        size=st.sampled_from([2, 3, 4, 8, 64]),
        start_offset=st.integers(-(10**9), 10**9),
    )
    def build(self, tick_us: int, size: int, start_offset: int) -> None:
        self.tick_us = tick_us
        start = START + timedelta(microseconds=start_offset)
        self.wheel = TimingWheel(tick=timedelta(microseconds=tick_us), wheel_size=size, start=start)
        self.now = start

    def _at(self, ticks: int, micros: int) -> datetime:
        return self.now + timedelta(microseconds=ticks * self.tick_us + micros % self.tick_us)

    def _advance_to(self, target: datetime) -> None:
        fired = self.wheel.advance(target)
        self.now = max(self.now, target)
        expected = {k: d for k, d in self.model.items() if d <= self.now}
        # Exactly the timers whose deadline has come: none early, none left behind, none twice.
        assert len(fired) == len(expected)
        assert dict(fired) == expected
        deadlines = [d for _, d in fired]
        assert deadlines == sorted(deadlines)
        for key in expected:
            del self.model[key]

    @rule(key=st.integers(0, 20), ticks=st.integers(-3, 5000), micros=st.integers(0, 10**6))
    def add(self, key: int, ticks: int, micros: int) -> None:
        deadline = self._at(ticks, micros)
        self.wheel.add(key, deadline)
        self.model[key] = deadline

    @rule(key=st.integers(0, 20), ticks=st.integers(10**5, 10**9))
    def add_far(self, key: int, ticks: int) -> None:
        self.add(key, ticks, 0)

    @rule(key=st.integers(0, 20))
    def cancel(self, key: int) -> None:
        assert self.wheel.cancel(key) == (key in self.model)
        self.model.pop(key, None)

    @rule(
        ticks=st.one_of(
            st.integers(0, 3),
            st.integers(0, 200),
            st.integers(0, 10**4),
            st.integers(10**5, 10**10),
            st.integers(-50, -1),
        ),
        micros=st.integers(0, 10**6),
    )
    def advance(self, ticks: int, micros: int) -> None:
        self._advance_to(self._at(ticks, micros))

    @precondition(lambda self: bool(self.model))
    @rule()
    def advance_to_just_before_then_at_the_next_deadline(self) -> None:
        soonest = self.wheel.next_deadline()
        assert soonest is not None
        self._advance_to(soonest - timedelta(microseconds=1))
        self._advance_to(soonest)

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert len(self.wheel) == len(self.model)
        assert self.wheel.next_deadline() == (min(self.model.values()) if self.model else None)
        for key, deadline in self.model.items():
            assert key in self.wheel
            assert self.wheel.deadline_of(key) == deadline


WheelAgainstModel.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
test_wheel_against_model = WheelAgainstModel.TestCase
