"""A StartTimer's `traceparent` header is kept with its timer (tracing on) so what the timer fires
continues the trace; the header is the producer's to write, so only a valid W3C traceparent is
kept. A NUL (PostgreSQL text cannot hold one) or kilobytes of junk is dropped and the timer is
stored and fires as if the command carried no context. Before, the NUL failed the insert of the
whole polled batch, which the consume loop then retried one command a transaction: one hostile
record degraded every batch it sat in. Real broker, real database."""

import logging
from collections.abc import Iterator
from datetime import timedelta

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from slotflow.contracts import FireTimerFired, StartTimer
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import envelope_headers
from slotflow.contracts.routing import build_command
from slotflow.contracts.timers import sleep_timer_id
from slotflow.contracts.topics import DLQ_MESSAGES, SCHEDULE_EVENTS, TIMER_EVENTS
from slotflow.kafka.producer import OutgoingRecord, Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing.spans import recorded_spans
from tests.integration.ticker.support import TopicTail, db_now, tickers

TRACEPARENTS = {
    "nul-ids": b"00-" + b"\x00" * 32 + b"-" + b"\x00" * 16 + b"-01",
    "nul": b"\x00",
    "long": b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + b"\xff" * 10_000,
    "valid": b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recorded_spans() as exporter:
        yield exporter


async def test_a_hostile_traceparent_on_a_start_timer_is_dropped_and_the_timer_fires(
    kafka: KafkaSettings,
    pg_dsn: str,
    pg_pool: Pool,
    spans: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="slotflow.kafka.loop")
    async with (
        tickers(kafka, pg_dsn) as _,
        TopicTail(kafka, (TIMER_EVENTS, SCHEDULE_EVENTS, DLQ_MESSAGES)) as tail,
    ):
        now = await db_now(pg_pool)
        records = []
        for name, traceparent in TRACEPARENTS.items():
            timer = StartTimer(
                timer_id=sleep_timer_id(f"wf-{name}", 1),
                fire_at=now + timedelta(milliseconds=200),
                on_fire=FireTimerFired(owner=f"wf-{name}", sequence=1),
            )
            spec, envelope = build_command(timer, command_id=f"cmd-{name}", source="test")
            headers = {**envelope_headers(envelope), "traceparent": traceparent}
            records.append(
                OutgoingRecord(kafka.topic(spec), envelope.key.encode(), encode(envelope), headers)
            )
        async with Producer(kafka, client_id="test-trace-headers") as producer:
            await producer.send_raw_many(records)

        await tail.wait_for(
            lambda t: (
                {e.data["owner"] for e in t.of_type("timer.fired")} >= {f"wf-{n}" for n in TRACEPARENTS}
            ),
            timeout=60,
            message="every timer fired",
        )
        await tail.wait_for(
            lambda t: (
                {e.id for e in t.of_type("command.accepted")} >= {f"cmd-{n}/accepted" for n in TRACEPARENTS}
            ),
            timeout=30,
            message="every command accepted",
        )
        # Each command was taken as it came, in one batch: none was parked, no batch fell apart.
        assert [s.envelope.type for s in tail.seen if s.record.topic == kafka.topic(DLQ_MESSAGES)] == []
        assert [
            r.getMessage() for r in caplog.records if "failed, handling one by one" in r.getMessage()
        ] == []
