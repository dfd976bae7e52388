"""The outbox relay against real PostgreSQL and Kafka, including the classic outbox skip.

A relay that remembers "the highest seq I published" and polls `seq > last_seen` loses any row
whose transaction took its seq first but committed after a higher seq was published: the sequence
is handed out at insert, visibility comes at commit. The test builds exactly that interleaving.
"""

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from slotflow.contracts import REGISTRY, CommandAccepted, CommandRejected, DeadLettered, wrap
from slotflow.contracts.codec import decode
from slotflow.contracts.topics import DLQ_MAX_RECORD_BYTES, DLQ_MESSAGES, SCHEDULE_EVENTS
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.producer import Producer
from slotflow.pg.migrations import OUTBOX, apply_migrations
from slotflow.pg.outbox import Staged, append, append_grouped, encoded
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow.relay import PICK_AND_MARK, OutboxRelay
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name

SCHEMA = "relay_test"


def staged(topic: str, event_id: str, key: str) -> Staged:
    message = CommandAccepted(command_id=event_id, command_type="test", subject=key)
    return Staged(topic, wrap(message, id=event_id, key=key, source="test", occurred_at=datetime.now(UTC)))


async def read_ids(kafka: KafkaSettings, topic: str, want: int) -> list[str]:
    ids: list[str] = []
    async with Consumer(kafka, topic, group_id=unique_name("reader"), client_id="reader") as consumer:

        async def enough() -> bool:
            ids.extend(decode(r.value).id for r in await consumer.poll(timeout_ms=200))
            return len(ids) >= want

        await assert_eventually(enough, timeout=30, message=f"{want} records")
    return ids


@pytest.mark.parametrize(
    "mode",
    [{}, {"parallel_shards": True}, {"one_transaction": True}],
    ids=["shard-by-shard", "parallel-shards", "one-transaction"],
)
async def test_a_row_committed_after_a_higher_seq_was_published_is_still_published(
    pg_pool: Pool, kafka: KafkaSettings, mode: dict[str, Any]
) -> None:
    await apply_migrations(pg_pool, schema=SCHEMA, sources=[OUTBOX])
    topic = kafka.topic(SCHEDULE_EVENTS)
    async with Producer(kafka, client_id="relay-test") as producer:
        relay = OutboxRelay(pg_pool, producer, schema=SCHEMA, **mode)
        async with pg_pool.acquire() as slow, pg_pool.acquire() as fast:
            slow_tx = slow.transaction()
            await slow_tx.start()
            item = staged(topic, "slow", "k")
            await append(slow, schema=SCHEMA, topic=item.topic, envelope=item.envelope)
            slow_seq = await slow.fetchval(
                sql("SELECT seq FROM {schema}.outbox WHERE event_id = 'slow'", SCHEMA)
            )
            async with fast.transaction():
                item = staged(topic, "fast", "k")
                await append(fast, schema=SCHEMA, topic=item.topic, envelope=item.envelope)
            fast_seq = await fast.fetchval(
                sql("SELECT seq FROM {schema}.outbox WHERE event_id = 'fast'", SCHEMA)
            )
            assert slow_seq < fast_seq

            # The slow transaction is still open: only the higher seq is visible, and it goes out.
            assert await relay.relay_once() == 1
            last_seen = await pg_pool.fetchval(
                sql("SELECT max(seq) FROM {schema}.outbox WHERE published_at IS NOT NULL", SCHEMA)
            )
            assert last_seen == fast_seq  # a `seq > last_seen` poller would never look at slow_seq again

            await slow_tx.commit()

        assert await relay.relay_once() == 1
        assert await relay.relay_once() == 0
        assert await relay.pending() == 0
    assert sorted(await read_ids(kafka, topic, 2)) == ["fast", "slow"]


async def test_two_relays_share_the_outbox_without_publishing_a_row_twice(
    pg_pool: Pool, kafka: KafkaSettings
) -> None:
    await apply_migrations(pg_pool, schema=SCHEMA, sources=[OUTBOX])
    topic = kafka.topic(SCHEDULE_EVENTS)
    async with pg_pool.acquire() as conn, conn.transaction():
        for i in range(400):
            item = staged(topic, f"e{i}", f"key{i % 37}")
            await append(conn, schema=SCHEMA, topic=item.topic, envelope=item.envelope)
    async with Producer(kafka, client_id="relay-a") as a, Producer(kafka, client_id="relay-b") as b:
        first = OutboxRelay(pg_pool, a, schema=SCHEMA, batch_size=7, one_transaction=True)
        second = OutboxRelay(pg_pool, b, schema=SCHEMA, batch_size=7, parallel_shards=True)

        async def drain(relay: OutboxRelay) -> int:
            total = 0
            while await relay.pending():
                total += await relay.relay_once()
            return total

        moved = await asyncio.gather(drain(first), drain(second))
    assert sum(moved) == 400
    ids = await read_ids(kafka, topic, 400)
    assert len(ids) == 400
    assert len(set(ids)) == 400


