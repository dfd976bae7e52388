"""The claimer with the real ticker: a schedule fires and pays once; a retry goes through the
ticker's durable one-shot timer."""

from datetime import timedelta

from slotflow.contracts import CreateSchedule, OnceSpec, RetryPolicy, ScheduleDefinition
from slotflow.core.identity import run_id
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import job_due, ledger, publish, wait_state
from tests.integration.ticker.support import db_now, send, start_ticker, stop_ticker


async def test_a_scheduled_payout_fires_through_the_ticker_and_pays_once(
    kafka: KafkaSettings, pg_dsn: str, producer: Producer, db: Pool, start_claimer: StartClaimer
) -> None:
    ticker = await start_ticker(kafka, pg_dsn)
    try:
        await start_claimer()
        slot = (await db_now(db)).replace(microsecond=0) + timedelta(seconds=2)
        definition = ScheduleDefinition(
            spec=OnceSpec(at=slot),
            handler="payouts.pay_merchants",
            payload={"merchant_id": "m-42", "amount_cents": 1250, "currency": "EUR"},
        )
        await send(producer, kafka, CreateSchedule(schedule_id="nightly-payout", definition=definition))
        run = run_id("nightly-payout", slot)
        row = await wait_state(db, run, "completed", timeout=60)
    finally:
        await stop_ticker(ticker)
    assert row["fence_token"] == 1
    paid = await ledger(db)
    assert [(p["run_id"], p["merchant_id"], p["amount_cents"]) for p in paid] == [(run, "m-42", 1250)]


async def test_a_retry_waits_in_the_tickers_durable_timer(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
) -> None:
    async def once_unavailable(ctx: RunContext) -> object:
        if ctx.attempt == 1:
            raise ConnectionError("payment gateway unavailable")
        return await registry.get("payouts.pay_merchants")(ctx)

    registry.register("test.once_unavailable", once_unavailable)
    ticker = await start_ticker(kafka, pg_dsn)
    try:
        await start_claimer()
        policy = RetryPolicy(base=timedelta(milliseconds=800), cap=timedelta(seconds=2), max_attempts=3)
        job = job_due("retry-via-ticker", handler="test.once_unavailable", retry=policy)
        await publish(producer, kafka, [job])
        row = await wait_state(db, job.run_id, "completed", timeout=60)
        timer = await db.fetchrow("SELECT * FROM ticker.timers WHERE timer_id = $1", f"retry:{job.run_id}#2")
    finally:
        await stop_ticker(ticker)
    assert row["attempt"] == 2
    assert timer is not None
    assert [(p["run_id"], p["fence_token"]) for p in await ledger(db)] == [(job.run_id, 2)]
