"""Two orchestrators never both decide for one workflow: the shard lease's token refuses
the one that lost it (a zombie), and nothing of its decision is written. Real PostgreSQL."""

from datetime import UTC, datetime

import asyncpg
import pytest

from slotflow.contracts import RunCompleted, StartWorkflow, wrap
from slotflow.contracts.codec import encode
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow.settings import KafkaSettings
from slotflow_orchestrator.app import apply_migrations
from slotflow_orchestrator.deciding import Decisions, LeaseLost
from slotflow_orchestrator.intake import prune_inbox, shard_of
from slotflow_orchestrator.leases import Leases
from slotflow_orchestrator.metrics import OrchestratorMetrics
from slotflow_orchestrator.outbound import Outbound
from slotflow_orchestrator.sql import RECORD_INPUTS
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode, load_workflow_code
from tests.integration.orchestrator.support import claimer_record

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


def _decisions(pool: Pool, workflow_code: RuntimeWorkflowCode, kafka: KafkaSettings) -> Decisions:
    return Decisions(
        pool,
        schema="orchestrator",
        workflow_code=workflow_code,
        outbound=Outbound(kafka),
        metrics=OrchestratorMetrics(),
        shards=SHARDS,
    )


async def test_a_zombie_holding_an_old_token_writes_nothing(
    pg_pool: Pool, workflow_code: RuntimeWorkflowCode, kafka: KafkaSettings
) -> None:
    await apply_migrations(pg_pool)
    workflow_id = "fenced-1"
    shard = shard_of(workflow_id, SHARDS)
    zombie = Leases(pg_pool, schema="orchestrator", owner="zombie")
    heir = Leases(pg_pool, schema="orchestrator", owner="heir")
    assert await zombie.reconcile(frozenset({shard}), 1) == [shard]
    old_token = zombie.held[shard]
    # The group moved the partition while the zombie was paused: the heir takes the lease.
    await heir.reconcile(frozenset({shard}), 1)
    assert heir.held[shard] == old_token + 1
    await _start_input(pg_pool, workflow_id)

    with pytest.raises(LeaseLost):
        await _decisions(pg_pool, workflow_code, kafka).decide(workflow_id, shard=shard, token=old_token)
    assert await pg_pool.fetchval("SELECT count(*) FROM orchestrator.history") == 0
    assert await pg_pool.fetchval("SELECT count(*) FROM orchestrator.outbox") == 0
    assert await pg_pool.fetchval("SELECT count(*) FROM orchestrator.inputs") == 1

    outcome = await _decisions(pg_pool, workflow_code, kafka).decide(
        workflow_id, shard=shard, token=heir.held[shard]
    )
    assert outcome.step is not None
    assert [e.message_type for e in outcome.step.events] == [
        "workflow.started",
        "workflow.activity_scheduled",
    ]
    row = await pg_pool.fetchrow("SELECT status, decided_with_token FROM orchestrator.workflows")
    assert row is not None
    assert (row["status"], row["decided_with_token"]) == ("running", old_token + 1)
    assert await pg_pool.fetchval("SELECT count(*) FROM orchestrator.inputs") == 0

    # The zombie, once told, does not take the shard back until the group rebalances again.
    zombie.lost(shard, old_token)
    assert await zombie.reconcile(frozenset({shard}), 1) == []
    assert await pg_pool.fetchval(
        "SELECT fence_token FROM orchestrator.shard_leases WHERE shard = $1", shard
    ) == (old_token + 1)


