"""A large activity result and a large signal payload pass by reference: the history table and the
history topic hold `{"$slotflow_payload": "sha256:…"}`, the payload table holds the value once,
and the workflow code (replayed at every decision) sees the value itself."""

from slotflow.contracts import (
    ActivityCompleted,
    SignalReceived,
    SignalWorkflow,
    WorkflowCompleted,
)
from slotflow.contracts.topics import WORKFLOW_HISTORY
from slotflow.contracts.workflows import is_payload_ref
from slotflow.settings import KafkaSettings
from tests.integration.claimer.support import TopicReader
from tests.integration.orchestrator.support import Workflows

BLOB = 300_000


async def test_large_values_travel_by_reference_and_the_code_sees_them(
    kafka: KafkaSettings, workflows: Workflows
) -> None:
    order = {"order_id": "big-1", "blob_bytes": BLOB}
    await workflows.start("big-1", "tests.large_result", order, "s-big")
    await workflows.wait("big-1", "workflow.activity_completed")
    await workflows.send(
        SignalWorkflow(workflow_id="big-1", signal="go", payload={"note": "n" * 100_000}),
        "g-big",
    )
    await workflows.wait("big-1", "workflow.completed")

    stored = await workflows.history("big-1")
    completed = next(e for e in stored if isinstance(e, ActivityCompleted))
    signal = next(e for e in stored if isinstance(e, SignalReceived))
    assert is_payload_ref(completed.result)
    assert completed.result["bytes"] > BLOB
    assert is_payload_ref(signal.payload)
    done = stored[-1]
    assert isinstance(done, WorkflowCompleted)
    assert done.result == {"blob_size": BLOB, "signal_size": 100_000}
    assert await workflows.db.fetchval("SELECT count(*) FROM orchestrator.payloads") == 2

    async with TopicReader(kafka, WORKFLOW_HISTORY) as topic:
        await topic.wait_for("workflow.completed")
        on_topic = {e.id: e for e in topic.seen}
        assert is_payload_ref(on_topic[f"big-1#{completed.sequence}"].data["result"])
