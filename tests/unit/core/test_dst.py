"""DST policies in several zones, both transitions, checked against a brute-force oracle.

The oracle never maps a wall time to an instant: it walks every instant (minute or second) in
UTC, reads the local clock, and asks whether the cron matches that reading. Nonexistent wall
times are found by walking wall times and noticing no instant shows them. So it shares no code
and no fold arithmetic with slotflow.core.cronslots.
"""

import functools
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from slotflow.contracts.policies import DstPolicy
from slotflow.contracts.schedules import CronSpec, IntervalSpec
from slotflow.core.cronslots import SkippedSlot, Slot, dst_skips_between, preview, slots_between
from tests.unit.core.cron_fields import cron_fields, matches_fields

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Sydney",  # southern hemisphere: clocks go back in April
    "Asia/Kolkata",  # no DST, +05:30
    "Australia/Lord_Howe",  # a 30-minute DST shift
    "America/Santiago",  # transitions at local midnight
]
CRONS = ["30 2 * * *", "0 * * * *", "*/15 * * * *", "0 0 * * *", "45 1 * * *", "30 23 * * *"]
POLICIES = [
    DstPolicy(repeated=r, nonexistent=n) for r in ("first", "last", "both") for n in ("shift", "skip")
]


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


# --- the oracle ---------------------------------------------------------------------------------


@functools.cache
def transitions(zone: str, year: int = 2026) -> list[datetime]:
    """Instants where the zone's offset changes, found by scanning every minute of the year."""
    tz = ZoneInfo(zone)
    found = []
    instant = utc(year, 1, 1)
    previous = instant.astimezone(tz).utcoffset()
    while instant.year == year:
        instant += timedelta(minutes=30)
        offset = instant.astimezone(tz).utcoffset()
        if offset != previous:
            exact = instant - timedelta(minutes=30)
            while exact.astimezone(tz).utcoffset() == previous:
                exact += timedelta(minutes=1)
            found.append(exact)
            previous = offset
    return found


@dataclass(frozen=True)
class Readings:
    """What the clock showed in a window: matching readings, and matching wall times it never showed."""

    #: (instant, local reading, fold, repeated?) for every instant whose reading matches.
    real: list[tuple[datetime, datetime, int, bool]]
    #: (nominal wall time, first instant whose reading is later) for matching wall times never shown.
    missing: list[tuple[datetime, datetime]]


def read_clock(expression: str, zone: str, after: datetime, until: datetime, step: timedelta) -> Readings:
    tz = ZoneInfo(zone)
    real = []
    instant = after.replace(second=0, microsecond=0)
    while instant <= until:
        local = instant.astimezone(tz)
        if instant > after and matches_fields(local.replace(tzinfo=None), expression):
            twin = local.replace(fold=1 - local.fold)
            real.append((instant, local, local.fold, twin.utcoffset() != local.utcoffset()))
        instant += step

    def reading(at: datetime) -> datetime:
        return at.astimezone(tz).replace(tzinfo=None)

    missing = []
    landing = after
    # Wall times a DST jump away from the window (no zone here jumps more than an hour).
    wall = reading(after - timedelta(hours=2)).replace(second=0, microsecond=0)
    wall_end = reading(until + timedelta(hours=2))
    while wall <= wall_end:
        shown = reading(wall.replace(tzinfo=tz).astimezone(UTC))
        if shown != wall and matches_fields(wall, expression):
            # The first instant whose reading is later than the missing wall time (the same for
            # every wall time in one gap, so the last answer is reused when it still holds).
            if not (reading(landing - timedelta(seconds=1)) <= wall < reading(landing)):
                landing = wall.replace(tzinfo=tz, fold=1).astimezone(UTC) - timedelta(hours=1)
                while reading(landing) <= wall:
                    landing += timedelta(seconds=1)
            if after < landing <= until:
                missing.append((wall, landing))
        wall += step
    return Readings(real, missing)