async def test_each_key_leaves_in_staging_order_whichever_mode_relays_it(
    pg_pool: Pool, kafka: KafkaSettings
) -> None:
    await apply_migrations(pg_pool, schema=SCHEMA, sources=[OUTBOX])
    topic = kafka.topic(SCHEDULE_EVENTS)
    async with pg_pool.acquire() as conn, conn.transaction():
        for i in range(300):
            item = staged(topic, f"{i % 5}:{i:04d}", f"key{i % 5}")
            await append(conn, schema=SCHEMA, topic=item.topic, envelope=item.envelope)
    async with Producer(kafka, client_id="relay-order") as producer:
        relay = OutboxRelay(pg_pool, producer, schema=SCHEMA, batch_size=11, one_transaction=True)
        while await relay.relay_once():
            pass
    ids = await read_ids(kafka, topic, 300)
    for key in range(5):
        mine = [i for i in ids if i.startswith(f"{key}:")]
        assert mine == sorted(mine)
        assert len(mine) == 60


async def test_grouped_rows_keep_each_keys_order_among_rows_of_their_own(
    pg_pool: Pool, kafka: KafkaSettings
) -> None:
    # Three transactions of 100 events on 7 keys, each staged grouped (one row per shard), with
    # a row of its own staged between them for every key: every key's events must leave in the
    # order they were staged, whatever row they sit in, and a pass is bounded in events.
    await apply_migrations(pg_pool, schema=SCHEMA, sources=[OUTBOX])
    topic = kafka.topic(SCHEDULE_EVENTS)
    expected: list[str] = []  # "<key>:<staging order>"
    for _ in range(3):
        async with pg_pool.acquire() as conn, conn.transaction():
            group = []
            for _ in range(100):
                key = len(expected) % 7
                expected.append(f"{key}:{len(expected):04d}")
                group.append(encoded(staged(topic, expected[-1], f"key{key}")))
            await append_grouped(conn, schema=SCHEMA, rows=group)
        async with pg_pool.acquire() as conn, conn.transaction():
            for key in range(7):
                expected.append(f"{key}:{len(expected):04d}")
                item = staged(topic, expected[-1], f"key{key}")
                await append(conn, schema=SCHEMA, topic=item.topic, envelope=item.envelope)
    n = len(expected)
    rows = await pg_pool.fetchval(sql("SELECT count(*) FROM {schema}.outbox", SCHEMA))
    assert rows < n  # grouped: at most one row per shard and transaction for the groups
    events = await pg_pool.fetch(sql("SELECT event_id FROM {schema}.outbox_events ORDER BY seq", SCHEMA))
    assert sorted(r["event_id"] for r in events) == sorted(expected)
    async with Producer(kafka, client_id="relay-grouped") as producer:
        relay = OutboxRelay(pg_pool, producer, schema=SCHEMA, batch_size=5, one_transaction=True)
        assert await relay.pending() == n
        passes = []
        while moved := await relay.relay_once():
            passes.append(moved)
        assert await relay.pending() == 0
    assert sum(passes) == n
    assert len(passes) > 1  # 5 events a shard, or a shard's first row whole: not all in one pass
    ids = await read_ids(kafka, topic, n)
    assert len(ids) == n
    for key in range(7):
        mine = [i for i in ids if i.startswith(f"{key}:")]
        assert mine == sorted(mine)


async def test_an_event_too_large_inside_a_group_is_parked_and_its_neighbours_flow(
    pg_pool: Pool, kafka: KafkaSettings
) -> None:
    await apply_migrations(pg_pool, schema=SCHEMA, sources=[OUTBOX])
    topic = kafka.topic(SCHEDULE_EVENTS)
    big = CommandRejected(command_id="big", command_type="test", subject="k", reason="x" * 2_000_000)
    envelope = wrap(big, id="big", key="k", source="test", occurred_at=datetime.now(UTC))
    group = [
        encoded(staged(topic, "before", "k")),
        encoded(Staged(topic, envelope)),
        *(encoded(staged(topic, f"behind-{n}", "k")) for n in range(3)),
    ]
    async with pg_pool.acquire() as conn, conn.transaction():
        await append_grouped(conn, schema=SCHEMA, rows=group)
    async with Producer(kafka, client_id="relay-test") as producer:
        relay = OutboxRelay(pg_pool, producer, schema=SCHEMA, one_transaction=True)
        assert await relay.relay_once() == 4  # the four that fit; the big one parked
        assert await relay.relay_once() == 1  # its dead letter, staged by the pass
        assert await relay.pending() == 0
    assert relay.parked == 1
    assert await read_ids(kafka, topic, 4) == ["before", "behind-0", "behind-1", "behind-2"]


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _plan_nodes(child))]


