"""A SIGSTOPped orchestrator that wakes after its partitions moved cannot append: the heir's lease
raised the fencing token, and every history row the sleeper could still write would carry the old
one. Real broker, real database, real processes."""

import signal

from slotflow.contracts import SignalReceived, SignalWorkflow, StartWorkflow
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_orchestrator.intake import shard_of
from tests.chaos.orchestrator.conftest import SpawnOrchestrator
from tests.integration.orchestrator.conftest import StartClaimer
from tests.integration.orchestrator.support import send, wait_history

WF = "paused-1"


async def test_a_paused_orchestrator_is_fenced_after_its_shard_moved(
    kafka: KafkaSettings,
    producer: Producer,
    schema: Pool,
    spawn: SpawnOrchestrator,
    start_claimer: StartClaimer,
) -> None:
    await start_claimer()
    sleeper = await spawn("sleeper", session_timeout_ms=6000)
    start = StartWorkflow(workflow_id=WF, workflow_type="tests.approval", input={"order_id": WF})
    await send(kafka, producer, start, "start-paused")
    await wait_history(schema, WF, "workflow.started")
    shards = await schema.fetchval("SELECT count(*) FROM orchestrator.shard_leases")
    assert shards >= 1
    shard = int(await schema.fetchval("SELECT shard FROM orchestrator.workflows WHERE workflow_id = $1", WF))
    assert shard == shard_of(WF, 3)
    old = int(
        await schema.fetchval("SELECT fence_token FROM orchestrator.shard_leases WHERE shard = $1", shard)
    )

    sleeper.signal(signal.SIGSTOP)
    # The heir holds its decisions open for 3 s, so the sleeper wakes while one is in flight.
    await spawn("heir", session_timeout_ms=6000, crash_window_seconds=3)

    async def moved() -> bool:
        row = await schema.fetchrow(
            "SELECT owner, fence_token FROM orchestrator.shard_leases WHERE shard = $1", shard
        )
        assert row is not None
        return bool(row["owner"] == "heir" and row["fence_token"] > old)

    await assert_eventually(moved, timeout=60, interval=0.1, message="the heir took the shard")
    await send(
        kafka,
        producer,
        SignalWorkflow(workflow_id=WF, signal="approve", payload={"by": "heir"}),
        "sig-paused",
    )

    async def waiting() -> bool:
        return bool(
            await schema.fetchval("SELECT count(*) FROM orchestrator.inputs WHERE workflow_id = $1", WF)
        )

    await assert_eventually(waiting, timeout=30, interval=0.05, message="the signal waits for a decision")
    sleeper.signal(signal.SIGCONT)

    events = await wait_history(schema, WF, "workflow.completed", timeout=60)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert len([e for e in events if isinstance(e, SignalReceived)]) == 1
    tokens = await schema.fetch(
        "SELECT sequence, fence_token FROM orchestrator.history WHERE workflow_id = $1 ORDER BY sequence", WF
    )
    # The start (the code then waits for the signal, recording nothing) was the sleeper's;
    # everything after it was appended under the heir's token: nothing by the sleeper.
    assert tokens[0]["fence_token"] == old
    assert all(r["fence_token"] > old for r in tokens[1:])
    assert sleeper.alive()
