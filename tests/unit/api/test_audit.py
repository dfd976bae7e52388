"""The slot audit's verdicts, from a schedule's timeline and what was recorded."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slotflow.contracts import CronSpec, DstPolicy, IntervalSpec, ScheduleDefinition
from slotflow.core.identity import run_id
from slotflow_api.audit import (
    AuditRangeTooLarge,
    RecordedRun,
    RecordedSkip,
    TimelineEntry,
    audit,
    expected_slots,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)
HOURLY = ScheduleDefinition(spec=IntervalSpec(every=timedelta(hours=1), anchor=T0), handler="h")
LATE = timedelta(seconds=5)


def ran(
    slot: datetime,
    *,
    after: timedelta = timedelta(seconds=1),
    completions: int = 1,
    state: str = "completed",
    kind: str = "scheduled",
) -> RecordedRun:
    return RecordedRun(
        run_id("s", slot),
        slot,
        kind,
        state,
        slot + after,
        None,
        completions,
        tuple(range(1, completions + 1)),
    )


def test_each_category_is_reported() -> None:
    timeline = [TimelineEntry(T0 - timedelta(minutes=1), "created", HOURLY)]
    slots = [T0 + timedelta(hours=h) for h in range(6)]
    runs = [
        ran(slots[0]),
        ran(slots[1], after=timedelta(minutes=3)),
        ran(slots[3], completions=2),
        ran(slots[4], state="skipped"),
        ran(T0 + timedelta(hours=2, minutes=17), kind="manual"),
    ]
    skips = [RecordedSkip(slots[2], run_id("s", slots[2]), "misfire", "fire_once kept the newest")]
    report = audit(
        timeline,
        runs,
        skips,
        schedule_id="s",
        start=T0,
        end=slots[5] + timedelta(seconds=1),
        now=T0 + timedelta(days=1),
        late_threshold=LATE,
        limit=100,
    )
    assert [v.status for v in report.slots] == [
        "fired",
        "late",
        "skipped_by_policy",
        "duplicated_effect",
        "skipped_by_policy",
        "missed",
    ]
    assert report.summary() == {
        "fired": 1,
        "missed": 1,
        "skipped_by_policy": 2,
        "late": 1,
        "held": 0,
        "duplicated_effect": 1,
    }
    assert "180.000s" in report.slots[1].detail
    assert "fence tokens 1, 2" in report.slots[3].detail
    assert [r.kind for r in report.unscheduled] == ["manual"]
    assert report.pending == 0


def test_jittered_fire_time_is_what_lateness_is_measured_against() -> None:
    timeline = [TimelineEntry(T0 - timedelta(minutes=1), "created", HOURLY)]
    jittered = RecordedRun(
        "r",
        T0,
        "scheduled",
        "completed",
        T0 + timedelta(minutes=10, seconds=2),
        T0 + timedelta(minutes=10),
        1,
    )
    report = audit(
        timeline,
        [jittered],
        [],
        schedule_id="s",
        start=T0,
        end=T0 + timedelta(minutes=1),
        now=T0 + timedelta(hours=1),
        late_threshold=LATE,
        limit=10,
    )
    assert [v.status for v in report.slots] == ["fired"]


def test_recent_unrecorded_slots_are_pending_not_missed() -> None:
    timeline = [TimelineEntry(T0 - timedelta(minutes=1), "created", HOURLY)]
    report = audit(
        timeline,
        [],
        [],
        schedule_id="s",
        start=T0,
        end=T0 + timedelta(hours=3),
        now=T0 + timedelta(hours=2, seconds=2),
        late_threshold=LATE,
        limit=10,
    )
    assert [v.status for v in report.slots] == ["missed", "missed"]
    assert report.pending == 1


def test_slots_outside_the_schedules_life_or_while_paused() -> None:
    timeline = [
        TimelineEntry(T0 + timedelta(minutes=30), "created", HOURLY),
        TimelineEntry(T0 + timedelta(hours=2, minutes=30), "paused"),
        TimelineEntry(T0 + timedelta(hours=4, minutes=30), "resumed"),
        TimelineEntry(T0 + timedelta(hours=6, minutes=30), "deleted"),
    ]
    report = audit(
        timeline,
        [],
        [],
        schedule_id="s",
        start=T0,
        end=T0 + timedelta(hours=10),
        now=T0 + timedelta(days=1),
        late_threshold=LATE,
        limit=100,
    )
    hours = [(v.slot - T0) // timedelta(hours=1) for v in report.slots]
    assert hours == [1, 2, 3, 4, 5, 6]
    assert [v.status for v in report.slots] == [
        "missed",
        "missed",
        "skipped_by_policy",
        "skipped_by_policy",
        "missed",
        "missed",
    ]


def test_an_update_changes_the_grid_from_its_moment_on() -> None:
    every_30 = ScheduleDefinition(spec=IntervalSpec(every=timedelta(minutes=30), anchor=T0), handler="h")
    timeline = [
        TimelineEntry(T0 - timedelta(minutes=1), "created", HOURLY),
        TimelineEntry(T0 + timedelta(hours=1, minutes=10), "updated", every_30),
    ]
    found = expected_slots(
        timeline, schedule_id="s", start=T0, end=T0 + timedelta(hours=2, minutes=1), limit=100
    )
    assert [e.at - T0 for e in found] == [
        timedelta(0),
        timedelta(hours=1),
        timedelta(hours=1, minutes=30),
        timedelta(hours=2),
    ]


def test_dst_skip_policy_slots_are_skipped_by_policy() -> None:
    berlin = ScheduleDefinition(
        spec=CronSpec(expression="30 2 * * *", timezone="Europe/Berlin"),
        handler="h",
        dst=DstPolicy(nonexistent="skip"),
    )
    created = datetime(2026, 3, 27, tzinfo=UTC)
    timeline = [TimelineEntry(created, "created", berlin)]
    report = audit(
        timeline,
        [],
        [],
        schedule_id="s",
        start=created,
        end=created + timedelta(days=3),
        now=created + timedelta(days=5),
        late_threshold=LATE,
        limit=100,
    )
    verdicts = [(v.slot.isoformat(), v.status) for v in report.slots]
    # 29 March 2026: 02:30 does not exist in Berlin (clocks jump 02:00 -> 03:00 at 01:00 UTC).
    assert ("2026-03-29T01:00:00+00:00", "skipped_by_policy") in verdicts
    assert [s for _, s in verdicts].count("missed") == 2


def test_a_window_with_too_many_slots_is_refused() -> None:
    every_second = ScheduleDefinition(spec=IntervalSpec(every=timedelta(seconds=1), anchor=T0), handler="h")
    timeline = [TimelineEntry(T0, "created", every_second)]
    with pytest.raises(AuditRangeTooLarge):
        expected_slots(timeline, schedule_id="s", start=T0, end=T0 + timedelta(hours=1), limit=100)


@settings(max_examples=50, deadline=None)
@given(
    recorded=st.lists(st.integers(min_value=0, max_value=23), unique=True),
    skipped=st.lists(st.integers(min_value=0, max_value=23), unique=True),
)
def test_every_expected_slot_gets_exactly_one_verdict(recorded: list[int], skipped: list[int]) -> None:
    timeline = [TimelineEntry(T0 - timedelta(minutes=1), "created", HOURLY)]
    slots = [T0 + timedelta(hours=h) for h in range(24)]
    runs = [ran(slots[h]) for h in recorded]
    skips = [RecordedSkip(slots[h], "r", "misfire", "") for h in skipped if h not in recorded]
    report = audit(
        timeline,
        runs,
        skips,
        schedule_id="s",
        start=T0,
        end=T0 + timedelta(days=1),
        now=T0 + timedelta(days=2),
        late_threshold=LATE,
        limit=100,
    )
    assert [v.slot for v in report.slots] == slots
    summary = report.summary()
    assert sum(summary.values()) == 24
    assert summary["fired"] == len(recorded)
    assert summary["skipped_by_policy"] == len(skips)
    assert summary["missed"] == 24 - len(recorded) - len(skips)


def test_a_held_run_is_held_not_missed_and_late_once_it_completes() -> None:
    """A run waiting for its downstream fired (its JobDue came in time) but has not run: `held`.
    Once it completes, its lateness is when it completed."""
    timeline = [TimelineEntry(T0 - timedelta(minutes=1), "created", HOURLY)]
    slots = [T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2)]
    waiting = RecordedRun(
        run_id("s", slots[0]), slots[0], "scheduled", "held", slots[0] + timedelta(seconds=1), None, 0,
        was_held=True, held_reason="circuit_open:bank-api",
    )  # fmt: skip
    done_late = RecordedRun(
        run_id("s", slots[1]), slots[1], "scheduled", "completed", slots[1] + timedelta(seconds=1), None, 1,
        (3,), was_held=True, finished_at=slots[1] + timedelta(minutes=20),
    )  # fmt: skip
    done_in_time = RecordedRun(
        run_id("s", slots[2]), slots[2], "scheduled", "completed", slots[2] + timedelta(seconds=1), None, 1,
        (2,), was_held=True, finished_at=slots[2] + timedelta(seconds=2),
    )  # fmt: skip
    report = audit(
        timeline,
        [waiting, done_late, done_in_time],
        [],
        schedule_id="s",
        start=T0,
        end=T0 + timedelta(hours=3),
        now=T0 + timedelta(hours=5),
        late_threshold=LATE,
        limit=100,
    )
    verdicts = {v.slot: v for v in report.slots}
    assert verdicts[slots[0]].status == "held"
    assert "circuit_open:bank-api" in verdicts[slots[0]].detail
    assert verdicts[slots[1]].status == "late"
    assert "held for a downstream; completed 1200.000s after" in verdicts[slots[1]].detail
    assert verdicts[slots[2]].status == "fired"
    assert report.summary()["held"] == 1
    assert report.summary()["missed"] == 0
