"""Retention of the orchestrator's workflow histories (issue 23): a closed workflow's history rows
go after the retention, its row stays and keeps answering, the history topic keeps every event;
open workflows and recently closed ones keep theirs. Real broker, database, orchestrator, claimer."""

from typing import Any

from slotflow.contracts import SignalWorkflow, StartWorkflow
from slotflow.contracts.topics import WORKFLOW_EVENTS, WORKFLOW_HISTORY
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.support import TopicReader
from tests.integration.orchestrator.conftest import StartClaimer, StartOrchestrator
from tests.integration.orchestrator.support import Workflows


async def _approved(workflows: Workflows, workflow_id: str) -> None:
    await workflows.start(workflow_id, "tests.approval", {"order_id": workflow_id}, f"start-{workflow_id}")
    await workflows.wait(workflow_id, "workflow.started")
    await workflows.send(SignalWorkflow(workflow_id=workflow_id, signal="approve"), f"approve-{workflow_id}")
    await workflows.wait(workflow_id, "workflow.completed")


async def test_closed_histories_past_the_retention_go_and_their_rows_keep_answering(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    start_orchestrator_: StartOrchestrator,
    start_claimer: StartClaimer,
) -> None:
    running = await start_orchestrator_(history_retention_days=30, purge_interval_seconds=0.2)
    await start_claimer()
    workflows = Workflows(kafka, producer, db)
    await _approved(workflows, "old-1")
    await _approved(workflows, "recent-1")
    await workflows.start("open-1", "tests.approval", {"order_id": "open-1"}, "start-open-1")
    await workflows.wait("open-1", "workflow.started")
    old_events = len(await workflows.history("old-1"))
    # Forty days pass for the old one, and for the open one too (open: kept however old).
    await db.execute(
        "UPDATE orchestrator.workflows SET closed_at = closed_at - interval '40 days', "
        "started_at = started_at - interval '40 days' WHERE workflow_id = 'old-1'"
    )
    await db.execute(
        "UPDATE orchestrator.workflows SET started_at = started_at - interval '40 days' "
        "WHERE workflow_id = 'open-1'"
    )

    async def purged() -> Any:
        return await db.fetchval(
            "SELECT history_purged_at FROM orchestrator.workflows WHERE workflow_id = 'old-1'"
        )

    await assert_eventually(purged, timeout=30, message="old-1's history purged")
    assert await workflows.history("old-1") == []
    assert [e.message_type for e in await workflows.history("recent-1")][-1] == "workflow.completed"
    assert [e.message_type for e in await workflows.history("open-1")][-1] == "workflow.started"
    rows = await db.fetch(
        "SELECT workflow_id, status, history_purged_at IS NOT NULL AS purged FROM orchestrator.workflows "
        "ORDER BY workflow_id"
    )
    assert [tuple(r) for r in rows] == [
        ("old-1", "completed", True),
        ("open-1", "running", False),
        ("recent-1", "completed", False),
    ]
    registry = running.orchestrator.metrics.registry
    assert registry.get_sample_value("slotflow_orchestrator_histories_purged_total") == 1

    # The row still answers: the id stays taken, a late signal is told the workflow ended.
    again = StartWorkflow(workflow_id="old-1", workflow_type="tests.approval", input={"order_id": "again"})
    await workflows.send(again, "start-old-1-again")
    await workflows.send(SignalWorkflow(workflow_id="old-1", signal="approve"), "approve-old-1-late")
    async with TopicReader(kafka, WORKFLOW_EVENTS) as answers:
        rejected = await answers.wait_for("command.rejected", count=2)
    reasons = {e.data["command_id"]: e.data["reason"] for e in rejected}
    assert reasons == {
        "start-old-1-again": (
            "workflow old-1 already exists (closed, history purged); id_reuse_policy is reject_duplicate"
        ),
        "approve-old-1-late": "workflow old-1 has already ended",
    }
    assert await workflows.history("old-1") == []
    # The history topic, kept forever, still holds every event of it.
    async with TopicReader(kafka, WORKFLOW_HISTORY) as history:
        await history.wait_for("workflow.completed", count=2)
        kept = [e for e in history.seen if e.key == "old-1"]
    assert len(kept) == old_events
