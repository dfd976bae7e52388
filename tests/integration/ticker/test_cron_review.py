"""Schedules stored under the cron rules before, met by a ticker of this version (real broker and DB).

The rows are written as the previous version left them (`cron_rules` 1). One whose expression reads
differently now must be paused with the reason, never fired under the new reading; one that reads
the same must fire as before; and no row is claimed before it is reviewed.
"""

import itertools
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest
from asyncpg import Record

from slotflow.contracts import CronSpec, ResumeSchedule, ScheduleDefinition
from slotflow.contracts.topics import JOBS_DUE, SCHEDULE_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_ticker.app import migrate
from tests.integration.ticker.support import TopicTail, db_now, job, send, ticker_settings, tickers

OLD_RULES = 1


@pytest.fixture
async def tail(kafka: KafkaSettings) -> AsyncIterator[TopicTail]:
    async with TopicTail(kafka, (JOBS_DUE, SCHEDULE_EVENTS)) as t:
        yield t


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="test-cron-review") as p:
        yield p


async def store_as_before(pool: Pool, schedule_id: str, expression: str) -> None:
    """A row as the previous version stored it: due in a second, under the old cron rules."""
    now = await db_now(pool)
    definition = ScheduleDefinition(spec=CronSpec(expression=expression), handler="reports.h")
    await pool.execute(
        "INSERT INTO ticker.schedules (schedule_id, definition, next_slot, next_fire_at, covered_until, "
        "cron_rules) VALUES ($1, $2::json, $3, $3, $4, $5)",
        schedule_id,
        definition.model_dump_json(),
        (now + timedelta(seconds=1)).replace(microsecond=0),
        now,
        OLD_RULES,
    )


def fired(tail: TopicTail, schedule_id: str) -> list[datetime]:
    return [job(e).slot for e in tail.of_type("job.due") if e.key == schedule_id]


def paused_reason(tail: TopicTail, schedule_id: str) -> str | None:
    found = [e for e in tail.of_type("schedule.paused") if e.key == schedule_id]
    return str(found[-1].data["reason"]) if found else None


async def test_a_changed_reading_is_paused_at_start_and_the_rest_fire_as_before(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, tail: TopicTail, producer: Producer
) -> None:
    await migrate(pg_pool, ticker_settings())
    changed = {
        "star-in-list": "*,5 * * * * *",  # fired at second 5 of each minute; now every second
        "random": "R * * * * *",  # drawn per process; now H
        "nth-or-day": "0 0 9 1 * 1#1",  # first Mondays only; now the 1st too
    }
    for schedule_id, expression in changed.items():
        await store_as_before(pg_pool, schedule_id, expression)
    await store_as_before(pg_pool, "same", "* * * * * *")

    async with tickers(kafka, pg_dsn):
        await tail.wait_for(
            lambda t: all(paused_reason(t, s) for s in changed) and len(fired(t, "same")) >= 3,
            message="three pauses and the unchanged schedule firing",
        )
        rows = {
            r["schedule_id"]: r
            for r in await pg_pool.fetch(
                "SELECT schedule_id, paused, pause_reason, cron_rules FROM ticker.schedules"
            )
        }
        for schedule_id, expression in changed.items():
            assert rows[schedule_id]["paused"]
            assert repr(expression) in rows[schedule_id]["pause_reason"]
            assert fired(tail, schedule_id) == [], f"{schedule_id} fired under the new reading"
        assert "R is now read as H" in (paused_reason(tail, "random") or "")
        assert "now allows every value; it allowed 5" in (paused_reason(tail, "star-in-list") or "")
        assert {r["cron_rules"] for r in rows.values()} == {2}
        assert not rows["same"]["paused"]

        # Its owner looked and resumes it: it fires under the documented reading, every second.
        await send(producer, kafka, ResumeSchedule(schedule_id="star-in-list"))

        async def resumed() -> Record | None:
            return await pg_pool.fetchrow(
                "SELECT paused_at, resumed_at FROM ticker.schedules WHERE schedule_id = 'star-in-list' "
                "AND resumed_at IS NOT NULL"
            )

        window = await assert_eventually(resumed, timeout=20, message="the resume applied")
        await tail.wait_for(
            lambda t: len([s for s in fired(t, "star-in-list") if s >= window["resumed_at"]]) >= 3,
            message="the resumed schedule firing",
        )
        slots = sorted(fired(tail, "star-in-list"))
        # The slots of the pause are skipped (`paused`), none fired (docs/scheduling.md, "Pause and
        # resume"); the ones missed before the review paused it met the misfire policy.
        assert not [s for s in slots if window["paused_at"] <= s < window["resumed_at"]]
        after = [s for s in slots if s >= window["resumed_at"]]
        assert {b - a for a, b in itertools.pairwise(after)} == {timedelta(seconds=1)}


async def test_a_row_stored_under_the_old_rules_is_not_claimed_before_its_review(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, tail: TopicTail
) -> None:
    # A ticker of the previous version, still running in a rolling upgrade, stores these after this
    # ticker's start: they wait for the next housekeeping pass, then pause or fire.
    async with tickers(kafka, pg_dsn, housekeeping_seconds=3.0):
        await store_as_before(pg_pool, "late-same", "* * * * * *")
        first_slot = await pg_pool.fetchval(
            "SELECT next_slot FROM ticker.schedules WHERE schedule_id = 'late-same'"
        )
        await store_as_before(pg_pool, "late-changed", "*,5 * * * * *")
        await tail.wait_for(
            lambda t: paused_reason(t, "late-changed") is not None and len(fired(t, "late-same")) >= 2,
            message="the review by housekeeping",
        )
    # Due a second after it was stored, it would have fired long before the review had the claim
    # taken it; and the unchanged one's first slot fired late, once reviewed, not skipped.
    assert fired(tail, "late-changed") == []
    assert min(fired(tail, "late-same")) == first_slot
