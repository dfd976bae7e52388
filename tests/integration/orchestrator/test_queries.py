"""Queries on the real broker and database: the orchestrator that holds the workflow's shard answers
through its listener, from the replayed state, appending nothing; under a lease token it no longer
holds (a zombie's) it answers `moved` and the api's path keeps asking until its deadline; a closed
workflow answers from its final state, and one whose history was purged is refused (410).
"""

import pytest

from slotflow.contracts import SignalWorkflow
from slotflow.contracts.topics import WORKFLOW_COMMANDS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.processes import free_port
from slotflow_api.workflow_queries import Queries, QueryRefused, QueryUnanswered
from slotflow_orchestrator.intake import shard_of
from tests.integration.orchestrator.conftest import StartOrchestrator
from tests.integration.orchestrator.support import Workflows

FENCE_AWAY = "UPDATE orchestrator.shard_leases SET fence_token = fence_token + 1 WHERE shard = $1"
LAST_SEQUENCE = "SELECT last_sequence FROM orchestrator.workflows WHERE workflow_id = $1"


async def test_the_shard_owner_answers_from_the_state_and_a_stale_token_is_refused(
    kafka: KafkaSettings, producer: Producer, db: Pool, start_orchestrator_: StartOrchestrator
) -> None:
    await start_orchestrator_(query_port=free_port())
    flows = Workflows(kafka, producer, db)
    topic = kafka.topic(WORKFLOW_COMMANDS)
    queries = Queries(db, producer, schema="orchestrator", commands_topic=topic, token=None)
    try:
        await flows.start("qn-1", "tests.noting", {"order_id": "qn-1"}, "start-qn-1")
        for n, text in enumerate(("gift wrap", "leave at door")):
            await flows.send(
                SignalWorkflow(workflow_id="qn-1", signal="note", payload={"text": text}), f"n-{n}"
            )

        async def both_noted() -> bool:
            history = await flows.history("qn-1")
            return sum(e.message_type == "workflow.signal_received" for e in history) == 2

        await assert_eventually(both_noted, timeout=60, message="qn-1 took both notes")
        before = await db.fetchval(LAST_SEQUENCE, "qn-1")
        answer = await queries.ask("qn-1", "notes", None, timeout=10)
        assert (answer.result, answer.status) == (["gift wrap", "leave at door"], "running")
        assert await db.fetchval(LAST_SEQUENCE, "qn-1") == before  # nothing appended

        with pytest.raises(QueryRefused) as unknown:
            await queries.ask("qn-1", "stage", None, timeout=10)
        assert (unknown.value.status, unknown.value.error) == (404, "unknown_query")

        # A zombie: the lease row moved on under another token; the orchestrator still believes
        # it holds the shard under the old one, and answers nothing under the new one.
        shards = await producer.partition_count(topic)
        await db.execute(FENCE_AWAY, shard_of("qn-1", shards))
        with pytest.raises(QueryUnanswered, match="moved"):
            await queries.ask("qn-1", "notes", None, timeout=1.5)
    finally:
        await queries.close()


async def test_a_closed_workflow_answers_from_its_final_state_until_its_history_is_purged(
    kafka: KafkaSettings, producer: Producer, db: Pool, start_orchestrator_: StartOrchestrator
) -> None:
    await start_orchestrator_(query_port=free_port())
    flows = Workflows(kafka, producer, db)
    queries = Queries(
        db, producer, schema="orchestrator", commands_topic=kafka.topic(WORKFLOW_COMMANDS), token=None
    )
    try:
        await flows.start("qn-2", "tests.noting", {"order_id": "qn-2"}, "start-qn-2")
        await flows.send(SignalWorkflow(workflow_id="qn-2", signal="note", payload={"text": "one"}), "qn2-a")
        await flows.send(SignalWorkflow(workflow_id="qn-2", signal="note", payload={"done": True}), "qn2-b")
        await flows.wait("qn-2", "workflow.completed")
        answer = await queries.ask("qn-2", "notes", None, timeout=10)
        assert (answer.result, answer.status) == (["one"], "completed")

        with pytest.raises(QueryRefused) as unknown_workflow:
            await queries.ask("qn-nobody", "notes", None, timeout=10)
        assert unknown_workflow.value.status == 404

        # Retention purged its history (retention.py does this after HISTORY_RETENTION_DAYS).
        async with db.acquire() as conn, conn.transaction():
            await conn.execute("DELETE FROM orchestrator.history WHERE workflow_id = 'qn-2'")
            await conn.execute(
                "UPDATE orchestrator.workflows SET history_purged_at = now() WHERE workflow_id = 'qn-2'"
            )
        with pytest.raises(QueryRefused) as purged:
            await queries.ask("qn-2", "notes", None, timeout=10)
        assert (purged.value.status, purged.value.error) == (410, "purged")
    finally:
        await queries.close()
