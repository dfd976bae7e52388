"""Round trips, transactions and idempotence against the real broker."""

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import RequestTimedOutError
from aiokafka.protocol.produce import ProduceRequest

from slotflow.contracts import REGISTRY, JobDue, wrap
from slotflow.contracts.codec import decode
from slotflow.contracts.envelope import TYPE_HEADER, Envelope
from slotflow.contracts.topics import JOBS_DUE
from slotflow.errors import TransientStorageError
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.producer import OutgoingRecord, Producer
from slotflow.kafka.records import Record
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name

AT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)


def job_envelope(n: int) -> Envelope:
    job = JobDue(run_id=f"job-{n}@2026-12-02T02:00:00Z", job_id=f"job-{n}", slot=AT, handler="noop")
    return wrap(job, id=job.run_id, key=job.job_id, source="test", occurred_at=AT)


async def read_all(
    settings: KafkaSettings, topic: str, *, expect: int, isolation: str = "read_committed"
) -> list[Record]:
    """Read the topic from the start until ``expect`` records arrived (or time out)."""
    seen: list[Record] = []
    consumer = Consumer(
        settings,
        topic,
        group_id=unique_name("g"),
        client_id="test",
        isolation_level=isolation,  # type: ignore[arg-type]
    )
    async with consumer:

        async def enough() -> bool:
            seen.extend(await consumer.poll(timeout_ms=200))
            return len(seen) >= expect

        await assert_eventually(enough, timeout=30, message=f"{expect} records on {topic}")
        # A short extra read: duplicates or leaked aborted records would show up here.
        for _ in range(3):
            seen.extend(await consumer.poll(timeout_ms=200))
    return seen


async def test_envelope_round_trip_keeps_key_headers_and_payload(kafka: KafkaSettings) -> None:
    topic = kafka.topic(JOBS_DUE)
    async with Producer(kafka, client_id="test") as producer:
        delivered = await producer.send(topic, job_envelope(1))
    assert delivered.offset >= 0

    (record,) = await read_all(kafka, topic, expect=1)
    assert record.key == b"job-1"
    assert record.header(TYPE_HEADER) == b"job.due"
    envelope = decode(record.value)
    assert envelope == job_envelope(1)
    assert isinstance(REGISTRY.parse(envelope), JobDue)


async def test_committed_transaction_is_visible_and_aborted_one_is_not(kafka: KafkaSettings) -> None:
    topic = kafka.topic(JOBS_DUE)
    producer = Producer(kafka, client_id="txn", transactional_id=unique_name("txn"))
    async with producer:
        async with producer.transaction():
            await producer.send(topic, job_envelope(1))
        with pytest.raises(RuntimeError, match="abort me"):
            await send_then_fail(producer, topic)
        async with producer.transaction():
            await producer.send(topic, job_envelope(3))

    committed = await read_all(kafka, topic, expect=2)
    assert sorted(r.key or b"" for r in committed) == [b"job-1", b"job-3"]

    # The aborted record was really written: an uncommitted reader sees it.
    everything = await read_all(kafka, topic, expect=3, isolation="read_uncommitted")
    assert sorted(r.key or b"" for r in everything) == [b"job-1", b"job-2", b"job-3"]


async def send_then_fail(producer: Producer, topic: str) -> None:
    async with producer.transaction():
        await producer.send(topic, job_envelope(2))
        raise RuntimeError("abort me")


def _all_appended(response: Any) -> bool:
    """True when the broker appended every batch of the request (no NotLeader or similar)."""
    return all(partition[1] == 0 for _topic, partitions in response.topics for partition in partitions)


