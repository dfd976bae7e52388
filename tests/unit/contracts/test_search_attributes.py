"""Memo and typed search attributes on the wire: types, names, limits, old records."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from slotflow.contracts import (
    REGISTRY,
    SearchAttribute,
    SearchAttributesUpserted,
    StartWorkflow,
    WorkflowStarted,
)
from slotflow.contracts.search import (
    MAX_MEMO_BYTES,
    MAX_SEARCH_ATTRIBUTES,
    MAX_SEARCH_ATTRIBUTES_BYTES,
    merged,
    search_attribute,
    typed_search_attributes,
)
from slotflow.contracts.workflows import current_search_attributes

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("acme", "keyword"),
        (3, "int"),
        (2.5, "float"),
        (True, "bool"),
        (AT, "datetime"),
        (["a", "b"], "keyword_list"),
        ({"type": "text", "value": "free words"}, "text"),
        ({"type": "float", "value": 3}, "float"),
    ],
)
def test_python_values_are_typed(value: Any, kind: str) -> None:
    assert search_attribute(value).type == kind


def test_a_float_typed_int_stays_a_float_through_json() -> None:
    attribute = SearchAttribute(type="float", value=3)
    again = SearchAttribute.model_validate_json(attribute.model_dump_json())
    assert again == attribute
    assert isinstance(again.value, float)


def test_a_datetime_travels_as_iso_and_comes_back_aware() -> None:
    start = StartWorkflow(workflow_id="w", workflow_type="t", search_attributes={"Due": search_attribute(AT)})
    data = json.loads(start.model_dump_json())
    assert data["search_attributes"] == {"Due": {"type": "datetime", "value": "2026-12-01T12:00:00Z"}}
    assert StartWorkflow.model_validate(data).search_attributes["Due"].value == AT


@pytest.mark.parametrize(
    ("attributes", "problem"),
    [
        ({"WorkflowType": "x"}, "built-in field"),
        ({"StartTime": "x"}, "built-in field"),
        ({"OR": "x"}, "word of the query language"),
        ({"in": "x"}, "word of the query language"),
        ({"with space": "x"}, "not a search attribute name"),
        ({"x" * 65: "x"}, "not a search attribute name"),
        ({"_x": "x"}, "not a search attribute name"),
        ({"A": None}, "no search attribute type"),
        ({"A": {"k": "v"}}, "no search attribute type"),
        ({"A": [1, 2]}, "no search attribute type"),
        ({"A": datetime(2026, 1, 1)}, "timezone-aware"),  # noqa: DTZ001 - the naive instant refused
        ({"A": {"type": "int", "value": 1.5}}, "integer"),
        ({"A": {"type": "int", "value": True}}, "integer"),
        ({"A": {"type": "bool", "value": 1}}, "true or false"),
        ({"A": {"type": "float", "value": float("inf")}}, "finite"),
        ({"A": {"type": "datetime", "value": "yesterday"}}, "ISO 8601"),
        ({"A": {"type": "datetime", "value": "2026-01-01T00:00:00"}}, "timezone-aware"),
        ({"A": {"type": "keyword_list", "value": ["x"] * 101}}, "at most 100"),
        ({"A": 2**63}, "64 bits"),
        ({"A": "x" * 2_001}, "longer than 2000"),
        ({f"A{i}": i for i in range(MAX_SEARCH_ATTRIBUTES + 1)}, f"at most {MAX_SEARCH_ATTRIBUTES}"),
        ({f"A{i}": "x" * 1_990 for i in range(25)}, f"at most {MAX_SEARCH_ATTRIBUTES_BYTES}"),
    ],
)
def test_bad_attributes_are_refused_naming_the_problem(attributes: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        typed_search_attributes(attributes)


def test_a_start_breaking_a_limit_is_refused_at_decode() -> None:
    body = {
        "workflow_id": "w",
        "workflow_type": "t",
        "search_attributes": {f"A{i}": {"type": "int", "value": i} for i in range(MAX_SEARCH_ATTRIBUTES + 1)},
    }
    with pytest.raises(ValidationError, match="at most 32 search attributes"):
        StartWorkflow.model_validate(body)
    with pytest.raises(ValidationError, match="built-in field"):
        StartWorkflow.model_validate(
            {
                "workflow_id": "w",
                "workflow_type": "t",
                "search_attributes": {"WorkflowId": {"type": "keyword", "value": "x"}},
            }
        )
    with pytest.raises(ValidationError, match="memo"):
        StartWorkflow.model_validate(
            {"workflow_id": "w", "workflow_type": "t", "memo": {"blob": "x" * MAX_MEMO_BYTES}}
        )


def test_a_start_without_them_serialises_as_before() -> None:
    start = StartWorkflow(workflow_id="w", workflow_type="t")
    assert "memo" not in start.model_dump(mode="json")
    assert "search_attributes" not in json.loads(start.model_dump_json())
    started = WorkflowStarted(workflow_id="w", sequence=1, workflow_type="t", command_id="c")
    assert "search_attributes" not in started.model_dump(mode="json")


def test_old_records_read_with_empty_memo_and_attributes() -> None:
    old = {"workflow_id": "w", "sequence": 1, "workflow_type": "t", "input": {}, "command_id": "c"}
    started = REGISTRY.model_for("workflow.started", 1).model_validate(old)
    assert isinstance(started, WorkflowStarted)
    assert started.memo == {}
    assert started.search_attributes == {}


def test_an_upsert_names_at_least_one_attribute_and_may_remove() -> None:
    with pytest.raises(ValidationError):
        SearchAttributesUpserted(workflow_id="w", sequence=2, search_attributes={})
    upsert = SearchAttributesUpserted(
        workflow_id="w", sequence=2, search_attributes={"Stage": search_attribute("paid"), "Coupon": None}
    )
    assert upsert.model_dump(mode="json")["search_attributes"] == {
        "Stage": {"type": "keyword", "value": "paid"},
        "Coupon": None,
    }
    with pytest.raises(ValidationError, match="built-in field"):
        SearchAttributesUpserted(workflow_id="w", sequence=2, search_attributes={"ExecutionStatus": None})


def test_current_attributes_follow_the_newest_run() -> None:
    first = WorkflowStarted(
        workflow_id="w",
        sequence=1,
        workflow_type="t",
        command_id="c",
        search_attributes={"Stage": search_attribute("new"), "Coupon": search_attribute("X")},
    )
    upsert = SearchAttributesUpserted(
        workflow_id="w", sequence=2, search_attributes={"Stage": search_attribute("paid"), "Coupon": None}
    )
    assert {k: v.value for k, v in current_search_attributes([first, upsert]).items()} == {"Stage": "paid"}
    assert merged({"A": search_attribute(1)}, {"A": None, "B": search_attribute(2)}) == {
        "B": search_attribute(2)
    }
