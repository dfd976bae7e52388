"""A relay stopped while it holds the outbox's shards loses them to the others (reliability bug 4).

The system suite SIGSTOPped a claimer and every claimer's outbox stopped being relayed: a relay
holds its shards' advisory locks for the whole pass, broker acknowledgement included, and a
process stopped inside a pass kept them (and its idle-in-transaction session) for as long as it
lived. Here a real relay runs in a child process over a backlog; it is SIGSTOPped while PostgreSQL
shows it holding the locks, and a second relay must still drain the outbox.

The rows are large (2 kB each, 4,000 a pass): a pass's rows are more than the loopback socket
buffers hold, so the child is usually stopped while its backend is still sending them. That backend
is not idle in its transaction, so `idle_in_transaction_session_timeout` never ends it; the second
relay must end it (`RECLAIM_SHARDS`). A CI run met exactly that.
"""

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from slotflow.contracts import CommandRejected, wrap
from slotflow.contracts.topics import SCHEDULE_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.pg.migrations import OUTBOX, apply_migrations
from slotflow.pg.outbox import Staged, append_many
from slotflow.pg.pool import Pool
from slotflow.relay import OutboxRelay
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually

SCHEMA = "relay_takeover"
APP = "stalled-relay"
HOLD_TIMEOUT = 3.0

CHILD = f"""
import asyncio, sys
from slotflow.kafka.producer import Producer
from slotflow.relay import OutboxRelay
from slotflow.pg.pool import create_pool
from slotflow.settings import KafkaSettings, PostgresSettings

async def main() -> None:
    pool = await create_pool(PostgresSettings(dsn=sys.argv[1]), min_size=1, max_size=2,
                             server_settings={{"application_name": "{APP}"}})
    async with Producer(KafkaSettings(bootstrap=sys.argv[2]), client_id="{APP}") as producer:
        relay = OutboxRelay(pool, producer, schema="{SCHEMA}", one_transaction=True, batch_size=500,
                            hold_timeout_seconds={HOLD_TIMEOUT})
        await relay.run(asyncio.Event())

asyncio.run(main())
"""

HELD = """
SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
 WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1
"""


def large(topic: str, event_id: str, key: str) -> Staged:
    message = CommandRejected(command_id=event_id, command_type="test", subject=key, reason="x" * 2000)
    return Staged(topic, wrap(message, id=event_id, key=key, source="test", occurred_at=datetime.now(UTC)))


@pytest.fixture
def child() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=10)


async def test_a_relay_stopped_holding_its_shards_does_not_stop_the_outbox(
    pg_pool: Pool, pg_dsn: str, kafka: KafkaSettings, child: list[subprocess.Popen[bytes]]
) -> None:
    await apply_migrations(pg_pool, schema=SCHEMA, sources=[OUTBOX])
    topic = kafka.topic(SCHEDULE_EVENTS)
    async with pg_pool.acquire() as conn:
        for start in range(0, 8000, 1000):
            items = [large(topic, f"e{i}", f"k{i % 97}") for i in range(start, start + 1000)]
            await append_many(conn, schema=SCHEMA, items=items)

    proc = subprocess.Popen([sys.executable, "-c", CHILD, pg_dsn, kafka.bootstrap], env=dict(os.environ))
    child.append(proc)

    # Stop it inside a pass: SIGSTOP when PostgreSQL shows it holding shard locks, and keep it
    # stopped only if it still holds them (it may have committed in between).
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        assert loop.time() < deadline, "the child relay was never caught holding its shards"
        assert proc.poll() is None, "the child relay exited"
        if await pg_pool.fetchval(HELD, APP):
            proc.send_signal(signal.SIGSTOP)
            await asyncio.sleep(0.2)
            if await pg_pool.fetchval(HELD, APP):
                break
            proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(0.005)
    left = await pg_pool.fetchval("SELECT count(*) FROM relay_takeover.outbox WHERE published_at IS NULL")
    assert left > 0

    async with Producer(kafka, client_id="relay-takeover") as producer:
        # Every relay of a deployment runs with the same hold timeout.
        relay = OutboxRelay(
            pg_pool, producer, schema=SCHEMA, one_transaction=True, hold_timeout_seconds=HOLD_TIMEOUT
        )
        stop = asyncio.Event()
        running = asyncio.create_task(relay.run(stop))
        try:
            await assert_eventually(
                lambda: _drained(relay),
                timeout=HOLD_TIMEOUT + 30,
                message="the outbox drained while the stopped relay held its shards",
            )
        finally:
            stop.set()
            await running
    # The stopped relay's session was ended by PostgreSQL or by the second relay, not by the test.
    assert await pg_pool.fetchval(HELD, APP) == 0


async def _drained(relay: OutboxRelay) -> bool:
    return await relay.pending() == 0