async def test_a_shard_handed_away_and_back_between_two_checks_is_decided_again(
    pg_pool: Pool, workflow_code: RuntimeWorkflowCode, kafka: KafkaSettings
) -> None:
    """Bug 1 of docs/reliability.md (seed 2): the partition went A -> B -> A between two of A's
    lease checks. B took the lease (token + 1) and released it when the partition left it; A saw
    the same partitions at both checks, so it kept its old token, was refused, and never took the
    shard again: the workflow's inputs waited for good. A new assignment number re-acquires."""
    await apply_migrations(pg_pool)
    workflow_id = "handed-back-1"
    shard = shard_of(workflow_id, SHARDS)
    first = Leases(pg_pool, schema="orchestrator", owner="orchestrator-0")
    second = Leases(pg_pool, schema="orchestrator", owner="orchestrator-1")
    await first.reconcile(frozenset({shard}), 1)
    old_token = first.held[shard]
    # Assignment 2 (unseen by `first`): the shard is the second's; assignment 3 hands it back.
    await second.reconcile(frozenset({shard}), 1)
    await second.reconcile(frozenset(), 2)
    await _start_input(pg_pool, workflow_id)
    with pytest.raises(LeaseLost):
        await _decisions(pg_pool, workflow_code, kafka).decide(workflow_id, shard=shard, token=old_token)
    first.lost(shard, old_token)

    assert await first.reconcile(frozenset({shard}), 3) == [shard]
    assert first.held[shard] == old_token + 2
    outcome = await _decisions(pg_pool, workflow_code, kafka).decide(
        workflow_id, shard=shard, token=first.held[shard]
    )
    assert outcome.step is not None
    assert outcome.step.events
    assert await pg_pool.fetchval("SELECT count(*) FROM orchestrator.inputs") == 0


async def test_a_held_shard_is_acquired_again_at_every_new_assignment(pg_pool: Pool) -> None:
    """The same partitions before and after a rebalance do not mean the lease stayed ours: the
    token is raised again, and a refusal of the old token no longer drops the shard."""
    await apply_migrations(pg_pool)
    leases = Leases(pg_pool, schema="orchestrator", owner="orchestrator-0")
    assert await leases.reconcile(frozenset({0, 1}), 1) == [0, 1]
    tokens = dict(leases.held)
    assert await leases.reconcile(frozenset({0, 1}), 1) == []
    assert await leases.reconcile(frozenset({0, 1}), 2) == [0, 1]
    assert leases.held == {0: tokens[0] + 1, 1: tokens[1] + 1}
    leases.lost(0, tokens[0])  # a decision begun under the old token, refused
    assert leases.held == {0: tokens[0] + 1, 1: tokens[1] + 1}


async def test_the_inbox_forgets_only_ids_older_than_its_retention(pg_pool: Pool) -> None:
    await apply_migrations(pg_pool)
    await pg_pool.execute(
        "INSERT INTO orchestrator.inbox (event_id, topic, processed_at) VALUES "
        "('old', 't', now() - interval '9 days'), ('recent', 't', now() - interval '6 days')"
    )
    assert await prune_inbox(pg_pool, schema="orchestrator", older_than_seconds=8 * 86_400) == 1
    rows = await pg_pool.fetch("SELECT event_id FROM orchestrator.inbox")
    assert [r["event_id"] for r in rows] == ["recent"]


async def _completed_input(pool: Pool, workflow_id: str, sequence: int) -> None:
    """A RunCompleted of the activity at ``sequence``, and the claimer's record that backs it."""
    activity = await pool.fetchval(
        "SELECT data->>'activity' FROM orchestrator.history WHERE workflow_id = $1 AND sequence = $2",
        workflow_id,
        sequence,
    )
    await claimer_record(pool, workflow_id, sequence, handler=activity, result={"ok": sequence})
    done = RunCompleted(
        run_id=f"{workflow_id}/{sequence}",
        job_id=workflow_id,
        slot=datetime.now(UTC),
        attempt=1,
        fence_token=1,
        owner="claimer",
        workflow_id=workflow_id,
        sequence=sequence,
        result={"ok": sequence},
        started_at=datetime.now(UTC),
        finished_at=datetime.now(UTC),
    )
    envelope = wrap(
        done,
        id=f"done-{workflow_id}-{sequence}",
        key=workflow_id,
        source="test",
        occurred_at=datetime.now(UTC),
    )
    await pool.execute(
        RECORD_INPUTS.format(schema="orchestrator"),
        [workflow_id],
        [shard_of(workflow_id, SHARDS)],
        [envelope.type],
        [encode(envelope)],
    )


