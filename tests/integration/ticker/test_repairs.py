"""An operator's repairs of a schedule's slots (RerunSlots, MarkSlots) on the real broker and
database, with a real ticker and claimer:

- a typo'd handler, fixed by `schedule update`: re-running the dead-lettered slot runs it with the
  fixed handler and it completes (before, only a redrive could, and as it ran it dead-lettered again);
- a forced re-run of a completed slot runs its effect a second time, as the run `{run id}#rerun-1`,
  while an unforced re-run of it changes nothing;
- a JobDue naming a re-run the ticker never issued (`#rerun-9`, or a re-run number on the slot's own
  run) is parked by the claimer and runs nothing;
- a mark records who marked which slot and why, and runs nothing; a slot that has not come is refused.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import TypeVar

import pytest

from slotflow.contracts import (
    REGISTRY,
    CommandRejected,
    CreateSchedule,
    DeadLettered,
    JobDue,
    MarkSlots,
    RerunSlots,
    ScheduleDefinition,
    SlotsMarked,
    SlotsRerun,
    UpdateSchedule,
)
from slotflow.contracts.envelope import Message, wrap
from slotflow.contracts.topics import DLQ_MESSAGES, JOBS_DUE, SCHEDULE_EVENTS
from slotflow.core.identity import job_due_event_id, rerun_run_id, run_id
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool, create_pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually
from slotflow.testing.topics import TopicTail
from slotflow_claimer.app import ClaimerService
from tests.integration.dlq.test_redrive_claimer import claimer_settings
from tests.integration.ticker.support import Replica, db_now, send, start_ticker, stop_ticker


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="test-repairs") as p:
        yield p


@pytest.fixture
async def pool(pg_dsn: str) -> AsyncIterator[Pool]:
    p = await create_pool(PostgresSettings(dsn=pg_dsn), min_size=1, max_size=4)
    yield p
    await p.close()


@pytest.fixture
async def ticker(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Replica]:
    replica = await start_ticker(kafka, pg_dsn)
    yield replica
    await stop_ticker(replica)


M = TypeVar("M", bound=Message)


async def messages_of(
    tail: TopicTail, kind: type[M], where: Callable[[M], bool] = lambda _: True, *, count: int = 1
) -> list[M]:
    """The messages of ``kind`` the tail has seen that ``where`` holds for, once there are ``count``."""

    def found() -> list[M]:
        parsed = (REGISTRY.parse(envelope) for envelope in tail.of_type(kind.message_type))
        return [m for m in parsed if isinstance(m, kind) and where(m)]

    await tail.wait_for(lambda _: len(found()) >= count, timeout=60, message=f"{count} {kind.__name__}")
    return found()


class Payouts:
    """A claimer whose handler records each run id it ran (the effect a re-run repeats or not)."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def pay(self, ctx: RunContext) -> str:
        self.ran.append(ctx.run_id)
        return "paid"


@pytest.fixture
async def payouts(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Payouts]:
    effects = Payouts()
    registry = HandlerRegistry()
    registry.register("payouts.pay", effects.pay)
    claimer = ClaimerService(claimer_settings(kafka, pg_dsn), registry=registry)
    await claimer.start()
    try:
        yield effects
    finally:
        await claimer.stop()


async def run_state(pool: Pool, run: str) -> str | None:
    state = await pool.fetchval("SELECT state FROM claimer.runs WHERE run_id = $1", run)
    return None if state is None else str(state)


async def once(
    pool: Pool, producer: Producer, kafka: KafkaSettings, schedule_id: str, handler: str
) -> datetime:
    """A one-shot schedule firing a second from now; returns its slot."""
    at = (await db_now(pool)) + timedelta(seconds=1)
    definition = ScheduleDefinition.model_validate(
        {"spec": {"kind": "once", "at": at.isoformat()}, "handler": handler}
    )
    await send(producer, kafka, CreateSchedule(schedule_id=schedule_id, definition=definition))
    return at


