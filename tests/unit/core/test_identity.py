from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slotflow.core.identity import NaiveDatetime, job_due_event_id, run_id, slot_label


def test_slot_label_is_utc_with_z() -> None:
    berlin_two_am = datetime(2026, 12, 2, 3, 0, tzinfo=timezone(timedelta(hours=1)))
    assert slot_label(berlin_two_am) == "2026-12-02T02:00:00Z"


def test_run_id_is_the_same_whoever_computes_it() -> None:
    utc = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
    other_zone = utc.astimezone(timezone(timedelta(hours=-5)))
    assert run_id("payouts", utc) == run_id("payouts", other_zone) == "payouts@2026-12-02T02:00:00Z"


def test_naive_slot_is_refused() -> None:
    with pytest.raises(NaiveDatetime):
        slot_label(datetime(2026, 12, 2, 2, 0))  # noqa: DTZ001


def test_retries_have_distinct_event_ids_but_share_the_run_id() -> None:
    run = "payouts@2026-12-02T02:00:00Z"
    assert job_due_event_id(run, 1) == run
    assert job_due_event_id(run, 2) == f"{run}#2"


@given(st.datetimes(timezones=st.timezones()))
def test_slot_label_round_trips(slot: datetime) -> None:
    label = slot_label(slot)
    parsed = datetime.fromisoformat(label.replace("Z", "+00:00"))
    # Compare instants: Python never calls an aware datetime in a DST gap or fold equal to one in
    # another zone (PEP 495), even when both name the same instant.
    assert parsed == slot.astimezone(UTC)