async def test_a_history_kept_from_an_own_decision_is_not_used_after_another_appended(
    pg_pool: Pool, workflow_code: RuntimeWorkflowCode, kafka: KafkaSettings
) -> None:
    """The first owner keeps the history it committed; the shard moves away and back, the heir
    appended meanwhile: the first owner's next decision reads the table, not what it kept."""
    await apply_migrations(pg_pool)
    workflow_id = "kept-1"
    shard = shard_of(workflow_id, SHARDS)
    first = Leases(pg_pool, schema="orchestrator", owner="first")
    heir = Leases(pg_pool, schema="orchestrator", owner="heir")
    first_decisions = _decisions(pg_pool, workflow_code, kafka)
    # The heir runs its own workflow runtime: two processes share no cache.
    heir_decisions = _decisions(pg_pool, load_workflow_code(["tests.integration.orchestrator.saga"]), kafka)
    await first.reconcile(frozenset({shard}), 1)
    await _start_input(pg_pool, workflow_id)
    await first_decisions.decide(workflow_id, shard=shard, token=first.held[shard])
    await _completed_input(pg_pool, workflow_id, 2)
    await first_decisions.decide(workflow_id, shard=shard, token=first.held[shard])
    assert (first_decisions.cache_hits, first_decisions.cache_misses) == (1, 0)

    await heir.reconcile(frozenset({shard}), 1)
    # The newest event is the pending activity (`inventory.reserve`).
    pending = await pg_pool.fetchval("SELECT last_sequence FROM orchestrator.workflows")
    await _completed_input(pg_pool, workflow_id, pending)
    heir_outcome = await heir_decisions.decide(workflow_id, shard=shard, token=heir.held[shard])
    assert heir_outcome.step is not None
    assert heir_outcome.step.events
    assert heir_decisions.cache_misses == 1

    first.lost(shard, first.held[shard])
    await first.reconcile(frozenset(), 2)
    await first.reconcile(frozenset({shard}), 3)
    last = await pg_pool.fetchval("SELECT last_sequence FROM orchestrator.workflows")
    await _completed_input(pg_pool, workflow_id, last)
    outcome = await first_decisions.decide(workflow_id, shard=shard, token=first.held[shard])
    assert first_decisions.cache_misses == 1
    assert outcome.step is not None
    assert outcome.step.events[0].sequence == last + 1
    sequences = [
        r["sequence"] for r in await pg_pool.fetch("SELECT sequence FROM orchestrator.history ORDER BY 1")
    ]
    assert sequences == list(range(1, len(sequences) + 1))


async def test_a_group_that_fails_leaves_nothing_kept(
    pg_pool: Pool, workflow_code: RuntimeWorkflowCode, kafka: KafkaSettings
) -> None:
    """Two decisions share a transaction; one of them cannot append (its sequence is taken), so
    neither commits, and the next decision of the other reads its history from the table."""
    await apply_migrations(pg_pool)
    ids = ["group-a", "group-b"]
    shard = shard_of(ids[0], SHARDS)
    other = next(i for i in range(100) if shard_of(f"group-b{i}", SHARDS) == shard)
    ids[1] = f"group-b{other}"
    leases = Leases(pg_pool, schema="orchestrator", owner="one")
    await leases.reconcile(frozenset({shard}), 1)
    token = leases.held[shard]
    decisions = _decisions(pg_pool, workflow_code, kafka)
    for workflow_id in ids:
        await _start_input(pg_pool, workflow_id)
    await decisions.decide_many(ids, shard=shard, token=token)
    for workflow_id in ids:
        await _completed_input(pg_pool, workflow_id, 2)
    # Sequence 3 of the second workflow is taken behind the orchestrator's back.
    await pg_pool.execute(
        "INSERT INTO orchestrator.history (workflow_id, sequence, type, data, fence_token) "
        "VALUES ($1, 3, 'workflow.signal_received', '{}', $2)",
        ids[1],
        token,
    )
    with pytest.raises(asyncpg.UniqueViolationError):
        await decisions.decide_many(ids, shard=shard, token=token)
    assert await pg_pool.fetchval("SELECT count(*) FROM orchestrator.inputs") == 2
    assert (
        await pg_pool.fetchval("SELECT count(*) FROM orchestrator.history WHERE workflow_id = $1", ids[0])
        == 2
    )
    misses = decisions.cache_misses
    outcome = await decisions.decide(ids[0], shard=shard, token=token)
    assert decisions.cache_misses == misses + 1
    assert outcome.step is not None
    assert outcome.step.events[0].sequence == 3