async def test_a_backlog_behind_stale_statistics_is_picked_once_and_marked_by_primary_key(
    pg_pool: Pool,
) -> None:
    # Statistics taken while nothing was pending, then a backlog: what a relay meets when the
    # claims outrun it before autovacuum analyses the table. The pick must run once (not once per
    # pending row) and the mark must find its rows by primary key (not by filtering the backlog).
    await apply_migrations(pg_pool, schema=SCHEMA, sources=[OUTBOX])
    await pg_pool.execute(sql("ALTER TABLE {schema}.outbox SET (autovacuum_enabled = false)", SCHEMA))
    await pg_pool.execute(
        sql(
            "INSERT INTO {schema}.outbox (topic, event_id, key, shard, value, published_at) "
            "SELECT 't', 'old-' || g, 'k', g % 8, '\\x00', now() FROM generate_series(1, 5000) g",
            SCHEMA,
        )
    )
    await pg_pool.execute(sql("ANALYZE {schema}.outbox", SCHEMA))
    await pg_pool.execute(
        sql(
            "INSERT INTO {schema}.outbox (topic, event_id, key, shard, value) "
            "SELECT 't', 'new-' || g, 'k' || g, g % 8, '\\x00' FROM generate_series(1, 5000) g",
            SCHEMA,
        )
    )
    statement = sql(PICK_AND_MARK, SCHEMA)
    async with pg_pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            raw = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", list(range(8)), 100)
        finally:
            await transaction.rollback()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    assert plan["Node Type"] == "ModifyTable"
    assert plan["Actual Rows"] == 800  # 100 from each of the 8 shards
    [scan] = [p for p in plan["Plans"] if p.get("Parent Relationship") != "InitPlan"]
    assert scan["Index Name"] == "outbox_pkey", scan
    assert scan["Actual Loops"] == 1
    picks = [n for n in _plan_nodes(plan) if n.get("Node Type") == "Limit"]
    assert picks
    assert all(n["Actual Loops"] == 8 for n in picks), picks  # once per shard, not per pending row


@pytest.mark.parametrize(
    "mode",
    [{}, {"one_transaction": True}],
    ids=["shard-by-shard", "one-transaction"],
)
async def test_a_row_too_large_to_send_is_parked_and_the_rows_behind_it_flow(
    pg_pool: Pool, kafka: KafkaSettings, mode: dict[str, Any]
) -> None:
    """Issue 23: one 2 MB RunCompleted made the relay pause every second, forever; the rows
    behind it (same key, so same shard) never left. Now it is parked with a dead letter."""
    await apply_migrations(pg_pool, schema=SCHEMA, sources=[OUTBOX])
    topic = kafka.topic(SCHEDULE_EVENTS)
    big = CommandRejected(command_id="big", command_type="test", subject="k", reason="x" * 2_000_000)
    async with pg_pool.acquire() as conn, conn.transaction():
        envelope = wrap(big, id="big", key="k", source="test", occurred_at=datetime.now(UTC))
        await append(conn, schema=SCHEMA, topic=topic, envelope=envelope)
        for n in range(3):
            item = staged(topic, f"behind-{n}", "k")
            await append(conn, schema=SCHEMA, topic=item.topic, envelope=item.envelope)
    async with Producer(kafka, client_id="relay-test") as producer:
        relay = OutboxRelay(pg_pool, producer, schema=SCHEMA, **mode)
        stop = asyncio.Event()
        task = asyncio.create_task(relay.run(stop))
        try:
            started = asyncio.get_running_loop().time()
            assert await read_ids(kafka, topic, 3) == ["behind-0", "behind-1", "behind-2"]
            assert asyncio.get_running_loop().time() - started < 5.0

            async def pending() -> bool:
                return await relay.pending() == 0

            await assert_eventually(pending, timeout=10, message="the outbox drained")
        finally:
            stop.set()
            await task
    assert relay.parked == 1
    dlq = kafka.topic(DLQ_MESSAGES)
    async with Consumer(kafka, dlq, group_id=unique_name("dlq"), client_id="dlq") as consumer:
        letters: list[Any] = []

        async def parked() -> bool:
            letters.extend(
                REGISTRY.parse(decode(r.value, max_bytes=DLQ_MAX_RECORD_BYTES))
                for r in await consumer.poll(timeout_ms=200)
            )
            return bool(letters)

        await assert_eventually(parked, timeout=30, message="the dead letter")
    [letter] = letters
    assert isinstance(letter, DeadLettered)
    assert (letter.reason, letter.topic, letter.partition) == ("too_large", topic, -1)
    assert letter.source_service == f"outbox:{SCHEMA}"
    assert letter.value_size is not None
    assert letter.value_size > 2_000_000
