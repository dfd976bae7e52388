"""The review of stored schedules: which expressions read differently now, and only those.

`reading_changes` is held against the old reading itself (tests/unit/ticker/legacy_cron.py, the
code before slotflow had its own cron rules): an expression it passes as unchanged must fire at the
same wall times under both readings, so no stored schedule changes its slots unannounced.
"""

import itertools
import json
from datetime import UTC, datetime

import pytest
from croniter import croniter
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from slotflow.contracts import CreateSchedule, CronSpec, ScheduleDefinition, UpdateSchedule
from slotflow.contracts.policies import DstPolicy
from slotflow.core.cronslots import iter_slots
from slotflow_ticker.commands import _new_definition
from slotflow_ticker.cron_review import pause_reason, reading_changes, stored_changes
from slotflow_ticker.rows import ScheduleRow
from slotflow_ticker.sql import CRON_RULES, Queries
from slotflow_ticker.validation import CommandRefused
from tests.unit.core.cron_fields import cron_expressions
from tests.unit.ticker.legacy_cron import legacy_walk

START = datetime(2026, 1, 1)  # noqa: DTZ001 - naive wall time, as both readings walk


@pytest.mark.parametrize(
    ("expression", "said"),
    [
        ("R * * * *", "R is now read as H"),
        ("R(0-29)/10 3 * * *", "R is now read as H"),
        ("*,5 * * * *", "minute '*,5' now allows every value; it allowed 5"),
        ("0 0 * * *,0", "day-of-week '*,0' now allows 0,1,2,3,4,5,6; it allowed 0"),
        ("0 0 1 jan-jan *", "month 'jan-jan' now allows 1; it allowed 1,2,3,4,5,6,7,8,9,10,11,12"),
        ("0 0 1 * sun-sun", "day-of-week 'sun-sun' now allows 0; it allowed 0,1,2,3,4,5,6"),
        ("0 23-1/2 * * *", "hour '23-1/2' now allows 1,23; it allowed 23"),
        ("0 0 */2 * 1", "now combine with AND"),
        ("0 0 1-5 * */1", "now combine with AND"),
        ("0 0 1-31 * 1,*/2", "now combine with OR"),
        ("0 9 1 * 1#1", "a # or W day had to match the other field too"),
        ("0 0 15W * 1", "a # or W day had to match the other field too"),
        ("0 0 1 * L5", "a # or W day had to match the other field too"),
        ("* * * * 0-7,0#1", "croniter fired only the 0#1 days"),
        ("0 0 * * 5#3,5", "croniter fired only the 5#3 days"),
    ],
)
def test_each_changed_reading_is_named(expression: str, said: str) -> None:
    changes = reading_changes(expression)
    assert any(said in change for change in changes), changes
    # ...and it does change the slots (the first 60 wall times of the old reading differ).
    new = iter_slots(
        CronSpec(expression=expression), DstPolicy(), after=START.replace(tzinfo=UTC), schedule_id="s"
    )
    ours = [s.at.replace(tzinfo=None) for s in itertools.islice(new, 60)]
    if not expression.startswith("R"):  # R drew a new value with each parse: no sequence to compare
        assert ours != list(itertools.islice(legacy_walk(expression, START), 60))


