"""A large activity result and a large signal payload pass by reference: the history table and the
history topic hold `{"$slotflow_payload": "sha256:…"}`, the payload table holds the value once,
and the workflow code (replayed at every decision) sees the value itself. A result too large for
a Kafka record (5 MB) leaves the claimer by reference too: its payload table, in the outcome's
transaction, and RunCompleted names it; `slotflow replay --payloads-dsn` replays the history."""

import httpx
from fastapi import FastAPI

from slotflow.contracts import (
    ActivityCompleted,
    ActivityScheduled,
    SignalReceived,
    SignalWorkflow,
    WorkflowCompleted,
)
from slotflow.contracts.topics import RUN_EVENTS, WORKFLOW_HISTORY
from slotflow.contracts.workflows import PAYLOAD_REF_KEY, is_payload_ref
from slotflow.settings import KafkaSettings
from tests.integration.api.conftest import api_settings, app, client  # noqa: F401 - the api fixtures
from tests.integration.api.helpers import eventually_json
from tests.integration.claimer.support import TopicReader
from tests.integration.cli.test_replay_topic import slotflow
from tests.integration.orchestrator.support import Workflows, wait_published

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


HUGE = 5 * 1024 * 1024


async def test_a_5_mb_activity_result_leaves_the_claimer_by_reference_and_replays(
    kafka: KafkaSettings,
    workflows: Workflows,
    pg_dsn: str,
    client: httpx.AsyncClient,  # noqa: F811 - the api fixture
    app: FastAPI,  # noqa: F811 - the api fixture
) -> None:
    order = {"order_id": "huge-1", "blob_bytes": HUGE}
    await workflows.start("huge-1", "tests.large_result", order, "s-huge")
    await workflows.wait("huge-1", "workflow.activity_completed", timeout=120)
    await workflows.send(SignalWorkflow(workflow_id="huge-1", signal="go", payload={"note": "n"}), "g-huge")
    events = await workflows.wait("huge-1", "workflow.completed", timeout=120)
    done = events[-1]
    assert isinstance(done, WorkflowCompleted)
    assert done.result == {"blob_size": HUGE, "signal_size": 1}  # the code saw all 5 MB

    # The claimer: the result in its payload table, the run row and RunCompleted hold a reference.
    (scheduled,) = [e for e in events if isinstance(e, ActivityScheduled)]
    async with TopicReader(kafka, RUN_EVENTS) as runs:
        (sent,) = await runs.wait_for("run.completed", run_id=scheduled.run_id)
    reference = sent.data["result"]
    assert is_payload_ref(reference)
    assert reference["bytes"] > HUGE
    stored = await workflows.db.fetchval(
        "SELECT size FROM claimer.payloads WHERE ref = $1", reference[PAYLOAD_REF_KEY]
    )
    assert stored == reference["bytes"]
    recorded = await workflows.db.fetchval(
        "SELECT result FROM claimer.runs WHERE run_id = $1", scheduled.run_id
    )
    assert PAYLOAD_REF_KEY in recorded
    assert len(recorded) < 1000

    # The orchestrator: the history holds its own reference, to its own payload table.
    completed = next(e for e in events if isinstance(e, ActivityCompleted))
    assert is_payload_ref(completed.result)
    assert (
        await workflows.db.fetchval(
            "SELECT size FROM orchestrator.payloads WHERE ref = $1", completed.result[PAYLOAD_REF_KEY]
        )
        == completed.result["bytes"]
    )

    # The api's read model shows the references and their sizes, from the run events and history.
    shown = await eventually_json(client, "/v1/workflows/huge-1", lambda b: b["status"] == "completed")
    (step,) = shown["steps"]
    assert step["result"] == completed.result
    run = await eventually_json(client, f"/v1/runs/{scheduled.run_id}", lambda b: b["state"] == "completed")
    assert run["result"] == reference

    # `slotflow replay` reads the published history and resolves the reference in that table.
    await wait_published(kafka, "huge-1", len(events))
    argv = [
        "replay",
        "--topic",
        "--workflow-id",
        "huge-1",
        "--module",
        "tests.integration.orchestrator.flows",
    ]
    code, out, err = await slotflow(kafka, *argv)
    assert code != 0, (out, err)
    assert "--payloads-dsn" in out + err
    code, out, err = await slotflow(kafka, *argv, "--payloads-dsn", pg_dsn)
    assert code == 0, (out, err)
    assert out.startswith("ok  huge-1  tests.large_result"), out
