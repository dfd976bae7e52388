"""The committable offset is one past the highest contiguous durable offset, per partition."""

from hypothesis import given
from hypothesis import strategies as st

from slotflow_claimer.offsets import OffsetTracker

P = ("jobs", 0)


def test_nothing_seen_commits_nothing() -> None:
    assert OffsetTracker().committable() == {}


def test_a_gap_holds_the_commit_back_until_it_is_durable() -> None:
    tracker = OffsetTracker()
    for offset in (10, 11, 12):
        tracker.seen(P, offset)
    tracker.durable(P, 11)
    tracker.durable(P, 12)
    assert tracker.committable() == {P: 10}
    tracker.durable(P, 10)
    assert tracker.committable() == {P: 13}


def test_committed_offsets_are_not_offered_again() -> None:
    tracker = OffsetTracker()
    tracker.seen(P, 5)
    tracker.durable(P, 5)
    tracker.committed(tracker.committable())
    assert tracker.committable() == {}


def test_forget_drops_partitions_no_longer_assigned() -> None:
    tracker = OffsetTracker()
    tracker.seen(P, 1)
    tracker.seen(("jobs", 1), 1)
    tracker.forget([("jobs", 1)])
    assert set(tracker.committable()) == {("jobs", 1)}


@given(st.lists(st.integers(min_value=0, max_value=40), unique=True, min_size=1), st.data())
def test_never_commits_past_a_record_that_is_not_durable(offsets: list[int], data: st.DataObject) -> None:
    offsets.sort()
    tracker = OffsetTracker()
    for offset in offsets:
        tracker.seen(P, offset)
    durable = data.draw(st.lists(st.sampled_from(offsets), unique=True))
    for offset in durable:
        tracker.durable(P, offset)
    committable = tracker.committable().get(P)
    pending = [o for o in offsets if o not in durable]
    expected = min(pending) if pending else max(offsets) + 1
    assert committable == expected
    # Everything below the committed offset is durable or was never seen.
    assert all(o in durable for o in offsets if o < expected)
