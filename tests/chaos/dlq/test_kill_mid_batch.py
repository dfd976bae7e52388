"""A DLQ service process killed with SIGKILL in the middle of a batch: after a restart nothing is
parked twice and nothing is lost.

The service commits its consumer offsets after each batch, and parks each letter in its own
transaction, so a kill mid-batch leaves letters parked whose offsets were never committed. The
restarted process reads them again; the inbox (keyed by the DLQ record's position) recognises
them, so each origin keeps count 1, and an origin deliberately sent twice keeps count 2.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
from aiokafka.admin import AIOKafkaAdminClient

from slotflow.contracts.topics import DLQ_MESSAGES
from slotflow.errors import InvalidPayload
from slotflow.kafka.poison import dead_letter_envelope
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.dlq.helpers import AT

ORIGINS = 2500
RESENT = 250  # origins a consumer re-sends (as after its own crash): parked once, counted twice


def start_service(kafka: KafkaSettings, pg_dsn: str, log: Path, **extra: str) -> "subprocess.Popen[bytes]":
    env = {
        **os.environ,
        "SLOTFLOW_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": kafka.topic_namespace,
        "SLOTFLOW_PG_DSN": pg_dsn,
        "SLOTFLOW_DLQ_METRICS_PORT": "0",
        "SLOTFLOW_DLQ_MAX_POLL_RECORDS": "500",
        **extra,
    }
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "slotflow_dlq"], env=env, stdout=out, stderr=out)


async def committed_offsets(kafka: KafkaSettings) -> int:
    admin: Any = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(f"{kafka.topic_namespace}.slotflow.dlq.messages")
    finally:
        await admin.close()
    return sum(max(meta.offset, 0) for meta in offsets.values())


async def test_sigkill_mid_batch_parks_nothing_twice_and_loses_nothing(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, tmp_path: Path
) -> None:
    topic = kafka.topic(DLQ_MESSAGES)
    letters = []
    for n in range(ORIGINS):
        origin = Record(f"{kafka.topic_namespace}.origin", n % 3, n, b"k", b"{bad %d" % n, (), None)
        letters.append(
            (topic, dead_letter_envelope(origin, InvalidPayload("x"), source_service="chaos", occurred_at=AT))
        )
    letters += letters[:RESENT]
    async with Producer(kafka, client_id="chaos-feed") as feed:
        await feed.send_many(letters)
    total = len(letters)

    log = tmp_path / "dlq.log"
    # Each parked batch is held a moment before its offsets are committed: the kill lands there.
    first = start_service(kafka, pg_dsn, log, SLOTFLOW_DLQ_CRASH_WINDOW_SECONDS="1.0")

    async def handled() -> int:
        try:
            return int(
                await pg_pool.fetchval("SELECT count(*) FROM dlq.inbox WHERE event_id LIKE 'dlq-record:%'")
            )
        except asyncpg.UndefinedTableError:  # until the service has migrated
            return 0

    try:

        async def parked_not_committed() -> bool:
            # Two full batches committed, a third parked and waiting for its offset commit.
            return await handled() >= 1000 and await committed_offsets(kafka) < await handled()

        await assert_eventually(
            parked_not_committed, timeout=90, interval=0.02, message="a parked, uncommitted batch"
        )
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    at_kill = await handled()
    committed = await committed_offsets(kafka)
    assert at_kill < total, "killed too late to be mid-run"
    assert committed < at_kill, "letters parked whose offsets were never committed"

    second = start_service(kafka, pg_dsn, log)
    try:

        async def all_seen() -> bool:
            return await handled() == total

        await assert_eventually(all_seen, timeout=120, message="every letter handled after the restart")
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0, log.read_text()[-3000:]
    finally:
        if second.poll() is None:
            second.kill()

    rows = await pg_pool.fetch("SELECT id, count FROM dlq.dead_letters")
    assert len(rows) == ORIGINS  # nothing lost, nothing parked twice
    counts = {r["id"]: r["count"] for r in rows}
    resent = {envelope.id for _, envelope in letters[:RESENT]}
    assert {i: c for i, c in counts.items() if c != 1} == dict.fromkeys(resent, 2)
    # Every letter the restarted process re-read was recognised, and its status event staged once.
    assert await pg_pool.fetchval("SELECT count(*) FROM dlq.inbox") == total
    events = await pg_pool.fetchval(
        "SELECT count(DISTINCT event_id) FROM dlq.outbox WHERE event_id LIKE '%/parked'"
    )
    assert events == ORIGINS
    assert await committed_offsets(kafka) == total
