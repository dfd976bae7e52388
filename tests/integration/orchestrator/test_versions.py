"""An edit that reorders steps, deployed under running workflows: stuck with NonDeterminismDetected
(history untouched, nothing scheduled) and caught by `slotflow replay`; the same edit behind
`workflow.patched` replays cleanly, and deploying it lets the stuck workflow finish."""

from slotflow.contracts import NonDeterminismDetected, SignalWorkflow, StartWorkflow, WorkflowCompleted
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_orchestrator.workflow_code import load_workflow_code
from tests.integration.cli.test_replay_topic import slotflow
from tests.integration.orchestrator.conftest import StartClaimer, StartOrchestrator
from tests.integration.orchestrator.support import effects, history, send, wait_history

VERSIONS = "tests.integration.orchestrator.evolving"
WF = "evolving-1"


async def test_a_reorder_is_stuck_caught_by_replay_and_its_patched_form_finishes(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    start_orchestrator_: StartOrchestrator,
    start_claimer: StartClaimer,
) -> None:
    await start_claimer()
    first = await start_orchestrator_(with_workflow_code=load_workflow_code([f"{VERSIONS}.v1"]))
    await send(
        kafka,
        producer,
        StartWorkflow(workflow_id=WF, workflow_type="tests.evolving", input={"order_id": WF}),
        "s-ev",
    )

    async def waiting_for_go() -> bool:
        events = await history(db, WF)
        return len(events) == 5 and events[-1].message_type == "workflow.activity_completed"

    await assert_eventually(waiting_for_go, timeout=60, message="v1 waits for the signal")
    await first.stop()

    # The reorder, deployed as is: the next decision replays, diverges, and stops.
    reordered = await start_orchestrator_(with_workflow_code=load_workflow_code([f"{VERSIONS}.v2"]))
    await send(kafka, producer, SignalWorkflow(workflow_id=WF, signal="go"), "go-ev")
    stuck = await wait_history(db, WF, "workflow.non_determinism_detected")
    marker = stuck[-1]
    assert isinstance(marker, NonDeterminismDetected)
    assert marker.at_sequence == 2
    assert "payments.authorize" in marker.expected
    assert "inventory.reserve" in marker.got
    assert [e.message_type for e in stuck[5:]] == [
        "workflow.signal_received",
        "workflow.non_determinism_detected",
    ]
    assert (
        await db.fetchval("SELECT status FROM orchestrator.workflows WHERE workflow_id = $1", WF) == "stuck"
    )
    assert len(await effects(db, f"{WF}/")) == 2
    await reordered.stop()

    code, out, err = await slotflow(
        kafka, "replay", "--topic", "--workflow-id", WF, "--module", f"{VERSIONS}.v2"
    )
    assert code == 1, (out, err)
    assert out.splitlines()[:2] == [f"MISMATCH  {WF}  tests.evolving", "  sequence: 2"]
    code, out, err = await slotflow(
        kafka, "replay", "--topic", "--workflow-id", WF, "--module", f"{VERSIONS}.v3"
    )
    assert code == 0, (out, err)

    # Deploying the patched form: the stuck workflow is decided again and finishes on its old path.
    await start_orchestrator_(with_workflow_code=load_workflow_code([f"{VERSIONS}.v3"]))
    done = await wait_history(db, WF, "workflow.completed")
    assert done[len(stuck)].message_type == "workflow.activity_scheduled"
    ended = done[-1]
    assert isinstance(ended, WorkflowCompleted)
    assert ended.result == {"version": 3}
    assert [e["activity"] for e in await effects(db, f"{WF}/")] == [
        "payments.authorize",
        "inventory.reserve",
        "payments.capture",
    ]