def expected_slots(readings: Readings, policy: DstPolicy, zone: str) -> list[Slot]:
    chosen: dict[datetime, Slot] = {}
    for instant, local, fold, repeated in readings.real:
        if repeated and policy.repeated != "both" and fold != (0 if policy.repeated == "first" else 1):
            continue
        mark = None if not repeated else ("repeated-first" if fold == 0 else "repeated-second")
        chosen[instant] = Slot(instant, local.isoformat(), mark)  # type: ignore[arg-type]
    if policy.nonexistent == "shift":
        for wall, landing in readings.missing:
            if landing not in chosen:
                offset = landing.astimezone(ZoneInfo(zone)).isoformat()[-6:]
                chosen[landing] = Slot(landing, wall.isoformat() + offset, "shifted")
    return [chosen[at] for at in sorted(chosen)]


def check(expression: str, zone: str, after: datetime, until: datetime) -> None:
    step = timedelta(seconds=1) if len(expression.split()) == 6 else timedelta(minutes=1)
    readings = read_clock(expression, zone, after, until, step)
    spec = CronSpec(expression=expression, timezone=zone)
    for policy in POLICIES:
        got = slots_between(spec, policy, after=after, until=until, limit=100_000)
        assert got == expected_slots(readings, policy, zone), policy
        skips = dst_skips_between(spec, policy, after=after, until=until)
        if policy.nonexistent == "shift":
            assert skips == []
            continue
        assert [(s.at, s.reason) for s in skips] == [
            (landing, "dst_nonexistent") for _, landing in readings.missing
        ]
        for skip, (wall, _) in zip(skips, readings.missing, strict=True):
            assert wall.isoformat() in skip.detail


# --- every zone, both transitions, the usual crons ---------------------------------------------


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("expression", CRONS)
def test_matches_the_oracle_around_each_transition(zone: str, expression: str) -> None:
    around = transitions(zone) or [utc(2026, 3, 29, 1)]
    assert len(around) == (0 if zone == "Asia/Kolkata" else 2) or zone == "Asia/Kolkata"
    for change in around:
        check(
            expression,
            zone,
            change - timedelta(hours=30),
            change + timedelta(hours=30),
        )


@settings(max_examples=30, deadline=None)
@given(
    cron=cron_fields(),
    zone=st.sampled_from([z for z in ZONES if z != "Asia/Kolkata"]),
    which=st.integers(0, 1),
    shift=st.timedeltas(min_value=timedelta(minutes=-90), max_value=timedelta(minutes=30)),
)
def test_random_crons_match_the_oracle_near_transitions(
    cron: tuple[str, list[set[int] | None]], zone: str, which: int, shift: timedelta
) -> None:
    expression, _ = cron
    # Per-second crons get a window a sixth as long: the oracle reads the clock every second.
    scale = 6 if len(expression.split()) == 6 else 1
    after = transitions(zone)[which] + shift / scale
    window = timedelta(hours=6) / scale
    check(expression, zone, after, after + window)


# --- worked examples (the ones docs/scheduling.md shows) ----------------------------------------


def daily(zone: str, policy: DstPolicy, day: datetime, expression: str = "30 2 * * *") -> list[Slot]:
    spec = CronSpec(expression=expression, timezone=zone)
    return slots_between(
        spec, policy, after=day - timedelta(hours=14), until=day + timedelta(hours=14), limit=50
    )


def test_berlin_spring_forward_shifts_to_the_first_valid_instant() -> None:
    # 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC); 02:30 never happens.
    assert daily("Europe/Berlin", DstPolicy(), utc(2026, 3, 29, 1)) == [
        Slot(utc(2026, 3, 29, 1), "2026-03-29T02:30:00+02:00", "shifted")
    ]


def test_berlin_spring_forward_skip_fires_nothing_and_reports_it() -> None:
    policy = DstPolicy(nonexistent="skip")
    assert daily("Europe/Berlin", policy, utc(2026, 3, 29, 1)) == []
    spec = CronSpec(expression="30 2 * * *", timezone="Europe/Berlin")
    skipped = dst_skips_between(spec, policy, after=utc(2026, 3, 28), until=utc(2026, 3, 30))
    assert skipped == [
        SkippedSlot(
            utc(2026, 3, 29, 1),
            "dst_nonexistent",
            "local time 2026-03-29T02:30:00 does not exist in Europe/Berlin: "
            "clocks jump from 02:00:00 to 03:00:00 on 2026-03-29",
        )
    ]