async def reach(pool: Pool, run: str, state: str, *, timeout: float = 60) -> None:
    async def there() -> bool:
        return await run_state(pool, run) == state

    await assert_eventually(there, timeout=timeout, message=f"run {run} {state}")


async def test_a_typod_handler_fixed_by_an_update_completes_when_its_slot_is_rerun(
    kafka: KafkaSettings, producer: Producer, pool: Pool, ticker: Replica, payouts: Payouts
) -> None:
    slot = await once(pool, producer, kafka, "payouts", "payouts.pya")
    run = run_id("payouts", slot)
    await reach(pool, run, "dead_lettered")

    fixed = await pool.fetchval("SELECT definition::text FROM ticker.schedules WHERE schedule_id = 'payouts'")
    definition = ScheduleDefinition.model_validate_json(fixed).model_copy(update={"handler": "payouts.pay"})
    await send(producer, kafka, UpdateSchedule(schedule_id="payouts", definition=definition))

    async def updated() -> bool:
        handler = await pool.fetchval(
            "SELECT definition->>'handler' FROM ticker.schedules WHERE schedule_id = 'payouts'"
        )
        return bool(handler == "payouts.pay")

    await assert_eventually(updated, timeout=30)

    async with TopicTail(kafka, (SCHEDULE_EVENTS,)) as events:
        await send(producer, kafka, RerunSlots(schedule_id="payouts", slots=(slot,), reason="handler fixed"))
        await reach(pool, run, "completed")
        assert payouts.ran == [run]
        row = await pool.fetchrow(
            "SELECT handler, rerun_count, fence_token FROM claimer.runs WHERE run_id = $1", run
        )
        assert row is not None
        assert (row["handler"], row["rerun_count"]) == ("payouts.pay", 1)
        assert row["fence_token"] == 2  # the re-run's claim is under a higher fence token
        [rerun] = await messages_of(events, SlotsRerun)
        assert rerun.reason == "handler fixed"
        assert [(r.run_id, r.number, r.forced) for r in rerun.reruns] == [(run, 1, False)]
        assert rerun.handler == "payouts.pay"

    # A second re-run of the completed slot (not forced) runs nothing: the claimer leaves it alone.
    await send(producer, kafka, RerunSlots(schedule_id="payouts", slots=(slot,), reason="again"))

    async def both_recorded() -> bool:
        return int(await pool.fetchval("SELECT count(*) FROM ticker.slot_reruns")) == 2

    await assert_eventually(both_recorded, timeout=30)
    await reach(pool, run, "completed")
    assert payouts.ran == [run]


async def test_a_forced_rerun_runs_a_completed_slot_again_as_a_run_of_its_own(
    kafka: KafkaSettings, producer: Producer, pool: Pool, ticker: Replica, payouts: Payouts
) -> None:
    slot = await once(pool, producer, kafka, "refund", "payouts.pay")
    run = run_id("refund", slot)
    await reach(pool, run, "completed")

    # Unforced: the slot's own run completed, so the claimer leaves it alone.
    await send(producer, kafka, RerunSlots(schedule_id="refund", slots=(slot,), reason="not forced"))

    async def recorded() -> bool:
        return int(await pool.fetchval("SELECT count(*) FROM ticker.slot_reruns")) == 1

    await assert_eventually(recorded, timeout=30)
    # Forced: a new run identity, `#rerun-2` (the slot's second re-run number), runs the effect again.
    await send(producer, kafka, RerunSlots(schedule_id="refund", forced=(slot,), reason="the bank lost it"))
    again = rerun_run_id("refund", slot, 2)
    await reach(pool, again, "completed")
    assert again == f"{run}#rerun-2"
    assert sorted(payouts.ran) == sorted([run, again])
    assert await run_state(pool, run) == "completed"


