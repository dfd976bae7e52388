"""Records whose rejection used to kill the ticker for good (issue 23), on the real stack.

A 1,001-character key on a value that is not JSON, and a valid envelope with a 1,000-character id
and an unknown type: the CommandRejected built for each once exceeded the envelope's own limits,
the validation error escaped the reject path, and the ticker exited before committing, so every
restart died on the same record; redriving the parked copy killed it again. Now each gets its
rejection (ids and keys cut and hashed to fit), is parked, and the ticker carries on; so it does
when a redrive has the ticker read them back from their topic (refused again, answered, never parked twice).
"""

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from slotflow.commands import publish_command
from slotflow.contracts import (
    CreateSchedule,
    CronSpec,
    DeadLetterFilter,
    RedriveDeadLetters,
    ScheduleDefinition,
)
from slotflow.contracts.topics import DLQ_MESSAGES, SCHEDULE_COMMANDS, SCHEDULE_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.dlq.conftest import Running, start_dlq, stop_dlq
from tests.integration.ticker.support import TopicTail, send, start_ticker, stop_ticker

LONG_KEY = b"k" * 1001
LONG_ID = "i" * 1000


def killer_records() -> list[tuple[bytes, bytes]]:
    """(key, value) of the two records from the issue."""
    unknown = {
        "type": "no.such.command",
        "version": 1,
        "id": LONG_ID,
        "key": "victim",
        "occurred_at": datetime.now(UTC).isoformat(),
        "source": "probe",
        "data": {},
    }
    return [(LONG_KEY, b"this is not json"), (b"victim", json.dumps(unknown).encode())]


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="test-killers") as p:
        yield p


@pytest.fixture
async def dlq(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Running]:
    running = await start_dlq(kafka, pg_dsn)
    yield running
    await stop_dlq(running)


def rejections(tail: TopicTail) -> list[dict[str, object]]:
    return [e.data for e in tail.of_type("command.rejected")]


async def test_the_ticker_survives_the_killer_records_and_their_redrive(
    kafka: KafkaSettings, pg_dsn: str, producer: Producer, dlq: Running
) -> None:
    topic = kafka.topic(SCHEDULE_COMMANDS)
    definition = ScheduleDefinition(spec=CronSpec(expression="0 0 * * *"), handler="h")
    async with TopicTail(kafka, (SCHEDULE_EVENTS, DLQ_MESSAGES)) as tail:
        replica = await start_ticker(kafka, pg_dsn)
        try:
            for key, value in killer_records():
                await producer.send_raw(topic, key=key, value=value)
            after = await send(producer, kafka, CreateSchedule(schedule_id="after", definition=definition))
            await tail.wait_for(lambda t: bool(t.by_id(f"{after}/accepted")), message="the command behind")
            assert not replica.task.done(), "the ticker stopped"
            await tail.wait_for(lambda t: len(rejections(t)) >= 2, message="two rejections")
            assert {r["command_type"] for r in rejections(tail)} >= {"no.such.command"}
            assert any(r["command_id"] == LONG_ID for r in rejections(tail)), "the long id is echoed whole"
            for envelope in tail.of_type("command.rejected"):
                assert len(envelope.id) <= 1000
                assert len(envelope.key) <= 1000

            async def parked() -> bool:
                return await dlq.count("topic = $1 AND status = 'parked'", topic) == 2

            await assert_eventually(parked, timeout=30, message="both records parked")
            reasons = await dlq.pool.fetch("SELECT reason FROM dlq.dead_letters WHERE topic = $1", topic)
            assert sorted(r["reason"] for r in reasons) == ["undecodable", "unknown_type"]

            # The HTTP redrive publishes this command: the ticker, which consumes that topic, reads
            # each record back from it and refuses it again (answered, not parked a second time).
            await publish_command(
                producer,
                kafka,
                RedriveDeadLetters(selection=DeadLetterFilter(topic=topic, status="parked")),
                source="test",
            )

            async def refused_again() -> bool:
                return await dlq.count("topic = $1 AND status = 'redrive_failed'", topic) == 2

            await assert_eventually(refused_again, timeout=30, message="the ticker refused both again")
            notes = await dlq.pool.fetch("SELECT reason, note FROM dlq.dead_letters WHERE topic = $1", topic)
            for row in notes:
                assert "refused by the ticker: ticker read" in row["note"]
                assert f"back and refused it again: {row['reason']}" in row["note"]
            assert await dlq.count("topic = $1", topic) == 2  # no second entry for either
            last = await send(producer, kafka, CreateSchedule(schedule_id="last", definition=definition))
            await tail.wait_for(lambda t: bool(t.by_id(f"{last}/accepted")), message="the last command")
            assert not replica.task.done(), "the ticker stopped after the redrive"
        finally:
            if replica.task.done():
                await replica.task  # the crash, as the test's error
            await stop_ticker(replica)

        # Their offsets were committed: a restarted ticker does not meet them again.
        seen = len(rejections(tail))
        again = await start_ticker(kafka, pg_dsn)
        try:
            probe = await send(producer, kafka, CreateSchedule(schedule_id="probe", definition=definition))
            await tail.wait_for(lambda t: bool(t.by_id(f"{probe}/accepted")), message="after a restart")
            await asyncio.sleep(0)
            assert len(rejections(tail)) == seen
            assert not again.task.done()
        finally:
            await stop_ticker(again)
