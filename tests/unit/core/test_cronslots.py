"""Cron, interval and one-shot slots: ordering, continuity, field matching, agreement with croniter."""

import itertools
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from slotflow.contracts.policies import DstPolicy
from slotflow.contracts.schedules import CronSpec, IntervalSpec, OnceSpec
from slotflow.core.cronslots import Slot, iter_slots, next_slot, preview, slots_between
from slotflow.core.identity import NaiveDatetime
from tests.cron_oracle import CronOracle
from tests.unit.core.cron_fields import cron_fields, matches_fields

DEFAULT = DstPolicy()
DST_ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Sydney",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "America/Santiago",
]
POLICIES = [
    DstPolicy(repeated=r, nonexistent=n) for r in ("first", "last", "both") for n in ("shift", "skip")
]


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


# Hypothesis bounds are naive by its API; the drawn values carry UTC.
instants = st.datetimes(
    min_value=datetime(2019, 1, 1),  # noqa: DTZ001
    max_value=datetime(2031, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)


# --- examples -----------------------------------------------------------------------------------


def test_five_fields_are_minute_first_with_second_zero() -> None:
    spec = CronSpec(expression="5 4 * * *")
    slot = next_slot(spec, DEFAULT, after=utc(2026, 1, 1))
    assert slot == Slot(utc(2026, 1, 1, 4, 5), "2026-01-01T04:05:00+00:00")


def test_six_fields_are_seconds_first() -> None:
    spec = CronSpec(expression="30 5 4 * * *")
    assert [s.at for s in preview(spec, DEFAULT, after=utc(2026, 1, 1), count=2)] == [
        utc(2026, 1, 1, 4, 5, 30),
        utc(2026, 1, 2, 4, 5, 30),
    ]


def test_after_is_exclusive_and_microseconds_do_not_leak() -> None:
    spec = CronSpec(expression="* * * * * *")
    assert next_slot(spec, DEFAULT, after=utc(2026, 1, 1, 0, 0, 5)) == Slot(
        utc(2026, 1, 1, 0, 0, 6), "2026-01-01T00:00:06+00:00"
    )
    just_past = datetime(2026, 1, 1, 0, 0, 5, 999_999, tzinfo=UTC)
    slot = next_slot(spec, DEFAULT, after=just_past)
    assert slot is not None
    assert slot.at == utc(2026, 1, 1, 0, 0, 6)


def test_zone_cron_fires_at_local_wall_time() -> None:
    spec = CronSpec(expression="0 9 * * 1-5", timezone="America/New_York")
    slots = preview(spec, DEFAULT, after=utc(2026, 7, 3), count=3)  # Friday 3 July 2026
    assert [s.local for s in slots] == [
        "2026-07-03T09:00:00-04:00",
        "2026-07-06T09:00:00-04:00",
        "2026-07-07T09:00:00-04:00",
    ]
    assert slots[0].at == utc(2026, 7, 3, 13)
    assert all(s.at.tzinfo is UTC for s in slots)


def test_cron_that_never_fires_has_no_next_slot() -> None:
    assert next_slot(CronSpec(expression="0 0 31 2 *"), DEFAULT, after=utc(2026, 1, 1)) is None


def test_cron_near_the_end_of_time_ends_quietly() -> None:
    spec = CronSpec(expression="0 0 1 1 *")
    assert next_slot(spec, DEFAULT, after=utc(9999, 6, 1)) is None


def test_naive_after_is_refused() -> None:
    with pytest.raises(NaiveDatetime):
        next_slot(CronSpec(expression="* * * * *"), DEFAULT, after=datetime(2026, 1, 1))  # noqa: DTZ001


def test_slots_between_is_half_open_and_limited() -> None:
    spec = CronSpec(expression="0 * * * *")
    got = slots_between(spec, DEFAULT, after=utc(2026, 1, 1, 0), until=utc(2026, 1, 1, 5), limit=100)
    assert [s.at.hour for s in got] == [1, 2, 3, 4, 5]
    limited = slots_between(spec, DEFAULT, after=utc(2026, 1, 1, 0), until=utc(2026, 1, 1, 5), limit=2)
    assert [s.at.hour for s in limited] == [1, 2]
    assert slots_between(spec, DEFAULT, after=utc(2026, 1, 1, 5), until=utc(2026, 1, 1, 0), limit=9) == []
    with pytest.raises(ValueError, match="negative"):
        slots_between(spec, DEFAULT, after=utc(2026, 1, 1), until=utc(2026, 1, 2), limit=-1)


def test_interval_slots_stay_on_the_anchor_grid() -> None:
    spec = IntervalSpec(every=timedelta(minutes=7), anchor=datetime(2026, 1, 1, 0, 3, tzinfo=UTC))
    # Asked from an instant off the grid, long after the anchor: still anchor + k * 7 minutes.
    after = utc(2026, 5, 17, 13, 2, 11)
    slots = preview(spec, DEFAULT, after=after, count=3)
    for slot in slots:
        assert (slot.at - spec.anchor) % spec.every == timedelta(0)
    assert slots[0].at > after
    assert slots[0].at - after <= spec.every
    assert [b.at - a.at for a, b in itertools.pairwise(slots)] == [spec.every] * 2


def test_interval_before_its_anchor_extends_the_grid_backwards() -> None:
    spec = IntervalSpec(every=timedelta(hours=1), anchor=utc(2026, 1, 1, 0, 30))
    assert next_slot(spec, DEFAULT, after=utc(2025, 12, 31, 22, 45)) == Slot(
        utc(2025, 12, 31, 23, 30), "2025-12-31T23:30:00+00:00"
    )


def test_interval_local_label_uses_the_anchor_offset() -> None:
    plus_two = timezone(timedelta(hours=2))
    spec = IntervalSpec(every=timedelta(hours=6), anchor=datetime(2026, 1, 1, 6, tzinfo=plus_two))
    slot = next_slot(spec, DEFAULT, after=utc(2026, 1, 1))
    assert slot == Slot(utc(2026, 1, 1, 4), "2026-01-01T06:00:00+02:00")


def test_once_fires_once() -> None:
    at = datetime(2026, 3, 1, 9, tzinfo=ZoneInfo("Europe/Berlin"))
    spec = OnceSpec(at=at)
    slot = next_slot(spec, DEFAULT, after=utc(2026, 1, 1))
    assert slot == Slot(utc(2026, 3, 1, 8), "2026-03-01T09:00:00+01:00")
    assert next_slot(spec, DEFAULT, after=slot.at) is None
    assert slots_between(spec, DEFAULT, after=utc(2026, 1, 1), until=utc(2027, 1, 1), limit=5) == [slot]


# --- properties ---------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(cron=cron_fields(), after=instants)
def test_utc_cron_equals_the_documented_oracle(
    cron: tuple[str, list[set[int] | None]], after: datetime
) -> None:
    # croniter and cronsim are compared in test_cron_differential.py, with the documented differences.
    expression, _ = cron
    spec = CronSpec(expression=expression)
    ours = [s.at for s in preview(spec, DEFAULT, after=after, count=12)]
    walls = CronOracle(expression).next_wall_times(after.replace(tzinfo=None), 12)
    assert ours == [w.replace(tzinfo=UTC) for w in walls]


@settings(max_examples=150, deadline=None)
@given(
    cron=cron_fields(),
    zone=st.sampled_from(DST_ZONES),
    policy=st.sampled_from(POLICIES),
    after=instants,
)
def test_slots_are_ordered_continuous_and_match_their_fields(
    cron: tuple[str, list[set[int] | None]], zone: str, policy: DstPolicy, after: datetime
) -> None:
    expression, _ = cron
    spec = CronSpec(expression=expression, timezone=zone)
    slots = preview(spec, policy, after=after, count=15)

    instants_seen = [s.at for s in slots]
    assert instants_seen == sorted(set(instants_seen)), "strictly increasing, no instant twice"
    assert all(s.at > after for s in slots)

    # Asking again from each slot gives the one that follows: no gaps, no repeats.
    chained = []
    cursor = after
    for _ in slots:
        step = next_slot(spec, policy, after=cursor)
        assert step is not None
        chained.append(step)
        cursor = step.at
    assert chained == slots

    if slots:
        between = slots_between(spec, policy, after=after, until=slots[-1].at, limit=1000)
        assert between == slots

    tz = ZoneInfo(zone)
    for slot in slots:
        wall = datetime.fromisoformat(slot.local).replace(tzinfo=None)
        assert matches_fields(wall, expression), slot
        if slot.dst == "shifted":
            continue
        assert slot.local == slot.at.astimezone(tz).isoformat()


@settings(max_examples=60, deadline=None)
@given(cron=cron_fields(), zone=st.sampled_from(DST_ZONES), after=instants)
def test_both_is_the_union_of_first_and_last(
    cron: tuple[str, list[set[int] | None]], zone: str, after: datetime
) -> None:
    spec = CronSpec(expression=cron[0], timezone=zone)
    until = after + timedelta(days=2)
    first = slots_between(spec, DstPolicy(repeated="first"), after=after, until=until, limit=100)
    last = slots_between(spec, DstPolicy(repeated="last"), after=after, until=until, limit=100)
    both = slots_between(spec, DstPolicy(repeated="both"), after=after, until=until, limit=200)
    if len(first) < 100 and len(last) < 100:
        assert {s.at for s in both} == {s.at for s in first} | {s.at for s in last}


@settings(max_examples=100, deadline=None)
@given(
    every=st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=9)),
    anchor=instants,
    after=instants,
)
def test_interval_never_drifts(every: timedelta, anchor: datetime, after: datetime) -> None:
    spec = IntervalSpec(every=every, anchor=anchor)
    slots = list(iter_slots_limited(spec, after, 5))
    assert slots[0].at > after >= slots[0].at - every
    for slot in slots:
        assert (slot.at - anchor) % every == timedelta(0)
    assert all(b.at - a.at == every for a, b in itertools.pairwise(slots))


