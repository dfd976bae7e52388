"""Failure sorting: transient failures retry through the ticker's durable timer, permanent ones
never do."""

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from pydantic import TypeAdapter

from slotflow.contracts import DeadLettered, RetryPolicy
from slotflow.contracts.envelope import REDRIVE_COUNT_HEADER
from slotflow.contracts.topics import DLQ_MESSAGES, RUN_EVENTS, TIMER_COMMANDS
from slotflow.errors import PermanentError
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_claimer.sql import HISTORY_KEPT
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import (
    TopicReader,
    job_due,
    ledger,
    publish,
    wait_state,
)
from tests.integration.ticker.support import Replica, start_ticker, stop_ticker


@contextlib.asynccontextmanager
async def ticking(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Replica]:
    """The real ticker, which keeps the retries' one-shot timers."""
    ticker = await start_ticker(kafka, pg_dsn)
    try:
        yield ticker
    finally:
        await stop_ticker(ticker)


class PaymentDeclined(Exception):
    """A business error the schedule's retry policy names as non-retryable."""


async def test_transient_failure_retries_through_a_timer_and_then_completes(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    async def flaky(ctx: RunContext) -> str:
        if ctx.attempt == 1:
            raise ConnectionError("gateway unreachable")
        return "paid"

    registry.register("test.flaky", flaky)
    await start_claimer()
    policy = RetryPolicy(base=timedelta(milliseconds=500), cap=timedelta(seconds=2), max_attempts=3)
    job = job_due("flaky", handler="test.flaky", retry=policy)
    async with ticking(kafka, pg_dsn):
        await publish(producer, kafka, [job])
        row = await wait_state(db, job.run_id, "completed")
    assert row["attempt"] == 2
    assert row["fence_token"] == 2
    async with TopicReader(kafka, RUN_EVENTS) as events, TopicReader(kafka, TIMER_COMMANDS) as commands:
        await events.wait_for("run.completed", run_id=job.run_id)
        failed = events.of_type("run.failed", job.run_id)
        retrying = events.of_type("run.retrying", job.run_id)
        timers = await commands.wait_for("timer.start")
    assert [f.data["retryable"] for f in failed] == [True]
    assert failed[0].data["error_type"] == "ConnectionError"
    assert retrying[0].data["next_attempt"] == 2
    assert [t.id for t in timers] == [f"retry:{job.run_id}#2"]
    timer = timers[0].data
    assert timer["on_fire"]["job"]["attempt"] == 2
    assert timer["on_fire"]["job"]["kind"] == "retry"
    # Full jitter: the first retry waits a draw from [0, base).
    delay = TypeAdapter(timedelta).validate_python(retrying[0].data["delay"])
    assert timedelta(0) <= delay < policy.base
    assert timer["fire_at"] == retrying[0].data["retry_at"]


@pytest.mark.parametrize(
    ("error", "non_retryable"),
    [
        (PermanentError("merchant account closed"), ()),
        (ValueError("amount is not a number"), ()),
        (PaymentDeclined("card declined"), ("PaymentDeclined",)),
    ],
    ids=["PermanentError", "ValueError", "named-non-retryable"],
)
async def test_permanent_failure_is_dead_lettered_without_a_retry(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    error: Exception,
    non_retryable: tuple[str, ...],
) -> None:
    calls: list[int] = []

    async def doomed(ctx: RunContext) -> None:
        calls.append(ctx.attempt)
        raise error

    registry.register("test.doomed", doomed)
    await start_claimer()
    job = job_due(
        "doomed",
        handler="test.doomed",
        retry=RetryPolicy(base=timedelta(milliseconds=100), max_attempts=5, non_retryable=non_retryable),
    )
    await publish(producer, kafka, [job])
    row = await wait_state(db, job.run_id, "dead_lettered")
    assert row["attempt"] == 1
    async with TopicReader(kafka, DLQ_MESSAGES) as dlq, TopicReader(kafka, RUN_EVENTS) as events:
        letters = await dlq.wait_for(DeadLettered.message_type)
        dead = await events.wait_for("run.dead_lettered", run_id=job.run_id)
    letter = letters[0].data
    assert letter["reason"] == "permanent_error"
    assert letter["run_id"] == job.run_id
    assert letter["error_type"] == type(error).__name__
    assert [h["attempt"] for h in letter["history"]] == [1]
    assert dead[0].data["reason"] == "permanent_error"
    assert events.of_type("run.retrying", job.run_id) == []
    # Events are staged with the state change, so the outbox is the complete record: no timer.
    staged = await db.fetch("SELECT topic FROM claimer.outbox_events")
    assert kafka.topic(TIMER_COMMANDS) not in {r["topic"] for r in staged}
    assert calls == [1]


async def test_payout_business_rule_is_permanent_and_pays_nothing(
    kafka: KafkaSettings, producer: Producer, db: Pool, start_claimer: StartClaimer
) -> None:
    await start_claimer()
    job = job_due("merchant-neg", payload={"merchant_id": "m", "amount_cents": -5})
    await publish(producer, kafka, [job])
    row = await wait_state(db, job.run_id, "dead_lettered")
    assert row["attempt"] == 1
    assert row["error"] is not None
    assert await ledger(db) == []


async def test_exhausted_attempts_land_in_the_dlq_with_their_history(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    async def down(ctx: RunContext) -> None:
        raise TimeoutError("upstream timed out")

    registry.register("test.down", down)
    await start_claimer()
    policy = RetryPolicy(base=timedelta(milliseconds=100), cap=timedelta(milliseconds=300), max_attempts=3)
    job = job_due("down", handler="test.down", retry=policy)
    async with ticking(kafka, pg_dsn):
        await publish(producer, kafka, [job])
        row = await wait_state(db, job.run_id, "dead_lettered")
    assert row["attempt"] == 3
    async with TopicReader(kafka, DLQ_MESSAGES) as dlq:
        letters = await dlq.wait_for(DeadLettered.message_type)
    letter = letters[0].data
    assert letter["reason"] == "attempts_exhausted"
    assert [h["attempt"] for h in letter["history"]] == [1, 2, 3]
    assert {h["error_type"] for h in letter["history"]} == {"TimeoutError"}
    assert [h["fence_token"] for h in letter["history"]] == [1, 2, 3]


async def test_start_to_close_timeout_is_a_transient_failure(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    async def slow_then_fast(ctx: RunContext) -> str:
        if ctx.attempt == 1:
            await asyncio.sleep(30)
        return "done"

    registry.register("test.slow", slow_then_fast)
    await start_claimer()
    policy = RetryPolicy(
        base=timedelta(milliseconds=100), max_attempts=3, start_to_close=timedelta(milliseconds=500)
    )
    job = job_due("slow", handler="test.slow", retry=policy)
    async with ticking(kafka, pg_dsn):
        await publish(producer, kafka, [job])
        row = await wait_state(db, job.run_id, "completed")
    assert row["attempt"] == 2
    assert row["history"] is not None


async def redrive(producer: Producer, letter: DeadLettered, count: int) -> None:
    """What the DLQ service does: the very same record back to its topic, with a redrive count."""
    await producer.send_raw(
        letter.topic,
        key=base64.b64decode(letter.key_b64) if letter.key_b64 else None,
        value=base64.b64decode(letter.value_b64),
        headers={REDRIVE_COUNT_HEADER: str(count).encode()},
    )


async def test_unknown_handler_is_dead_lettered_and_a_redrive_after_deploy_completes_it_once(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    claimer = await start_claimer()
    job = job_due("later", handler="reports.not_deployed_yet")
    await publish(producer, kafka, [job])
    await wait_state(db, job.run_id, "dead_lettered")
    async with TopicReader(kafka, DLQ_MESSAGES) as dlq:
        letters = await dlq.wait_for(DeadLettered.message_type)
    letter = DeadLettered.model_validate(letters[0].data)
    assert letter.reason == "unknown_handler"

    calls: list[int] = []

    async def deployed(ctx: RunContext) -> str:
        calls.append(ctx.fence_token)
        return "built"

    registry.register("reports.not_deployed_yet", deployed)
    await redrive(producer, letter, 1)
    row = await wait_state(db, job.run_id, "completed")
    assert row["fence_token"] == 2
    assert row["attempt"] == 2  # attempts keep counting over the run's life; the budget restarted
    assert row["redrive_count"] == 1
    # Redriving again (the same count, then a higher one) never runs a completed run twice.
    before = claimer.metrics.value("slotflow_claimer_jobdue_duplicates_total")
    await redrive(producer, letter, 1)
    await redrive(producer, letter, 2)
    await assert_eventually(
        lambda: claimer.metrics.value("slotflow_claimer_jobdue_duplicates_total") >= before + 2
    )
    assert calls == [2]
    assert (await wait_state(db, job.run_id, "completed"))["fence_token"] == 2


async def test_a_transient_error_that_ran_out_of_attempts_stays_retryable(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    """Dead-lettered for running out of attempts, not for being permanent: a redrive may succeed,
    so every RunFailed says `retryable: true`, and the letter attempts_exhausted."""

    async def times_out(ctx: RunContext) -> None:
        raise ConnectionError(f"bank API timed out on attempt {ctx.attempt}")

    registry.register("test.times_out", times_out)
    await start_claimer()
    policy = RetryPolicy(base=timedelta(milliseconds=100), cap=timedelta(milliseconds=200), max_attempts=2)
    job = job_due("exhausted", handler="test.times_out", retry=policy)
    async with ticking(kafka, pg_dsn):
        await publish(producer, kafka, [job])
        await wait_state(db, job.run_id, "dead_lettered")
    async with TopicReader(kafka, DLQ_MESSAGES) as dlq, TopicReader(kafka, RUN_EVENTS) as events:
        letters = await dlq.wait_for(DeadLettered.message_type)
        dead = await events.wait_for("run.dead_lettered", run_id=job.run_id)
        failed = events.of_type("run.failed", job.run_id)
    assert [f.data["retryable"] for f in failed] == [True, True]
    assert dead[0].data["reason"] == "attempts_exhausted"
    assert letters[0].data["reason"] == "attempts_exhausted"


async def test_unlimited_attempts_with_a_constant_backoff_retry_until_success(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    """`max_attempts=0` retries past any finite budget, and `backoff_coefficient=1` keeps every
    wait under `base`, where doubling from 100 ms would have allowed 6.4 s before the eighth try."""
    succeeds_on = 9

    async def stubborn(ctx: RunContext) -> str:
        if ctx.attempt < succeeds_on:
            raise ConnectionError(f"gateway unreachable (attempt {ctx.attempt})")
        return "paid"

    registry.register("test.stubborn", stubborn)
    await start_claimer()
    policy = RetryPolicy(
        base=timedelta(milliseconds=100), cap=timedelta(seconds=10), max_attempts=0, backoff_coefficient=1
    )
    job = job_due("stubborn", handler="test.stubborn", retry=policy)
    async with ticking(kafka, pg_dsn):
        await publish(producer, kafka, [job])
        row = await wait_state(db, job.run_id, "completed", timeout=60)
    assert row["attempt"] == succeeds_on
    async with TopicReader(kafka, RUN_EVENTS) as events:
        await events.wait_for("run.completed", run_id=job.run_id)
        retrying = events.of_type("run.retrying", job.run_id)
        dead = events.of_type("run.dead_lettered", job.run_id)
    assert dead == []
    assert [r.data["next_attempt"] for r in retrying] == list(range(2, succeeds_on + 1))
    delays = [TypeAdapter(timedelta).validate_python(r.data["delay"]) for r in retrying]
    assert all(timedelta(0) <= delay <= policy.base for delay in delays), delays
    # The policy travelled with every retry's JobDue: the stored one still says so.
    stored = RetryPolicy.model_validate_json(
        await db.fetchval("SELECT retry::text FROM claimer.runs WHERE run_id = $1", job.run_id)
    )
    assert (stored.max_attempts, stored.backoff_coefficient) == (0, 1.0)


async def test_a_runs_failure_history_keeps_its_newest_entries(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    """A run with unlimited attempts appends one history entry per failure for as long as it fails:
    the row keeps the newest HISTORY_KEPT, so it (rewritten on every write), its RunDeadLettered
    and its letter stay bounded. The run's history is seeded full while its first attempt waits."""
    seeded = asyncio.Event()

    async def fails_once(ctx: RunContext) -> str:
        if ctx.attempt == 1:
            await asyncio.wait_for(seeded.wait(), timeout=30)
            raise ConnectionError("gateway unreachable")
        return "paid"

    registry.register("test.fails_once", fails_once)
    await start_claimer()
    policy = RetryPolicy(base=timedelta(milliseconds=100), cap=timedelta(milliseconds=200), max_attempts=0)
    job = job_due("long-failing", handler="test.fails_once", retry=policy)
    earlier = [
        {
            "event": "failed",
            "attempt": 1,
            "fence_token": 1,
            "owner": "earlier",
            "error_type": "TimeoutError",
            "message": f"earlier failure {n}",
            "started_at": None,
            "finished_at": "2026-01-01T00:00:00+00:00",
        }
        for n in range(HISTORY_KEPT)
    ]
    async with ticking(kafka, pg_dsn):
        await publish(producer, kafka, [job])
        await wait_state(db, job.run_id, "running")
        await db.execute(
            "UPDATE claimer.runs SET history = $2::jsonb WHERE run_id = $1", job.run_id, json.dumps(earlier)
        )
        seeded.set()
        row = await wait_state(db, job.run_id, "completed")
    history = json.loads(row["history"])
    assert len(history) == HISTORY_KEPT
    # The oldest entry made room; the rest kept their order, the new failure last.
    assert [entry["message"] for entry in history[:-1]] == [
        f"earlier failure {n}" for n in range(1, HISTORY_KEPT)
    ]
    assert (history[-1]["error_type"], history[-1]["attempt"]) == ("ConnectionError", 1)
