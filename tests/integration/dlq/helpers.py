"""Helpers shared by the DLQ integration tests: build origins, park letters, read events."""

from datetime import UTC, datetime

from slotflow.contracts import REGISTRY, DeadLetterStatusChanged, Message
from slotflow.contracts.codec import decode
from slotflow.contracts.topics import DLQ_EVENTS, DLQ_MESSAGES
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.poison import dead_letter_envelope
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow.testing.topics import first_reads

AT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)


def origin(
    topic: str,
    offset: int,
    value: bytes,
    key: bytes | None = b"k",
    headers: tuple[tuple[str, bytes], ...] = (),
) -> Record:
    return Record(topic, 1, offset, key, value, headers, 1_780_000_000_000)


async def park(
    producer: Producer,
    kafka: KafkaSettings,
    record: Record,
    error: BaseException,
    *,
    source: str = "ticker",
    reason: str | None = None,
    run_id: str | None = None,
    job_id: str | None = None,
    tags: tuple[str, ...] = (),
) -> None:
    """Send the dead letter a consumer named ``source`` would send for ``record``."""
    envelope = dead_letter_envelope(
        record,
        error,
        source_service=source,
        occurred_at=AT,
        reason=reason,
        run_id=run_id,
        job_id=job_id,
        tags=tags,
    )
    await producer.send(kafka.topic(DLQ_MESSAGES), envelope)


async def read_messages(kafka: KafkaSettings, topic: str, expect: int) -> list[tuple[Record, Message]]:
    seen: list[Record] = []
    positions: set[str] = set()
    async with Consumer(kafka, topic, group_id=unique_name("ev"), client_id="ev") as reader:

        async def enough() -> bool:
            seen.extend(first_reads(await reader.poll(timeout_ms=200), positions))
            return len(seen) >= expect

        await assert_eventually(enough, timeout=30, message=f"{expect} events")
        seen.extend(first_reads(await reader.poll(timeout_ms=300), positions))
    return [(r, REGISTRY.parse(decode(r.value))) for r in seen]


async def read_records(kafka: KafkaSettings, topic: str, expect: int) -> list[Record]:
    """Records that need not be envelopes (read without decoding)."""
    seen: list[Record] = []
    positions: set[str] = set()
    async with Consumer(kafka, topic, group_id=unique_name("raw"), client_id="raw") as reader:

        async def enough() -> bool:
            seen.extend(first_reads(await reader.poll(timeout_ms=200), positions))
            return len(seen) >= expect

        await assert_eventually(enough, timeout=30)
    return seen


async def read_events(kafka: KafkaSettings, expect: int) -> list[DeadLetterStatusChanged]:
    """The first ``expect`` status events (and any that follow at once) on the DLQ events topic."""
    found = await read_messages(kafka, kafka.topic(DLQ_EVENTS), expect)
    return [m for _, m in found if isinstance(m, DeadLetterStatusChanged)]
