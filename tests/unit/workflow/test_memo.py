"""`workflow.upsert_memo`: recorded, merged, replayed, carried over a continue-as-new, bounded."""

from datetime import UTC, datetime
from typing import Any

import pytest

from slotflow import workflow
from slotflow.contracts import MemoUpserted, WorkflowStarted
from slotflow.contracts.workflows import current_memo
from slotflow.history import Recorded, fold
from slotflow.workflow import NonDeterminismError, Replayer, WorkflowError
from slotflow.workflow.testing import WorkflowEnvironment

AT = datetime(2026, 12, 7, tzinfo=UTC)


@workflow.defn(name="tests.noted")
class Noted:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> dict[str, Any]:
        before = workflow.memo()
        workflow.upsert_memo({"stage": "paid", "note": None})
        await workflow.wait_signal("ship")
        workflow.upsert_memo({"tracking": {"carrier": "dhl", "number": "JD0146"}})
        return {"before": before, "after": workflow.memo()}


@workflow.defn(name="tests.noted_differently")
class NotedDifferently:
    @workflow.run
    async def run(self, order: dict[str, Any]) -> None:
        workflow.upsert_memo({"stage": "PAID"})
        await workflow.wait_signal("ship")


@workflow.defn(name="tests.bad_memo")
class BadMemo:
    @workflow.run
    async def run(self, what: dict[str, Any]) -> str:
        updates = what.get("updates", {"tags": {"a", "b"}})  # a set: not JSON
        try:
            workflow.upsert_memo(updates)
        except WorkflowError as err:
            return str(err)
        return "accepted"


@workflow.defn(name="tests.noted_chain")
class NotedChain:
    @workflow.run
    async def run(self, page: dict[str, int]) -> dict[str, Any]:
        if page["n"] == 0:
            workflow.upsert_memo({"pages": 1})
            workflow.continue_as_new({"n": 1})
        return workflow.memo()


async def test_an_upsert_is_recorded_merged_and_shown() -> None:
    async with WorkflowEnvironment([Noted], replay_every_step=True) as env:
        handle = await env.start_workflow(Noted, {}, id="m-1", memo={"channel": "web", "note": "gift"})
        assert env.memo("m-1") == {"channel": "web", "stage": "paid"}
        await env.signal("m-1", "ship")
        result = await handle.result()
        history = env.history("m-1")
    assert result["before"] == {"channel": "web", "note": "gift"}
    assert result["after"] == {
        "channel": "web",
        "stage": "paid",
        "tracking": {"carrier": "dhl", "number": "JD0146"},
    }
    upserts = [e for e in history if isinstance(e, MemoUpserted)]
    assert [e.memo for e in upserts] == [
        {"stage": "paid", "note": None},
        {"tracking": {"carrier": "dhl", "number": "JD0146"}},
    ]
    # The read model's fold shows the memo as the history leaves it.
    state = fold([Recorded(e, AT) for e in history])
    assert state is not None
    assert state.memo == result["after"] == current_memo(history)


async def test_replay_with_other_values_is_non_deterministic() -> None:
    async with WorkflowEnvironment([Noted]) as env:
        await env.start_workflow(Noted, {}, id="m-2")
        history = env.history("m-2")
    renamed = [
        e.model_copy(update={"workflow_type": "tests.noted_differently"})
        if isinstance(e, WorkflowStarted)
        else e
        for e in history
    ]
    with pytest.raises(NonDeterminismError) as caught:
        Replayer([NotedDifferently]).replay(renamed)
    assert "upsert_memo" in str(caught.value)
    assert Replayer([Noted]).replay(history).next_events == []


async def test_a_continued_run_carries_the_memo_as_the_previous_run_left_it() -> None:
    async with WorkflowEnvironment([NotedChain], replay_every_step=True) as env:
        result = await env.execute_workflow(NotedChain, {"n": 0}, id="m-3", memo={"channel": "api"})
    assert result == {"channel": "api", "pages": 1}


@pytest.mark.parametrize(
    ("updates", "message"),
    [
        ({}, "at least one"),
        ({"": 1}, "1 to 200 characters"),
        ({"blob": "x" * 40_000}, "at most"),
        (None, "must be JSON"),
    ],
)
async def test_a_bad_upsert_raises_in_the_code_and_records_nothing(
    updates: dict[str, Any] | None, message: str
) -> None:
    given = {} if updates is None else {"updates": updates}  # None: the code upserts a set
    async with WorkflowEnvironment([BadMemo]) as env:
        result = await env.execute_workflow(BadMemo, given, id="bad")
        history = env.history("bad")
    assert result.startswith("upsert_memo:")
    assert message in result
    assert not any(isinstance(e, MemoUpserted) for e in history)
