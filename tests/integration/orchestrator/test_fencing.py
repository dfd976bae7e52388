"""Two orchestrators never both decide for one workflow: the shard lease's fencing token refuses
the one that lost it (a zombie), and nothing of its decision is written. Real PostgreSQL."""

from datetime import UTC, datetime

import pytest

from slotflow.contracts import StartWorkflow, wrap
from slotflow.contracts.codec import encode
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow.settings import KafkaSettings
from slotflow_orchestrator.app import apply_migrations
from slotflow_orchestrator.deciding import Decisions, LeaseLost
from slotflow_orchestrator.intake import RECORD_INPUTS, prune_inbox, shard_of
from slotflow_orchestrator.leases import Leases
from slotflow_orchestrator.metrics import OrchestratorMetrics
from slotflow_orchestrator.outbound import Outbound
from slotflow_orchestrator.runtime import RuntimeDecider

SHARDS = 3


async def _start_input(pool: Pool, workflow_id: str) -> None:
    start = StartWorkflow(workflow_id=workflow_id, workflow_type="tests.checkout", input={"order_id": "f"})
    envelope = wrap(
        start, id=f"start-{workflow_id}", key=workflow_id, source="test", occurred_at=datetime.now(UTC)
    )
    await pool.execute(
        sql(RECORD_INPUTS, "orchestrator"),
        [workflow_id],
        [shard_of(workflow_id, SHARDS)],
        [envelope.type],
        [encode(envelope)],
    )


def _decisions(pool: Pool, decider: RuntimeDecider, kafka: KafkaSettings) -> Decisions:
    return Decisions(
        pool,
        schema="orchestrator",
        decider=decider,
        outbound=Outbound(kafka),
        metrics=OrchestratorMetrics(),
        shards=SHARDS,
    )


async def test_a_zombie_holding_an_old_token_writes_nothing(
    pg_pool: Pool, decider: RuntimeDecider, kafka: KafkaSettings
) -> None:
    await apply_migrations(pg_pool)
    workflow_id = "fenced-1"
    shard = shard_of(workflow_id, SHARDS)
    zombie = Leases(pg_pool, schema="orchestrator", owner="zombie")
    heir = Leases(pg_pool, schema="orchestrator", owner="heir")
    assert await zombie.reconcile(frozenset({shard})) == [shard]
    old_token = zombie.held[shard]
    # The group moved the partition while the zombie was paused: the heir takes the lease.
    await heir.reconcile(frozenset({shard}))
    assert heir.held[shard] == old_token + 1
    await _start_input(pg_pool, workflow_id)

    with pytest.raises(LeaseLost):
        await _decisions(pg_pool, decider, kafka).decide(workflow_id, shard=shard, token=old_token)
    assert await pg_pool.fetchval("SELECT count(*) FROM orchestrator.history") == 0
    assert await pg_pool.fetchval("SELECT count(*) FROM orchestrator.outbox") == 0
    assert await pg_pool.fetchval("SELECT count(*) FROM orchestrator.inputs") == 1

    outcome = await _decisions(pg_pool, decider, kafka).decide(
        workflow_id, shard=shard, token=heir.held[shard]
    )
    assert outcome.step is not None
    assert [e.message_type for e in outcome.step.events] == [
        "workflow.started",
        "workflow.activity_scheduled",
    ]
    row = await pg_pool.fetchrow("SELECT status, decided_with_token FROM orchestrator.workflows")
    assert (row["status"], row["decided_with_token"]) == ("running", old_token + 1)
    assert await pg_pool.fetchval("SELECT count(*) FROM orchestrator.inputs") == 0

    # The zombie, once told, does not take the shard back until the assignment changes.
    zombie.lost(shard)
    assert await zombie.reconcile(frozenset({shard})) == []
    assert await pg_pool.fetchval(
        "SELECT fence_token FROM orchestrator.shard_leases WHERE shard = $1", shard
    ) == (old_token + 1)


async def test_the_inbox_forgets_only_ids_older_than_its_retention(pg_pool: Pool) -> None:
    await apply_migrations(pg_pool)
    await pg_pool.execute(
        "INSERT INTO orchestrator.inbox (event_id, topic, processed_at) VALUES "
        "('old', 't', now() - interval '9 days'), ('recent', 't', now() - interval '6 days')"
    )
    assert await prune_inbox(pg_pool, schema="orchestrator", older_than_seconds=8 * 86_400) == 1
    rows = await pg_pool.fetch("SELECT event_id FROM orchestrator.inbox")
    assert [r["event_id"] for r in rows] == ["recent"]
