"""SIGKILL an orchestrator in the middle of every decision of the order saga, start another one,
and the saga still ends failed-and-compensated with each activity's effect exactly once.

The effects are counted in `order_effects` (tests/integration/orchestrator/activities.py), which
the activities append to on
every attempt and which has no unique key, so the system's own keys cannot hide a duplicate.
Every decision transaction is held open `crash_window_seconds`, so a kill that lands while a
decision's inputs are waiting lands inside its transaction.
"""

import asyncio
import signal

from slotflow.contracts import ActivityScheduled, StartWorkflow, WorkflowFailed
from slotflow.contracts.topics import WORKFLOW_HISTORY
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.chaos.orchestrator.conftest import SpawnOrchestrator
from tests.integration.claimer.support import TopicReader
from tests.integration.orchestrator.conftest import StartClaimer
from tests.integration.orchestrator.support import effects, history, send, wait_history

WF = "chaos-order-1"
SAGA = ["payments.authorize", "inventory.reserve", "payments.capture", "inventory.release", "payments.void"]


async def _pending_inputs(pool: Pool) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM orchestrator.inputs WHERE workflow_id = $1", WF))


async def test_sigkill_inside_every_decision_leaves_each_effect_once(
    kafka: KafkaSettings,
    producer: Producer,
    schema: Pool,
    spawn: SpawnOrchestrator,
    start_claimer: StartClaimer,
) -> None:
    await start_claimer()
    order = {"order_id": WF, "capture_fails": True}
    await send(
        kafka,
        producer,
        StartWorkflow(workflow_id=WF, workflow_type="tests.checkout", input=order),
        "start-chaos",
    )
    kills_inside = 0
    for round_ in range(12):
        before = len(await history(schema, WF))
        proc = await spawn(f"orch-{round_}", crash_window_seconds=0.6, session_timeout_ms=6000)

        async def progressed(before: int = before) -> bool:
            events = await history(schema, WF)
            return (len(events) > before and await _pending_inputs(schema) > 0) or (
                bool(events) and events[-1].message_type == "workflow.failed"
            )

        await assert_eventually(progressed, timeout=90, interval=0.05, message=f"round {round_} progresses")
        if (await history(schema, WF))[-1].message_type == "workflow.failed":
            break
        # Inputs wait for this orchestrator's next decision, which holds its transaction open for
        # 0.6 s: the kill lands inside it.
        await asyncio.sleep(0.3)
        committed = len(await history(schema, WF))
        proc.signal(signal.SIGKILL)
        proc.proc.wait(timeout=10)
        if len(await history(schema, WF)) == committed and await _pending_inputs(schema) > 0:
            kills_inside += 1
    else:
        raise AssertionError("the saga did not end within 12 orchestrator lives")

    # One more orchestrator outlives the last kill and finishes whatever is left.
    await spawn("orch-last", session_timeout_ms=6000)
    events = await wait_history(schema, WF, "workflow.failed", timeout=90)
    assert kills_inside >= 3, f"only {kills_inside} kills landed inside a decision"
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    ended = events[-1]
    assert isinstance(ended, WorkflowFailed)
    assert ended.compensated is True
    scheduled = [e.activity for e in events if isinstance(e, ActivityScheduled)]
    assert scheduled == SAGA
    assert [e["activity"] for e in await effects(schema, f"{WF}/")] == SAGA

    # The history topic holds the same events (a relay that died after publishing may publish an
    # event twice: the same id and bytes, which readers collapse).
    async with TopicReader(kafka, WORKFLOW_HISTORY) as topic:
        await topic.wait_for("workflow.failed", timeout=60)
        by_id = {e.id: e for e in topic.seen}
        assert sorted(by_id) == sorted(f"{WF}#{e.sequence}" for e in events)
        for event in events:
            assert by_id[f"{WF}#{event.sequence}"].data == event.model_dump(mode="json")
