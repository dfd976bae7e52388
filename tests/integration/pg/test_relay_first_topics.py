"""`OutboxRelay(first_topics=...)`: a pass's records of other topics wait for its first topics' to
be acknowledged. The orchestrator's history goes first, so a broker that takes a decision's timer
command but fails its history leaves neither on Kafka: nothing a decision sent is on a topic
without the history that decided it (what a rebuild from the history topic relies on)."""

from collections.abc import Iterable
from datetime import UTC, datetime

import pytest

from slotflow.contracts import CommandAccepted, wrap
from slotflow.contracts.topics import TIMER_COMMANDS, WORKFLOW_HISTORY
from slotflow.errors import TransientStorageError
from slotflow.kafka.producer import OutgoingRecord, Producer
from slotflow.kafka.reading import read_to_end
from slotflow.pg.migrations import OUTBOX, apply_migrations
from slotflow.pg.outbox import Staged, append_encoded, encoded
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow.relay import OutboxRelay
from slotflow.settings import KafkaSettings

SCHEMA = "relay_first"


def staged(topic: str, event_id: str, key: str) -> Staged:
    message = CommandAccepted(command_id=event_id, command_type="test", subject=key)
    return Staged(topic, wrap(message, id=event_id, key=key, source="test", occurred_at=datetime.now(UTC)))


class HistoryPartitionDown(Producer):
    """The real broker, with the history topic's partition failing: the other records of a send
    are delivered, the history's are not (a partial failure across partitions)."""

    def __init__(self, kafka: KafkaSettings, history_topic: str) -> None:
        super().__init__(kafka, client_id="relay-first-down")
        self._history = history_topic

    async def send_raw_all(self, records: Iterable[OutgoingRecord]) -> int:
        batch = list(records)
        others = [r for r in batch if r.topic != self._history]
        sent = await super().send_raw_all(others)
        if len(others) < len(batch):
            raise TransientStorageError(f"the leader of {self._history} is not available")
        return sent


async def test_a_decisions_other_records_wait_until_its_history_is_acknowledged(
    pg_pool: Pool, kafka: KafkaSettings
) -> None:
    await apply_migrations(pg_pool, schema=SCHEMA, sources=[OUTBOX])
    history = kafka.topic(WORKFLOW_HISTORY)
    timers = kafka.topic(TIMER_COMMANDS)
    async with pg_pool.acquire() as conn, conn.transaction():
        # One decision: its history event, then the timer it starts (keyed by the timer's id),
        # both in the workflow's outbox shard.
        rows = [
            encoded(staged(history, "wf-1#2", "wf-1")),
            encoded(staged(timers, "wf-1/timer/2/start", "wf-1/timer/2")),
        ]
        await append_encoded(conn, schema=SCHEMA, rows=rows, shard_keys=["wf-1", "wf-1"])
    shards = await pg_pool.fetch(sql("SELECT DISTINCT shard FROM {schema}.outbox", SCHEMA))
    assert len(shards) == 1

    async with HistoryPartitionDown(kafka, history) as failing:
        relay = OutboxRelay(pg_pool, failing, schema=SCHEMA, one_transaction=True, first_topics=[history])
        with pytest.raises(TransientStorageError):
            await relay.relay_once()
        assert await relay.pending() == 2
    assert await read_to_end(kafka, timers) == []  # the timer never went out without its history

    async with Producer(kafka, client_id="relay-first") as producer:
        relay = OutboxRelay(pg_pool, producer, schema=SCHEMA, one_transaction=True, first_topics=[history])
        assert await relay.relay_once() == 2
    assert [r.key for r in await read_to_end(kafka, history)] == [b"wf-1"]
    assert [r.key for r in await read_to_end(kafka, timers)] == [b"wf-1/timer/2"]
