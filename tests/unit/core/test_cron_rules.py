"""The cron rules docs/scheduling.md writes out ("Cron expressions"), one row per rule.

Each row is an expression, what it means, and its first four slots after 2026-01-01T00:00Z (UTC,
schedule id "payouts" for the `H` rows). The same table, in words, is in the docs.
"""

import subprocess
import sys
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from slotflow.contracts.policies import DstPolicy
from slotflow.contracts.schedules import CronSpec
from slotflow.core._cronfields import parse_expression
from slotflow.core.cronslots import draws_from_schedule_id, next_slot, preview
from slotflow.errors import CronNeedsScheduleId, InvalidCronExpression
from tests.cron_oracle import CronOracle

AFTER = datetime(2026, 1, 1, tzinfo=UTC)

RULES = [
    (
        "*,5 * * * *",
        ["2026-01-01 00:01", "2026-01-01 00:02", "2026-01-01 00:03", "2026-01-01 00:04"],
    ),  # a `*` in a list allows every value: every minute
    (
        "0 0 * * *,0",
        ["2026-01-02 00:00", "2026-01-03 00:00", "2026-01-04 00:00", "2026-01-05 00:00"],
    ),  # every day (not Sundays only)
    (
        "0 9 1 * 1#1",
        ["2026-01-01 09:00", "2026-01-05 09:00", "2026-02-01 09:00", "2026-02-02 09:00"],
    ),  # 09:00 on the 1st and on the first Monday
    (
        "0 0 15W * 1",
        ["2026-01-05 00:00", "2026-01-12 00:00", "2026-01-15 00:00", "2026-01-19 00:00"],
    ),  # the weekday nearest the 15th, and every Monday
    (
        "0 0 29 * 0#4",
        ["2026-01-25 00:00", "2026-01-29 00:00", "2026-02-22 00:00", "2026-03-22 00:00"],
    ),  # the 29th and the fourth Sunday
    (
        "0 0 L * 1#2",
        ["2026-01-12 00:00", "2026-01-31 00:00", "2026-02-09 00:00", "2026-02-28 00:00"],
    ),  # the last day and the second Monday
    (
        "0 0 1 jan-jan *",
        ["2027-01-01 00:00", "2028-01-01 00:00", "2029-01-01 00:00", "2030-01-01 00:00"],
    ),  # an equal range is its one value: 1 January
    (
        "0 0 * * 1/2",
        ["2026-01-02 00:00", "2026-01-05 00:00", "2026-01-07 00:00", "2026-01-09 00:00"],
    ),  # a/k in day-of-week runs to Saturday: Mon, Wed, Fri
    (
        "0 0 * * 7/2",
        ["2026-01-03 00:00", "2026-01-04 00:00", "2026-01-06 00:00", "2026-01-08 00:00"],
    ),  # 7 is Sunday, so 7/2 is 0/2: Sun, Tue, Thu, Sat
    (
        "0 0 * * 1-7/2",
        ["2026-01-02 00:00", "2026-01-04 00:00", "2026-01-05 00:00", "2026-01-07 00:00"],
    ),  # a range may end at 7 (Sunday): Mon, Wed, Fri, Sun
    (
        "0 0 1 * 0-6",
        ["2026-01-02 00:00", "2026-01-03 00:00", "2026-01-04 00:00", "2026-01-05 00:00"],
    ),  # a day-of-week list of every day still restricts: the 1st or any weekday, so daily
    (
        "0 0 */2 * 1",
        ["2026-01-05 00:00", "2026-01-19 00:00", "2026-02-09 00:00", "2026-02-23 00:00"],
    ),  # a day field starting with * does not restrict: odd days that are Mondays
    (
        "0 0 1-31/2 * 1",
        ["2026-01-03 00:00", "2026-01-05 00:00", "2026-01-07 00:00", "2026-01-09 00:00"],
    ),  # odd days or Mondays
    (
        "0 22-2 * * *",
        ["2026-01-01 01:00", "2026-01-01 02:00", "2026-01-01 22:00", "2026-01-01 23:00"],
    ),  # a range wraps: 22, 23, 0, 1, 2
    (
        "0 22-2/2 * * *",
        ["2026-01-01 02:00", "2026-01-01 22:00", "2026-01-02 00:00", "2026-01-02 02:00"],
    ),  # the step counts across the turn: 22, 0, 2
    (
        "0 0 * * fri-mon",
        ["2026-01-02 00:00", "2026-01-03 00:00", "2026-01-04 00:00", "2026-01-05 00:00"],
    ),  # Friday to Monday
    (
        "0 0 ? * 1",
        ["2026-01-05 00:00", "2026-01-12 00:00", "2026-01-19 00:00", "2026-01-26 00:00"],
    ),  # ? is *: Mondays
    (
        "0 0 * * 5L",
        ["2026-01-30 00:00", "2026-02-27 00:00", "2026-03-27 00:00", "2026-04-24 00:00"],
    ),  # the last Friday
    (
        "0 0 LW * *",
        ["2026-01-30 00:00", "2026-02-27 00:00", "2026-03-31 00:00", "2026-04-30 00:00"],
    ),  # the last weekday of the month
    (
        "0 0 31W * *",
        ["2026-01-30 00:00", "2026-02-27 00:00", "2026-03-31 00:00", "2026-04-30 00:00"],
    ),  # the weekday nearest the 31st, or the month's last day
    (
        "H 2 * * *",
        ["2026-01-01 02:04", "2026-01-02 02:04", "2026-01-03 02:04", "2026-01-04 02:04"],
    ),  # a minute of 02:00-02:59 fixed by the schedule id
    (
        "H/15 * * * *",
        ["2026-01-01 00:01", "2026-01-01 00:16", "2026-01-01 00:31", "2026-01-01 00:46"],
    ),  # every 15 minutes from a phase fixed by the schedule id
    (
        "H H H * *",
        ["2026-01-16 02:04", "2026-02-16 02:04", "2026-03-16 02:04", "2026-04-16 02:04"],
    ),  # monthly, day 1-28, at a time fixed by the schedule id
]


