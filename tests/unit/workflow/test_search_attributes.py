"""Memo and search attributes in workflow code: `upsert_search_attributes`, `memo()`, replay."""

from datetime import UTC, datetime
from typing import Any

import pytest

from slotflow import workflow
from slotflow.contracts import SearchAttribute, SearchAttributesUpserted, WorkflowStarted
from slotflow.workflow import NonDeterminismError, Replayer, WorkflowError
from slotflow.workflow.runtime import WorkflowRuntime
from slotflow.workflow.testing import WorkflowEnvironment

SHIPPED_AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@workflow.defn(name="tests.tagged")
class Tagged:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        before = workflow.info().search_attributes
        workflow.upsert_search_attributes({"Stage": "paid", "Coupon": None})
        await workflow.wait_signal("ship")
        workflow.upsert_search_attributes(
            {
                "Stage": "shipped",
                "ShippedAt": SHIPPED_AT,
                "Parcels": 2,
                "Note": SearchAttribute(type="text", value="x"),
            }
        )
        return {"memo": workflow.memo(), "before": before, "after": workflow.info().search_attributes}


@workflow.defn(name="tests.tagged_differently")
class TaggedDifferently:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> None:
        workflow.upsert_search_attributes({"Stage": "PAID"})
        await workflow.wait_signal("ship")


@workflow.defn(name="tests.bad_upsert")
class BadUpsert:
    @workflow.run
    async def run(self, what: dict[str, Any]) -> str:
        try:
            workflow.upsert_search_attributes(what["updates"])
        except WorkflowError as err:
            return str(err)
        return "accepted"


async def test_upsert_is_recorded_and_merged() -> None:
    async with WorkflowEnvironment([Tagged], replay_every_step=True) as env:
        handle = await env.start_workflow(
            Tagged,
            {},
            id="o-1",
            memo={"channel": "web"},
            search_attributes={"Customer": "acme", "Coupon": "X"},
        )
        assert env.search_attributes("o-1") == {"Customer": "acme", "Stage": "paid"}
        await env.signal("o-1", "ship")
        result = await handle.result()
    assert result["memo"] == {"channel": "web"}
    assert result["before"] == {"Customer": "acme", "Coupon": "X"}
    assert result["after"]["Stage"] == "shipped"
    assert result["after"]["Parcels"] == 2
    upserts = [e for e in env.history("o-1") if isinstance(e, SearchAttributesUpserted)]
    assert [sorted(e.search_attributes) for e in upserts] == [
        ["Coupon", "Stage"],
        ["Note", "Parcels", "ShippedAt", "Stage"],
    ]
    assert upserts[0].search_attributes["Coupon"] is None
    assert upserts[1].search_attributes["Note"] == SearchAttribute(type="text", value="x")
    assert env.search_attributes("o-1") == {
        "Customer": "acme",
        "Stage": "shipped",
        "ShippedAt": SHIPPED_AT,
        "Parcels": 2,
        "Note": "x",
    }


async def test_replay_with_other_values_is_non_deterministic() -> None:
    async with WorkflowEnvironment([Tagged]) as env:
        await env.start_workflow(Tagged, {}, id="o-2")
        history = env.history("o-2")
    # The same history, the code now upserting another value: the replay diverges at the upsert.
    renamed = [
        e.model_copy(update={"workflow_type": "tests.tagged_differently"})
        if isinstance(e, WorkflowStarted)
        else e
        for e in history
    ]
    with pytest.raises(NonDeterminismError) as caught:
        Replayer([TaggedDifferently]).replay(renamed)
    assert "upsert_search_attributes" in str(caught.value)
    # The code it was recorded with replays it without a new event (the replayer and the runtime).
    assert Replayer([Tagged]).replay(history).next_events == []
    assert list(WorkflowRuntime([Tagged]).replay(history, now=SHIPPED_AT).events) == []


@pytest.mark.parametrize(
    ("updates", "message"),
    [
        ({"WorkflowId": "x"}, "built-in field"),
        ({"and": "x"}, "word of the query language"),
        ({"9lives": "x"}, "not a search attribute name"),
        ({"Stage": {"nested": 1}}, "no search attribute type"),
        ({}, "at least one"),
        ({f"A{i}": i for i in range(33)}, "at most 32"),
        ({"Big": "x" * 2_001}, "longer than 2000"),
    ],
)
async def test_bad_upserts_raise_in_the_code_and_record_nothing(
    updates: dict[str, Any], message: str
) -> None:
    async with WorkflowEnvironment([BadUpsert]) as env:
        result = await env.execute_workflow(BadUpsert, {"updates": updates}, id="bad")
    assert message in result
    assert result.startswith("upsert_search_attributes:")
    assert not any(isinstance(e, SearchAttributesUpserted) for e in env.history("bad"))


async def test_a_start_with_bad_attributes_is_refused() -> None:
    async with WorkflowEnvironment([Tagged]) as env:
        with pytest.raises(ValueError, match="timezone-aware"):
            await env.start_workflow(Tagged, {}, id="o-3", search_attributes={"Due": datetime(2026, 1, 1)})  # noqa: DTZ001
        with pytest.raises(ValueError, match="memo"):
            await env.start_workflow(Tagged, {}, id="o-4", memo={"blob": "x" * 40_000})


@workflow.defn(name="tests.child_tagged")
class ChildTagged:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        return {"memo": workflow.memo(), "attributes": workflow.info().search_attributes}


@workflow.defn(name="tests.parent_tagging")
class ParentTagging:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await workflow.execute_child_workflow(
            ChildTagged, {}, id="child-1", memo={"from": "parent"}, search_attributes={"Parent": "p-1"}
        )
        return result


async def test_a_child_starts_with_its_own_memo_and_search_attributes() -> None:
    async with WorkflowEnvironment([ParentTagging, ChildTagged], replay_every_step=True) as env:
        result = await env.execute_workflow(ParentTagging, {}, id="p-1")
    assert result == {"memo": {"from": "parent"}, "attributes": {"Parent": "p-1"}}
    assert env.search_attributes("child-1") == {"Parent": "p-1"}
    scheduled = [e for e in env.history("p-1") if e.message_type == "workflow.child_scheduled"]
    assert scheduled[0].model_dump(mode="json")["search_attributes"] == {
        "Parent": {"type": "keyword", "value": "p-1"}
    }
