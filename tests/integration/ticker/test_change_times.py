"""A schedule change's time is taken after its row lock: the api orders a schedule's timeline (what
the slot audit reads) by the time each change carries, so a change applied after another must not
carry an earlier time, whichever of a command and the automatic resume took the row first."""

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from slotflow.contracts import CreateSchedule, CronSpec, Envelope, Message, PauseSchedule, ScheduleDefinition
from slotflow.contracts.routing import build_command
from slotflow.contracts.topics import SCHEDULE_COMMANDS, TIMER_COMMANDS
from slotflow.pg.outbox import Staged
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow_ticker.app import migrate
from slotflow_ticker.claims import SlotFirer
from slotflow_ticker.commands import CommandHandler, CommandTopics
from slotflow_ticker.events import EventFactory, Outgoing, Topics
from slotflow_ticker.metrics import TickerMetrics
from slotflow_ticker.sql import Queries
from tests.integration.ticker.support import SCHEMA, db_now, ticker_settings, wait_db_time

HOURLY = ScheduleDefinition(spec=CronSpec(expression="0 * * * *"), handler="h")


@dataclass
class Ticker:
    """A ticker's command handler and slot firer on the test's database, no loops running."""

    queries: Queries
    firer: SlotFirer
    handler: CommandHandler


@pytest.fixture
async def ticker(pg_pool: Pool, kafka: KafkaSettings) -> Ticker:
    await migrate(pg_pool, ticker_settings())
    queries = Queries.for_schema(SCHEMA)
    events = EventFactory(Topics.of(kafka), source="ticker/test")
    metrics = TickerMetrics()
    firer = SlotFirer(
        pg_pool, schema=SCHEMA, queries=queries, events=events, metrics=metrics, batch_size=100, max_slots=100
    )
    handler = CommandHandler(
        pg_pool,
        schema=SCHEMA,
        queries=queries,
        events=events,
        firer=firer,
        metrics=metrics,
        on_commit=lambda due: None,
        topics=CommandTopics(schedules=kafka.topic(SCHEDULE_COMMANDS), timers=kafka.topic(TIMER_COMMANDS)),
    )
    return Ticker(queries, firer, handler)


def _command(message: Message) -> Envelope:
    return build_command(message, source="test")[1]


async def _apply(pool: Pool, ticker: Ticker, message: Message) -> list[Outgoing]:
    async with pool.acquire() as conn, conn.transaction():
        now: datetime = await conn.fetchval("SELECT now()")
        return (await ticker.handler.apply(conn, _command(message), message, now=now)).staged


def _at(staged: list[Outgoing], event_type: str) -> datetime:
    [envelope] = [s.envelope for s in staged if isinstance(s, Staged) and s.envelope.type == event_type]
    return envelope.occurred_at


async def _paused_until(pool: Pool, ticker: Ticker, seconds: float) -> datetime:
    await _apply(pool, ticker, CreateSchedule(schedule_id="nap", definition=HOURLY))
    resume_at = await db_now(pool) + timedelta(seconds=seconds)
    await _apply(pool, ticker, PauseSchedule(schedule_id="nap", reason="deploy", resume_at=resume_at))
    return resume_at


async def test_a_pause_waiting_for_the_automatic_resume_is_newer_than_it(
    pg_pool: Pool, ticker: Ticker
) -> None:
    """The pause's command batch began before the automatic resume took the row; the pause waits
    for the lock, then pauses the resumed schedule. Its time must be later than the resume's, or the
    timeline reads "paused, resumed" and the audit counts the paused schedule's slots as missed."""
    resume_at = await _paused_until(pg_pool, ticker, 0.3)
    pause = PauseSchedule(schedule_id="nap", reason="still deploying")
    async with pg_pool.acquire() as pausing, pausing.transaction():
        now: datetime = await pausing.fetchval("SELECT now()")  # the command batch has begun
        await wait_db_time(pg_pool, resume_at)
        assert await ticker.firer.auto_resume() == 1  # on its own connection, and commits
        resumed_at = await pg_pool.fetchval("SELECT resumed_at FROM ticker.schedules")
        applied = await ticker.handler.apply(pausing, _command(pause), pause, now=now)
    assert await pg_pool.fetchval("SELECT paused FROM ticker.schedules")
    assert _at(applied.staged, "schedule.paused") > resumed_at
    # The ticker's own pause window starts where the event says it does.
    assert await pg_pool.fetchval("SELECT paused_at FROM ticker.schedules") == _at(
        applied.staged, "schedule.paused"
    )


async def test_an_automatic_resume_begun_before_a_pause_committed_is_newer_than_it(
    pg_pool: Pool, ticker: Ticker
) -> None:
    """The automatic resume's transaction has begun when a second pause (keeping the passed
    resume_at) commits; the resume's statement then reads the new pause and resumes after it, so its
    time must be later than the pause's."""
    resume_at = await _paused_until(pg_pool, ticker, 0.3)
    await wait_db_time(pg_pool, resume_at)
    async with pg_pool.acquire() as resuming, resuming.transaction():
        await resuming.fetchval("SELECT now()")  # the automatic resume's transaction has begun
        staged = await _apply(pg_pool, ticker, PauseSchedule(schedule_id="nap", reason="note"))
        rows = await resuming.fetch(ticker.queries.auto_resume, 100)
    assert [r["schedule_id"] for r in rows] == ["nap"]
    assert rows[0]["db_now"] > _at(staged, "schedule.paused")
