"""OutboxRelay restricted to some shards (the ticker's `relay_loops`): each relay publishes its own
shards only, so relays of one process on disjoint shards never hold back each other's rows, and
together they publish every row once.
"""

from datetime import UTC, datetime

import pytest

from slotflow.contracts import CommandAccepted, wrap
from slotflow.contracts.codec import decode
from slotflow.contracts.topics import SCHEDULE_EVENTS
from slotflow.errors import ConfigurationError
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.producer import Producer
from slotflow.pg.migrations import OUTBOX, apply_migrations
from slotflow.pg.outbox import Staged, append_many
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow.relay import OutboxRelay
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name

SCHEMA = "relay_shards"


def staged(topic: str, event_id: str, key: str) -> Staged:
    message = CommandAccepted(command_id=event_id, command_type="test", subject=key)
    return Staged(topic, wrap(message, id=event_id, key=key, source="test", occurred_at=datetime.now(UTC)))


async def test_relays_on_disjoint_shards_publish_only_their_own_and_together_everything_once(
    pg_pool: Pool, kafka: KafkaSettings
) -> None:
    await apply_migrations(pg_pool, schema=SCHEMA, sources=[OUTBOX])
    topic = kafka.topic(SCHEDULE_EVENTS)
    items = [staged(topic, f"e{i}", f"key-{i % 23}") for i in range(200)]
    async with pg_pool.acquire() as conn, conn.transaction():
        await append_many(conn, schema=SCHEMA, items=items)
    by_shard = {
        r["shard"]: r["n"]
        for r in await pg_pool.fetch(
            sql("SELECT shard, count(*) AS n FROM {schema}.outbox GROUP BY shard", SCHEMA)
        )
    }
    assert len(by_shard) > 2, "the keys must spread over several shards"
    async with Producer(kafka, client_id="relay-shards") as producer:
        even = OutboxRelay(pg_pool, producer, schema=SCHEMA, one_transaction=True, shards=[0, 2, 4, 6])
        odd = OutboxRelay(pg_pool, producer, schema=SCHEMA, parallel_shards=True, shards=[1, 3, 5, 7])
        assert await even.relay_once() == sum(n for s, n in by_shard.items() if s % 2 == 0)
        left = await pg_pool.fetch(
            sql("SELECT DISTINCT shard FROM {schema}.outbox WHERE published_at IS NULL", SCHEMA)
        )
        assert {r["shard"] for r in left} == {s for s in by_shard if s % 2 == 1}
        assert await odd.relay_once() == sum(n for s, n in by_shard.items() if s % 2 == 1)
        assert await even.relay_once() == 0
        assert await odd.pending() == 0
    ids: list[str] = []
    async with Consumer(kafka, topic, group_id=unique_name("reader"), client_id="reader") as consumer:

        async def everything() -> bool:
            ids.extend(decode(r.value).id for r in await consumer.poll(timeout_ms=200))
            return len(ids) >= len(items)

        await assert_eventually(everything, timeout=30, message="every staged record")
    assert sorted(ids) == sorted(item.envelope.id for item in items)


@pytest.mark.parametrize("shards", [[], [8], [-1, 0]])
async def test_a_relay_refuses_shards_that_do_not_exist(
    pg_pool: Pool, kafka: KafkaSettings, shards: list[int]
) -> None:
    async with Producer(kafka, client_id="relay-shards-bad") as producer:
        with pytest.raises(ConfigurationError):
            OutboxRelay(pg_pool, producer, schema=SCHEMA, shards=shards)
