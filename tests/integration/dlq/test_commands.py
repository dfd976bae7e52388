"""Redrive and discard, through commands on Kafka: byte-exact records back, once per command id."""

import asyncio

from slotflow.commands import publish_command
from slotflow.contracts import (
    CommandAccepted,
    DeadLetterFilter,
    DeadLetterStatusChanged,
    DiscardDeadLetters,
    JobDue,
    RedriveDeadLetters,
    wrap,
)
from slotflow.contracts.codec import encode
from slotflow.contracts.dlq import REDRIVE_OF_HEADER
from slotflow.contracts.envelope import REDRIVE_COUNT_HEADER
from slotflow.contracts.topics import DLQ_EVENTS, DLQ_MESSAGES, JOBS_DUE, SCHEDULE_COMMANDS
from slotflow.errors import InvalidPayload, PermanentError
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.loop import ConsumeLoop, Incoming
from slotflow.kafka.poison import dead_letter_envelope
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow_dlq import queries
from tests.integration.dlq.conftest import Running
from tests.integration.dlq.helpers import AT, origin, park, read_messages, read_records


def job_value(n: int) -> bytes:
    job = JobDue(run_id=f"pay@{n}", job_id="pay", slot=AT, handler="pay")
    return encode(wrap(job, id=job.run_id, key="pay", source="ticker", occurred_at=AT))


async def status(dlq: Running, dead_letter_id: str) -> tuple[str, int]:
    row = await dlq.pool.fetchrow(
        "SELECT status, redrive_count FROM dlq.dead_letters WHERE id = $1", dead_letter_id
    )
    return (row["status"], row["redrive_count"]) if row else ("missing", 0)