def test_nonexistent_times_in_one_gap_collapse_into_one_slot() -> None:
    both = daily("Europe/Berlin", DstPolicy(), utc(2026, 3, 29, 1), expression="0,30 2 * * *")
    assert both == [Slot(utc(2026, 3, 29, 1), "2026-03-29T02:00:00+02:00", "shifted")]
    # When the schedule also fires at the landing wall time, that real slot stands for all.
    with_three = daily("Europe/Berlin", DstPolicy(), utc(2026, 3, 29, 1), expression="0,30 2,3 * * *")
    assert with_three[:2] == [
        Slot(utc(2026, 3, 29, 1), "2026-03-29T03:00:00+02:00"),
        Slot(utc(2026, 3, 29, 1, 30), "2026-03-29T03:30:00+02:00"),
    ]


@pytest.mark.parametrize(
    ("repeated", "expected"),
    [
        ("first", [Slot(utc(2026, 10, 25, 0, 30), "2026-10-25T02:30:00+02:00", "repeated-first")]),
        ("last", [Slot(utc(2026, 10, 25, 1, 30), "2026-10-25T02:30:00+01:00", "repeated-second")]),
        (
            "both",
            [
                Slot(utc(2026, 10, 25, 0, 30), "2026-10-25T02:30:00+02:00", "repeated-first"),
                Slot(utc(2026, 10, 25, 1, 30), "2026-10-25T02:30:00+01:00", "repeated-second"),
            ],
        ),
    ],
)
def test_berlin_fall_back_repeated_policies(repeated: str, expected: list[Slot]) -> None:
    policy = DstPolicy(repeated=repeated)  # type: ignore[arg-type]
    assert daily("Europe/Berlin", policy, utc(2026, 10, 25, 1)) == expected


def test_new_york_both_transitions() -> None:
    spring = daily("America/New_York", DstPolicy(), utc(2026, 3, 8, 7))
    assert spring == [Slot(utc(2026, 3, 8, 7), "2026-03-08T02:30:00-04:00", "shifted")]
    fall = daily("America/New_York", DstPolicy(repeated="last"), utc(2026, 11, 1, 6), expression="30 1 * * *")
    assert fall == [Slot(utc(2026, 11, 1, 6, 30), "2026-11-01T01:30:00-05:00", "repeated-second")]


def test_sydney_southern_hemisphere() -> None:
    # Clocks go forward in October (02:00 -> 03:00) and back in April (03:00 -> 02:00).
    spring = daily("Australia/Sydney", DstPolicy(), utc(2026, 10, 3, 16))
    assert spring == [Slot(utc(2026, 10, 3, 16), "2026-10-04T02:30:00+11:00", "shifted")]
    fall = daily("Australia/Sydney", DstPolicy(repeated="first"), utc(2026, 4, 4, 16))
    assert fall == [Slot(utc(2026, 4, 4, 15, 30), "2026-04-05T02:30:00+11:00", "repeated-first")]


def test_lord_howe_half_hour_shift() -> None:
    # October: 02:00 -> 02:30, so 02:15 does not exist but 02:30 does.
    spring = daily("Australia/Lord_Howe", DstPolicy(), utc(2026, 10, 3, 15, 30), expression="15 2 * * *")
    assert spring == [Slot(utc(2026, 10, 3, 15, 30), "2026-10-04T02:15:00+11:00", "shifted")]
    real = daily("Australia/Lord_Howe", DstPolicy(), utc(2026, 10, 3, 15, 30))
    assert real == [Slot(utc(2026, 10, 3, 15, 30), "2026-10-04T02:30:00+11:00")]
    # April: 02:00 -> 01:30, so 01:45 happens twice, 30 minutes apart.
    fall = daily(
        "Australia/Lord_Howe", DstPolicy(repeated="both"), utc(2026, 4, 4, 15), expression="45 1 * * *"
    )
    assert [(s.at, s.dst) for s in fall] == [
        (utc(2026, 4, 4, 14, 45), "repeated-first"),
        (utc(2026, 4, 4, 15, 15), "repeated-second"),
    ]


