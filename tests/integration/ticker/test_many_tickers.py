"""Three tickers, no leader, 1,000 schedules: every expected slot is emitted, and none twice.

The expectation is computed independently of the ticker (croniter walks each cron in its zone;
intervals are plain arithmetic) from each schedule's creation instant to the first slot its row
still holds when the tickers stop. The JobDue records are read back from the real topic.
"""

import random
from datetime import UTC, datetime, timedelta

from slotflow.contracts import CreateSchedule, CronSpec, IntervalSpec, ScheduleDefinition
from slotflow.contracts.topics import JOBS_DUE, SCHEDULE_EVENTS
from slotflow.core.identity import run_id
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_ticker.rows import parse_definition
from tests.integration.ticker.support import (
    TopicTail,
    db_now,
    drain_outbox,
    duplicates,
    expected_slots,
    job,
    send_many,
    tickers,
    wait_db_time,
)

SCHEDULES = 1000
RUN_SECONDS = 60
CRONS = ["*/3 * * * * *", "*/5 * * * * *", "2,17,32,47 * * * * *", "*/10 * * * * *"]
ZONES = ["UTC", "Asia/Kolkata", "America/New_York", "Australia/Lord_Howe", "Europe/Berlin"]


def definitions(rng: random.Random) -> list[ScheduleDefinition]:
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    found = []
    for i in range(SCHEDULES):
        jitter = timedelta(milliseconds=rng.choice([0, 0, 0, 700]))
        if i % 4 == 3:
            spec: CronSpec | IntervalSpec = IntervalSpec(
                every=timedelta(seconds=rng.choice([4, 6, 7])),
                anchor=anchor + timedelta(milliseconds=rng.randrange(5000)),
            )
        else:
            spec = CronSpec(expression=rng.choice(CRONS), timezone=rng.choice(ZONES))
        found.append(ScheduleDefinition(spec=spec, handler="load.noop", jitter=jitter, payload={"i": i}))
    return found


async def test_three_tickers_emit_every_expected_slot_exactly_once(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool
) -> None:
    rng = random.Random(6)
    defs = definitions(rng)
    async with (
        TopicTail(kafka, (JOBS_DUE, SCHEDULE_EVENTS)) as tail,
        Producer(kafka, client_id="load") as producer,
    ):
        async with tickers(kafka, pg_dsn, count=3) as replicas:
            await send_many(
                producer,
                kafka,
                (CreateSchedule(schedule_id=f"load-{i}", definition=d) for i, d in enumerate(defs)),
            )

            async def all_created() -> bool:
                count = await pg_pool.fetchval("SELECT count(*) FROM ticker.schedules")
                return int(count) == SCHEDULES

            await assert_eventually(all_created, timeout=180, message="1000 schedules created")
            await wait_db_time(
                pg_pool, await db_now(pg_pool) + timedelta(seconds=RUN_SECONDS), timeout=RUN_SECONDS + 30
            )
            passes = [r.app.ticking.passes if r.app.ticking else 0 for r in replicas]
        stopped_at = await db_now(pg_pool)
        drained = await drain_outbox(pg_pool, kafka)
        rows = await pg_pool.fetch(
            "SELECT schedule_id, definition::text AS definition, created_at, next_slot FROM ticker.schedules"
        )
        expected: set[str] = set()
        for row in rows:
            definition = parse_definition(row["definition"])
            # The tickers kept up: each row's first unhandled slot is at most jitter + 2 s behind.
            assert row["next_slot"] > stopped_at - definition.jitter - timedelta(seconds=2), row[
                "schedule_id"
            ]
            slots = expected_slots(definition, after=row["created_at"], before=row["next_slot"])
            expected.update(run_id(row["schedule_id"], s) for s in slots)
        published = await pg_pool.fetchval(
            "SELECT count(*) FROM ticker.outbox WHERE topic = $1", kafka.topic(JOBS_DUE)
        )
        await tail.wait_for(
            lambda t: len(t.of_type("job.due")) >= published, timeout=60, message="every JobDue read back"
        )

    jobs = tail.of_type("job.due")
    run_ids = [e.data["run_id"] for e in jobs]
    assert len(expected) > 5_000, "the load is meant to be thousands of slots"
    assert duplicates(run_ids) == {}, "a slot was emitted twice"
    assert set(run_ids) == expected, (
        f"missing {sorted(expected - set(run_ids))[:5]}, unexpected {sorted(set(run_ids) - expected)[:5]}"
    )
    assert tail.of_type("slot.skipped") == []
    for envelope in jobs:
        due = job(envelope)
        assert envelope.id == due.run_id
        assert due.fire_at is not None
        assert envelope.occurred_at >= due.fire_at >= due.slot, "fired before its time"
    sources = {e.source for e in jobs}
    assert len(sources) == 3, f"every replica should have claimed some slots: {sources}"
    assert all(passes), passes
    assert drained >= 0
