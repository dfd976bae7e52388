"""Runs: continue-as-new, the history ceiling, child workflows and the parent-close policy."""

from itertools import pairwise
from typing import Any

import pytest

from slotflow import workflow
from slotflow.contracts.workflows import (
    ChildWorkflowScheduled,
    WorkflowContinuedAsNew,
    WorkflowFailed,
    WorkflowStarted,
)
from slotflow.runs import RunContext
from slotflow.workflow import ChildWorkflowError, Replayer
from slotflow.workflow.commands import ContinueAsNew, NotifyParent, RequestCancelWorkflow, StartChildWorkflow
from slotflow.workflow.runtime import WorkflowRuntime
from slotflow.workflow.testing import WorkflowEnvironment, WorkflowFailureError
from tests.unit.workflow.helpers import History


@workflow.defn(name="feed.poll")
class Poller:
    @workflow.run
    async def run(self, state: dict[str, int]) -> dict[str, int]:
        count = state.get("count", 0)
        while count < state["until"]:
            await workflow.execute_activity("feed.next", {"count": count})
            count += 1
            if workflow.info().is_continue_as_new_suggested:
                workflow.continue_as_new({"count": count, "until": state["until"]})
        return {"count": count, "run": int(workflow.info().run_id.rsplit("#", 1)[1])}


@workflow.defn(name="feed.forever")
class Forever:
    @workflow.run
    async def run(self) -> None:
        while True:
            await workflow.execute_activity("feed.next")


def test_continue_as_new_ends_the_run_and_the_next_starts_after_it() -> None:
    runtime = WorkflowRuntime([Poller], max_history_events=20, suggest_continue_as_new_at=10)
    history = History(runtime, "feed.poll", {"until": 100})
    decision = history.replay()
    while not isinstance(history.events[-1], WorkflowContinuedAsNew):
        history.complete(history.events[-1].sequence)
        decision = history.replay()
    ended = history.events[-1]
    assert isinstance(ended, WorkflowContinuedAsNew)
    assert ended.input == {"count": 5, "until": 100}
    assert decision.commands == [
        ContinueAsNew("wf-1", "feed.poll", ended.input, next_sequence=ended.sequence + 1)
    ]
    # The orchestrator starts the next run right after it, same workflow id, sequences going on.
    history.add(
        WorkflowStarted,
        workflow_type="feed.poll",
        input=ended.input,
        command_id="wf-1#12",
        continued_from=ended.sequence,
    )
    first = history.replay()
    assert first.events[0].message_type == "workflow.activity_scheduled"
    assert first.events[0].run_id == f"wf-1/{ended.sequence + 2}"  # type: ignore[attr-defined]
    # Only the new run is replayed; the old one stays as it was recorded.
    assert Replayer([Poller]).replay(history.events).events == 2


async def test_continue_as_new_in_the_environment_goes_on_to_the_end() -> None:
    async def step(ctx: RunContext) -> None:
        return None

    async with WorkflowEnvironment(
        [Poller],
        activities={"feed.next": step},
        max_history_events=30,
        suggest_continue_as_new_at=20,
        replay_every_step=True,
    ) as env:
        result = await env.execute_workflow(Poller, {"until": 40}, id="poll-1")
        assert result["count"] == 40
        runs = [e for e in env.history("poll-1") if isinstance(e, WorkflowStarted)]
        assert len(runs) == 5
        assert all(len_run <= 30 for len_run in _run_lengths(env.history("poll-1")))


def _run_lengths(events: list[Any]) -> list[int]:
    starts = [i for i, e in enumerate(events) if isinstance(e, WorkflowStarted)] + [len(events)]
    return [b - a for a, b in pairwise(starts)]


def test_reaching_the_ceiling_without_continue_as_new_fails_the_run_clearly() -> None:
    runtime = WorkflowRuntime([Forever], max_history_events=12)
    history = History(runtime, "feed.forever")
    history.replay()
    while not isinstance(history.events[-1], WorkflowFailed):
        history.complete(history.events[-1].sequence)
        history.replay()
    failed = history.events[-1]
    assert isinstance(failed, WorkflowFailed)
    assert failed.error_type == "HistoryLimitExceeded"
    assert "limit of 12" in failed.message
    assert "continue_as_new" in failed.message
    assert len(history.events) == 12  # the failure is the last event it had room for: nothing truncated
    # A replay of the failed run stops at the failure instead of calling the code non-deterministic.
    assert Replayer([Forever], max_history_events=12).replay(history.events).status == "failed"


def test_info_reports_the_history_length_whatever_the_batching() -> None:
    @workflow.defn(name="lengths")
    class Lengths:
        @workflow.run
        async def run(self) -> list[int]:
            seen = [workflow.info().history_length]
            await workflow.gather(workflow.execute_activity("a"), workflow.execute_activity("b"))
            seen.append(workflow.info().history_length)
            return seen

    one = History(WorkflowRuntime([Lengths]), "lengths")
    one.replay()
    one.complete(2)
    one.replay()
    one.complete(3)
    two = History(WorkflowRuntime([Lengths]), "lengths")
    two.replay()
    two.complete(2)
    two.complete(3)
    assert one.replay().events == two.replay().events


