"""A rebuild keeps a cancelled workflow's activity cancelled (the real broker and database).

The orchestrator's record of an activity cancel (`activity_cancels`) is what a claimer checks a
CancelActivity against before it stops anything, and it is not on Kafka. Here the workflow is
cancelled while no claimer runs, so its CancelActivity waits on the internal topic; the schema is
then lost and rebuilt from the topics. The rebuild records the cancel again (and sends it again under its
id), so the claimer that starts afterwards takes it: the run ends `cancelled` and never finishes
its work. Without that, the claimer parks the genuine cancel as unproven and runs the step.
"""

import asyncio

from slotflow.contracts import CancelWorkflow
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_orchestrator.rebuild import rebuild
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode
from tests.integration.claimer.support import wait_state
from tests.integration.orchestrator.conftest import StartClaimer, StartOrchestrator
from tests.integration.orchestrator.flows import LONG_STEP
from tests.integration.orchestrator.support import Workflows, orchestrator_settings
from tests.integration.orchestrator.test_activity_cancels import LongStep

UNRELAYED = "SELECT count(*) FROM orchestrator.outbox WHERE published_at IS NULL"


async def test_a_rebuild_restores_the_record_of_a_cancel_still_on_its_topic(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    workflow_code: RuntimeWorkflowCode,
    start_orchestrator_: StartOrchestrator,
    start_claimer: StartClaimer,
) -> None:
    step = LongStep()
    registry.register(LONG_STEP, step)
    orchestrator = await start_orchestrator_()
    flows = Workflows(kafka, producer, db)
    # No claimer yet: the activity's JobDue and then its CancelActivity wait on their topics.
    await flows.start("rbc-1", "tests.long_step", {"order_id": "rbc-1"}, "start-rbc-1")
    await flows.wait("rbc-1", "workflow.activity_scheduled")
    await flows.send(CancelWorkflow(workflow_id="rbc-1", reason="customer cancelled"), "cancel-rbc-1")
    await flows.wait("rbc-1", "workflow.cancelled")

    async def relayed() -> bool:
        return int(await db.fetchval(UNRELAYED)) == 0

    await assert_eventually(relayed, timeout=30, message="the orchestrator's outbox relayed")
    await orchestrator.stop()
    # The schema is lost (its record of the cancel with it), then rebuilt from the topics.
    await db.execute("DROP SCHEMA orchestrator CASCADE")
    report = await rebuild(orchestrator_settings(kafka, pg_dsn), workflow_code=workflow_code, pool=db)
    assert report.activity_cancels == 1, report.lines()
    recorded = await db.fetch("SELECT run_id, handler, reason FROM orchestrator.activity_cancels")
    assert [dict(r) for r in recorded] == [
        {
            "run_id": "rbc-1/2",
            "handler": LONG_STEP,
            "reason": "workflow rbc-1 was cancelled: customer cancelled",
        }
    ]

    await start_orchestrator_()
    await start_claimer()
    row = await wait_state(db, "rbc-1/2", "cancelled", timeout=45)
    assert row["attempt"] <= 1
    await asyncio.sleep(0.5)
    assert "finished" not in step.seen
