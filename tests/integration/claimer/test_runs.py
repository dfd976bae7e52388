"""A JobDue becomes one fenced run: claimed, started, handled, completed, published."""

import asyncio

from slotflow.contracts.topics import RUN_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import TopicReader, job_due, ledger, publish, wait_state


async def test_job_due_runs_once_and_publishes_started_and_completed(
    kafka: KafkaSettings, producer: Producer, db: Pool, start_claimer: StartClaimer
) -> None:
    claimer = await start_claimer()
    job = job_due("merchant-1")
    await publish(producer, kafka, [job])
    row = await wait_state(db, job.run_id, "completed")
    assert row["fence_token"] == 1
    assert row["owner"] == claimer.owner
    paid = await ledger(db, job.run_id)
    assert len(paid) == 1
    assert paid[0]["fence_token"] == 1
    assert paid[0]["amount_cents"] == 1250
    async with TopicReader(kafka, RUN_EVENTS) as events:
        started = await events.wait_for("run.started", run_id=job.run_id)
        completed = await events.wait_for("run.completed", run_id=job.run_id)
    assert started[0].data["fence_token"] == 1
    assert started[0].key == "merchant-1"
    assert completed[0].data["result"]["payout_id"] == paid[0]["payout_id"]


async def test_duplicate_job_due_collapses_on_run_id(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    calls: list[str] = []

    async def count(ctx: RunContext) -> None:
        calls.append(ctx.run_id)
        await asyncio.sleep(0.3)

    registry.register("test.count", count)
    claimer = await start_claimer()
    job = job_due("dup", handler="test.count")
    await publish(producer, kafka, [job, job, job])
    await wait_state(db, job.run_id, "completed")
    await publish(producer, kafka, [job])

    await assert_eventually(lambda: claimer.metrics.value("slotflow_claimer_jobdue_duplicates_total") >= 3)
    assert calls == [job.run_id]
    row = await wait_state(db, job.run_id, "completed")
    assert row["fence_token"] == 1