def test_santiago_midnight_does_not_exist_on_its_spring_day() -> None:
    midnight = daily("America/Santiago", DstPolicy(), utc(2026, 9, 6, 4), expression="0 0 * * *")
    assert midnight == [Slot(utc(2026, 9, 6, 4), "2026-09-06T00:00:00-03:00", "shifted")]
    skipped = daily(
        "America/Santiago", DstPolicy(nonexistent="skip"), utc(2026, 9, 6, 4), expression="0 0 * * *"
    )
    assert skipped == []


def test_kolkata_has_no_dst_and_a_half_hour_offset() -> None:
    spec = CronSpec(expression="30 2 * * *", timezone="Asia/Kolkata")
    slots = preview(spec, DstPolicy(), after=utc(2026, 3, 28), count=400)
    assert all(s.dst is None for s in slots)
    assert {(s.at.hour, s.at.minute) for s in slots} == {(21, 0)}
    assert all(s.local.endswith("T02:30:00+05:30") for s in slots)


def test_every_fifteen_minutes_in_a_dst_zone_is_not_a_fixed_interval() -> None:
    # On the repeated hour "first" keeps only the first pass: a 75-minute hole in UTC.
    spec = CronSpec(expression="*/15 * * * *", timezone="Europe/Berlin")
    slots = slots_between(
        spec, DstPolicy(), after=utc(2026, 10, 25, 0, 40), until=utc(2026, 10, 25, 2, 30), limit=20
    )
    gaps = {b.at - a.at for a, b in itertools.pairwise(slots)}
    assert gaps == {timedelta(minutes=15), timedelta(minutes=75)}
    # In UTC (or as an IntervalSpec) the spacing is exact.
    interval = IntervalSpec(every=timedelta(minutes=15))
    fixed = slots_between(
        interval, DstPolicy(), after=utc(2026, 10, 25, 0, 40), until=utc(2026, 10, 25, 2), limit=20
    )
    assert {b.at - a.at for a, b in itertools.pairwise(fixed)} == {timedelta(minutes=15)}


def test_croniter_alone_fires_a_repeated_wall_time_twice() -> None:
    # Why slots do not use croniter's zone support: it has no policy, a daily job runs twice.
    berlin = ZoneInfo("Europe/Berlin")
    walker = croniter("30 2 * * *", datetime(2026, 10, 24, 12, tzinfo=berlin), ret_type=datetime)
    first, second = walker.get_next(datetime), walker.get_next(datetime)
    assert first.astimezone(UTC) == utc(2026, 10, 25, 0, 30)
    assert second.astimezone(UTC) == utc(2026, 10, 25, 1, 30)


def test_hourly_cron_runs_once_per_real_hour_across_both_changes() -> None:
    spec = CronSpec(expression="0 * * * *", timezone="Europe/Berlin")
    spring = slots_between(spec, DstPolicy(), after=utc(2026, 3, 28, 23), until=utc(2026, 3, 29, 3), limit=10)
    assert [(s.at.hour, s.local[11:], s.dst) for s in spring] == [
        (0, "01:00:00+01:00", None),
        (1, "03:00:00+02:00", None),  # 02:00 does not exist and merges into the real 03:00
        (2, "04:00:00+02:00", None),
        (3, "05:00:00+02:00", None),
    ]
    fall = slots_between(spec, DstPolicy(), after=utc(2026, 10, 24, 23), until=utc(2026, 10, 25, 3), limit=10)
    assert [(s.at.hour, s.local[11:], s.dst) for s in fall] == [
        (0, "02:00:00+02:00", "repeated-first"),
        (2, "03:00:00+01:00", None),  # the second 02:00 (01:00 UTC) is not fired under "first"
        (3, "04:00:00+01:00", None),
    ]
