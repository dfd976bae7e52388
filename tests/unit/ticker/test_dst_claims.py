"""DST as the ticker lives it: claims running on time through both transitions in several zones.

Each case is a daily cron whose local time falls in the gap (spring forward) or the repeated hour
(fall back) of a 2026 transition. A healthy ticker claims each row when it falls due; we count
what fired and what was recorded as skipped on that local day, per policy.
"""

from datetime import UTC, date, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

import pytest

from slotflow.contracts import CronSpec, DstPolicy, ScheduleDefinition
from slotflow_ticker.planning import ScheduleState, plan_due, start_position

Kind = Literal["gap", "repeat"]

CASES: list[tuple[str, str, date, Kind]] = [
    ("Europe/Berlin", "30 2 * * *", date(2026, 3, 29), "gap"),
    ("Europe/Berlin", "30 2 * * *", date(2026, 10, 25), "repeat"),
    ("America/New_York", "30 2 * * *", date(2026, 3, 8), "gap"),
    ("America/New_York", "30 1 * * *", date(2026, 11, 1), "repeat"),
    ("Australia/Sydney", "30 2 * * *", date(2026, 10, 4), "gap"),  # southern hemisphere: spring in October
    ("Australia/Sydney", "30 2 * * *", date(2026, 4, 5), "repeat"),
    ("Australia/Lord_Howe", "15 2 * * *", date(2026, 10, 4), "gap"),  # a 30-minute shift
    ("Australia/Lord_Howe", "45 1 * * *", date(2026, 4, 5), "repeat"),
    ("America/Santiago", "30 0 * * *", date(2026, 9, 6), "gap"),  # the gap is at midnight
    ("America/Santiago", "30 23 * * *", date(2026, 4, 4), "repeat"),
]


def run_day(
    zone: str, expression: str, day: date, dst: DstPolicy
) -> tuple[list[datetime], list[tuple[datetime, str]]]:
    """Tick through the local ``day`` (and a margin either side); fired slots and skips that day."""
    tz = ZoneInfo(zone)
    definition = ScheduleDefinition(spec=CronSpec(expression=expression, timezone=zone), handler="h", dst=dst)
    begin = datetime.combine(day - timedelta(days=1), datetime.min.time(), tz).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=2), datetime.min.time(), tz).astimezone(UTC)
    state = ScheduleState("s", definition, start_position("s", definition, after=begin))
    fired: list[datetime] = []
    skipped: list[tuple[datetime, str]] = []
    while state.position.next_fire_at is not None and state.position.next_fire_at <= end:
        plan = plan_due(state, now=state.position.next_fire_at + timedelta(milliseconds=2), max_slots=10)
        fired.extend(f.at for f in plan.fire)
        skipped.extend((s.at, s.reason) for s in plan.skip)
        state = state._replace(position=plan.position)

    def on_day(at: datetime) -> bool:
        return at.astimezone(tz).date() == day

    return [f for f in fired if on_day(f)], [s for s in skipped if on_day(s[0])]


@pytest.mark.parametrize(("zone", "expression", "day", "kind"), CASES, ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_each_dst_policy_through_each_transition(zone: str, expression: str, day: date, kind: Kind) -> None:
    tz = ZoneInfo(zone)
    minute = int(expression.split()[0])
    if kind == "gap":
        shifted, _ = run_day(zone, expression, day, DstPolicy(nonexistent="shift"))
        assert len(shifted) == 1, "a nonexistent local time fires once, at the next valid instant"
        local = shifted[0].astimezone(tz)
        assert local.utcoffset() != (shifted[0] - timedelta(hours=3)).astimezone(tz).utcoffset()
        fired, skipped = run_day(zone, expression, day, DstPolicy(nonexistent="skip"))
        assert fired == []
        assert [reason for _, reason in skipped] == ["dst_nonexistent"]
    else:
        first, _ = run_day(zone, expression, day, DstPolicy(repeated="first"))
        last, _ = run_day(zone, expression, day, DstPolicy(repeated="last"))
        both, skipped = run_day(zone, expression, day, DstPolicy(repeated="both"))
        assert len(first) == 1
        assert len(last) == 1
        assert both == [first[0], last[0]]
        offset_first, offset_last = first[0].astimezone(tz).utcoffset(), last[0].astimezone(tz).utcoffset()
        assert offset_first is not None
        assert offset_last is not None
        assert last[0] - first[0] == offset_first - offset_last
        assert skipped == []
        for at in both:
            assert at.astimezone(tz).minute == minute


def test_a_zone_without_dst_fires_once_every_day() -> None:
    fired, skipped = run_day("Asia/Kolkata", "30 2 * * *", date(2026, 3, 29), DstPolicy(nonexistent="skip"))
    assert fired == [datetime(2026, 3, 28, 21, 0, tzinfo=UTC)]  # 02:30 IST is 21:00 UTC the day before
    assert skipped == []
