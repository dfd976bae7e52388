"""A handler's 2 MB result must not stall the claimer's outbox (issue 23), on the real stack.

The 2,000,484-byte RunCompleted it made was larger than its topic takes: the relay paused every
second retrying it, and no other run's events left until the row was edited by hand. The result
is now capped before it is staged (a truncation marker in its place), and other runs' events keep
flowing.
"""

from collections.abc import AsyncIterator

import pytest

from slotflow.contracts.codec import FIELD_MAX_DEPTH, decode
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
            "SELECT published_at FROM claimer.outbox_events WHERE event_id = $1", f"{job.run_id}/1/completed"
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


def nested(depth: int) -> dict[str, object]:
    value: dict[str, object] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


async def test_a_result_nested_deeper_than_its_consumers_decode_is_recorded_as_a_marker(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    registry: HandlerRegistry,
    start_claimer: StartClaimer,
    run_events: Consumer,
) -> None:
    # Issue 20, one depth limit for every service: a result nested 200 deep was published in a
    # RunCompleted no consumer could decode (the api parked it, a workflow never saw its activity
    # finish); one nested 5,000 deep could not be recorded at all, so the run was taken over and
    # run again until quarantined.
    depths = {"fits": FIELD_MAX_DEPTH, "deep": 200, "deeper": 5000}
    for name, depth in depths.items():

        async def returns(ctx: RunContext, depth: int = depth) -> object:
            return nested(depth)

        registry.register(f"test.{name}", returns)
    await start_claimer()
    jobs = {name: job_due(f"nested-{name}", handler=f"test.{name}", slot=SLOT) for name in depths}
    await publish(producer, kafka, list(jobs.values()))
    for job in jobs.values():
        row = await wait_state(db, job.run_id, "completed", timeout=30)
        assert (row["fence_token"], row["takeovers"]) == (1, 0)

    completed: dict[str, dict[str, object]] = {}

    async def seen() -> bool:
        for record in await run_events.poll(timeout_ms=200):
            envelope = decode(record.value)  # every one decodes: none is parked
            if envelope.type == "run.completed":
                completed[envelope.data["run_id"]] = envelope.data
        return {j.run_id for j in jobs.values()} <= completed.keys()

    await assert_eventually(seen, timeout=30, message="every RunCompleted published")
    assert completed[jobs["fits"].run_id]["result"] == nested(FIELD_MAX_DEPTH)
    for name in ("deep", "deeper"):
        marker = completed[jobs[name].run_id]["result"]
        assert isinstance(marker, dict)
        assert marker["slotflow_result_truncated"] is True
        assert marker["limit_depth"] == FIELD_MAX_DEPTH
        assert "levels deep" in str(marker["reason"])
