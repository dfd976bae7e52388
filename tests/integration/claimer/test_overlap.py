"""Overlap policies when a run of the same job is still running: allow, skip, buffer_one,
cancel_previous."""

import asyncio
from collections import defaultdict
from datetime import timedelta
from typing import Any

from slotflow.contracts.topics import RUN_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import SLOT, TopicReader, job_due, publish, wait_state


class Gate:
    """A handler that runs until the test opens its run's gate, recording what ran and when."""

    def __init__(self) -> None:
        self.gates: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.live: set[str] = set()
        self.max_live = 0

    async def __call__(self, ctx: RunContext) -> str:
        self.started.append(ctx.run_id)
        self.live.add(ctx.run_id)
        self.max_live = max(self.max_live, len(self.live))
        try:
            await self.gates[ctx.run_id].wait()
        except asyncio.CancelledError:
            self.cancelled.append(ctx.run_id)
            raise
        finally:
            self.live.discard(ctx.run_id)
        return "done"


def slots(job: str, overlap: str, n: int) -> list[Any]:
    return [
        job_due(job, handler="test.gate", overlap=overlap, slot=SLOT + timedelta(minutes=i)) for i in range(n)
    ]


async def start_gate(registry: HandlerRegistry, start_claimer: StartClaimer) -> Gate:
    gate = Gate()
    registry.register("test.gate", gate)
    await start_claimer(lease_ttl_seconds=1.5)
    return gate


async def test_allow_runs_overlapping_runs_side_by_side(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    gate = await start_gate(registry, start_claimer)
    first, second = slots("allow-job", "allow", 2)
    await publish(producer, kafka, [first])
    await wait_state(db, first.run_id, "running")
    await publish(producer, kafka, [second])
    await assert_eventually(lambda: gate.max_live == 2)
    for job in (first, second):
        gate.gates[job.run_id].set()
        await wait_state(db, job.run_id, "completed")


async def test_skip_records_the_overlapping_run_as_skipped(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    gate = await start_gate(registry, start_claimer)
    first, second = slots("skip-job", "skip", 2)
    await publish(producer, kafka, [first])
    await wait_state(db, first.run_id, "running")
    await publish(producer, kafka, [second])
    skipped = await wait_state(db, second.run_id, "skipped")
    assert skipped["fence_token"] == 1
    gate.gates[first.run_id].set()
    await wait_state(db, first.run_id, "completed")
    assert gate.started == [first.run_id]
    async with TopicReader(kafka, RUN_EVENTS) as events:
        found = await events.wait_for("run.skipped", run_id=second.run_id)
    assert first.run_id in found[0].data["reason"]


async def test_buffer_one_keeps_one_run_waiting_and_skips_the_rest(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    gate = await start_gate(registry, start_claimer)
    first, second, third = slots("buffer-job", "buffer_one", 3)
    await publish(producer, kafka, [first])
    await wait_state(db, first.run_id, "running")
    await publish(producer, kafka, [second, third])
    await wait_state(db, second.run_id, "pending")
    await wait_state(db, third.run_id, "skipped")
    gate.gates[first.run_id].set()
    await wait_state(db, first.run_id, "completed")
    # The buffered run starts when the live one finishes, and only then.
    await wait_state(db, second.run_id, "running")
    assert gate.max_live == 1
    gate.gates[second.run_id].set()
    await wait_state(db, second.run_id, "completed")
    assert gate.started == [first.run_id, second.run_id]


async def test_cancel_previous_cancels_the_live_run_then_starts_the_new_one(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    gate = await start_gate(registry, start_claimer)
    first, second = slots("cancel-job", "cancel_previous", 2)
    await publish(producer, kafka, [first])
    await wait_state(db, first.run_id, "running")
    await publish(producer, kafka, [second])
    cancelled = await wait_state(db, first.run_id, "cancelled")
    assert cancelled["history"] is not None
    await wait_state(db, second.run_id, "running")
    assert gate.cancelled == [first.run_id]
    assert gate.max_live == 1
    gate.gates[second.run_id].set()
    await wait_state(db, second.run_id, "completed")
    async with TopicReader(kafka, RUN_EVENTS) as events:
        failed = await events.wait_for("run.failed", run_id=first.run_id)
    assert failed[0].data["error_type"] == "RunCancelled"
    assert failed[0].data["retryable"] is False