@pytest.mark.parametrize(("expression", "first_four"), RULES, ids=[row[0] for row in RULES])
def test_each_documented_rule(expression: str, first_four: list[str]) -> None:
    slots = preview(CronSpec(expression=expression), DstPolicy(), after=AFTER, count=4, schedule_id="payouts")
    assert [s.at.strftime("%Y-%m-%d %H:%M") for s in slots] == first_four
    # The documented oracle, which shares no code with slotflow, reads the rule the same way.
    walls = CronOracle(expression, "payouts").next_wall_times(AFTER.replace(tzinfo=None), 4)
    assert [w.strftime("%Y-%m-%d %H:%M") for w in walls] == first_four


def test_a_date_the_old_reading_refused_now_fires() -> None:
    # `0 0 29 * 0#4` was refused as "matches no date that exists": the 29th and the 4th Sunday exist.
    slot = next_slot(CronSpec(expression="0 0 29 * 0#4"), DstPolicy(), after=AFTER)
    assert slot is not None
    assert slot.at == datetime(2026, 1, 25, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("61 * * * *", "minute field '61': 61 is outside 0-59"),
        ("* * * * 8", "day-of-week field '8': 8 is outside 0-7"),
        ("*/0 * * * *", "a step must be at least 1"),
        ("1,,2 * * * *", "an empty item"),
        ("? * * * *", "only for day-of-month and day-of-week"),
        ("0 0 * * 1#6", "#1 to #5"),
        ("0 0 * * L", "not a value, range, step or list"),
        ("0 0 1 foo *", "'foo' is not a number or a month name"),
        ("H(30-10) * * * *", "must not wrap"),
    ],
)
def test_what_the_grammar_refuses_says_where(expression: str, fragment: str) -> None:
    with pytest.raises(InvalidCronExpression, match="invalid cron expression") as refused:
        parse_expression(expression)
    assert fragment in str(refused.value)
    # A CronSpec refuses it with the same words (InvalidCronExpression is a ValueError).
    with pytest.raises(ValidationError, match="invalid cron expression"):
        CronSpec(expression=expression)


def test_invalid_cron_expression_is_a_value_error_for_validators() -> None:
    assert issubclass(InvalidCronExpression, ValueError)


# --- H: a value fixed by the schedule id --------------------------------------------------------


def test_h_needs_the_schedule_id() -> None:
    spec = CronSpec(expression="H 2 * * *")
    assert draws_from_schedule_id(spec)
    assert not draws_from_schedule_id(CronSpec(expression="0 2 * * *"))
    with pytest.raises(CronNeedsScheduleId, match="pass schedule_id"):
        next_slot(spec, DstPolicy(), after=AFTER)


def test_h_differs_between_schedules_and_stays_in_its_range() -> None:
    minutes = set()
    for n in range(200):
        slot = next_slot(
            CronSpec(expression="H(10-19) 2 * * *"), DstPolicy(), after=AFTER, schedule_id=f"s{n}"
        )
        assert slot is not None
        assert slot.at.hour == 2
        minutes.add(slot.at.minute)
    assert minutes == set(range(10, 20))  # 200 ids spread over every minute of the range


def test_h_in_day_of_month_stays_within_28_so_every_month_fires() -> None:
    days = set()
    for n in range(300):
        slot = next_slot(CronSpec(expression="0 0 H * *"), DstPolicy(), after=AFTER, schedule_id=f"s{n}")
        assert slot is not None
        days.add(slot.at.day)
    assert max(days) <= 28


def test_r_is_read_as_h() -> None:
    for expression in ("R 2 * * *", "R(0-29)/10 * * * *"):
        hashed = expression.replace("R", "H")
        assert preview(
            CronSpec(expression=expression), DstPolicy(), after=AFTER, count=5, schedule_id="payouts"
        ) == preview(CronSpec(expression=hashed), DstPolicy(), after=AFTER, count=5, schedule_id="payouts")


@pytest.mark.parametrize("expression", ["H H(0-5) * * H", "R * * * *"])
def test_h_and_r_are_the_same_in_every_process(expression: str) -> None:
    # Python's hash() is salted per process (PYTHONHASHSEED), and croniter drew R at random in each
    # process (three processes fired `R * * * *` first at 00:16, 00:30 and 00:37).
    program = (
        "from datetime import UTC, datetime\n"
        "from slotflow.contracts import CronSpec, DstPolicy\n"
        "from slotflow.core.cronslots import preview\n"
        f"spec = CronSpec(expression={expression!r})\n"
        "after = datetime(2026, 1, 1, tzinfo=UTC)\n"
        "print([s.at.isoformat() for s in preview(spec, DstPolicy(), after=after, count=3, schedule_id='payouts')])\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", program],
            env={"PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1
