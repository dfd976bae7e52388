"""Command validation against the current state, and the envelopes the ticker stages (pure)."""

import json
from datetime import UTC, datetime, timedelta
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slotflow.contracts import (
    Backfill,
    CancelTimer,
    CronSpec,
    DstPolicy,
    IntervalSpec,
    JobDue,
    OnceSpec,
    RetryPolicy,
    ScheduleDefinition,
    StartTimer,
    TriggerNow,
)
from slotflow.contracts.timers import FireTimerFired
from slotflow.core.cronslots import SkippedSlot
from slotflow.core.identity import run_id
from slotflow.pg.outbox import encoded
from slotflow_ticker.commands import subject_of
from slotflow_ticker.events import EventFactory, Topics
from slotflow_ticker.rows import ScheduleRow
from slotflow_ticker.validation import (
    CommandRefused,
    backfill_plan,
    backfill_skips,
    require_fireable,
    require_live,
    require_new,
    require_some_slot,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
# hypothesis bounds its datetimes naively and attaches the zone itself.
NAIVE_MIN = datetime(2000, 1, 1, tzinfo=UTC).replace(tzinfo=None)
NAIVE_MAX = datetime(2100, 1, 1, tzinfo=UTC).replace(tzinfo=None)
HOURLY = ScheduleDefinition(spec=CronSpec(expression="0 * * * *"), handler="h")
ROW = ScheduleRow(
    schedule_id="s",
    definition=HOURLY,
    version=1,
    paused=False,
    pause_reason="",
    resume_at=None,
    paused_at=None,
    resumed_at=None,
    next_slot=NOW + timedelta(hours=1),
    next_fire_at=NOW + timedelta(hours=1),
    covered_until=NOW,
    deleted=False,
)
EVENTS = EventFactory(
    Topics(jobs="jobs", schedule_events="events", timer_events="timers", dlq="dlq"), source="ticker/t1"
)


def test_create_needs_a_free_id() -> None:
    require_new(None, "s")
    require_new(ROW._replace(deleted=True), "s")  # a deleted id may be reused
    with pytest.raises(CommandRefused, match="already exists"):
        require_new(ROW, "s")


def test_other_commands_need_a_live_schedule() -> None:
    assert require_live(ROW, "s") is ROW
    for row in (None, ROW._replace(deleted=True)):
        with pytest.raises(CommandRefused, match="does not exist"):
            require_live(row, "s")


def test_a_one_shot_outside_its_own_window_is_refused() -> None:
    once = ScheduleDefinition(spec=OnceSpec(at=NOW), handler="h", end_at=NOW - timedelta(hours=1))
    with pytest.raises(CommandRefused, match="outside start_at/end_at"):
        require_fireable(once, "s")
    require_fireable(ScheduleDefinition(spec=OnceSpec(at=NOW), handler="h"), "s")


def test_backfill_emits_the_slots_of_a_half_open_range() -> None:
    start = NOW - timedelta(hours=5)
    slots = backfill_plan(
        Backfill(schedule_id="s", start=start, end=start + timedelta(hours=3)), HOURLY, now=NOW
    )
    assert [s.at for s in slots] == [start, start + timedelta(hours=1), start + timedelta(hours=2)]


def test_backfill_refuses_more_than_max_slots_and_the_future() -> None:
    start = NOW - timedelta(days=2)
    with pytest.raises(CommandRefused, match="max_slots=5"):
        backfill_plan(Backfill(schedule_id="s", start=start, end=NOW, max_slots=5), HOURLY, now=NOW)
    with pytest.raises(CommandRefused, match="after the current time"):
        backfill_plan(Backfill(schedule_id="s", start=start, end=NOW + timedelta(seconds=1)), HOURLY, now=NOW)


def test_every_command_names_its_subject() -> None:
    fire = FireTimerFired(owner="wf")
    assert subject_of(StartTimer(timer_id="t1", fire_at=NOW, on_fire=fire)) == "t1"
    assert subject_of(CancelTimer(timer_id="t1")) == "t1"
    assert subject_of(TriggerNow(schedule_id="s")) == "s"


# --- envelopes ---------------------------------------------------------------------------------


def test_jobdue_is_named_and_keyed_by_its_slot() -> None:
    slot = NOW + timedelta(hours=1)
    staged = EVENTS.job_due("s", HOURLY, slot, kind="scheduled", fire_at=slot, occurred_at=slot)
    envelope = json.loads(staged.value)
    assert staged.topic == "jobs"
    assert staged.event_id == envelope["id"] == run_id("s", slot) == "s@2026-06-01T13:00:00Z"
    assert staged.key == envelope["key"] == "s"
    assert envelope["source"] == "ticker/t1"
    assert envelope["data"]["fire_at"] == "2026-06-01T13:00:00Z"
    assert json.loads(staged.headers) == {"slotflow-type": "job.due", "slotflow-version": "1"}
    again = EVENTS.job_due(
        "s", HOURLY, slot, kind="scheduled", fire_at=slot, occurred_at=slot + timedelta(seconds=9)
    )
    assert again.event_id == staged.event_id  # a second staging collapses on the outbox's unique id


def storable_text(*, max_size: int) -> st.SearchStrategy[str]:
    return st.text(
        alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=max_size
    )


@settings(max_examples=200, deadline=None)
@given(
    schedule_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,40}", fullmatch=True),
    # Text the acceptance rule lets through: a definition with a NUL is refused before it is stored.
    payload=st.dictionaries(
        storable_text(max_size=8), st.one_of(st.integers(), storable_text(max_size=8), st.none()), max_size=4
    ),
    tags=st.lists(storable_text(max_size=10), max_size=3).map(tuple),
    slot=st.datetimes(min_value=NAIVE_MIN, max_value=NAIVE_MAX, timezones=st.just(UTC)),
    delay=st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=1)),
    kind=st.sampled_from(["scheduled", "manual", "backfill"]),
    base=st.integers(1, 100),
)
def test_the_fast_jobdue_is_byte_for_byte_the_validated_one(
    schedule_id: str,
    payload: dict[str, object],
    tags: tuple[str, ...],
    slot: datetime,
    delay: timedelta,
    kind: Literal["scheduled", "manual", "backfill"],
    base: int,
) -> None:
    definition = ScheduleDefinition(
        spec=CronSpec(expression="* * * * *"),
        handler="h.x",
        payload=payload,
        tags=tags,
        retry=RetryPolicy(base=timedelta(milliseconds=base), cap=timedelta(seconds=base)),
        overlap="buffer_one",
    )
    args = (schedule_id, definition, slot)
    fast = EVENTS.job_due(*args, kind=kind, fire_at=slot + delay, occurred_at=slot + 2 * delay)
    slow = EVENTS.job_due_validated(*args, kind=kind, fire_at=slot + delay, occurred_at=slot + 2 * delay)
    assert fast == encoded(slow)  # the very row append_many would have stored
    assert JobDue.model_validate(json.loads(fast.value)["data"]).slot == slot