def lose_first_produce_response(client: Any) -> list[int]:
    """Fault injection at the network seam: the broker appends, the acknowledgement is lost.

    The producer sees a timeout and resends the same batch, exactly what happens when a response
    is dropped on a real network. Only a response reporting a successful append is dropped: on a
    loaded broker the first request may be refused (NotLeader), which appends nothing.
    """
    real_send = client.send
    lost: list[int] = []

    async def send(node_id: int, request: Any, **kwargs: Any) -> Any:
        response = await real_send(node_id, request, **kwargs)
        if isinstance(request, ProduceRequest) and not lost and _all_appended(response):
            lost.append(node_id)
            raise RequestTimedOutError("produce response lost (injected)")
        return response

    client.send = send
    return lost


async def test_idempotent_producer_retry_does_not_duplicate(kafka: KafkaSettings) -> None:
    topic = kafka.topic(JOBS_DUE)
    producer = Producer(kafka, client_id="idem")
    async with producer:
        lost = lose_first_produce_response(producer._producer.client)
        await producer.send(topic, job_envelope(1))
        await producer.send(topic, job_envelope(2))
    assert lost, "the fault was not injected"

    records = await read_all(kafka, topic, expect=2)
    assert sorted(r.key or b"" for r in records) == [b"job-1", b"job-2"]
    # The resend of job-1 was recognised by its producer id and sequence, not appended again.
    (first,) = [r for r in records if r.key == b"job-1"]
    assert await log_end_offset(kafka, topic, first.partition) == sum(
        1 for r in records if r.partition == first.partition
    )


async def test_without_idempotence_the_same_fault_duplicates(kafka: KafkaSettings) -> None:
    """The control for the test above: proves the injected fault really causes a resend."""
    topic = kafka.topic(JOBS_DUE)
    raw = AIOKafkaProducer(**kafka.client_options(), acks="all", enable_idempotence=False)
    await raw.start()
    try:
        lost = lose_first_produce_response(raw.client)
        delivered = await raw.send_and_wait(topic, value=b"payload", key=b"job-1")
    finally:
        await raw.stop()
    assert lost

    # One send, two records: the lost first write sits at offset 0, the resend at offset 1.
    assert delivered.offset == 1
    assert await log_end_offset(kafka, topic, delivered.partition) == 2


