"""ConsumeLoop against the real broker: poison parked with its reason, goods in order, commits last.

A 2 MiB record is produced to the job topic (its `max.message.bytes` allows it), refused by the
consumer's own 1 MiB limit and parked whole in the DLQ topic, base64 inside its envelope.
"""

import asyncio
import base64
from datetime import UTC, datetime, timedelta
from typing import cast

from slotflow.contracts import REGISTRY, DeadLettered, JobDue, wrap
from slotflow.contracts.codec import decode, encode
from slotflow.contracts.topics import DLQ_MESSAGES, JOBS_DUE
from slotflow.core.identity import run_id
from slotflow.kafka.admin import ensure_topics
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.loop import ConsumeLoop, Incoming
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow.testing.badinput import catalogue

AT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
BIG = 16 * 1024 * 1024


def job(n: int) -> bytes:
    slot = AT + timedelta(seconds=n)
    message = JobDue(run_id=run_id("pay", slot), job_id="pay", slot=slot, handler="h")
    return encode(wrap(message, id=message.run_id, key="pay", source="t", occurred_at=AT))


async def read_letters(
    settings: KafkaSettings, expect: int, *, topic: str | None = None
) -> list[DeadLettered]:
    seen: list[Record] = []
    name = topic or settings.topic(DLQ_MESSAGES)
    async with Consumer(settings, name, group_id=unique_name("r"), client_id="r") as reader:

        async def enough() -> bool:
            seen.extend(await reader.poll(timeout_ms=300))
            return len(seen) >= expect

        await assert_eventually(enough, timeout=60, message=f"{expect} dead letters")
        seen.extend(await reader.poll(timeout_ms=300))
    return [cast(DeadLettered, REGISTRY.parse(decode(r.value, max_bytes=BIG))) for r in seen]


async def test_catalogue_on_one_partition_parks_each_bad_record_and_handles_the_rest_in_order(
    kafka: KafkaSettings,
) -> None:
    topic = kafka.topic(JOBS_DUE)
    bad = catalogue(decode(job(0)))
    async with Producer(kafka, client_id="feed", max_message_bytes=BIG) as feed:
        positions: dict[int, str] = {}
        for n, entry in enumerate(bad):
            await feed.send_raw(topic, key=b"pay", value=job(n), partition=0)
            sent = await feed.send_raw(
                topic, key=entry.key, value=entry.value, headers=dict(entry.headers), partition=0
            )
            positions[sent.offset] = entry.name
        await feed.send_raw(topic, key=b"pay", value=job(len(bad)), partition=0)

    handled: list[str] = []

    async def handler(incoming: Incoming) -> None:
        handled.append(incoming.envelope.id)

    stop = asyncio.Event()
    group = unique_name("g")
    async with (
        Consumer(kafka, topic, group_id=group, client_id="loop", max_poll_records=7) as consumer,
        # A producer with default settings: dead letters may be larger than other records.
        Producer(kafka, client_id="dlq") as dlq,
    ):
        loop = ConsumeLoop(
            consumer,
            handler=handler,
            dlq=dlq,
            dlq_topic=kafka.topic(DLQ_MESSAGES),
            source_service="test",
            accept=(JobDue,),
        )
        task = asyncio.create_task(loop.run(stop))
        await assert_eventually(lambda: len(handled) == len(bad) + 1, timeout=60, message="every good record")
        stop.set()
        await task

    assert handled == [run_id("pay", AT + timedelta(seconds=n)) for n in range(len(bad) + 1)]
    letters = await read_letters(kafka, len(bad))
    assert len(letters) == len(bad)  # one each: nothing lost, nothing doubled
    by_name = {positions[letter.offset]: letter for letter in letters}
    for entry in bad:
        letter = by_name[entry.name]
        assert letter.reason == entry.reason, entry.name
        assert (letter.topic, letter.partition, letter.source_service) == (topic, 0, "test")
        assert not letter.value_truncated
        assert base64.b64decode(letter.value_b64) == (entry.value or b""), entry.name
    assert by_name["two_mib_message"].value_size == len(
        next(e.value for e in bad if e.name == "two_mib_message") or b""
    )

    # Committed after the DLQ acknowledged: a new member of the group starts after the last record.
    async with Consumer(kafka, topic, group_id=group, client_id="again") as again:
        for _ in range(4):
            assert await again.poll(timeout_ms=300) == []


async def test_a_record_larger_than_the_dlq_accepts_is_parked_truncated(kafka: KafkaSettings) -> None:
    # A DLQ topic created with the broker's default 1 MiB limit (as an old deployment would have):
    # the whole letter is refused by the broker, and a truncated one parks instead.
    small_dlq = DLQ_MESSAGES.model_copy(
        update={
            "name": f"{kafka.topic_namespace}.small.{DLQ_MESSAGES.name}",
            "partitions": 1,
            "extra_config": {"max.message.bytes": str(1024 * 1024)},
        }
    )
    await ensure_topics(kafka.bootstrap, [small_dlq])
    topic = kafka.topic(JOBS_DUE)
    async with Producer(kafka, client_id="feed", max_message_bytes=BIG) as feed:
        await feed.send_raw(topic, key=b"pay", value=b"z" * (3 * 1024 * 1024), partition=1)
        await feed.send_raw(topic, key=b"pay", value=job(1), partition=1)
    handled: list[str] = []

    async def handler(incoming: Incoming) -> None:
        handled.append(incoming.envelope.id)

    stop = asyncio.Event()
    async with (
        Consumer(kafka, topic, group_id=unique_name("g"), client_id="loop") as consumer,
        Producer(kafka, client_id="dlq") as dlq,
    ):
        loop = ConsumeLoop(
            consumer, handler=handler, dlq=dlq, dlq_topic=small_dlq.name, source_service="test"
        )
        task = asyncio.create_task(loop.run(stop))
        await assert_eventually(lambda: handled == [run_id("pay", AT + timedelta(seconds=1))], timeout=60)
        stop.set()
        await task
    [letter] = await read_letters(kafka, 1, topic=small_dlq.name)
    assert letter.reason == "too_large"
    assert letter.value_truncated
    assert letter.value_size == 3 * 1024 * 1024
    assert (letter.topic, letter.partition) == (topic, 1)