def test_nominal_times_lost_in_one_dst_gap_keep_separate_records() -> None:
    gap = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    a = EVENTS.slot_skipped("s", SkippedSlot(gap, "dst_nonexistent", "local time 02:00 ..."), occurred_at=gap)
    b = EVENTS.slot_skipped("s", SkippedSlot(gap, "dst_nonexistent", "local time 02:15 ..."), occurred_at=gap)
    assert a.envelope.id != b.envelope.id
    assert a.envelope.data["run_id"] == b.envelope.data["run_id"] == run_id("s", gap)
    missed = EVENTS.slot_skipped("s", SkippedSlot(gap, "misfire"), occurred_at=gap)
    assert missed.envelope.id == f"{run_id('s', gap)}/skipped"


def test_timer_fired_goes_to_its_owner() -> None:
    staged = EVENTS.timer_fired("sleep:wf/3", owner="wf", sequence=3, fire_at=NOW, fired_at=NOW)
    assert (staged.topic, staged.envelope.key, staged.envelope.id) == ("timers", "wf", "timer:sleep:wf/3")


def test_command_acknowledgements_are_named_by_the_command() -> None:
    ok = EVENTS.accepted(command_id="c1", command_type="schedule.create", subject="s", occurred_at=NOW)
    no = EVENTS.rejected(
        command_id="c1", command_type="schedule.create", subject="s", reason="r", occurred_at=NOW
    )
    assert (ok.envelope.id, no.envelope.id) == ("c1/accepted", "c1/rejected")
    assert json.loads(no.envelope.model_dump_json())["data"]["reason"] == "r"


def test_interval_backfill_stays_on_the_anchor_grid() -> None:
    every = ScheduleDefinition(
        spec=IntervalSpec(every=timedelta(minutes=7), anchor=NOW - timedelta(days=1, seconds=3)), handler="h"
    )
    slots = backfill_plan(Backfill(schedule_id="s", start=NOW - timedelta(hours=1), end=NOW), every, now=NOW)
    assert all((s.at - every.spec.anchor) % timedelta(minutes=7) == timedelta(0) for s in slots)  # type: ignore[union-attr]
    assert len(slots) in (8, 9)


