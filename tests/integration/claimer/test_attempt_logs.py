"""What a handler logs during an attempt travels with that attempt's outcome, and only that one's."""

import asyncio
import logging
import time
from datetime import timedelta

from slotflow.contracts import RetryPolicy
from slotflow.contracts.topics import RUN_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow_claimer.capture import MAX_LINES
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import TopicReader, job_due, publish, wait_state
from tests.integration.claimer.test_failures import ticking

handler_log = logging.getLogger("tests.payouts")


async def test_each_attempt_carries_its_own_log_lines(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    handler_log.setLevel(logging.INFO)

    async def flaky(ctx: RunContext) -> str:
        handler_log.info("attempt %d of %s: calling the bank", ctx.attempt, ctx.run_id)
        # Another run on the same loop logs meanwhile: its lines must not land in this attempt.
        await asyncio.sleep(0.05)
        if ctx.attempt == 1:
            handler_log.warning("bank said 503")
            raise ConnectionError("gateway unreachable")
        return "paid"

    def chatty(ctx: RunContext) -> str:
        # A plain def runs in a thread: the capture follows it there. It logs past the bound.
        for i in range(MAX_LINES + 50):
            handler_log.info("line %d of %s", i, ctx.run_id)
        time.sleep(0.01)
        return "done"

    registry.register("test.flaky", flaky)
    registry.register("test.chatty", chatty)
    await start_claimer()
    policy = RetryPolicy(base=timedelta(milliseconds=300), cap=timedelta(seconds=1), max_attempts=3)
    job = job_due("flaky-logs", handler="test.flaky", retry=policy)
    noisy = job_due("chatty-logs", handler="test.chatty")
    async with ticking(kafka, pg_dsn):
        await publish(producer, kafka, [job, noisy])
        await wait_state(db, job.run_id, "completed")
        await wait_state(db, noisy.run_id, "completed")
    async with TopicReader(kafka, RUN_EVENTS) as events:
        completed = await events.wait_for("run.completed", run_id=job.run_id)
        loud = await events.wait_for("run.completed", run_id=noisy.run_id)
        failed = events.of_type("run.failed", job.run_id)
    first = failed[0].data["logs"]
    assert len(first) == 2, first
    assert first[0].endswith(f"INFO tests.payouts: attempt 1 of {job.run_id}: calling the bank")
    assert first[1].endswith("WARNING tests.payouts: bank said 503")
    assert "ConnectionError" in failed[0].data["traceback"]
    second = next(e for e in completed if e.data["attempt"] == 2).data["logs"]
    assert len(second) == 1
    assert second[0].endswith(f"attempt 2 of {job.run_id}: calling the bank")
    lines = loud[0].data["logs"]
    assert len(lines) == MAX_LINES + 1
    assert all(noisy.run_id in line for line in lines[:-1])
    assert lines[-1] == "... 50 more log lines of this attempt not kept"
