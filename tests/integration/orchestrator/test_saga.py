"""The order saga end to end on the real broker and database: StartWorkflow over Kafka, the
activities run by a real claimer, results back into the history, the workflow completed; and
with the capture failing permanently, the compensations in reverse order, each once."""

from slotflow.contracts import (
    ActivityCompleted,
    ActivityFailed,
    ActivityScheduled,
    CommandAccepted,
    CommandRejected,
    StartWorkflow,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowStarted,
)
from slotflow.contracts.topics import WORKFLOW_EVENTS, WORKFLOW_HISTORY
from slotflow.settings import KafkaSettings
from tests.integration.claimer.support import TopicReader
from tests.integration.orchestrator.support import Workflows


async def test_the_order_saga_completes_and_a_second_start_appends_nothing(
    kafka: KafkaSettings, workflows: Workflows
) -> None:
    start = StartWorkflow(workflow_id="order-1", workflow_type="tests.checkout", input={"order_id": "1"})
    await workflows.send(start, "start-order-1")
    events = await workflows.wait("order-1", "workflow.completed")
    assert [type(e) for e in events][:3] == [WorkflowStarted, ActivityScheduled, ActivityCompleted]
    scheduled = [e for e in events if isinstance(e, ActivityScheduled)]
    assert [e.activity for e in scheduled] == ["payments.authorize", "inventory.reserve", "payments.capture"]
    assert all(e.run_id == f"order-1/{e.sequence}" for e in scheduled)
    done = events[-1]
    assert isinstance(done, WorkflowCompleted)
    assert done.result["captured"] is True
    assert await workflows.effects("order-1/") == [
        "payments.authorize",
        "inventory.reserve",
        "payments.capture",
    ]

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


async def test_a_failed_capture_releases_then_voids_and_fails_compensated(workflows: Workflows) -> None:
    order = {"order_id": "2", "capture_fails": True}
    await workflows.start("order-2", "tests.checkout", order, "start-order-2")
    events = await workflows.wait("order-2", "workflow.failed")
    failed = events[-1]
    assert isinstance(failed, WorkflowFailed)
    assert failed.compensated is True
    assert any(isinstance(e, ActivityFailed) and e.permanent for e in events)
    compensations = [e for e in events if isinstance(e, ActivityScheduled) and e.compensation]
    assert [e.activity for e in compensations] == ["inventory.release", "payments.void"]
    assert await workflows.effects("order-2/") == [
        "payments.authorize",
        "inventory.reserve",
        "payments.capture",
        "inventory.release",
        "payments.void",
    ]
