"""An activity parked in the DLQ and redriven, on the real broker and database with a real
claimer, ticker (the claimer's retries) and DLQ service: the claimers give up on it, the step is
marked failed with the DLQ reason while the workflow waits; once the cause is fixed, a redrive of
the parked run lets the workflow go on to completion, each attempt's effect recorded once."""

from collections.abc import AsyncIterator

import pytest

from slotflow.commands import publish_command
from slotflow.contracts import (
    ActivityCompleted,
    ActivityParked,
    DeadLetterFilter,
    RedriveDeadLetters,
    WorkflowCompleted,
)
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.dlq.conftest import Running, start_dlq, stop_dlq
from tests.integration.orchestrator.support import Workflows
from tests.integration.ticker.support import Replica


@pytest.fixture
async def dlq(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Running]:
    running = await start_dlq(kafka, pg_dsn)
    yield running
    await stop_dlq(running)


async def test_a_parked_activity_fails_its_step_and_a_redrive_lets_the_workflow_go_on(
    kafka: KafkaSettings, producer: Producer, ticker: Replica, dlq: Running, workflows: Workflows
) -> None:
    await workflows.start("pk-1", "tests.parked_booking", {"order_id": "pk-1"}, "start-pk-1")
    parked_history = await workflows.wait("pk-1", "workflow.activity_parked")
    parked = parked_history[-1]
    assert isinstance(parked, ActivityParked)
    assert (parked.scheduled_sequence, parked.reason, parked.error_type) == (
        2,
        "attempts_exhausted",
        "CarrierClosed",
    )
    assert parked.message == "carrier closed for order pk-1"

    async def in_the_dlq() -> bool:
        return await dlq.count("run_id = 'pk-1/2' AND status = 'parked'") == 1

    await assert_eventually(in_the_dlq, timeout=30, message="the activity's run parked in the DLQ")
    # Parked, the workflow waits: nothing more is appended while the run stays in the DLQ.
    assert [e.message_type for e in await workflows.history("pk-1")] == [
        "workflow.started",
        "workflow.activity_scheduled",
        "workflow.activity_parked",
    ]

    await workflows.db.execute("INSERT INTO carrier_open (order_id) VALUES ('pk-1')")  # the fix
    redrive = RedriveDeadLetters(selection=DeadLetterFilter(run_id="pk-1/2"))
    await publish_command(producer, kafka, redrive, command_id="redrive-pk-1", source="test")

    events = await workflows.wait("pk-1", "workflow.completed")
    assert [e.message_type for e in events] == [
        "workflow.started",
        "workflow.activity_scheduled",
        "workflow.activity_parked",
        "workflow.activity_completed",
        "workflow.completed",
    ]
    completed = events[3]
    assert isinstance(completed, ActivityCompleted)
    assert completed.scheduled_sequence == 2
    done = events[-1]
    assert isinstance(done, WorkflowCompleted)
    assert done.result == {"order_id": "pk-1", "booking": "book-pk-1/2"}
    # Two attempts before the DLQ, one after the redrive.
    assert await workflows.effects("pk-1/") == ["shipping.book"] * 3
