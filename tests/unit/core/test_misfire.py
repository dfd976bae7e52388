"""Misfire planning (what fires after downtime) and per-slot jitter."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slotflow.contracts.policies import MisfirePolicy
from slotflow.core.cronslots import MisfirePlan, SkippedSlot, Slot, jitter_offset, plan_misfire
from slotflow.core.identity import NaiveDatetime, run_id

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def slot(ago: timedelta) -> Slot:
    at = NOW - ago
    return Slot(at, at.isoformat())


def minutes(*ago: int) -> list[Slot]:
    return sorted(slot(timedelta(minutes=m)) for m in ago)


def ats(items: tuple[Slot, ...] | tuple[SkippedSlot, ...]) -> list[datetime]:
    return [item.at for item in items]


# --- examples -----------------------------------------------------------------------------------


def test_late_slots_within_grace_always_fire() -> None:
    due = [slot(timedelta(seconds=59)), slot(timedelta(seconds=60)), slot(timedelta(0))]
    for kind in ("fire_all", "fire_once", "skip"):
        plan = plan_misfire(MisfirePolicy(policy=kind, grace=timedelta(seconds=60)), due, now=NOW)
        assert plan == MisfirePlan(fire=tuple(sorted(due)), skip=())


def test_fire_once_fires_the_newest_missed_slot() -> None:
    due = minutes(50, 40, 30, 20, 10)
    plan = plan_misfire(MisfirePolicy(policy="fire_once"), due, now=NOW)
    assert ats(plan.fire) == [NOW - timedelta(minutes=10)]
    assert ats(plan.skip) == [s.at for s in due[:-1]]
    assert {s.reason for s in plan.skip} == {"misfire"}


def test_fire_all_keeps_the_newest_up_to_max_catch_up() -> None:
    due = minutes(5, 4, 3, 2)
    plan = plan_misfire(MisfirePolicy(policy="fire_all", max_catch_up=3), due, now=NOW)
    assert ats(plan.fire) == [s.at for s in due[1:]]
    assert ats(plan.skip) == [due[0].at]
    assert plan.skip[0].reason == "misfire"


def test_skip_fires_nothing_missed_but_keeps_the_late() -> None:
    due = [*minutes(30, 20), slot(timedelta(seconds=10))]
    plan = plan_misfire(MisfirePolicy(policy="skip"), due, now=NOW)
    assert ats(plan.fire) == [NOW - timedelta(seconds=10)]
    assert [s.reason for s in plan.skip] == ["misfire", "misfire"]


def test_older_than_the_catch_up_window_never_fires() -> None:
    window = timedelta(hours=1)
    due = [
        slot(timedelta(hours=3)),
        slot(window + timedelta(seconds=1)),
        slot(window),
        slot(timedelta(minutes=5)),
    ]
    plan = plan_misfire(MisfirePolicy(policy="fire_all", catch_up_window=window), due, now=NOW)
    assert ats(plan.fire) == [NOW - window, NOW - timedelta(minutes=5)]
    assert [(s.at, s.reason) for s in plan.skip] == [
        (NOW - timedelta(hours=3), "outside_catch_up_window"),
        (NOW - window - timedelta(seconds=1), "outside_catch_up_window"),
    ]
    assert "catch-up window" in plan.skip[0].detail


def test_order_of_the_input_does_not_matter() -> None:
    due = minutes(9, 3, 6)
    policy = MisfirePolicy(policy="fire_all", max_catch_up=2)
    assert plan_misfire(policy, due, now=NOW) == plan_misfire(policy, list(reversed(due)), now=NOW)


def test_future_duplicate_and_naive_inputs_are_refused() -> None:
    policy = MisfirePolicy()
    with pytest.raises(ValueError, match="not due"):
        plan_misfire(policy, [slot(timedelta(seconds=-1))], now=NOW)
    with pytest.raises(ValueError, match="twice"):
        plan_misfire(policy, [slot(timedelta(minutes=1)), slot(timedelta(minutes=1))], now=NOW)
    with pytest.raises(NaiveDatetime):
        plan_misfire(policy, [], now=NOW.replace(tzinfo=None))


def test_nothing_due_plans_nothing() -> None:
    assert plan_misfire(MisfirePolicy(), [], now=NOW) == MisfirePlan(fire=(), skip=())


# --- properties ---------------------------------------------------------------------------------

policies = st.builds(
    MisfirePolicy,
    policy=st.sampled_from(["fire_all", "fire_once", "skip"]),
    max_catch_up=st.integers(1, 20),
    catch_up_window=st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=2)),
    grace=st.timedeltas(min_value=timedelta(0), max_value=timedelta(minutes=10)),
)
due_slots = st.lists(
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)), unique=True, max_size=60
).map(lambda agos: [slot(ago) for ago in agos])


@settings(max_examples=300, deadline=None)
@given(policy=policies, due=due_slots)
def test_plan_partitions_the_due_slots_within_the_policy(policy: MisfirePolicy, due: list[Slot]) -> None:
    plan = plan_misfire(policy, due, now=NOW)
    fired = ats(plan.fire)
    skipped = ats(plan.skip)

    # Exactly a partition: every due slot once, on one side.
    assert sorted(fired + skipped) == sorted(s.at for s in due)
    assert not set(fired) & set(skipped)
    assert fired == sorted(fired)
    assert skipped == sorted(skipped)

    late_from = NOW - policy.grace
    missed_fired = [at for at in fired if at < late_from]
    # Late slots (within grace) always fire.
    assert {s.at for s in due if s.at >= late_from} <= set(fired)
    # Caps on missed slots.
    cap = {"fire_all": policy.max_catch_up, "fire_once": 1, "skip": 0}[policy.policy]
    assert len(missed_fired) <= cap
    # Nothing older than the window fires, and every such slot says so.
    window_from = NOW - policy.catch_up_window
    assert all(at >= window_from for at in missed_fired)
    for item in plan.skip:
        expected = "outside_catch_up_window" if item.at < window_from else "misfire"
        assert item.reason == expected
    # What fires among the missed is the newest.
    missed = sorted(s.at for s in due if window_from <= s.at < late_from)
    assert missed_fired == missed[len(missed) - min(cap, len(missed)) :]


@settings(max_examples=300, deadline=None)
@given(
    job=st.text(min_size=1, max_size=30),
    at=st.datetimes(timezones=st.just(UTC)),
    max_jitter=st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=1)),
)
def test_jitter_is_in_bounds_and_deterministic(job: str, at: datetime, max_jitter: timedelta) -> None:
    run = run_id(job, at)
    offset = jitter_offset(run, max_jitter)
    assert offset == jitter_offset(run, max_jitter)
    assert timedelta(0) <= offset
    assert offset < max_jitter or offset == max_jitter == timedelta(0)


def test_jitter_is_pinned_across_processes() -> None:
    # A fixed value: a change here means two ticker versions would fire one slot at two times.
    expected = timedelta(microseconds=123_009_221)  # first 8 bytes of SHA-256, scaled to 10 minutes
    assert jitter_offset("payouts@2026-12-02T02:00:00Z", timedelta(minutes=10)) == expected


def test_jitter_spreads_slots_across_the_range() -> None:
    max_jitter = timedelta(minutes=10)
    offsets = [
        jitter_offset(run_id("herd", NOW + timedelta(minutes=i)), max_jitter) / max_jitter
        for i in range(2000)
    ]
    # Ten equal bins each get a fair share: the hash is not clumping the herd.
    bins = [0] * 10
    for fraction in offsets:
        bins[int(fraction * 10)] += 1
    assert min(bins) > 140
    assert max(bins) < 260


def test_negative_jitter_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        jitter_offset("x@2026-01-01T00:00:00Z", timedelta(seconds=-1))


def test_the_documented_downtime_example() -> None:
    # docs/scheduling.md: an every-minute job, ticker down 11:50-12:00, planned at 12:00:30.
    now = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
    due = [Slot(datetime(2026, 6, 1, 11, m, tzinfo=UTC), "") for m in range(51, 60)]
    due.append(Slot(datetime(2026, 6, 1, 12, 0, tzinfo=UTC), ""))
    plan = plan_misfire(MisfirePolicy(), due, now=now)
    assert ats(plan.fire) == [
        datetime(2026, 6, 1, 11, 59, tzinfo=UTC),
        datetime(2026, 6, 1, 12, 0, tzinfo=UTC),
    ]
    assert ats(plan.skip) == [s.at for s in due[:8]]
    assert {s.reason for s in plan.skip} == {"misfire"}


def test_two_slots_for_one_instant_are_refused_whatever_their_marks() -> None:
    at = NOW - timedelta(minutes=5)
    with pytest.raises(ValueError, match="twice"):
        plan_misfire(MisfirePolicy(), [Slot(at, "x", None), Slot(at, "x", "shifted")], now=NOW)
