"""Automatic resume at `resume_at`, and the Prometheus endpoint of a running replica."""

import socket
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from slotflow.contracts import CreateSchedule, CronSpec, MisfirePolicy, PauseSchedule, ScheduleDefinition
from slotflow.contracts.topics import JOBS_DUE, SCHEDULE_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.ticker.support import TopicTail, db_now, job, send, tickers

EVERY_SECOND = ScheduleDefinition(
    spec=CronSpec(expression="* * * * * *"),
    handler="h",
    misfire=MisfirePolicy(policy="skip", grace=timedelta(milliseconds=500)),
)


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="test-resume") as p:
        yield p


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_pause_with_resume_at_resumes_on_its_own(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, producer: Producer
) -> None:
    async with TopicTail(kafka, (JOBS_DUE, SCHEDULE_EVENTS)) as tail, tickers(kafka, pg_dsn):
        await send(producer, kafka, CreateSchedule(schedule_id="nap", definition=EVERY_SECOND))
        await tail.wait_for(lambda t: bool(t.of_type("job.due")))
        resume_at = await db_now(pg_pool) + timedelta(seconds=3)
        await send(producer, kafka, PauseSchedule(schedule_id="nap", reason="deploy", resume_at=resume_at))
        await tail.wait_for(lambda t: bool(t.of_type("schedule.resumed")), timeout=30, message="resumed")
        await tail.wait_for(
            lambda t: any(job(e).slot > resume_at + timedelta(seconds=1) for e in t.of_type("job.due")),
            message="firing again",
        )
    resumed = tail.of_type("schedule.resumed")[0]
    assert resumed.occurred_at >= resume_at  # by the database clock, not before
    paused_at: datetime = await pg_pool.fetchval("SELECT paused_at FROM ticker.schedules")
    # A slot due a moment before the pause command and not yet claimed is an ordinary misfire.
    skipped = [e for e in tail.of_type("slot.skipped") if datetime.fromisoformat(e.data["slot"]) >= paused_at]
    assert len(skipped) >= 2, "slots that passed while paused are recorded"
    assert {e.data["reason"] for e in skipped} == {"paused"}
    assert all(datetime.fromisoformat(e.data["slot"]) < resumed.occurred_at for e in skipped)
    assert "deploy" in skipped[0].data["detail"]


async def test_metrics_are_served_while_slots_fire(
    kafka: KafkaSettings, pg_dsn: str, producer: Producer
) -> None:
    port = free_port()
    async with (
        TopicTail(kafka, (JOBS_DUE,)) as tail,
        tickers(kafka, pg_dsn, metrics_port=port, metrics_host="127.0.0.1", backlog_seconds=0.2),
        httpx.AsyncClient() as client,
    ):
        await send(producer, kafka, CreateSchedule(schedule_id="m", definition=EVERY_SECOND))
        await tail.wait_for(lambda t: len(t.of_type("job.due")) >= 2)

        async def scraped() -> dict[str, float]:
            text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
            samples = {
                f"{s.name}{sorted(s.labels.items())}": s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }
            fired = samples.get("slotflow_ticker_slots_fired_total[('kind', 'scheduled')]", 0)
            return samples if fired >= 2 else {}

        samples = await assert_eventually(scraped, timeout=20, message="metrics")
    assert samples["slotflow_ticker_fire_lateness_seconds_count[]"] >= 2
    assert samples["slotflow_ticker_claim_batch_size_count[]"] >= 2
    assert (
        samples["slotflow_ticker_commands_total[('outcome', 'accepted'), ('type', 'schedule.create')]"] == 1
    )
    assert "slotflow_ticker_outbox_backlog[]" in samples
    assert "slotflow_ticker_wheel_pending[]" in samples
