"""A merge patch of a schedule definition changes what it names and nothing else."""

from datetime import timedelta

import pytest
from pydantic import ValidationError

from slotflow.contracts import CronSpec, IntervalSpec, ScheduleDefinition, UpdateSchedule
from slotflow.contracts.schedules import definition_changes, merge_patch, patch_definition

BASE = ScheduleDefinition.model_validate(
    {
        "spec": {"kind": "cron", "expression": "0 2 * * *", "timezone": "Europe/Berlin"},
        "handler": "payouts.pay",
        "payload": {"currency": "EUR", "batch": 50},
        "tags": ["money"],
        "retry": {"max_attempts": 7, "base": "PT2S"},
    }
)


def test_merge_patch_follows_rfc_7396() -> None:
    assert merge_patch({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": None, "e": 4}}) == {
        "a": 1,
        "b": {"d": 3, "e": 4},
    }
    assert merge_patch({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}


def test_only_named_fields_change_and_nested_policies_merge() -> None:
    after = patch_definition(BASE, {"handler": "payouts.v2", "retry": {"max_attempts": 3}})
    assert after.handler == "payouts.v2"
    assert after.retry.max_attempts == 3
    assert after.retry.base == timedelta(seconds=2)
    assert (after.payload, after.tags, after.spec) == (BASE.payload, BASE.tags, BASE.spec)
    assert definition_changes(BASE, after) == [
        ("handler", "payouts.pay", "payouts.v2"),
        ("retry.max_attempts", 7, 3),
    ]


def test_a_spec_of_the_same_kind_merges_and_of_another_kind_replaces() -> None:
    same = patch_definition(BASE, {"spec": {"expression": "0 3 * * *"}})
    assert same.spec == CronSpec(expression="0 3 * * *", timezone="Europe/Berlin")
    other = patch_definition(BASE, {"spec": {"kind": "interval", "every": "PT30S"}})
    assert other.spec == IntervalSpec(every=timedelta(seconds=30))


def test_the_payload_is_replaced_whole_and_null_resets_a_field() -> None:
    after = patch_definition(BASE, {"payload": {"currency": "USD"}, "tags": None})
    assert after.payload == {"currency": "USD"}
    assert after.tags == ()


def test_an_invalid_result_or_an_unknown_field_is_refused() -> None:
    with pytest.raises(ValidationError):
        patch_definition(BASE, {"retry": {"max_attempts": -1}})
    with pytest.raises(ValidationError, match="unknown fields"):
        UpdateSchedule(schedule_id="s", patch={"hander": "x"})
    with pytest.raises(ValidationError, match="exactly one"):
        UpdateSchedule(schedule_id="s", patch={"handler": "x"}, definition=BASE)
    with pytest.raises(ValidationError, match="changes nothing"):
        UpdateSchedule(schedule_id="s", patch={})


def test_a_spec_without_kind_is_the_kind_its_field_implies() -> None:
    cron = ScheduleDefinition.model_validate({"spec": {"expression": "0 2 * * *"}, "handler": "h"})
    assert cron.spec.kind == "cron"
    interval = ScheduleDefinition.model_validate({"spec": {"every": "15m"}, "handler": "h"})
    assert interval.spec == IntervalSpec(every=timedelta(minutes=15))
    # A patch naming another kind's field replaces the spec, as one naming its kind would.
    patched = patch_definition(cron, {"spec": {"every": "30s"}})
    assert patched.spec == IntervalSpec(every=timedelta(seconds=30))
    same_kind = patch_definition(cron, {"spec": {"expression": "30 2 * * *"}})
    assert same_kind.spec == CronSpec(expression="30 2 * * *")
