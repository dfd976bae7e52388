"""Claim planning: what one claim fires, skips and where the grid resumes (pure, no I/O)."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from slotflow.contracts import CronSpec, DstPolicy, IntervalSpec, MisfirePolicy, OnceSpec, ScheduleDefinition
from slotflow.core.cronslots import next_slot
from slotflow.core.identity import run_id
from slotflow_ticker.planning import (
    EPSILON,
    ClaimPlan,
    PauseWindow,
    Position,
    ScheduleState,
    fire_time,
    manual_slot,
    plan_due,
    start_position,
)

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def definition(spec: Any, **kwargs: Any) -> ScheduleDefinition:
    return ScheduleDefinition(spec=spec, handler="h", **kwargs)


def every_minute(**kwargs: Any) -> ScheduleDefinition:
    return definition(CronSpec(expression="* * * * *"), **kwargs)


def created(defn: ScheduleDefinition, at: datetime, schedule_id: str = "s") -> ScheduleState:
    return ScheduleState(schedule_id, defn, start_position(schedule_id, defn, after=at))


def run_until_settled(state: ScheduleState, *, now: datetime, max_slots: int) -> list[ClaimPlan]:
    plans = []
    for _ in range(10_000):
        plan = plan_due(state, now=now, max_slots=max_slots)
        plans.append(plan)
        state = state._replace(position=plan.position)
        if not plan.more:
            return plans
    raise AssertionError("claims never settled the backlog")


def test_a_new_schedule_starts_strictly_after_its_creation() -> None:
    state = created(every_minute(), T0)
    assert state.position == Position(T0 + timedelta(minutes=1), T0 + timedelta(minutes=1), T0)


def test_a_slow_claim_fires_the_slot_and_stays_on_the_grid() -> None:
    state = created(every_minute(), T0)
    # The claim runs 40 s late (within the default 60 s grace): the slot fires, and the next one
    # is computed from the slot, not from the time of the claim.
    plan = plan_due(state, now=T0 + timedelta(minutes=1, seconds=40), max_slots=100)
    assert [f.at for f in plan.fire] == [T0 + timedelta(minutes=1)]
    assert plan.skip == ()
    assert plan.position.next_slot == T0 + timedelta(minutes=2)
    assert plan.position.covered_until == T0 + timedelta(minutes=1, seconds=40)
    assert not plan.more


def test_nothing_fires_before_its_slot() -> None:
    state = created(every_minute(), T0)
    plan = plan_due(state, now=T0 + timedelta(seconds=59, microseconds=999_999), max_slots=100)
    assert plan.fire == ()
    assert plan.position.next_slot == T0 + timedelta(minutes=1)


@pytest.mark.parametrize(
    ("policy", "fired_minutes", "skipped"),
    [
        ("fire_once", [10], 9),  # the newest missed slot (10) fires; 1..9 are recorded as skipped
        ("skip", [], 10),
        ("fire_all", [8, 9, 10], 7),  # max_catch_up=3 keeps the newest three
    ],
)
def test_downtime_follows_the_misfire_policy(
    policy: Literal["fire_all", "fire_once", "skip"], fired_minutes: list[int], skipped: int
) -> None:
    misfire = MisfirePolicy(policy=policy, max_catch_up=3, grace=timedelta(seconds=30))
    state = created(every_minute(misfire=misfire), T0)
    plan = plan_due(state, now=T0 + timedelta(minutes=10, seconds=45), max_slots=100)
    assert [f.at for f in plan.fire] == [T0 + timedelta(minutes=m) for m in fired_minutes]
    assert len(plan.skip) == skipped
    assert {s.reason for s in plan.skip} <= {"misfire"}
    fired = {f.at for f in plan.fire}
    assert fired.isdisjoint(s.at for s in plan.skip)
    assert fired | {s.at for s in plan.skip} == {T0 + timedelta(minutes=m) for m in range(1, 11)}
    assert plan.position.next_slot == T0 + timedelta(minutes=11)


def test_slots_older_than_the_catch_up_window_never_fire() -> None:
    misfire = MisfirePolicy(policy="fire_all", catch_up_window=timedelta(minutes=5), grace=timedelta(0))
    state = created(every_minute(misfire=misfire), T0)
    plan = plan_due(state, now=T0 + timedelta(minutes=10, seconds=30), max_slots=100)
    assert [f.at for f in plan.fire] == [T0 + timedelta(minutes=m) for m in range(6, 11)]
    assert [s.reason for s in plan.skip] == ["outside_catch_up_window"] * 5


def test_slots_missed_while_paused_are_reported_as_paused() -> None:
    misfire = MisfirePolicy(policy="skip", grace=timedelta(seconds=10))
    state = created(every_minute(misfire=misfire), T0)
    pause = PauseWindow(T0 + timedelta(minutes=2, seconds=30), T0 + timedelta(minutes=6), "maintenance")
    plans = run_until_settled(
        state._replace(pause=pause), now=T0 + timedelta(minutes=6, seconds=30), max_slots=100
    )
    skips = [s for plan in plans for s in plan.skip]
    reasons = {s.at: s.reason for s in skips}
    assert reasons[T0 + timedelta(minutes=2)] == "misfire"  # before the pause began
    assert reasons[T0 + timedelta(minutes=3)] == "paused"
    assert reasons[T0 + timedelta(minutes=6)] == "misfire"  # resumed at 6:00; the slot is at 6:00
    assert "maintenance" in next(s.detail for s in skips if s.reason == "paused")


def test_a_pause_shorter_than_the_grace_skips_its_slots_unless_the_resume_catches_up() -> None:
    state = created(every_minute(misfire=MisfirePolicy(policy="fire_all", grace=timedelta(minutes=10))), T0)
    pause = PauseWindow(T0 + timedelta(minutes=2, seconds=30), T0 + timedelta(minutes=6), "bank")
    now = T0 + timedelta(minutes=6, seconds=1)
    plans = run_until_settled(state._replace(pause=pause), now=now, max_slots=100)
    # 1:00 and 2:00 came before the pause and 6:00 at its end: late, so they fire; 3:00 to 5:00
    # passed while paused and are skipped, however short the pause was.
    assert [f.at for p in plans for f in p.fire] == [T0 + timedelta(minutes=m) for m in (1, 2, 6)]
    skipped = [(s.at, s.reason) for p in plans for s in p.skip]
    assert skipped == [(T0 + timedelta(minutes=m), "paused") for m in (3, 4, 5)]
    assert plans[-1].position.next_slot == T0 + timedelta(minutes=7)
    caught_up = plan_due(state._replace(pause=replace(pause, catch_up=True)), now=now, max_slots=100)
    assert [f.at for f in caught_up.fire] == [T0 + timedelta(minutes=m) for m in range(1, 7)]
    assert caught_up.skip == ()


def test_a_paused_slot_still_ahead_of_the_claim_is_left_for_later() -> None:
    # The resume's instant can be later than a claim's transaction start (clock_timestamp), so a
    # slot inside the pause may still be ahead of `now`: nothing to plan yet, and no endless loop.
    state = created(every_minute(), T0)
    pause = PauseWindow(T0, T0 + timedelta(minutes=5))
    plan = plan_due(state._replace(pause=pause), now=T0 + timedelta(seconds=30), max_slots=100)
    assert (plan.fire, plan.skip, plan.more) == ((), (), False)
    assert plan.position.next_slot == T0 + timedelta(minutes=1)


def test_a_long_pause_is_settled_over_several_claims_and_fires_nothing_of_it() -> None:
    defn = definition(CronSpec(expression="* * * * * *"))
    state = created(defn, T0)
    pause = PauseWindow(T0 + timedelta(milliseconds=500), T0 + timedelta(seconds=1000, milliseconds=500))
    plans = run_until_settled(
        state._replace(pause=pause), now=T0 + timedelta(seconds=1000, milliseconds=700), max_slots=64
    )
    assert len(plans) > 10
    skipped = [s.at for p in plans for s in p.skip]
    assert skipped == [T0 + timedelta(seconds=k) for k in range(1, 1001)]
    assert {s.reason for p in plans for s in p.skip} == {"paused"}
    assert [f.at for p in plans for f in p.fire] == []


def test_force_skip_records_every_passed_slot_as_paused() -> None:
    state = created(every_minute(), T0)
    plan = plan_due(state, now=T0 + timedelta(minutes=3), max_slots=100, force_skip=True)
    assert plan.fire == ()
    assert [(s.at, s.reason) for s in plan.skip] == [(T0 + timedelta(minutes=m), "paused") for m in (1, 2, 3)]
    assert plan.position.next_slot == T0 + timedelta(minutes=4)


def test_a_long_backlog_is_settled_in_chunks_that_each_stay_claimable() -> None:
    misfire = MisfirePolicy(policy="fire_all", max_catch_up=5, grace=timedelta(seconds=1))
    defn = definition(CronSpec(expression="* * * * * *"), misfire=misfire)
    state = created(defn, T0)
    now = T0 + timedelta(seconds=2500, milliseconds=500)
    plans = run_until_settled(state, now=now, max_slots=400)
    assert len(plans) > 5
    assert all(p.more for p in plans[:-1])
    fired = [f.at for p in plans for f in p.fire]
    skipped = [s.at for p in plans for s in p.skip]
    assert len(fired) == 6  # five newest missed plus the one within grace
    assert sorted(fired + skipped) == [T0 + timedelta(seconds=k) for k in range(1, 2501)]


def test_a_past_one_shot_is_not_dropped_but_meets_the_misfire_policy() -> None:
    once = definition(OnceSpec(at=T0 - timedelta(minutes=5)), misfire=MisfirePolicy(policy="skip"))
    state = created(once, T0)
    assert state.position.next_slot == T0 - timedelta(minutes=5)
    plan = plan_due(state, now=T0, max_slots=10)
    assert plan.fire == ()
    assert [s.at for s in plan.skip] == [T0 - timedelta(minutes=5)]
    assert plan.position.next_slot is None
    assert plan.position.next_fire_at is None


def test_end_at_stops_the_grid() -> None:
    defn = every_minute(end_at=T0 + timedelta(minutes=2))
    plan = plan_due(created(defn, T0), now=T0 + timedelta(minutes=5, seconds=10), max_slots=10)
    assert len(plan.fire) + len(plan.skip) == 2
    assert plan.position.next_fire_at is None


def test_jitter_delays_a_slot_but_never_advances_it() -> None:
    defn = every_minute(jitter=timedelta(seconds=50))
    state = created(defn, T0)
    slot = T0 + timedelta(minutes=1)
    fire_at = fire_time("s", defn, slot)
    assert slot <= fire_at < slot + timedelta(seconds=50)
    assert state.position.next_fire_at == fire_at
    assert plan_due(state, now=fire_at - EPSILON, max_slots=10).fire == ()
    plan = plan_due(state, now=fire_at, max_slots=10)
    assert [(f.at, f.fire_at) for f in plan.fire] == [(slot, fire_at)]


def test_a_jittered_slot_is_late_not_missed_while_within_grace_plus_jitter() -> None:
    # grace 5 s, jitter 50 s: a slot firing 40 s after its instant is on its jittered time.
    defn = every_minute(
        jitter=timedelta(seconds=50), misfire=MisfirePolicy(policy="skip", grace=timedelta(seconds=5))
    )
    state = created(defn, T0)
    fire_at = state.position.next_fire_at
    assert fire_at is not None
    plan = plan_due(state, now=fire_at + timedelta(seconds=1), max_slots=10)
    assert len(plan.fire) == 1


# --- DST ---------------------------------------------------------------------------------------


def test_a_local_time_that_does_not_exist_is_recorded_as_skipped_when_its_instant_passes() -> None:
    # Europe/Berlin jumps from 02:00 to 03:00 on 2026-03-29 (01:00 UTC).
    defn = definition(
        CronSpec(expression="30 2 * * *", timezone="Europe/Berlin"), dst=DstPolicy(nonexistent="skip")
    )
    state = created(defn, datetime(2026, 3, 28, 12, 0, tzinfo=UTC))
    # The next real slot is on the 30th; the row is nevertheless due at the transition instant.
    assert state.position.next_slot == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)
    assert state.position.next_fire_at == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    plan = plan_due(state, now=datetime(2026, 3, 29, 1, 0, 0, 5000, tzinfo=UTC), max_slots=10)
    assert plan.fire == ()
    assert [s.reason for s in plan.skip] == ["dst_nonexistent"]
    assert "02:30" in plan.skip[0].detail
    assert plan.position.next_fire_at == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)


def test_a_local_time_that_does_not_exist_shifts_by_default() -> None:
    defn = definition(CronSpec(expression="30 2 * * *", timezone="Europe/Berlin"))
    state = created(defn, datetime(2026, 3, 28, 12, 0, tzinfo=UTC))
    assert state.position.next_slot == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST


@pytest.mark.parametrize(
    ("repeated", "expected_utc_hours"),
    [("first", [5]), ("last", [6]), ("both", [5, 6])],
)
def test_a_repeated_local_time_fires_per_policy(
    repeated: Literal["first", "last", "both"], expected_utc_hours: list[int]
) -> None:
    # America/New_York repeats 01:00-02:00 on 2026-11-01 (EDT 05:00Z, then EST 06:00Z).
    defn = definition(
        CronSpec(expression="30 1 * * *", timezone="America/New_York"), dst=DstPolicy(repeated=repeated)
    )
    state = created(defn, datetime(2026, 10, 31, 12, 0, tzinfo=UTC))
    fired = ticking_on_time(state, until=datetime(2026, 11, 1, 7, 0, tzinfo=UTC))
    assert fired == [
        datetime(2026, 10, 31, 5, 30, tzinfo=UTC) + timedelta(days=1, hours=h - 5) for h in expected_utc_hours
    ]


def ticking_on_time(state: ScheduleState, *, until: datetime) -> list[datetime]:
    """Claim each time the row falls due (3 ms late), as a healthy ticker does; the fired slots."""
    fired: list[datetime] = []
    while state.position.next_fire_at is not None and state.position.next_fire_at <= until:
        plan = plan_due(state, now=state.position.next_fire_at + timedelta(milliseconds=3), max_slots=10)
        assert plan.skip == () or all(s.reason == "dst_nonexistent" for s in plan.skip)
        fired.extend(f.at for f in plan.fire)
        state = state._replace(position=plan.position)
    return fired


# --- properties --------------------------------------------------------------------------------

SPECS = st.sampled_from(
    [
        CronSpec(expression="*/7 * * * * *"),
        CronSpec(expression="* * * * *"),
        CronSpec(expression="*/15 * * * *", timezone="Europe/Berlin"),
        IntervalSpec(every=timedelta(seconds=13), anchor=T0 - timedelta(seconds=5)),
    ]
)
POLICIES = st.builds(
    MisfirePolicy,
    policy=st.sampled_from(["fire_all", "fire_once", "skip"]),
    max_catch_up=st.integers(1, 50),
    catch_up_window=st.sampled_from([timedelta(minutes=3), timedelta(hours=1), timedelta(days=1)]),
    grace=st.sampled_from([timedelta(0), timedelta(seconds=20), timedelta(minutes=2)]),
)


@settings(max_examples=150, deadline=None)
@given(
    spec=SPECS,
    misfire=POLICIES,
    jitter=st.sampled_from([timedelta(0), timedelta(seconds=9)]),
    downtime=st.integers(0, 3 * 3600),
    chunk=st.integers(1, 200),
)
def test_chunked_claims_decide_exactly_what_one_big_claim_decides(
    spec: Any, misfire: MisfirePolicy, jitter: timedelta, downtime: int, chunk: int
) -> None:
    defn = definition(spec, misfire=misfire, jitter=jitter)
    state = created(defn, T0)
    now = T0 + timedelta(seconds=downtime, microseconds=250_000)
    chunked = run_until_settled(state, now=now, max_slots=chunk)
    whole = plan_due(state, now=now, max_slots=1_000_000)
    assert not whole.more
    fired = [f.at for p in chunked for f in p.fire]
    skipped = [(s.at, s.reason) for p in chunked for s in p.skip]
    assert fired == [f.at for f in whole.fire]
    assert skipped == [(s.at, s.reason) for s in whole.skip]
    assert chunked[-1].position == whole.position
    # Every slot up to the new coverage is handled exactly once, and nothing fires early.
    handled = sorted(fired + [at for at, _ in skipped])
    assert len(handled) == len(set(handled))
    assert all(fire_time("s", defn, at) <= now for at in fired)
    assert whole.position.next_slot is None or whole.position.next_slot > whole.position.covered_until


@settings(max_examples=60, deadline=None)
@given(
    expression=st.sampled_from(["*/5 * * * * *", "7,37 * * * * *", "0 */2 * * * *", "*/3 * * * *"]),
    steps=st.integers(1, 40),
)
def test_successive_claims_fire_exactly_croniters_sequence(expression: str, steps: int) -> None:
    defn = definition(CronSpec(expression=expression))
    state = created(defn, T0)
    fired: list[datetime] = []
    now = T0
    for _ in range(steps):
        assert state.position.next_fire_at is not None
        now = state.position.next_fire_at + timedelta(milliseconds=3)
        plan = plan_due(state, now=now, max_slots=10)
        assert plan.skip == ()
        fired.extend(f.at for f in plan.fire)
        state = state._replace(position=plan.position)
    expected = croniter(expression, T0, ret_type=datetime, second_at_beginning=len(expression.split()) == 6)
    assert fired == [expected.get_next(datetime) for _ in fired]
    assert len(fired) == steps


def test_a_manual_trigger_names_its_run_to_the_second_unless_that_is_a_grid_slot() -> None:
    hourly = ScheduleDefinition(spec=CronSpec(expression="0 * * * *"), handler="h")
    now = datetime(2026, 12, 2, 11, 35, 12, 483_920, tzinfo=UTC)
    assert manual_slot("s", hourly, now) == now.replace(microsecond=0)
    assert run_id("s", manual_slot("s", hourly, now)) == "s@2026-12-02T11:35:12Z"
    # 12:00:00 is the hourly slot: the fraction keeps the trigger's run apart from the scheduled one.
    on_the_hour = datetime(2026, 12, 2, 12, 0, 0, 250_000, tzinfo=UTC)
    assert manual_slot("s", hourly, on_the_hour) == on_the_hour
    exact = datetime(2026, 12, 2, 11, 35, 12, tzinfo=UTC)
    assert manual_slot("s", hourly, exact) == exact


def test_schedules_sharing_an_h_definition_each_draw_from_their_own_id() -> None:
    # Parsed definitions are shared objects (one per stored text) and the next-slot memo is keyed by
    # them: an H cron must still be computed per schedule id, as the api computes it.
    shared = ScheduleDefinition(spec=CronSpec(expression="H H * * *"), handler="h")
    firsts = {}
    for schedule_id in ("payouts-a", "payouts-b", "payouts-c", "payouts-d"):
        position = start_position(schedule_id, shared, after=T0)
        expected = next_slot(shared.spec, shared.dst, after=T0, schedule_id=schedule_id)
        assert expected is not None
        assert position.next_slot == expected.at
        firsts[schedule_id] = position.next_slot
    assert len(set(firsts.values())) > 1
    # ...and the same id asked again gets the same answer.
    assert start_position("payouts-a", shared, after=T0).next_slot == firsts["payouts-a"]
