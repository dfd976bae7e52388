"""A claimer waiting in a long rebalance joins the group once and claims again (reliability bug 3).

The claimer commits durable offsets every 0.2 s from its own loop. A commit sent while the member
waits in JoinGroup (another member is slow to hand its partitions back) queues behind the join on
the coordinator connection, reaches the broker under the old generation and is refused
(IllegalGeneration); aiokafka answers that by joining again, which starts the next rebalance, in
which the commit loop, its offsets still uncommitted, did the same. In the system suite the group
rebalanced every three seconds for minutes and the retries of runs that had failed in a PostgreSQL
restart, all on that claimer's partition, were never read.
"""

import asyncio
import contextlib
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

from slotflow.contracts.topics import JOBS_DUE
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import job_due, publish

#: How long the slow member takes to hand its partitions back; the others wait in JoinGroup.
SLOW_REVOKE_S = 5.0


class SlowToRejoin(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    """A member that takes its time handing its partitions back (a long flush, a loaded host)."""

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if revoked:
            await asyncio.sleep(SLOW_REVOKE_S)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        return None


def member(kafka: KafkaSettings, group_id: str, listener: ConsumerRebalanceListener | None = None) -> Any:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        session_timeout_ms=30_000,
        rebalance_timeout_ms=30_000,
    )
    consumer.subscribe([kafka.topic(JOBS_DUE)], listener=listener)
    return consumer


async def test_a_claimer_waiting_in_a_long_rebalance_joins_once_and_claims_again(
    kafka: KafkaSettings, producer: Producer, db: Pool, start_claimer: StartClaimer
) -> None:
    claimer = await start_claimer()
    group = claimer.settings.group_id()
    slow = member(kafka, group, SlowToRejoin())
    third = member(kafka, group)
    stop = asyncio.Event()
    published: list[str] = []
    base = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)

    async def feed() -> None:
        # A steady stream: whenever the group rebalances, the claimer has offsets to commit.
        for n in itertools.count():
            if stop.is_set():
                return
            job = job_due(f"rebalance-{n % 11}", slot=base + timedelta(seconds=n))
            await publish(producer, kafka, [job])
            published.append(job.run_id)
            await asyncio.sleep(0.02)

    async def keep_polling(consumer: Any) -> None:
        while not stop.is_set():
            await consumer.getmany(timeout_ms=100)

    await slow.start()
    tasks = [asyncio.create_task(feed()), asyncio.create_task(keep_polling(slow))]
    try:
        await assert_eventually(
            lambda: bool(claimer.consumer.assignment() and slow.assignment()),
            timeout=60,
            message="the claimer and the slow member share the partitions",
        )
        await asyncio.sleep(2.0)
        before = claimer.consumer.assignments
        await third.start()  # one rebalance, in which the claimer waits for the slow member
        tasks.append(asyncio.create_task(keep_polling(third)))

        async def settled() -> bool:
            # Past the slow member's revocation and a few heartbeats: no further rebalance.
            await asyncio.sleep(SLOW_REVOKE_S + 8.0)
            return bool(claimer.consumer.assignment()) and not claimer.consumer.rebalancing

        await assert_eventually(settled, timeout=60, interval=0.1, message="the group settles")
        assert claimer.consumer.assignments - before == 1, "the claimer rebalanced again by its own commit"
        mine = {partition for _, partition in claimer.consumer.assignment()}
        rows = await db.fetch(
            "SELECT max(due_offset) AS last FROM claimer.runs WHERE due_partition = ANY($1::int[])",
            list(mine),
        )
        claimed_before = rows[0]["last"] or -1

        async def claiming_again() -> bool:
            last = await db.fetchval(
                "SELECT max(due_offset) FROM claimer.runs WHERE due_partition = ANY($1::int[])", list(mine)
            )
            return bool(last is not None and last > claimed_before)

        await assert_eventually(claiming_again, timeout=30, message="the claimer claims from its partitions")
    finally:
        stop.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await task
        await slow.stop()
        await third.stop()