async def log_end_offset(settings: KafkaSettings, topic: str, partition: int) -> int:
    """Ask the broker (ListOffsets) how many records the partition holds; no consumer group."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    consumer = AIOKafkaConsumer(**settings.client_options(), group_id=None)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


async def test_offsets_sent_in_a_transaction_commit_with_the_output(kafka: KafkaSettings) -> None:
    """Consume, transform, produce: output and input offsets commit atomically."""
    source, sink = kafka.topic(JOBS_DUE), f"{kafka.topic(JOBS_DUE)}.sink"
    from slotflow.contracts.topics import JOBS_DUE as SPEC
    from slotflow.kafka.admin import ensure_topics

    await ensure_topics(kafka.bootstrap, [SPEC.model_copy(update={"name": sink, "partitions": 1})])
    async with Producer(kafka, client_id="seed") as seed:
        await seed.send_many([(source, job_envelope(n)) for n in range(5)])

    group = unique_name("g")
    consumer = Consumer(kafka, source, group_id=group, client_id="ctp")
    producer = Producer(kafka, client_id="ctp", transactional_id=unique_name("ctp"))
    async with consumer, producer:
        records: list[Record] = []

        async def got_all() -> bool:
            records.extend(await consumer.poll(timeout_ms=200))
            return len(records) >= 5

        await assert_eventually(got_all, timeout=30)
        async with producer.transaction():
            for record in records:
                await producer.send_raw(sink, key=record.key, value=record.value)
            offsets: dict[tuple[str, int], int] = {}
            for record in records:
                key = (record.topic, record.partition)
                offsets[key] = max(offsets.get(key, 0), record.offset + 1)
            await producer.send_offsets_to_transaction(offsets, group)

    assert len(await read_all(kafka, sink, expect=5)) == 5
    # The group resumes after the transformed records: nothing is consumed twice.
    again = Consumer(kafka, source, group_id=group, client_id="ctp2")
    async with again:
        leftovers = []
        for _ in range(5):
            leftovers.extend(await again.poll(timeout_ms=300))
            await asyncio.sleep(0)
    assert leftovers == []


async def test_a_poll_takes_every_partitions_share_before_one_partitions_backlog(
    kafka: KafkaSettings,
) -> None:
    """A backlog on one partition does not fill the batch while the others' records wait behind
    it (aiokafka alone hands out its buffer one partition after another)."""
    topic = kafka.topic(JOBS_DUE)
    backlog = [OutgoingRecord(topic, b"hot", f"hot-{n}".encode()) for n in range(600)]
    others = [OutgoingRecord(topic, f"cold-{n}".encode(), b"cold") for n in range(40)]
    async with Producer(kafka, client_id="fair") as producer:
        delivered = await producer.send_raw_many([*backlog, *others])
    hot = delivered[0].partition
    cold = {d.partition for d in delivered[len(backlog) :]} - {hot}
    assert cold
    consumer = Consumer(kafka, topic, group_id=unique_name("fair"), client_id="test", max_poll_records=100)
    async with consumer:
        seen: list[Record] = []

        async def everything_buffered() -> bool:
            # The first poll waits for the first fetch, which brings every partition's records.
            seen.extend(await consumer.poll(timeout_ms=500))
            return bool(seen)

        await assert_eventually(everything_buffered, timeout=30, message="a first batch")
        first = {r.partition for r in seen}
        assert cold <= first, (hot, sorted(cold), sorted(first))
        assert len(seen) == 100
        while len(seen) < len(delivered):
            batch = await consumer.poll(timeout_ms=500)
            assert batch, f"{len(seen)} of {len(delivered)} records read"
            seen.extend(batch)
    # Each partition's records in offset order, none twice.
    assert [r.value for r in seen if r.key == b"hot"] == [f"hot-{n}".encode() for n in range(600)]
    assert len({(r.partition, r.offset) for r in seen}) == len(delivered)


async def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    kafka: KafkaSettings,
) -> None:
    """Kafka 4.1 with aiokafka: starting a producer under a transactional id bumps its epoch; the
    older one's open transaction is aborted by the broker and its commit is refused, so a zombie
    writes nothing a read_committed consumer sees (docs/decisions/0004-orchestrator.md)."""
    from aiokafka.errors import KafkaError, ProducerFenced

    topic = kafka.topic(JOBS_DUE)
    transactional_id = unique_name("fence")
    zombie = Producer(kafka, client_id="zombie", transactional_id=transactional_id)
    successor = Producer(kafka, client_id="successor", transactional_id=transactional_id)
    async with zombie:
        await zombie._producer.begin_transaction()
        await zombie.send(topic, job_envelope(1))  # written, not yet committed
        async with successor:
            async with successor.transaction():
                await successor.send(topic, job_envelope(2))
            with pytest.raises(KafkaError) as refused:
                await zombie._producer.commit_transaction()
    assert isinstance(refused.value, ProducerFenced), refused.value

    committed = await read_all(kafka, topic, expect=1)
    assert [r.key for r in committed] == [b"job-2"]


async def test_check_cluster_is_answered_by_a_broker_over_the_producer_s_own_connections(
    kafka: KafkaSettings,
) -> None:
    """The readiness probe of every worker (slotflow.health.kafka_probe): a metadata request that
    names no topic, answered by the real broker; a producer that knows no broker yet is refused
    with the reason, not hung."""
    async with Producer(kafka, client_id="test") as producer:
        await asyncio.wait_for(producer.check_cluster(), timeout=10)
    unstarted = Producer(kafka, client_id="test-unstarted")
    try:
        with pytest.raises(TransientStorageError, match="no broker known yet"):
            await asyncio.wait_for(unstarted.check_cluster(), timeout=10)
    finally:
        await unstarted.stop()
