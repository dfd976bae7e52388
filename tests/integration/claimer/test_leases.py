"""Leases judged by the database clock: heartbeats keep them, losing one cancels the handler, a
live one held by another claimer means skip, an expired one is taken over with the next token."""

import asyncio
import json
import time

from slotflow.contracts.topics import RUN_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import TopicReader, job_due, ledger, publish, wait_state


class Hold:
    """A handler that records each invocation and waits until released (or cancelled)."""

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = seconds
        self.release = asyncio.Event()
        self.calls: list[tuple[str, int]] = []
        self.cancelled: list[int] = []

    async def __call__(self, ctx: RunContext) -> str:
        self.calls.append((ctx.owner, ctx.fence_token))
        try:
            if self.seconds is not None:
                await asyncio.sleep(self.seconds)
            else:
                await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(ctx.fence_token)
            raise
        return ctx.owner


async def test_heartbeats_keep_a_run_past_its_lease_ttl(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    hold = Hold(seconds=4.0)
    registry.register("test.hold", hold)
    await start_claimer(lease_ttl_seconds=1.2)
    await start_claimer(lease_ttl_seconds=1.2)  # a second claimer whose reaper would steal a lapsed lease
    job = job_due("long", handler="test.hold")
    await publish(producer, kafka, [job])
    row = await wait_state(db, job.run_id, "completed", timeout=30)
    assert row["fence_token"] == 1
    assert row["takeovers"] == 0
    assert len(hold.calls) == 1


async def test_losing_the_lease_cancels_the_handler_and_records_nothing(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    hold = Hold()
    registry.register("test.hold", hold)
    claimer = await start_claimer(lease_ttl_seconds=1.5)
    job = job_due("stolen", handler="test.hold")
    await publish(producer, kafka, [job])
    await wait_state(db, job.run_id, "running")
    await assert_eventually(lambda: hold.calls)
    # Another claimer takes the run over (what a reaper does after this one paused past its lease).
    await db.execute(
        "UPDATE claimer.runs SET fence_token = fence_token + 1, owner = 'intruder', "
        "lease_expires_at = now() + interval '1 minute' WHERE run_id = $1",
        job.run_id,
    )
    await assert_eventually(lambda: hold.cancelled == [1])
    await assert_eventually(lambda: claimer.metrics.value("slotflow_claimer_leases_lost_total") == 1)
    await assert_eventually(lambda: claimer.executor.in_flight == 0)
    row = await wait_state(db, job.run_id, "running")
    assert row["owner"] == "intruder"
    assert row["fence_token"] == 2


async def test_a_live_lease_of_another_claimer_means_skip(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    hold = Hold()
    registry.register("test.hold", hold)
    await start_claimer()
    job = job_due("held", handler="test.hold")
    await publish(producer, kafka, [job])
    await wait_state(db, job.run_id, "running")
    # A claimer in another group sees the same JobDue while the first holds a live lease.
    other = await start_claimer(group_id=unique_name("other-group"))
    await assert_eventually(lambda: other.metrics.value("slotflow_claimer_jobdue_duplicates_total") == 1)
    assert len(hold.calls) == 1
    hold.release.set()
    row = await wait_state(db, job.run_id, "completed")
    assert row["fence_token"] == 1


async def test_a_redelivered_job_due_takes_over_an_expired_lease_with_the_next_token(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    async def pay_slowly(ctx: RunContext) -> object:
        if ctx.fence_token == 1:
            await asyncio.Event().wait()  # the first claimer dies in here
        return await registry.get("payouts.pay_merchants")(ctx)

    registry.register("test.pay_slowly", pay_slowly)
    first = await start_claimer(lease_ttl_seconds=1.0, commit_interval_seconds=60)
    job = job_due("crashy", handler="test.pay_slowly")
    await publish(producer, kafka, [job])
    await wait_state(db, job.run_id, "running")
    await first.kill()  # no release, no commit: the lease must expire on its own
    await assert_eventually(
        lambda: db.fetchval(
            "SELECT lease_expires_at < now() FROM claimer.runs WHERE run_id = $1", job.run_id
        ),
        timeout=10,
    )
    # Reaper effectively off, so the redelivery is what takes the run over.
    second = await start_claimer(lease_ttl_seconds=1.0, reaper_interval_seconds=3600)
    row = await wait_state(db, job.run_id, "completed", timeout=30)
    assert row["fence_token"] == 2
    assert row["owner"] == second.owner
    assert row["takeovers"] == 1
    assert [h["error_type"] for h in row_history(row)] == ["LeaseExpired"]
    paid = await ledger(db, job.run_id)
    assert len(paid) == 1
    assert paid[0]["fence_token"] == 2


def row_history(row: dict[str, object]) -> list[dict[str, object]]:
    raw = row["history"]
    return json.loads(raw) if isinstance(raw, str) else []


async def test_graceful_stop_releases_leases_for_another_claimer_at_once(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    hold = Hold()
    registry.register("test.hold", hold)
    first = await start_claimer(lease_ttl_seconds=20.0)
    job = job_due("released", handler="test.hold")
    await publish(producer, kafka, [job])
    await wait_state(db, job.run_id, "running")
    await start_claimer(lease_ttl_seconds=20.0, reaper_interval_seconds=0.2)
    stopped_at = time.monotonic()
    await first.stop(grace=0.2)
    assert hold.cancelled == [1]
    await assert_eventually(lambda: len(hold.calls) == 2, timeout=10)
    # Taken over long before the 20 s lease would have expired on its own.
    assert time.monotonic() - stopped_at < 10
    hold.release.set()
    row = await wait_state(db, job.run_id, "completed")
    assert row["fence_token"] == 2


async def test_graceful_stop_lets_running_handlers_finish_within_the_grace(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    hold = Hold(seconds=1.0)
    registry.register("test.hold", hold)
    claimer = await start_claimer()
    job = job_due("finish", handler="test.hold")
    await publish(producer, kafka, [job])
    await wait_state(db, job.run_id, "running")
    await claimer.stop(grace=10.0)
    row = await wait_state(db, job.run_id, "completed", timeout=1)
    assert row["fence_token"] == 1
    assert hold.cancelled == []


async def test_workflow_activities_take_the_same_path_and_their_events_say_where_they_belong(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    async def charge(ctx: RunContext) -> dict[str, object]:
        return {"workflow": ctx.workflow_id, "sequence": ctx.sequence, "kind": ctx.kind}

    registry.register("orders.charge", charge)
    await start_claimer()
    job = job_due("order-7", handler="orders.charge", kind="activity", workflow_id="order-7", sequence=3)
    await publish(producer, kafka, [job])
    await wait_state(db, "order-7/3", "completed")
    async with TopicReader(kafka, RUN_EVENTS) as events:
        started = await events.wait_for("run.started", run_id="order-7/3")
        completed = await events.wait_for("run.completed", run_id="order-7/3")
    for event in (started[0], completed[0]):
        assert event.data["workflow_id"] == "order-7"
        assert event.data["sequence"] == 3
    assert completed[0].data["result"] == {"workflow": "order-7", "sequence": 3, "kind": "activity"}
