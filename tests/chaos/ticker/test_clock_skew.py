"""Tickers whose host clocks are 30 s fast and 30 s slow (libfaketime) neither fire early nor twice.

The ticker decides what is due with the database's now(), so a skewed host changes nothing but
the Kafka CreateTime its producer stamps; that timestamp is how the test proves the skew was real.
The test process itself runs on the true clock and notes when each JobDue arrives: none may
arrive before its slot. One replica also has its monotonic clock faked, the other not, since the
ticker sleeps on monotonic time.
"""

import glob
from datetime import timedelta
from pathlib import Path

import pytest

from slotflow.contracts import CreateSchedule, CronSpec, ScheduleDefinition
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
    spawn_ticker,
    wait_db_time,
    wait_until_serving,
)

SCHEDULES = 120
RUN = timedelta(seconds=20)
SKEWS = {"fast": {"FAKETIME": "+30s"}, "slow": {"FAKETIME": "-30s", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}}
# Preloaded into the ticker itself rather than through the `faketime` wrapper, which forks: a
# signal to the wrapper would leave the ticker running unseen.
LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))), None)

pytestmark = pytest.mark.skipif(LIBFAKETIME is None, reason="needs libfaketime (make test installs faketime)")


async def test_skewed_tickers_neither_fire_early_nor_twice(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, tmp_path: Path
) -> None:
    replicas = {
        name: spawn_ticker(
            kafka,
            pg_dsn,
            log_dir=str(tmp_path),
            env={"LD_PRELOAD": str(LIBFAKETIME), **env},
            ticker_id=f"skew-{name}",
        )
        for name, env in SKEWS.items()
    }
    try:
        for replica in replicas.values():
            await wait_until_serving(pg_pool, replica.ticker_id)
        async with TopicTail(kafka, (JOBS_DUE, SCHEDULE_EVENTS)) as tail:
            async with Producer(kafka, client_id="skew") as producer:
                await send_many(
                    producer,
                    kafka,
                    (
                        CreateSchedule(
                            schedule_id=f"c{i}",
                            definition=ScheduleDefinition(
                                spec=CronSpec(expression="* * * * * *" if i % 3 else "*/2 * * * * *"),
                                handler="h",
                                jitter=timedelta(milliseconds=300 * (i % 2)),
                            ),
                        )
                        for i in range(SCHEDULES)
                    ),
                )

            async def created() -> bool:
                return int(await pg_pool.fetchval("SELECT count(*) FROM ticker.schedules")) == SCHEDULES

            await assert_eventually(created, timeout=120, message="schedules created")
            await wait_db_time(pg_pool, await db_now(pg_pool) + RUN)
            for replica in replicas.values():
                replica.terminate()
            # Rows a replica staged but did not relay before it stopped are published by this
            # process's drain, on the true clock: their timestamps prove nothing about the skew.
            drained = {
                r["event_id"]
                for r in await pg_pool.fetch(
                    "SELECT event_id FROM ticker.outbox WHERE published_at IS NULL AND topic = $1",
                    kafka.topic(JOBS_DUE),
                )
            }
            await drain_outbox(pg_pool, kafka)
            rows = await pg_pool.fetch(
                "SELECT schedule_id, definition::text AS d, created_at, next_slot FROM ticker.schedules"
            )
            expected = {
                run_id(r["schedule_id"], slot)
                for r in rows
                for slot in expected_slots(
                    parse_definition(r["d"]), after=r["created_at"], before=r["next_slot"]
                )
            }
            staged = await pg_pool.fetchval(
                "SELECT count(*) FROM ticker.outbox WHERE topic = $1", kafka.topic(JOBS_DUE)
            )
            await tail.wait_for(
                lambda t: len(t.of_type("job.due")) >= staged, timeout=60, message="all JobDue read"
            )
    finally:
        for replica in replicas.values():
            replica.terminate()

    seen = [s for s in tail.seen if s.envelope.type == "job.due"]
    run_ids = [s.envelope.data["run_id"] for s in seen]
    assert duplicates(run_ids) == {}, "a slot fired twice"
    assert set(run_ids) == expected
    assert tail.of_type("slot.skipped") == []
    for item in seen:
        due = job(item.envelope)
        assert due.fire_at is not None
        assert item.received_at >= due.fire_at >= due.slot, (
            f"{due.run_id} arrived early at {item.received_at}"
        )
        assert item.envelope.occurred_at >= due.fire_at
    # Both skewed replicas fired slots...
    for name in ("fast", "slow"):
        assert [s for s in seen if s.envelope.source == f"ticker/skew-{name}"], (
            f"the {name} ticker fired nothing"
        )
    # ...and their clocks really were 30 s off. A record's Kafka timestamp is the clock of the replica
    # whose relay published it, which need not be the one that staged it (any replica relays any
    # outbox row), so every record must carry one of the two skews, whichever replica sent it.
    offsets = [
        (s.record.timestamp_ms or 0) / 1000 - s.received_at.timestamp()
        for s in seen
        if s.envelope.id not in drained
    ]
    assert offsets
    # Tolerance covers produce-to-consume latency on a loaded machine; an unskewed clock reads ~0.
    assert all(min(abs(o - 30), abs(o + 30)) < 10 for o in offsets), "a record not stamped by a skewed clock"
