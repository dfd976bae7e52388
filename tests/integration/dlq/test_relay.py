"""The redrive relay: byte-exact records, in staging order, in batches bounded by size."""

from slotflow.contracts.topics import JOBS_DUE
from slotflow.kafka.producer import Producer
from slotflow.pg.migrations import INBOX, OUTBOX, apply_migrations
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow_dlq.app import MIGRATIONS
from slotflow_dlq.relay import RedriveRelay
from slotflow_dlq.store import encode_headers
from tests.integration.dlq.helpers import read_records

MIB = 1024 * 1024


async def stage(pool: Pool, topic: str, n: int, value: bytes) -> None:
    await pool.execute(
        'INSERT INTO dlq.dead_letters (id, reason, error_type, error, source_service, topic, "partition", '
        "\"offset\", value, value_size) VALUES ($1, 'r', 'E', 'e', 's', $2, 0, $3, $4, $5)",
        f"{topic}:0:{n}",
        topic,
        n,
        value,
        len(value),
    )
    await pool.execute(
        "INSERT INTO dlq.redrives (dead_letter_id, redrive_number, command_id, topic, record_key, value, headers) "
        "VALUES ($1, 1, 'cmd', $2, $3, $4, $5::jsonb)",
        f"{topic}:0:{n}",
        topic,
        None if n == 0 else b"\xffkey",
        value,
        encode_headers([("n", str(n).encode()), ("bin", b"\x00")]),
    )


async def test_large_records_go_in_batches_bounded_by_size(pg_pool: Pool, kafka: KafkaSettings) -> None:
    await apply_migrations(pg_pool, schema="dlq", sources=[OUTBOX, INBOX, MIGRATIONS])
    topic = kafka.topic(JOBS_DUE)
    for n in range(3):
        await stage(pg_pool, topic, n, bytes([n]) * MIB)
    async with Producer(kafka, client_id="relay", max_message_bytes=4 * MIB) as producer:
        relay = RedriveRelay(pg_pool, producer, schema="dlq", max_batch_bytes=MIB + MIB // 2)
        assert await relay.relay_once() == 2  # the third would pass the byte budget
        assert await relay.relay_once() == 1
        assert await relay.relay_once() == 0
    read = await read_records(kafka, topic, 3)
    # Order holds within a partition only: the unkeyed record may sit on another partition and be
    # read before or after the others. The two records of one key keep their staging order.
    assert [r.value[0] for r in read if r.key == b"\xffkey" and r.value] == [1, 2]
    sent = sorted(read, key=lambda r: (r.value or b"\xff")[0])  # a missing value sorts last, then fails
    assert [r.value for r in sent] == [bytes([n]) * MIB for n in range(3)]
    assert [r.key for r in sent] == [None, b"\xffkey", b"\xffkey"]
    assert [dict(r.headers) for r in sent] == [{"n": str(n).encode(), "bin": b"\x00"} for n in range(3)]
    assert await pg_pool.fetchval("SELECT count(*) FROM dlq.redrives WHERE published_at IS NULL") == 0
