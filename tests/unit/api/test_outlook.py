"""A schedule's outlook (status, next fire, next slots) from its definition at read time."""

from datetime import UTC, datetime, timedelta

from slotflow.contracts import CronSpec, DstPolicy, IntervalSpec, MisfirePolicy, OnceSpec, ScheduleDefinition
from slotflow.core.cronslots import preview
from slotflow_api.outlook import fire_time, outlook

NOW = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def every_minute(**extra: object) -> ScheduleDefinition:
    return ScheduleDefinition.model_validate({"spec": IntervalSpec(every=MINUTE), "handler": "h.x", **extra})


def test_the_next_fire_is_the_first_slot_after_now_not_the_last_announced_one() -> None:
    seen = outlook(
        "s", every_minute(), paused=False, resume_at=None, deleted=False, once_handled=False, now=NOW
    )
    assert seen.status == "active"
    assert seen.next_fire_at == datetime(2026, 3, 1, 12, 1, tzinfo=UTC)
    assert [slot.at.minute for slot in seen.next_slots] == [1, 2, 3, 4, 5]


def test_a_slot_due_this_instant_is_still_ahead() -> None:
    at = datetime(2026, 3, 1, 12, 1, tzinfo=UTC)
    seen = outlook(
        "s", every_minute(), paused=False, resume_at=None, deleted=False, once_handled=False, now=at
    )
    assert seen.next_fire_at == at


def test_jitter_is_the_tickers_own() -> None:
    definition = every_minute(jitter=timedelta(seconds=20))
    seen = outlook("s", definition, paused=False, resume_at=None, deleted=False, once_handled=False, now=NOW)
    slot = datetime(2026, 3, 1, 12, 1, tzinfo=UTC)
    assert seen.next_fire_at == fire_time("s", definition, slot)
    assert slot <= seen.next_fire_at < slot + timedelta(seconds=20)


def test_paused_without_resume_promises_nothing() -> None:
    seen = outlook(
        "s", every_minute(), paused=True, resume_at=None, deleted=False, once_handled=False, now=NOW
    )
    assert (seen.status, seen.next_fire_at, seen.next_slots) == ("paused", None, [])


def test_paused_until_resume_at_skips_the_pause_under_the_skip_policy() -> None:
    definition = every_minute(misfire=MisfirePolicy(policy="skip", grace=timedelta(seconds=1)))
    resume = datetime(2026, 3, 1, 12, 10, 30, tzinfo=UTC)
    seen = outlook("s", definition, paused=True, resume_at=resume, deleted=False, once_handled=False, now=NOW)
    assert seen.status == "paused"
    assert seen.next_fire_at == datetime(2026, 3, 1, 12, 11, tzinfo=UTC)
    assert all(slot.at > resume for slot in seen.next_slots)


def test_an_automatic_resume_never_catches_up_even_under_fire_once() -> None:
    # The slots passing during the pause are skipped (`paused`) by the ticker, so the first
    # firing is the first slot after resume_at, not a catch-up at resume_at.
    resume = datetime(2026, 3, 1, 12, 10, 30, tzinfo=UTC)
    seen = outlook(
        "s", every_minute(), paused=True, resume_at=resume, deleted=False, once_handled=False, now=NOW
    )
    assert seen.next_fire_at == datetime(2026, 3, 1, 12, 11, tzinfo=UTC)
    assert seen.next_slots[0].at == datetime(2026, 3, 1, 12, 11, tzinfo=UTC)


def test_a_missed_slot_older_than_the_catch_up_window_does_not_fire_at_resume() -> None:
    definition = ScheduleDefinition(
        spec=IntervalSpec(every=timedelta(hours=6)),
        handler="h.x",
        misfire=MisfirePolicy(policy="fire_all", catch_up_window=timedelta(minutes=5)),
    )
    resume = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)  # the missed 12:00 slot was an hour before
    later = datetime(2026, 3, 1, 11, 0, tzinfo=UTC)
    seen = outlook(
        "s", definition, paused=True, resume_at=resume, deleted=False, once_handled=False, now=later
    )
    assert seen.next_fire_at == datetime(2026, 3, 1, 18, 0, tzinfo=UTC)


def test_end_at_and_start_at_bound_the_slots() -> None:
    ended = every_minute(end_at=datetime(2026, 3, 1, 12, 2, tzinfo=UTC))
    seen = outlook("s", ended, paused=False, resume_at=None, deleted=False, once_handled=False, now=NOW)
    assert [slot.at.minute for slot in seen.next_slots] == [1, 2]
    after_end = outlook(
        "s", ended, paused=False, resume_at=None, deleted=False, once_handled=False, now=NOW + 5 * MINUTE
    )
    assert (after_end.status, after_end.next_fire_at) == ("finished", None)
    later = every_minute(start_at=datetime(2026, 3, 2, tzinfo=UTC))
    seen = outlook("s", later, paused=False, resume_at=None, deleted=False, once_handled=False, now=NOW)
    assert seen.next_fire_at == datetime(2026, 3, 2, tzinfo=UTC)


def test_a_one_shot_is_finished_once_handled_and_due_while_not() -> None:
    at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    once = ScheduleDefinition(spec=OnceSpec(at=at), handler="h.x")
    fired = outlook("s", once, paused=False, resume_at=None, deleted=False, once_handled=True, now=NOW)
    assert (fired.status, fired.next_fire_at, fired.next_slots) == ("finished", None, [])
    overdue = outlook("s", once, paused=False, resume_at=None, deleted=False, once_handled=False, now=NOW)
    assert (overdue.status, overdue.next_fire_at) == ("active", at)
    ahead = outlook(
        "s", once, paused=False, resume_at=None, deleted=False, once_handled=False, now=at - MINUTE
    )
    assert [slot.at for slot in ahead.next_slots] == [at]


def test_a_deleted_schedule_has_no_outlook() -> None:
    seen = outlook(
        "s", every_minute(), paused=False, resume_at=None, deleted=True, once_handled=False, now=NOW
    )
    assert (seen.status, seen.next_fire_at, seen.next_slots) == ("deleted", None, [])


def test_an_h_schedules_next_slots_are_the_tickers_for_its_own_id() -> None:
    definition = ScheduleDefinition(spec=CronSpec(expression="H H * * *"), handler="h")
    for schedule_id in ("payouts-a", "payouts-b"):
        seen = outlook(
            schedule_id, definition, paused=False, resume_at=None, deleted=False, once_handled=False, now=NOW
        )
        ticker = preview(
            definition.spec, DstPolicy(), after=NOW, count=len(seen.next_slots), schedule_id=schedule_id
        )
        assert seen.next_slots == ticker