async def test_a_rerun_the_ticker_never_issued_is_parked_and_runs_nothing(
    kafka: KafkaSettings, producer: Producer, pool: Pool, ticker: Replica, payouts: Payouts
) -> None:
    slot = await once(pool, producer, kafka, "victim", "payouts.pay")
    run = run_id("victim", slot)
    await reach(pool, run, "completed")

    # Well-formed for every identity rule: only the ticker's record can tell them forged.
    forced = JobDue(
        run_id=rerun_run_id("victim", slot, 9),
        job_id="victim",
        slot=slot,
        kind="manual",
        handler="payouts.pay",
        payload={"to": "attacker"},
        rerun=9,
    )
    reopen = JobDue(run_id=run, job_id="victim", slot=slot, kind="manual", handler="payouts.pay", rerun=5)
    async with TopicTail(kafka, (DLQ_MESSAGES,)) as tail:
        for job in (forced, reopen):
            envelope = wrap(
                job,
                id=job_due_event_id(job.run_id, 1, 0, job.rerun),
                key="victim",
                source="attacker",
                occurred_at=slot,
            )
            await producer.send(kafka.topic(JOBS_DUE), envelope)

        letters = await messages_of(tail, DeadLettered, lambda m: "forged re-run" in m.error, count=2)
        assert {letter.reason for letter in letters} == {"invalid_payload"}
        assert any("forced re-run 9" in letter.error for letter in letters)
    assert await run_state(pool, forced.run_id) is None
    assert await run_state(pool, run) == "completed"
    assert payouts.ran == [run]


async def test_a_mark_records_who_and_why_and_a_slot_not_yet_come_is_refused(
    kafka: KafkaSettings, producer: Producer, pool: Pool, ticker: Replica
) -> None:
    slot = await once(pool, producer, kafka, "ledger", "payouts.pay")
    later = slot + timedelta(days=1)
    async with TopicTail(kafka, (SCHEDULE_EVENTS,)) as events:
        await assert_eventually(
            lambda: _passed(pool, slot), timeout=30, message="the slot has come by the database clock"
        )
        await send(
            producer, kafka, MarkSlots(schedule_id="ledger", slots=(slot,), mark="done", reason="by hand")
        )
        refused = await send(
            producer,
            kafka,
            MarkSlots(schedule_id="ledger", slots=(later,), mark="skipped", reason="too soon"),
        )
        [marked] = await messages_of(events, SlotsMarked)
        assert (marked.slots, marked.mark, marked.reason) == ((slot,), "done", "by hand")
        [rejection] = await messages_of(events, CommandRejected, lambda m: m.command_id == refused)
        assert "has not come yet" in rejection.reason


async def _passed(pool: Pool, slot: datetime) -> bool:
    return await db_now(pool) > slot


async def test_a_rerun_of_a_running_slot_runs_nothing_alongside_it(
    kafka: KafkaSettings, producer: Producer, pool: Pool, ticker: Replica, pg_dsn: str
) -> None:
    # The api leaves a running slot out; a RerunSlots sent past it (any operator's client) still
    # runs nothing beside the live claim: the claimer never reopens a running run.
    started, release = asyncio.Event(), asyncio.Event()
    ran: list[tuple[str, int]] = []

    async def slow(ctx: RunContext) -> str:
        ran.append((ctx.run_id, ctx.fence_token))
        started.set()
        await release.wait()
        return "paid"

    registry = HandlerRegistry()
    registry.register("payouts.slow", slow)
    claimer = ClaimerService(claimer_settings(kafka, pg_dsn), registry=registry)
    await claimer.start()
    try:
        slot = await once(pool, producer, kafka, "slow", "payouts.slow")
        run = run_id("slow", slot)
        await asyncio.wait_for(started.wait(), timeout=60)
        await send(producer, kafka, RerunSlots(schedule_id="slow", slots=(slot,), reason="while it runs"))

        async def recorded() -> bool:
            return int(await pool.fetchval("SELECT count(*) FROM ticker.slot_reruns")) == 1

        await assert_eventually(recorded, timeout=30)
        await asyncio.sleep(2)  # the re-run's JobDue reaches the claimer meanwhile
        assert await pool.fetchval("SELECT fence_token FROM claimer.runs WHERE run_id = $1", run) == 1
        release.set()
        await reach(pool, run, "completed")
        assert ran == [(run, 1)]
    finally:
        release.set()
        await claimer.stop()
