"""The order saga of examples/orders end to end on the real broker and database: StartWorkflow
over Kafka, its activities run by a real claimer, its hold a durable timer fired by a real ticker,
results back into the history, the workflow completed; and with the capture declined for good,
the compensations in reverse order, each once."""

import pytest

from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    CancelWorkflow,
    CommandAccepted,
    CommandRejected,
    StartWorkflow,
    TimerStarted,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowStarted,
)
from slotflow.contracts.topics import WORKFLOW_EVENTS, WORKFLOW_HISTORY
from slotflow.runs import HandlerRegistry
from slotflow.settings import KafkaSettings
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode
from tests.integration.claimer.support import TopicReader
from tests.integration.orchestrator.orders_example import (
    WORKFLOW_TYPE,
    Sandbox,
    order,
    orders_registry,
    orders_workflow_code,
    sandbox,  # noqa: F401 - the example's sandbox fixture
)
from tests.integration.orchestrator.support import Workflows
from tests.integration.ticker.support import Replica


@pytest.fixture
def workflow_code() -> RuntimeWorkflowCode:
    return orders_workflow_code()


@pytest.fixture
def registry() -> HandlerRegistry:
    return orders_registry()


async def test_the_order_saga_completes_and_a_second_start_appends_nothing(
    kafka: KafkaSettings,
    workflows: Workflows,
    ticker: Replica,
    sandbox: Sandbox,  # noqa: F811 - the example's sandbox fixture
) -> None:
    start = StartWorkflow(workflow_id="order-1", workflow_type=WORKFLOW_TYPE, input=order("1"))
    await workflows.send(start, "start-order-1")
    events = await workflows.wait("order-1", "workflow.completed")
    assert [type(e) for e in events][:3] == [WorkflowStarted, ActivityScheduled, ActivityCompleted]
    scheduled = [e for e in events if isinstance(e, ActivityScheduled)]
    assert [e.activity for e in scheduled] == ["payments.authorize", "inventory.reserve", "payments.capture"]
    assert all(e.run_id == f"order-1/{e.sequence}" for e in scheduled)
    assert len([e for e in events if isinstance(e, TimerStarted)]) == 1  # the hold
    done = events[-1]
    assert isinstance(done, WorkflowCompleted)
    assert done.result == {"order_id": "1", "capture_id": "cap-1", "amount_cents": 9990}
    assert sandbox.journal_of("order-1") == ["payments.authorize", "inventory.reserve", "payments.capture"]

    # The same command again (a client retry) appends nothing and is not answered twice; another
    # start of the same id is rejected with the reason.
    await workflows.send(start, "start-order-1")
    await workflows.send(start, "start-order-1-again")
    async with TopicReader(kafka, WORKFLOW_EVENTS) as answers:
        rejected = await answers.wait_for("command.rejected")
        assert rejected[0].data["command_id"] == "start-order-1-again"
        assert "already exists" in CommandRejected.model_validate(rejected[0].data).reason
        accepted = answers.of_type("command.accepted")
        assert [CommandAccepted.model_validate(a.data).command_id for a in accepted] == ["start-order-1"]
    assert len(await workflows.wait("order-1", "workflow.completed")) == len(events)
    async with TopicReader(kafka, WORKFLOW_HISTORY) as published:
        await published.wait_for("workflow.completed")
        assert [e.id for e in published.seen] == [f"order-1#{e.sequence}" for e in events]
    assert sum(sandbox.attempts.values()) == 3


async def test_a_declined_capture_releases_then_voids_and_fails_compensated(
    workflows: Workflows,
    ticker: Replica,
    sandbox: Sandbox,  # noqa: F811 - the example's sandbox fixture
) -> None:
    await workflows.start("order-2", WORKFLOW_TYPE, order("2", capture_declined=True), "start-order-2")
    events = await workflows.wait("order-2", "workflow.failed")
    failed = events[-1]
    assert isinstance(failed, WorkflowFailed)
    assert failed.compensated is True
    (declined,) = [e for e in events if isinstance(e, ActivityFailed)]
    assert (declined.error_type, declined.permanent) == ("CaptureDeclined", True)
    compensations = [e for e in events if isinstance(e, ActivityScheduled) and e.compensation]
    assert [e.activity for e in compensations] == ["inventory.release", "payments.void"]
    assert sandbox.journal_of("order-2") == [
        "payments.authorize",
        "inventory.reserve",
        "inventory.release",
        "payments.void",
    ]
    # The declined capture was tried once (not retried) and had no effect.
    assert sandbox.attempts["payments.capture"] == 1


async def test_the_order_example_cancelled_during_its_hold_releases_then_voids(
    workflows: Workflows,
    ticker: Replica,
    sandbox: Sandbox,  # noqa: F811 - the example's sandbox fixture
) -> None:
    await workflows.start("order-3", WORKFLOW_TYPE, order("3", hold="PT10M"), "start-order-3")
    await workflows.wait("order-3", "workflow.timer_started")
    await workflows.send(
        CancelWorkflow(workflow_id="order-3", reason="customer changed their mind"), "x-order-3"
    )
    events = await workflows.wait("order-3", "workflow.cancelled")
    cancelled = events[-1]
    assert isinstance(cancelled, WorkflowCancelled)
    assert (cancelled.reason, cancelled.compensated) == ("customer changed their mind", True)
    compensations = [e for e in events if isinstance(e, ActivityScheduled) and e.compensation]
    assert [e.activity for e in compensations] == ["inventory.release", "payments.void"]
    assert sandbox.journal_of("order-3") == [
        "payments.authorize",
        "inventory.reserve",
        "inventory.release",
        "payments.void",
    ]
    assert "payments.capture" not in sandbox.attempts