async def test_redrive_sends_the_record_back_byte_exact_once_per_command(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(JOBS_DUE)
    headers = (("traceparent", b"00-aa-bb-01"), ("bin", b"\x00\xfe"))
    record = origin(topic, 5, job_value(5), key=b"pay", headers=headers)
    dead_id = record.position
    await park(
        producer, kafka, record, PermanentError("no handler"), source="claimer", reason="unknown_handler"
    )
    await assert_eventually(lambda: dlq.count(), timeout=30)

    command = RedriveDeadLetters(selection=DeadLetterFilter(ids=(dead_id,)))
    await publish_command(producer, kafka, command, command_id="redrive-1", source="test")
    await publish_command(producer, kafka, command, command_id="redrive-1", source="test")  # a client retry

    async def redriven() -> bool:
        return await status(dlq, dead_id) == ("redriven", 1)

    await assert_eventually(redriven, timeout=30)
    back = await read_messages(kafka, topic, 1)
    assert len(back) == 1  # the retried command id applied once
    sent, message = back[0]
    assert sent.key == b"pay"
    assert sent.value == record.value
    assert dict(sent.headers) == {
        **dict(headers),
        REDRIVE_COUNT_HEADER: b"1",
        REDRIVE_OF_HEADER: dead_id.encode(),
    }
    assert isinstance(message, JobDue)

    # Redriving again is an explicit choice (status "redriven"), and counts on.
    again = RedriveDeadLetters(selection=DeadLetterFilter(ids=(dead_id,), status="redriven"))
    await publish_command(producer, kafka, again, command_id="redrive-2", source="test")

    async def twice() -> bool:
        return await status(dlq, dead_id) == ("redriven", 2)

    await assert_eventually(twice, timeout=30)
    back = await read_messages(kafka, topic, 2)
    assert [r.header(REDRIVE_COUNT_HEADER) for r, _ in back] == [b"1", b"2"]

    events = await read_messages(kafka, kafka.topic(DLQ_EVENTS), 5)
    changes = [m for _, m in events if isinstance(m, DeadLetterStatusChanged)]
    assert [(c.status, c.redrive_count, c.command_id) for c in changes] == [
        ("parked", 0, None),
        ("redriven", 1, "redrive-1"),
        ("redriven", 2, "redrive-2"),
    ]
    accepted = sorted(m.command_id for _, m in events if isinstance(m, CommandAccepted))
    assert accepted == ["redrive-1", "redrive-2"]
    detail = await queries.get_dead_letter(dlq.pool, schema="dlq", dead_letter_id=dead_id)
    assert detail is not None
    assert [(r.redrive_number, r.command_id) for r in detail.redrives] == [(1, "redrive-1"), (2, "redrive-2")]
    assert all(r.published_at is not None for r in detail.redrives)
    assert dlq.service.metrics.registry.get_sample_value("slotflow_dlq_redrives_total") == 2


async def test_a_keyless_record_goes_back_keyless_and_a_truncated_one_stays(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(SCHEDULE_COMMANDS)
    keyless = origin(topic, 1, b"\xffnot utf-8", key=None)
    await park(producer, kafka, keyless, InvalidPayload("x"), reason="undecodable")
    big = origin(topic, 2, b"x" * 300_000)
    truncated = dead_letter_envelope(
        big, InvalidPayload("x"), source_service="ticker", occurred_at=AT, max_bytes=100_000
    )
    await producer.send(kafka.topic(DLQ_MESSAGES), truncated)

    async def both() -> bool:
        return await dlq.count() == 2

    await assert_eventually(both, timeout=30)
    await publish_command(
        producer,
        kafka,
        RedriveDeadLetters(selection=DeadLetterFilter(topic=topic)),
        command_id="r",
        source="test",
    )

    async def done() -> bool:
        return await status(dlq, keyless.position) == ("redriven", 1)

    await assert_eventually(done, timeout=30)
    [sent] = await read_records(kafka, topic, 1)
    assert sent.key is None
    assert sent.value == b"\xffnot utf-8"
    assert await status(dlq, big.position) == ("parked", 0)
    accepted = [
        m for _, m in await read_messages(kafka, kafka.topic(DLQ_EVENTS), 3) if isinstance(m, CommandAccepted)
    ]
    assert "1 parked truncated cannot be redriven" in accepted[0].subject


async def test_discard_marks_a_filtered_set_with_the_reason(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(SCHEDULE_COMMANDS)
    for n in range(3):
        await park(producer, kafka, origin(topic, n, b"{}"), InvalidPayload("x"))
    await park(producer, kafka, origin(topic, 9, b"\xff"), InvalidPayload("x"), reason="undecodable")

    async def parked() -> bool:
        return await dlq.count() == 4

    await assert_eventually(parked, timeout=30)
    command = DiscardDeadLetters(
        selection=DeadLetterFilter(reason="invalid_payload"), reason="sender fixed; obsolete"
    )
    await publish_command(producer, kafka, command, command_id="discard-1", source="test")

    async def discarded() -> bool:
        return await dlq.count("status = 'discarded'") == 3

    await assert_eventually(discarded, timeout=30)
    assert await dlq.count("status = 'parked' AND reason = 'undecodable'") == 1
    notes = await dlq.pool.fetch("SELECT DISTINCT note FROM dlq.dead_letters WHERE status = 'discarded'")
    assert [r["note"] for r in notes] == ["sender fixed; obsolete"]
    assert dlq.service.metrics.registry.get_sample_value("slotflow_dlq_discards_total") == 3
    # Discarded entries are not redriven by a plain filter.
    await publish_command(
        producer,
        kafka,
        RedriveDeadLetters(selection=DeadLetterFilter(topic=topic)),
        command_id="r-1",
        source="test",
    )

    async def one_redriven() -> bool:
        return await dlq.count("status = 'redriven'") == 1

    await assert_eventually(one_redriven, timeout=30)
    assert await dlq.count("status = 'discarded'") == 3


async def test_a_redriven_record_that_fails_again_is_linked_to_its_first_entry(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(JOBS_DUE)
    first = origin(topic, 3, job_value(3), key=b"pay")
    await park(
        producer, kafka, first, PermanentError("still broken"), source="claimer", reason="permanent_error"
    )
    await assert_eventually(lambda: dlq.count(), timeout=30)

    async def refuse(incoming: Incoming) -> None:
        raise PermanentError("still broken")

    stop = asyncio.Event()
    async with Consumer(kafka, topic, group_id=unique_name("g"), client_id="c") as consumer:
        loop = ConsumeLoop(
            consumer,
            handler=refuse,
            dlq=producer,
            dlq_topic=kafka.topic(DLQ_MESSAGES),
            source_service="claimer",
        )
        task = asyncio.create_task(loop.run(stop))
        await publish_command(
            producer,
            kafka,
            RedriveDeadLetters(selection=DeadLetterFilter(ids=(first.position,))),
            source="test",
        )

        async def linked() -> bool:
            return await dlq.count("redrive_of = $1", first.position) == 1

        await assert_eventually(linked, timeout=30)
        stop.set()
        await task
    row = await dlq.pool.fetchrow(
        "SELECT id, prior_redrives, status FROM dlq.dead_letters WHERE redrive_of = $1", first.position
    )
    assert row is not None
    assert row["id"] != first.position
    assert (row["prior_redrives"], row["status"]) == (1, "parked")
    page = await queries.list_dead_letters(
        dlq.pool, schema="dlq", selection=DeadLetterFilter(status="parked")
    )
    assert [i.redrive_of for i in page.items] == [first.position]