def iter_slots_limited(spec: IntervalSpec, after: datetime, count: int) -> list[Slot]:
    iterator = iter_slots(spec, DEFAULT, after=after)
    return [next(iterator) for _ in range(count)]


@pytest.mark.parametrize(
    "expression",
    [
        "0 9 * jan-mar mon-fri",  # names and ranges
        "0 0 * * 7",  # 7 is Sunday too
        "0 0 1-5/2 * *",
        "0 0 13 * 5",  # day-of-month OR day-of-week
        "0 0 29 2 *",  # leap days only
        "0 12 L * *",  # last day of the month
        "30 2 * 3 0#5",  # fifth Sunday of March
        "0 8 15W * *",  # weekday nearest the 15th
        "15,45 */5 * * * *",
        "0 0 0 1 1 *",
    ],
)
def test_special_and_named_fields_agree_with_croniter(expression: str) -> None:
    after = utc(2026, 1, 1)
    six = len(expression.split()) == 6
    theirs = croniter(expression, after, ret_type=datetime, second_at_beginning=six)
    expected = [theirs.get_next(datetime) for _ in range(30)]
    assert [
        s.at for s in preview(CronSpec(expression=expression), DEFAULT, after=after, count=30)
    ] == expected


def test_walked_expressions_keep_the_dst_policy() -> None:
    # "#" is matched in naive wall time like every field; the DST policy still applies to the result.
    spec = CronSpec(expression="30 2 * 3 0#5", timezone="Europe/Berlin")  # 2026-03-29 is the 5th Sunday
    assert next_slot(spec, DstPolicy(), after=utc(2026, 3, 1)) == Slot(
        utc(2026, 3, 29, 1), "2026-03-29T02:30:00+02:00", "shifted"
    )
    # The fifth Sunday of March is always the EU's spring-forward day: skipping never fires.
    assert next_slot(spec, DstPolicy(nonexistent="skip"), after=utc(2026, 3, 1)) is None


def test_a_start_inclusive_end_exclusive_window_by_one_microsecond() -> None:
    # docs/scheduling.md: how a Backfill's [start, end) maps onto (after, until].
    spec = CronSpec(expression="0 * * * *")
    tiny = timedelta(microseconds=1)
    start, end = utc(2026, 1, 1, 3), utc(2026, 1, 1, 6)
    got = slots_between(spec, DEFAULT, after=start - tiny, until=end - tiny, limit=100)
    assert [s.at.hour for s in got] == [3, 4, 5]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # A `*` in a list allows every value; the other items add nothing.
        ("*,5 * * * *", [utc(2026, 1, 1, 0, m) for m in range(1, 6)]),
        ("0 0 * * *,0", [utc(2026, 1, d) for d in range(2, 7)]),  # daily, not Sundays only
        ("0 5,* * * *", [utc(2026, 1, 1, h) for h in range(1, 6)]),
    ],
)
def test_a_star_inside_a_list_allows_every_value(expression: str, expected: list[datetime]) -> None:
    slots = preview(CronSpec(expression=expression), DEFAULT, after=utc(2026, 1, 1), count=len(expected))
    assert [s.at for s in slots] == expected