def test_the_tickers_own_cap_bounds_every_backfill() -> None:
    start = NOW - timedelta(hours=10)
    asked = Backfill(schedule_id="s", start=start, end=start + timedelta(hours=4), max_slots=100_000)
    assert len(backfill_plan(asked, HOURLY, now=NOW, cap=4)) == 4
    wider = Backfill(schedule_id="s", start=start, end=start + timedelta(hours=5), max_slots=100_000)
    with pytest.raises(CommandRefused, match="SLOTFLOW_TICKER_MAX_BACKFILL_SLOTS"):
        backfill_plan(wider, HOURLY, now=NOW, cap=4)
    # Its own max_slots, when smaller, still speaks for itself.
    with pytest.raises(CommandRefused, match="max_slots=2"):
        backfill_plan(wider.model_copy(update={"max_slots": 2}), HOURLY, now=NOW, cap=4)


def test_a_backfill_across_a_spring_forward_gap_names_each_skipped_local_time() -> None:
    # Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC); 02:00-02:59 never happen.
    quarterly = ScheduleDefinition(
        spec=CronSpec(expression="*/15 * * * *", timezone="Europe/Berlin"),
        handler="h",
        dst=DstPolicy(nonexistent="skip"),
    )
    start, end = datetime(2026, 3, 29, 0, tzinfo=UTC), datetime(2026, 3, 29, 2, tzinfo=UTC)
    command = Backfill(schedule_id="s", start=start, end=end)
    slots = backfill_plan(command, quarterly, now=NOW)
    skips = backfill_skips(command, quarterly)
    assert [s.at for s in slots] == [start + timedelta(minutes=15 * k) for k in range(4)] + [
        start + timedelta(hours=1, minutes=15 * k) for k in range(4)
    ]
    transition = datetime(2026, 3, 29, 1, tzinfo=UTC)
    assert [(s.at, s.reason) for s in skips] == [(transition, "dst_nonexistent")] * 4
    assert [s.detail.split()[2] for s in skips] == [f"2026-03-29T02:{m:02}:00" for m in (0, 15, 30, 45)]
    # Shifted slots fire, so nothing is skipped; and a range without the gap skips nothing.
    assert backfill_skips(command, quarterly.model_copy(update={"dst": DstPolicy()})) == []
    assert backfill_skips(command.model_copy(update={"end": transition}), quarterly) == []
    with pytest.raises(CommandRefused, match="more than 3 local times"):
        backfill_skips(command, quarterly, cap=3)


CHECKED_AT = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (CronSpec(expression="0 0 30 2 *"), "matches no date that exists"),
        (CronSpec(expression="0 0 31 4 *"), "matches no date that exists"),
        (IntervalSpec(every=timedelta(days=999_999_999)), "past the year 9999"),
    ],
)
def test_a_schedule_that_can_never_fire_is_refused_with_why(spec: CronSpec | IntervalSpec, why: str) -> None:
    """Issue 23: these were accepted and silently never fired."""
    with pytest.raises(CommandRefused, match=f"schedule never can never fire: .*{why}"):
        require_some_slot(ScheduleDefinition(spec=spec, handler="h"), "never", now=CHECKED_AT)


@pytest.mark.parametrize(
    "definition",
    [
        ScheduleDefinition(spec=CronSpec(expression="0 0 29 2 *"), handler="h"),  # leap years exist
        # The 29th or the 4th Sunday: refused as "matches no date that exists" while croniter read it.
        ScheduleDefinition(spec=CronSpec(expression="0 0 29 * 0#4"), handler="h"),
        ScheduleDefinition(spec=CronSpec(expression="H H * * *"), handler="h"),  # H drawn from "ok"
        ScheduleDefinition(spec=IntervalSpec(every=timedelta(days=3650)), handler="h"),
        ScheduleDefinition(
            spec=OnceSpec(at=CHECKED_AT - timedelta(days=1)), handler="h"
        ),  # its misfire policy's
        ScheduleDefinition(
            spec=CronSpec(expression="0 0 * * *"), handler="h", end_at=CHECKED_AT - timedelta(days=1)
        ),  # finished, not broken
    ],
)
def test_schedules_that_can_fire_or_have_finished_pass(definition: ScheduleDefinition) -> None:
    require_some_slot(definition, "ok", now=CHECKED_AT)