@pytest.mark.parametrize(
    "expression",
    [
        "* * * * *",
        "*/15 * * * *",
        "0 2 * * *",
        "30 2 * * 1-5",
        "0 0 13 * 5",  # OR, as before
        "0 0 L * *",
        "0 12 L * 1",  # L alone was already ORed
        "0 0 15W * *",
        "0 0 * * 1#2",
        "0 0 ? * 1",
        "0 22-2 * * *",  # wrapping ranges: unchanged
        "0 0 * * 1/2",  # a/k in day-of-week: unchanged
        "*/10 * * * * *",
        "0 0 */2 * 0-6",  # croniter collapsed 0-6 to *: AND before and now
    ],
)
def test_expressions_that_read_the_same_are_left_alone(expression: str) -> None:
    assert reading_changes(expression) == []


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    expression=cron_expressions(),
    after=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1)),  # noqa: DTZ001
)
def test_an_expression_without_a_named_change_fires_as_before(expression: str, after: datetime) -> None:
    six = len(expression.split()) == 6
    assume(croniter.is_valid(expression, second_at_beginning=six))  # what the old version stored
    assume(not reading_changes(expression))
    old = list(itertools.islice(legacy_walk(expression, after), 12))
    spec = CronSpec(expression=expression)
    new = [
        s.at.replace(tzinfo=None)
        for s in itertools.islice(iter_slots(spec, DstPolicy(), after=after.replace(tzinfo=UTC)), 12)
    ]
    assert new == old, expression


def test_a_stored_definition_the_model_refuses_is_paused_not_left_to_break_the_claims() -> None:
    stored = ScheduleDefinition(spec=CronSpec(expression="0 0 * * *"), handler="h").model_dump(mode="json")
    stored["spec"]["expression"] = "0 0 * * 8"  # out of range: nothing the previous version stored
    expression, changes = stored_changes(json.dumps(stored))
    assert expression == "0 0 * * 8"
    assert len(changes) == 1
    assert "no longer valid" in changes[0]
    assert stored_changes(
        ScheduleDefinition(spec=CronSpec(expression="*,5 * * * *"), handler="h").model_dump_json()
    )[1]
    assert stored_changes(
        ScheduleDefinition(spec=CronSpec(expression="*/5 * * * *"), handler="h").model_dump_json()
    ) == (
        "*/5 * * * *",
        [],
    )


def test_the_pause_reason_names_the_change_and_fits() -> None:
    reason = pause_reason("*,5 * * * *", reading_changes("*,5 * * * *"))
    assert "'*,5 * * * *'" in reason
    assert "minute '*,5' now allows every value" in reason
    assert "resume" in reason
    assert len(pause_reason("x", ["y" * 5000])) == 1000


def test_every_statement_uses_this_versions_rules() -> None:
    q = Queries.for_schema("ticker")
    assert f"cron_rules >= {CRON_RULES}" in q.claim_due
    assert f"cron_rules >= {CRON_RULES}" in q.horizon_schedules
    assert f"cron_rules >= {CRON_RULES}" in q.horizon_schedules_after
    assert f"cron_rules < {CRON_RULES}" in q.unreviewed_schedules
    assert f"cron_rules = {CRON_RULES}" in q.replace_definition


# --- R: refused in a new or changed definition ---------------------------------------------------


def test_a_new_definition_with_r_is_refused_with_the_way_out() -> None:
    random = ScheduleDefinition(spec=CronSpec(expression="R 2 * * *"), handler="h")  # a stored R parses
    with pytest.raises(ValidationError, match="write H instead"):
        CreateSchedule(schedule_id="s", definition=random)
    with pytest.raises(ValidationError, match="write H instead"):
        UpdateSchedule(schedule_id="s", definition=random)
    CreateSchedule(
        schedule_id="s", definition=random.model_copy(update={"spec": CronSpec(expression="H 2 * * *")})
    )


def test_a_stored_r_is_refused_on_its_next_update_even_one_of_another_field() -> None:
    stored = ScheduleDefinition(spec=CronSpec(expression="R 2 * * *"), handler="h")
    row = ScheduleRow(
        "s", stored, 1, False, "", None, None, None, None, None, START.replace(tzinfo=UTC), False
    )
    with pytest.raises(CommandRefused, match="uses R"):
        _new_definition(UpdateSchedule(schedule_id="s", patch={"handler": "h2"}), row)
    fixed = _new_definition(UpdateSchedule(schedule_id="s", patch={"spec": {"expression": "H 2 * * *"}}), row)
    assert isinstance(fixed.spec, CronSpec)
    assert fixed.spec.expression == "H 2 * * *"
