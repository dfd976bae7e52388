"""Pause and resume as an operator predicts them: the slots that pass while a schedule is paused
are paused slots, recorded as skipped (`paused`) and never fired, however short the pause (one
shorter than the misfire grace once fired them all at once on resume, and the overlap policy then
skipped all but the oldest); unless the resume asks to catch up, when they meet the misfire policy."""

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest

from slotflow.contracts import (
    CreateSchedule,
    CronSpec,
    MisfirePolicy,
    PauseSchedule,
    ResumeSchedule,
    ScheduleDefinition,
)
from slotflow.contracts.topics import JOBS_DUE, SCHEDULE_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from tests.integration.ticker.support import TopicTail, expected_slots, job, send, tickers

# Every two seconds, with the default grace of a minute: a pause of a few seconds lies entirely
# inside the grace, the case where paused slots used to fire at once on resume.
EVERY_TWO_SECONDS = ScheduleDefinition(
    spec=CronSpec(expression="*/2 * * * * *"),
    handler="payments.capture",
    misfire=MisfirePolicy(policy="fire_all", grace=timedelta(seconds=60)),
)


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="test-pause-semantics") as p:
        yield p


async def _pause_and_resume(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, producer: Producer, *, catch_up: bool
) -> tuple[TopicTail, list[datetime]]:
    """Pause for about five seconds, resume, and return the events and the paused slots."""
    async with TopicTail(kafka, (JOBS_DUE, SCHEDULE_EVENTS)) as tail, tickers(kafka, pg_dsn):
        await send(producer, kafka, CreateSchedule(schedule_id="payouts", definition=EVERY_TWO_SECONDS))
        await tail.wait_for(lambda t: bool(t.of_type("job.due")), message="first firing")
        await send(producer, kafka, PauseSchedule(schedule_id="payouts", reason="bank maintenance"))
        await tail.wait_for(lambda t: bool(t.of_type("schedule.paused")), message="paused")
        await asyncio.sleep(5)
        await send(producer, kafka, ResumeSchedule(schedule_id="payouts", catch_up=catch_up))
        await tail.wait_for(lambda t: bool(t.of_type("schedule.resumed")), message="resumed")
        row = await pg_pool.fetchrow("SELECT paused_at, resumed_at FROM ticker.schedules")
        assert row is not None
        paused_at: datetime = row["paused_at"]
        resumed_at: datetime = row["resumed_at"]
        # Settled once a slot after the resume fired.
        await tail.wait_for(
            lambda t: any(job(e).slot >= resumed_at for e in t.of_type("job.due")),
            timeout=30,
            message="firing after the resume",
        )
    in_pause = expected_slots(
        EVERY_TWO_SECONDS, after=paused_at - timedelta(microseconds=1), before=resumed_at
    )
    assert len(in_pause) >= 2, in_pause
    return tail, in_pause


async def test_slots_that_pass_while_paused_are_skipped_not_fired_on_resume(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, producer: Producer
) -> None:
    tail, in_pause = await _pause_and_resume(kafka, pg_dsn, pg_pool, producer, catch_up=False)
    fired = {job(e).slot for e in tail.of_type("job.due")}
    assert not fired & set(in_pause), "a paused slot fired on resume"
    skipped = {datetime.fromisoformat(e.data["slot"]): e.data for e in tail.of_type("slot.skipped")}
    for slot in in_pause:
        assert skipped[slot]["reason"] == "paused", (slot, skipped.get(slot))
        assert "bank maintenance" in skipped[slot]["detail"]


async def test_a_resume_with_catch_up_runs_the_paused_slots_under_the_misfire_policy(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, producer: Producer
) -> None:
    tail, in_pause = await _pause_and_resume(kafka, pg_dsn, pg_pool, producer, catch_up=True)
    fired = {job(e).slot for e in tail.of_type("job.due")}
    # Every paused slot is within the minute's grace: late, not missed, so each fires.
    assert set(in_pause) <= fired, sorted(set(in_pause) - fired)
    skipped = {datetime.fromisoformat(e.data["slot"]) for e in tail.of_type("slot.skipped")}
    assert not skipped & set(in_pause)
