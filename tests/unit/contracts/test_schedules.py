from datetime import timedelta

import pytest
from pydantic import ValidationError

from slotflow.contracts import CreateSchedule, CronSpec, RetryPolicy, ScheduleDefinition


@pytest.mark.parametrize("expression", ["*/5 * * * *", "0 2 * * MON-FRI", "*/10 * * * * *", "0 0 2 * * *"])
def test_valid_cron_expressions_are_accepted(expression: str) -> None:
    assert CronSpec(expression=expression).expression == expression


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("61 * * * *", "invalid cron"),
        ("* * *", "5 or 6 fields"),
        ("* * * * * * * *", "5 or 6 fields"),
        ("'; DROP TABLE schedules; --", "cron"),
    ],
)
def test_invalid_cron_is_rejected_with_a_reason(expression: str, fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        CronSpec(expression=expression)


def test_unknown_time_zone_is_rejected() -> None:
    with pytest.raises(ValidationError, match="unknown IANA time zone"):
        CronSpec(expression="* * * * *", timezone="Mars/Olympus_Mons")


def test_retry_cap_below_base_is_rejected() -> None:
    with pytest.raises(ValidationError, match="cap cannot be less than base"):
        RetryPolicy(base=timedelta(seconds=10), cap=timedelta(seconds=1))


@pytest.mark.parametrize("schedule_id", ["", "a b", "x" * 201, "quote'd", "semi;colon"])
def test_schedule_ids_are_bounded_and_printable(schedule_id: str) -> None:
    definition = ScheduleDefinition(spec=CronSpec(expression="* * * * *"), handler="h")
    with pytest.raises(ValidationError, match="schedule_id"):
        CreateSchedule(schedule_id=schedule_id, definition=definition)
