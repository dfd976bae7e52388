"""A ticker killed with SIGKILL inside its claim transaction loses nothing and duplicates nothing.

Two ticker processes share 200 per-second schedules. Each claim transaction is held open for a
moment after it staged its JobDue rows and advanced its rows (a fault-injection setting), and the
test waits until a victim is exactly there, seen in pg_stat_activity, before killing it. PostgreSQL
rolls the transaction back; the other replica (or the replacement) claims the rows again. A kill
can also land in the relay between the broker's acknowledgement and the "published" mark: those
rows go out again with the same envelope id, which consumers collapse. So the checks are: every
expected slot arrived, and every record of one slot is the same event.
"""

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from slotflow.contracts import CreateSchedule, CronSpec, ScheduleDefinition
from slotflow.contracts.topics import JOBS_DUE, SCHEDULE_EVENTS
from slotflow.core.identity import run_id
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_ticker.rows import parse_definition
from slotflow_ticker.sql import Queries
from tests.integration.ticker.support import (
    Process,
    TopicTail,
    db_now,
    drain_outbox,
    expected_slots,
    send_many,
    spawn_ticker,
    wait_until_serving,
)

SCHEDULES = 200
KILLS = 5
OPTIONS: dict[str, Any] = {"debug_hold_claim_ms": 120, "batch_size": 80, "horizon_seconds": 1.0}

# The advance statement is the claim transaction's last; idle in transaction right after it means
# the JobDue rows are staged and the grid is moved, but nothing is committed.
# The statement is recognised by its own text, so the test follows any change to it.
IN_CLAIM = """
SELECT count(*) FROM pg_stat_activity
 WHERE application_name = $1 AND state = 'idle in transaction' AND query = $2
"""
ADVANCE = Queries.for_schema("ticker").advance


async def wait_inside_claim(pool: Pool, replica: Process) -> None:
    async def in_claim() -> bool:
        return bool(await pool.fetchval(IN_CLAIM, f"slotflow-ticker-{replica.ticker_id}", ADVANCE))

    await assert_eventually(
        in_claim, timeout=60, interval=0.005, message=f"{replica.ticker_id} inside a claim"
    )


async def kill_inside_claim(pool: Pool, victim: Process) -> None:
    await wait_inside_claim(pool, victim)
    victim.kill()

    async def backend_gone() -> bool:
        count = await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            f"slotflow-ticker-{victim.ticker_id}",
        )
        return bool(count == 0)

    await assert_eventually(backend_gone, timeout=30, message="the killed ticker's sessions ended")


async def test_sigkill_inside_the_claim_transaction_loses_nothing(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, tmp_path: Path
) -> None:
    logs = str(tmp_path)
    replicas = [spawn_ticker(kafka, pg_dsn, log_dir=logs, **OPTIONS) for _ in range(2)]
    try:
        for replica in replicas:
            await wait_until_serving(pg_pool, replica.ticker_id)
        async with TopicTail(kafka, (JOBS_DUE, SCHEDULE_EVENTS)) as tail:
            async with Producer(kafka, client_id="chaos") as producer:
                definitions = [
                    ScheduleDefinition(
                        spec=CronSpec(expression="* * * * * *" if i % 2 else "*/2 * * * * *"), handler="h"
                    )
                    for i in range(SCHEDULES)
                ]
                await send_many(
                    producer,
                    kafka,
                    (CreateSchedule(schedule_id=f"k{i}", definition=d) for i, d in enumerate(definitions)),
                )

            async def created() -> bool:
                return int(await pg_pool.fetchval("SELECT count(*) FROM ticker.schedules")) == SCHEDULES

            await assert_eventually(created, timeout=120, message="schedules created")
            kills = 0
            started = time.monotonic()
            while kills < KILLS:
                victim = replicas.pop(0)
                await kill_inside_claim(pg_pool, victim)
                kills += 1
                replacement = spawn_ticker(kafka, pg_dsn, log_dir=logs, **OPTIONS)
                replicas.append(replacement)
                # Killing the other replica before this one claims would stop time altogether.
                await wait_inside_claim(pg_pool, replacement)
            assert time.monotonic() - started < 180

            # The survivors catch up on what the kills held back, then keep the grid near now.
            async def caught_up() -> bool:
                lag = await pg_pool.fetchval(
                    "SELECT now() - min(next_slot) FROM ticker.schedules WHERE NOT deleted"
                )
                return bool(lag < timedelta(seconds=5))

            await assert_eventually(caught_up, timeout=90, message="the survivors kept the grid moving")
            for replica in replicas:
                replica.terminate()
            stopped = await db_now(pg_pool)
            await drain_outbox(pg_pool, kafka)
            rows = await pg_pool.fetch(
                "SELECT schedule_id, definition::text AS d, created_at, next_slot FROM ticker.schedules"
            )
            expected: set[str] = set()
            for row in rows:
                assert row["next_slot"] > stopped - timedelta(seconds=10), "the grid moved until the stop"
                slots = expected_slots(
                    parse_definition(row["d"]), after=row["created_at"], before=row["next_slot"]
                )
                expected.update(run_id(row["schedule_id"], slot) for slot in slots)
            staged = await pg_pool.fetchval(
                "SELECT count(*) FROM ticker.outbox WHERE topic = $1", kafka.topic(JOBS_DUE)
            )
            await tail.wait_for(
                lambda t: len({e.id for e in t.of_type("job.due")}) >= staged,
                timeout=60,
                message="all JobDue read",
            )
    finally:
        for replica in replicas:
            replica.terminate()

    jobs = tail.of_type("job.due")
    by_run: dict[str, set[str]] = {}
    for envelope in jobs:
        by_run.setdefault(envelope.data["run_id"], set()).add(
            envelope.model_dump_json(include={"id", "key", "data"})
        )
    assert set(by_run) == expected, (
        f"missing {sorted(expected - set(by_run))[:5]}, unexpected {sorted(set(by_run) - expected)[:5]}"
    )
    # A slot may arrive more than once only as the very same event (a relay republish after a kill).
    assert all(len(events) == 1 for events in by_run.values())
    assert tail.of_type("slot.skipped") == []
    republished = len(jobs) - len(by_run)
    print(f"{len(by_run)} slots, {KILLS} kills inside claims, {republished} republished records")  # noqa: T201
