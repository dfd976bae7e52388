"""Signals, cancel and terminate reach a running workflow; a child's result reaches its parent; a
durable sleep fires through the ticker. Real broker, real database, real claimer and ticker."""

from datetime import timedelta

from slotflow.contracts import (
    ActivityFailed,
    ActivityScheduled,
    CancelRequested,
    CancelWorkflow,
    ChildWorkflowCompleted,
    ChildWorkflowScheduled,
    SignalReceived,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
    TimerStarted,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowTimerFired,
)
from slotflow.contracts.topics import WORKFLOW_EVENTS
from slotflow.settings import KafkaSettings
from slotflow_orchestrator.stepping import ACTIVITY_TIMED_OUT, TERMINATED, TIMED_OUT
from tests.integration.claimer.support import TopicReader, wait_state
from tests.integration.orchestrator.support import Workflows
from tests.integration.ticker.support import Replica


async def test_a_signal_reaches_the_waiting_code(kafka: KafkaSettings, workflows: Workflows) -> None:
    start = StartWorkflow(workflow_id="ap-1", workflow_type="tests.approval", input={"order_id": "ap-1"})
    await workflows.send(start, "start-ap-1")
    await workflows.wait("ap-1", "workflow.started")
    signal = SignalWorkflow(workflow_id="ap-1", signal="approve", payload={"by": "ops"})
    await workflows.send(signal, "signal-ap-1")
    events = await workflows.wait("ap-1", "workflow.completed")
    received = [e for e in events if isinstance(e, SignalReceived)]
    assert [(e.signal, e.payload, e.command_id) for e in received] == [
        ("approve", {"by": "ops"}, "signal-ap-1")
    ]
    done = events[-1]
    assert isinstance(done, WorkflowCompleted)
    assert done.result["approved_by"] == "ops"
    # A signal for a workflow that has ended is refused with the reason.
    await workflows.send(signal, "signal-ap-1-late")
    async with TopicReader(kafka, WORKFLOW_EVENTS) as answers:
        rejected = await answers.wait_for("command.rejected")
        assert rejected[0].data["command_id"] == "signal-ap-1-late"
        assert rejected[0].data["reason"] == "workflow ap-1 has already ended"


async def test_a_cancel_during_a_sleep_compensates_and_terminate_ends_at_once(
    ticker: Replica, workflows: Workflows
) -> None:
    order = {"order_id": "c-1", "pause_seconds": 600}
    await workflows.start("c-1", "tests.checkout", order, "s-c-1")
    await workflows.wait("c-1", "workflow.timer_started")
    await workflows.send(CancelWorkflow(workflow_id="c-1", reason="customer"), "x-c-1")
    events = await workflows.wait("c-1", "workflow.cancelled")
    assert any(isinstance(e, CancelRequested) and e.reason == "customer" for e in events)
    ended = events[-1]
    assert isinstance(ended, WorkflowCancelled)
    assert ended.compensated is True
    assert await workflows.effects("c-1/") == [
        "payments.authorize",
        "inventory.reserve",
        "inventory.release",
        "payments.void",
    ]

    await workflows.start("t-1", "tests.checkout", {**order, "order_id": "t-1"}, "s-t-1")
    before = await workflows.wait("t-1", "workflow.timer_started")
    await workflows.send(TerminateWorkflow(workflow_id="t-1", reason="ops"), "k-t-1")
    after = await workflows.wait("t-1", "workflow.failed")
    assert len(after) == len(before) + 1
    terminated = after[-1]
    assert isinstance(terminated, WorkflowFailed)
    assert (terminated.error_type, terminated.message, terminated.compensated) == (TERMINATED, "ops", False)


async def test_a_sleep_fires_through_the_ticker_and_a_childs_result_reaches_its_parent(
    ticker: Replica, workflows: Workflows
) -> None:
    await workflows.start("z-1", "tests.sleeper", {"order_id": "z-1", "seconds": 1}, "s-z-1")
    await workflows.start("p-1", "tests.parent", {"order_id": "p-1"}, "s-p-1")
    slept = await workflows.wait("z-1", "workflow.completed")
    assert [type(e) for e in slept[1:3]] == [TimerStarted, WorkflowTimerFired]
    parent = await workflows.wait("p-1", "workflow.completed")
    scheduled = [e for e in parent if isinstance(e, ChildWorkflowScheduled)]
    assert [e.child_workflow_id for e in scheduled] == ["p-1-child"]
    answered = [e for e in parent if isinstance(e, ChildWorkflowCompleted)]
    assert answered[0].result["captured"] is True
    done = parent[-1]
    assert isinstance(done, WorkflowCompleted)
    assert done.result["child"]["order_id"] == "p-1"
    child = await workflows.history("p-1-child")
    assert child[0].parent_workflow_id == "p-1"  # type: ignore[attr-defined]
    assert isinstance(child[-1], WorkflowCompleted)
    assert len([e for e in child if isinstance(e, ActivityScheduled)]) == 3


async def test_an_activity_past_its_deadline_and_a_run_past_its_timeout_fail_through_ticker_timers(
    ticker: Replica, workflows: Workflows
) -> None:
    slow = StartWorkflow(
        workflow_id="dl-1", workflow_type="tests.deadline", input={"order_id": "dl-1", "seconds": 30}
    )
    await workflows.send(slow, "s-dl-1")
    timed = StartWorkflow(
        workflow_id="to-1",
        workflow_type="tests.approval",
        input={"order_id": "to-1"},
        execution_timeout=timedelta(seconds=2),
    )
    await workflows.send(timed, "s-to-1")

    deadline = await workflows.wait("dl-1", "workflow.completed", timeout=60)
    failed = next(e for e in deadline if isinstance(e, ActivityFailed))
    assert (failed.error_type, failed.permanent) == (ACTIVITY_TIMED_OUT, True)
    done = deadline[-1]
    assert isinstance(done, WorkflowCompleted)
    assert done.result == {"error_type": ACTIVITY_TIMED_OUT, "timed_out": True}
    # Its attempt, 30 s of work, is cancelled at the deadline rather than left to run.
    await wait_state(workflows.db, "dl-1/2", "cancelled", timeout=20)
    why = await workflows.db.fetchval("SELECT reason FROM claimer.activity_cancels WHERE run_id = 'dl-1/2'")
    assert "passed its schedule-to-close deadline" in why

    out_of_time = await workflows.wait("to-1", "workflow.failed", timeout=60)
    ended = out_of_time[-1]
    assert isinstance(ended, WorkflowFailed)
    assert ended.error_type == TIMED_OUT
    assert [e.message_type for e in out_of_time] == ["workflow.started", "workflow.failed"]
