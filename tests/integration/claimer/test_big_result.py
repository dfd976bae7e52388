"""A handler's 2 MB result must not stall the claimer's outbox (issue 23), on the real stack.

The 2,000,484-byte RunCompleted it made was larger than its topic takes: the relay paused every
second retrying it, and no other run's events left until the row was edited by hand. The result
is now capped before it is staged (a truncation marker in its place), and other runs' events keep
flowing.
"""

from collections.abc import AsyncIterator

import pytest

from slotflow.contracts.codec import decode
from slotflow.contracts.topics import RUN_EVENTS
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow_claimer.outcomes import RESULT_MAX_BYTES
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import SLOT, job_due, publish, wait_state


@pytest.fixture
async def run_events(kafka: KafkaSettings) -> AsyncIterator[Consumer]:
    async with Consumer(kafka, kafka.topic(RUN_EVENTS), group_id=unique_name("ev"), client_id="ev") as c:
        yield c


async def test_a_2mb_result_is_capped_and_other_runs_events_keep_flowing(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    run_events: Consumer,
) -> None:
    async def huge(ctx: RunContext) -> str:
        return "x" * 2_000_000

    async def small(ctx: RunContext) -> str:
        return "ok"

    registry.register("test.huge", huge)
    registry.register("test.small", small)
    await start_claimer()
    big = job_due("big", handler="test.huge", slot=SLOT)
    await publish(producer, kafka, [big])
    row = await wait_state(db, big.run_id, "completed", timeout=30)
    # Then other runs: on the same claimer and outbox, their events must still leave.
    others = [job_due(f"small-{n}", handler="test.small", slot=SLOT) for n in range(5)]
    await publish(producer, kafka, others)

    completed: dict[str, dict[str, object]] = {}

    async def seen() -> bool:
        for record in await run_events.poll(timeout_ms=200):
            envelope = decode(record.value)
            if envelope.type == "run.completed":
                completed[envelope.data["run_id"]] = envelope.data
        return {j.run_id for j in others} <= completed.keys() and big.run_id in completed

    await assert_eventually(seen, timeout=30, message="every RunCompleted published")
    for job in others:
        finished = await db.fetchval("SELECT finished_at FROM claimer.runs WHERE run_id = $1", job.run_id)
        published = await db.fetchval(
            "SELECT published_at FROM claimer.outbox WHERE event_id = $1", f"{job.run_id}/1/completed"
        )
        assert published is not None
        assert (published - finished).total_seconds() < 1.0, "an event waited behind the big result"
    marker = completed[big.run_id]["result"]
    assert isinstance(marker, dict)
    assert marker["slotflow_result_truncated"] is True
    assert marker["limit_bytes"] == RESULT_MAX_BYTES
    assert int(marker["size_bytes"]) > 2_000_000
    assert row["result"] is not None
    assert await db.fetchval("SELECT count(*) FROM claimer.outbox WHERE published_at IS NULL") == 0