@workflow.defn(name="invoices.issue")
class IssueInvoice:
    @workflow.run
    async def run(self, order: dict[str, int]) -> dict[str, str]:
        await workflow.execute_activity("invoices.render", order)
        return {"invoice": f"INV-{order['order_id']}"}


@workflow.defn(name="orders.with_invoice")
class WithInvoice:
    @workflow.run
    async def run(self, order: dict[str, int]) -> dict[str, Any]:
        try:
            invoice = await workflow.execute_child_workflow(
                IssueInvoice, order, id=f"invoice-{order['order_id']}"
            )
        except ChildWorkflowError as failed:
            return {"failed": failed.error_type}
        return {"invoice": invoice["invoice"]}


@workflow.defn(name="orders.leaves_early")
class LeavesEarly:
    @workflow.run
    async def run(self) -> str:
        await workflow.start_child_workflow(IssueInvoice, {"order_id": 1}, id="kept")
        await workflow.start_child_workflow(
            IssueInvoice, {"order_id": 2}, id="abandoned", parent_close_policy="abandon"
        )
        return "done"


def test_a_child_workflow_on_recorded_history() -> None:
    parent = History(WorkflowRuntime([WithInvoice, IssueInvoice]), "orders.with_invoice", {"order_id": 5})
    decision = parent.replay()
    (scheduled,) = decision.events
    assert isinstance(scheduled, ChildWorkflowScheduled)
    assert decision.commands == [
        StartChildWorkflow("wf-1", 2, "invoice-5", "invoices.issue", {"order_id": 5}, "request_cancel")
    ]
    child = History(
        WorkflowRuntime([IssueInvoice]),
        "invoices.issue",
        {"order_id": 5},
        workflow_id="invoice-5",
        parent_workflow_id="wf-1",
        parent_sequence=2,
    )
    child.replay()
    child.complete(2)
    ended = child.replay()
    assert ended.commands == [NotifyParent("wf-1", 2, "invoice-5", "completed", result={"invoice": "INV-5"})]
    parent.child_done(2, "invoice-5", {"invoice": "INV-5"})
    (done,) = parent.replay().events
    assert done.result == {"invoice": "INV-5"}  # type: ignore[attr-defined]

    failing = History(WorkflowRuntime([WithInvoice]), "orders.with_invoice", {"order_id": 6})
    failing.replay()
    failing.child_failed(2, "invoice-6", "TaxServiceDown")
    (done,) = failing.replay().events
    assert done.result == {"failed": "TaxServiceDown"}  # type: ignore[attr-defined]


def test_a_parent_that_ends_first_cancels_its_request_cancel_children_only() -> None:
    history = History(WorkflowRuntime([LeavesEarly]), "orders.leaves_early")
    decision = history.replay()
    assert decision.closed
    assert [c for c in decision.commands if isinstance(c, RequestCancelWorkflow)] == [
        RequestCancelWorkflow("kept", reason="parent wf-1 closed")
    ]


async def test_child_workflows_in_the_environment() -> None:
    rendered: list[str] = []

    async def render(ctx: RunContext) -> None:
        rendered.append(ctx.run_id)

    async with WorkflowEnvironment(
        [WithInvoice, IssueInvoice], activities={"invoices.render": render}, replay_every_step=True
    ) as env:
        assert await env.execute_workflow(WithInvoice, {"order_id": 9}, id="order-9") == {"invoice": "INV-9"}
        assert rendered == ["invoice-9/2"]
        # The same child id again cannot start: the parent sees a ChildWorkflowError.
        assert await env.execute_workflow(WithInvoice, {"order_id": 9}, id="order-9b") == {
            "failed": "WorkflowAlreadyStarted"
        }


async def test_a_child_that_fails_fails_the_parent_that_does_not_catch_it() -> None:
    @workflow.defn(name="strict")
    class Strict:
        @workflow.run
        async def run(self) -> Any:
            return await workflow.execute_child_workflow("invoices.issue", {"order_id": 1})

    async def broken(ctx: RunContext) -> None:
        raise ValueError("no template")

    async with WorkflowEnvironment([Strict, IssueInvoice], activities={"invoices.render": broken}) as env:
        with pytest.raises(WorkflowFailureError) as caught:
            await env.execute_workflow(Strict, id="strict-1")
        assert caught.value.error_type == "ValueError"
        child = env.history("strict-1/child/2")
        assert child[0].parent_workflow_id == "strict-1"  # type: ignore[attr-defined]


def test_a_run_ended_by_the_orchestrator_replays_up_to_that_end() -> None:
    for error_type in ("WorkflowTerminated", "WorkflowTimedOut"):
        history = History(WorkflowRuntime([Forever]), "feed.forever")
        history.replay()
        history.complete(2)
        history.replay()  # the next activity at 4
        history.add(WorkflowFailed, error_type=error_type, message="operator")
        assert Replayer([Forever]).replay(history.events).status == "failed"
