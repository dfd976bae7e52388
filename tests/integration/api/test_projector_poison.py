"""A poison record on a projected topic is parked in the DLQ; the records after it are projected."""

from datetime import UTC, datetime

import httpx

from slotflow.contracts import ScheduleCreated
from slotflow.contracts.topics import DLQ_MESSAGES, SCHEDULE_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from tests.integration.api.conftest import Emitter
from tests.integration.api.helpers import cron, eventually_json, read_topic


async def test_poison_is_parked_and_the_partition_moves_on(
    client: httpx.AsyncClient, emit: Emitter, producer: Producer, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(SCHEDULE_EVENTS)
    await producer.send_raw(topic, key=b"after", value=b'{"type": "schedule.created", "trunc', partition=0)
    created = ScheduleCreated(
        schedule_id="after", definition=cron(), paused=False, next_fire_at=datetime.now(UTC)
    )
    await emit(SCHEDULE_EVENTS, created, id="after/created", key="after")
    await eventually_json(client, "/v1/schedules/after", lambda b: b["schedule_id"] == "after")
    (letter,) = await read_topic(kafka, DLQ_MESSAGES, want=1)
    assert letter.data["reason"] == "undecodable"
    assert letter.data["source_service"] == "api"
    assert letter.data["topic"] == topic
