"""Commands round trip through a real ticker: Kafka command topic → ticker schema → events on Kafka."""

import base64
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slotflow.contracts import (
    Backfill,
    CancelTimer,
    CreateSchedule,
    CronSpec,
    DeleteSchedule,
    DstPolicy,
    FireJobDue,
    FireTimerFired,
    JobDue,
    MisfirePolicy,
    PauseSchedule,
    ResumeSchedule,
    ScheduleDefinition,
    StartTimer,
    TriggerNow,
    UpdateSchedule,
    wrap,
)
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import envelope_headers
from slotflow.contracts.timers import sleep_timer_id
from slotflow.contracts.topics import DLQ_MESSAGES, JOBS_DUE, SCHEDULE_COMMANDS, SCHEDULE_EVENTS, TIMER_EVENTS
from slotflow.core.identity import run_id
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from tests.integration.ticker.support import Replica, TopicTail, db_now, job, send, tickers, wait_db_time

EVERY_SECOND = CronSpec(expression="* * * * * *")
TOPICS = (JOBS_DUE, SCHEDULE_EVENTS, TIMER_EVENTS, DLQ_MESSAGES)


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="test-commands") as p:
        yield p


@pytest.fixture
async def ticker(kafka: KafkaSettings, pg_dsn: str) -> AsyncIterator[Replica]:
    async with tickers(kafka, pg_dsn) as (replica,):
        yield replica


@pytest.fixture
async def tail(kafka: KafkaSettings) -> AsyncIterator[TopicTail]:
    async with TopicTail(kafka, TOPICS) as t:
        yield t


def accepted(tail: TopicTail, command_id: str) -> bool:
    return bool(tail.by_id(f"{command_id}/accepted"))


def rejected_reason(tail: TopicTail, command_id: str) -> str | None:
    found = tail.by_id(f"{command_id}/rejected")
    return str(found[0].data["reason"]) if found else None


async def test_create_emits_one_jobdue_per_slot_labelled_by_its_slot(
    ticker: Replica, tail: TopicTail, producer: Producer, kafka: KafkaSettings
) -> None:
    definition = ScheduleDefinition(
        spec=EVERY_SECOND, handler="payouts.pay", payload={"merchant": 7}, tags=("money",)
    )
    cid = await send(producer, kafka, CreateSchedule(schedule_id="pay-7", definition=definition))
    await tail.wait_for(lambda t: len(t.of_type("job.due")) >= 3, message="three JobDue")
    assert accepted(tail, cid)
    created = tail.by_id(f"{cid}/created")
    assert created[0].type == "schedule.created"
    assert created[0].key == "pay-7"
    for envelope in tail.of_type("job.due")[:3]:
        due = job(envelope)
        assert due.slot.microsecond == 0
        assert due.slot.tzinfo is not None
        assert due.run_id == run_id("pay-7", due.slot) == envelope.id
        assert envelope.key == due.job_id == "pay-7"
        assert (due.handler, due.payload, due.tags, due.kind, due.attempt) == (
            "payouts.pay",
            {"merchant": 7},
            ("money",),
            "scheduled",
            1,
        )
        assert due.fire_at == due.slot
        assert envelope.occurred_at >= due.slot  # staged by the database clock, never before the slot
    slots = [job(e).slot for e in tail.of_type("job.due")]
    assert slots == sorted(slots)
    assert len(set(slots)) == len(slots)


async def test_a_redelivered_command_applies_once(
    ticker: Replica, tail: TopicTail, producer: Producer, kafka: KafkaSettings
) -> None:
    definition = ScheduleDefinition(spec=CronSpec(expression="0 0 * * *"), handler="h")
    create = CreateSchedule(schedule_id="once", definition=definition)
    cid = await send(producer, kafka, create, command_id="cmd-fixed-1")
    await send(producer, kafka, create, command_id="cmd-fixed-1")
    # Same key, same partition, in order: once this later command is accepted, both copies were seen.
    later = await send(producer, kafka, PauseSchedule(schedule_id="once", reason="x"))
    await tail.wait_for(lambda t: accepted(t, later))
    assert len(tail.by_id(f"{cid}/accepted")) == 1
    assert len(tail.by_id(f"{cid}/created")) == 1
    assert rejected_reason(tail, cid) is None


async def test_pause_stops_firing_and_resume_applies_the_misfire_policy(
    ticker: Replica, tail: TopicTail, producer: Producer, kafka: KafkaSettings, pg_pool: Pool
) -> None:
    definition = ScheduleDefinition(
        spec=EVERY_SECOND,
        handler="h",
        misfire=MisfirePolicy(policy="skip", grace=timedelta(milliseconds=500)),
    )
    await send(producer, kafka, CreateSchedule(schedule_id="p", definition=definition))
    await tail.wait_for(lambda t: len(t.of_type("job.due")) >= 1)
    pause = await send(producer, kafka, PauseSchedule(schedule_id="p", reason="quarter close"))
    await tail.wait_for(lambda t: accepted(t, pause))
    paused_at: datetime = await pg_pool.fetchval(
        "SELECT paused_at FROM ticker.schedules WHERE schedule_id = 'p'"
    )
    await wait_db_time(pg_pool, await db_now(pg_pool) + timedelta(seconds=3))
    resume = await send(producer, kafka, ResumeSchedule(schedule_id="p"))
    await tail.wait_for(lambda t: accepted(t, resume))
    resumed_at: datetime = await pg_pool.fetchval(
        "SELECT resumed_at FROM ticker.schedules WHERE schedule_id = 'p'"
    )
    await tail.wait_for(
        lambda t: any(job(e).slot > resumed_at for e in t.of_type("job.due")), message="firing again"
    )

    fired = [job(e).slot for e in tail.of_type("job.due")]
    every_skip = {
        datetime.fromisoformat(e.data["slot"]): e.data["reason"] for e in tail.of_type("slot.skipped")
    }
    # A slot due a moment before the pause command and not yet claimed is an ordinary misfire.
    assert {r for s, r in every_skip.items() if s < paused_at} <= {"misfire"}
    skipped = {s: r for s, r in every_skip.items() if s >= paused_at}
    skipped_at = set(skipped)
    # Nothing fired while paused (beyond the grace the policy allows for a late slot).
    assert not [
        s
        for s in fired
        if paused_at + timedelta(milliseconds=500) < s < resumed_at - timedelta(milliseconds=500)
    ]
    # Every slot that passed while paused was recorded, as "paused"; none silently dropped.
    assert len(skipped_at) >= 2
    assert set(skipped.values()) == {"paused"}
    assert all(paused_at <= s < resumed_at for s in skipped_at)
    assert skipped_at.isdisjoint(fired)
    assert tail.of_type("schedule.paused")[0].data["reason"] == "quarter close"


async def test_trigger_backfill_update_and_delete(
    ticker: Replica, tail: TopicTail, producer: Producer, kafka: KafkaSettings, pg_pool: Pool
) -> None:
    hourly = ScheduleDefinition(spec=CronSpec(expression="0 * * * *"), handler="reports.hourly")
    await send(producer, kafka, CreateSchedule(schedule_id="r", definition=hourly))
    trigger = await send(producer, kafka, TriggerNow(schedule_id="r"))
    now = await db_now(pg_pool)
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    backfill = await send(
        producer, kafka, Backfill(schedule_id="r", start=start, end=start + timedelta(hours=3))
    )
    # Acceptances and JobDue travel on different topics, so neither implies the other was read:
    # wait for both (one manual run plus three backfilled slots).
    await tail.wait_for(lambda t: accepted(t, backfill) and len(t.of_type("job.due")) >= 4)
    jobs = [job(e) for e in tail.of_type("job.due")]
    manual = [j for j in jobs if j.kind == "manual"]
    assert len(manual) == 1
    assert accepted(tail, trigger)
    assert manual[0].run_id == run_id("r", manual[0].slot)
    # Labelled to the second (no microseconds in its run id), unless that second is the hourly
    # grid's own slot: then the fraction keeps it apart from the scheduled run.
    whole = manual[0].slot.replace(microsecond=0)
    assert manual[0].slot == whole or (whole.minute, whole.second) == (0, 0), manual[0].run_id
    assert sorted(j.slot for j in jobs if j.kind == "backfill") == [
        start + timedelta(hours=h) for h in range(3)
    ]

    too_many = await send(
        producer, kafka, Backfill(schedule_id="r", start=start - timedelta(days=30), end=start, max_slots=10)
    )
    future = await send(producer, kafka, Backfill(schedule_id="r", start=start, end=now + timedelta(hours=2)))
    every_second = ScheduleDefinition(spec=EVERY_SECOND, handler="reports.fast")
    update = await send(producer, kafka, UpdateSchedule(schedule_id="r", definition=every_second))
    await tail.wait_for(lambda t: any(job(e).handler == "reports.fast" for e in t.of_type("job.due")))
    assert "max_slots=10" in (rejected_reason(tail, too_many) or "")
    assert "after the current time" in (rejected_reason(tail, future) or "")
    assert accepted(tail, update)
    assert tail.by_id(f"{update}/updated")

    delete = await send(producer, kafka, DeleteSchedule(schedule_id="r"))
    await tail.wait_for(lambda t: accepted(t, delete))
    deleted_at = await db_now(pg_pool)
    row = await pg_pool.fetchrow("SELECT deleted, next_fire_at FROM ticker.schedules WHERE schedule_id = 'r'")
    assert row is not None
    assert row["deleted"]
    assert row["next_fire_at"] is None
    again = await send(producer, kafka, TriggerNow(schedule_id="r"))
    await tail.wait_for(lambda t: rejected_reason(t, again) is not None)
    assert "does not exist" in (rejected_reason(tail, again) or "")
    assert not [e for e in tail.of_type("job.due") if job(e).slot > deleted_at and job(e).kind == "scheduled"]


async def test_a_backfill_across_a_spring_forward_gap_records_each_skipped_local_time(
    ticker: Replica, tail: TopicTail, producer: Producer, kafka: KafkaSettings
) -> None:
    # Europe/Berlin, 2025-03-30: 02:00 CET jumps to 03:00 CEST (01:00 UTC). With `skip` the wall
    # times 02:00 and 02:30 never fire; the backfill records them, as a claim would.
    half_hourly = ScheduleDefinition(
        spec=CronSpec(expression="*/30 * * * *", timezone="Europe/Berlin"),
        handler="reports.half_hourly",
        dst=DstPolicy(nonexistent="skip"),
    )
    await send(producer, kafka, CreateSchedule(schedule_id="gap", definition=half_hourly))
    start, end = datetime(2025, 3, 30, 0, tzinfo=UTC), datetime(2025, 3, 30, 2, tzinfo=UTC)
    backfill = await send(producer, kafka, Backfill(schedule_id="gap", start=start, end=end))

    def in_range(t: TopicTail) -> list[Any]:
        return [e for e in t.of_type("slot.skipped") if start <= datetime.fromisoformat(e.data["slot"]) < end]

    await tail.wait_for(lambda t: accepted(t, backfill) and len(in_range(t)) >= 2, message="two SlotSkipped")
    backfilled = sorted(job(e).slot for e in tail.of_type("job.due") if job(e).kind == "backfill")
    assert backfilled == [start + timedelta(minutes=30 * k) for k in (0, 1, 2, 3)]
    transition = datetime(2025, 3, 30, 1, tzinfo=UTC)
    skipped = in_range(tail)
    assert len(skipped) == 2
    assert {e.data["reason"] for e in skipped} == {"dst_nonexistent"}
    assert {datetime.fromisoformat(e.data["slot"]) for e in skipped} == {transition}
    assert {e.data["run_id"] for e in skipped} == {run_id("gap", transition)}
    assert sorted(e.data["detail"].split()[2] for e in skipped) == [
        "2025-03-30T02:00:00",
        "2025-03-30T02:30:00",
    ]


async def test_semantically_invalid_commands_are_rejected_not_parked(
    ticker: Replica, tail: TopicTail, producer: Producer, kafka: KafkaSettings
) -> None:
    definition = ScheduleDefinition(spec=CronSpec(expression="0 0 * * *"), handler="h")
    first = await send(producer, kafka, CreateSchedule(schedule_id="dup", definition=definition))
    second = await send(producer, kafka, CreateSchedule(schedule_id="dup", definition=definition))
    ghost = await send(producer, kafka, UpdateSchedule(schedule_id="ghost", definition=definition))
    await tail.wait_for(
        lambda t: rejected_reason(t, ghost) is not None and rejected_reason(t, second) is not None
    )
    assert accepted(tail, first)
    assert "already exists" in (rejected_reason(tail, second) or "")
    assert "does not exist" in (rejected_reason(tail, ghost) or "")
    # Answers, not poison: nothing reaches the DLQ. A poison command sent after them is parked,
    # so by the time its letter is seen, any letter for the two refusals would have been too.
    await producer.send_raw(kafka.topic(SCHEDULE_COMMANDS), key=b"dup", value=b"{not json", headers={})
    await tail.wait_for(lambda t: len(t.of_type("dlq.dead_lettered")) >= 1)
    letters = tail.of_type("dlq.dead_lettered")
    assert [e.data["reason"] for e in letters] == ["undecodable"]


BAD_COMMANDS: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "bad-cron": (
        lambda env: env["data"]["definition"]["spec"].update(expression="61 * * * *"),
        "invalid cron",
    ),
    "unknown-zone": (
        lambda env: env["data"]["definition"]["spec"].update(timezone="Mars/Olympus"),
        "unknown IANA time zone",
    ),
    "missing-field": (lambda env: env["data"]["definition"].pop("handler"), "handler"),
    "unknown-version": (lambda env: env.update(version=99), "unknown_type"),
}


async def test_schema_invalid_commands_are_rejected_with_a_reason_and_parked(
    ticker: Replica, tail: TopicTail, producer: Producer, kafka: KafkaSettings
) -> None:
    good = CreateSchedule(
        schedule_id="bad", definition=ScheduleDefinition(spec=CronSpec(expression="0 0 * * *"), handler="h")
    )
    for name, (mutate, _) in BAD_COMMANDS.items():
        envelope = wrap(good, id=f"cmd-{name}", key="bad", source="test", occurred_at=datetime.now(UTC))
        raw = json.loads(encode(envelope))
        mutate(raw)
        await producer.send_raw(
            kafka.topic(SCHEDULE_COMMANDS),
            key=b"bad",
            value=json.dumps(raw).encode(),
            headers=envelope_headers(envelope),
        )
    # The consumer moves on: a good command behind the bad ones on the same key is applied.
    cid = await send(producer, kafka, good)
    await tail.wait_for(
        lambda t: accepted(t, cid) and len(t.of_type("dlq.dead_lettered")) >= len(BAD_COMMANDS)
    )
    for name, (_, fragment) in BAD_COMMANDS.items():
        assert fragment in (rejected_reason(tail, f"cmd-{name}") or ""), name
    parked = {
        json.loads(base64.b64decode(e.data["value_b64"]))["id"] for e in tail.of_type("dlq.dead_lettered")
    }
    assert parked == {f"cmd-{name}" for name in BAD_COMMANDS}


async def test_durable_timers_fire_once_and_cancelled_ones_never(
    ticker: Replica, tail: TopicTail, producer: Producer, kafka: KafkaSettings, pg_pool: Pool
) -> None:
    now = await db_now(pg_pool)
    retry_job = JobDue(
        run_id="pay@2026-01-01T00:00:00Z",
        job_id="pay",
        slot=datetime(2026, 1, 1, tzinfo=UTC),
        attempt=2,
        kind="retry",
        handler="h",
    )
    await send(
        producer,
        kafka,
        StartTimer(
            timer_id="retry:pay@2026-01-01T00:00:00Z#2",
            fire_at=now + timedelta(seconds=1),
            on_fire=FireJobDue(job=retry_job),
        ),
    )
    await send(
        producer,
        kafka,
        StartTimer(
            timer_id=sleep_timer_id("wf-1", 3),
            fire_at=now - timedelta(days=3),
            on_fire=FireTimerFired(owner="wf-1", sequence=3),
        ),
    )
    await send(
        producer,
        kafka,
        StartTimer(
            timer_id=sleep_timer_id("wf-2", 1),
            fire_at=now + timedelta(seconds=2),
            on_fire=FireTimerFired(owner="wf-2", sequence=1),
        ),
    )
    cancel = await send(producer, kafka, CancelTimer(timer_id=sleep_timer_id("wf-2", 1)))
    # A duplicate StartTimer (another command id, same timer id) is a no-op.
    await send(
        producer,
        kafka,
        StartTimer(
            timer_id=sleep_timer_id("wf-1", 3), fire_at=now, on_fire=FireTimerFired(owner="wf-1", sequence=3)
        ),
    )
    await tail.wait_for(lambda t: bool(t.by_id("pay@2026-01-01T00:00:00Z#2")) and accepted(t, cancel))
    fired = tail.of_type("timer.fired")
    assert [(e.key, e.data["timer_id"], e.data["sequence"]) for e in fired] == [("wf-1", "wf-1/timer/3", 3)]
    due = job(tail.by_id("pay@2026-01-01T00:00:00Z#2")[0])
    assert (due.attempt, due.kind, due.fire_at) == (2, "retry", now + timedelta(seconds=1))
    assert tail.by_id("pay@2026-01-01T00:00:00Z#2")[0].occurred_at >= now + timedelta(seconds=1)
    await wait_db_time(pg_pool, now + timedelta(seconds=3))
    await tail.wait_for(lambda t: bool(t.of_type("command.accepted")))
    assert len(tail.of_type("timer.fired")) == 1
    states = {
        r["timer_id"]: r["state"] for r in await pg_pool.fetch("SELECT timer_id, state FROM ticker.timers")
    }
    assert states == {
        "retry:pay@2026-01-01T00:00:00Z#2": "fired",
        "wf-1/timer/3": "fired",
        "wf-2/timer/1": "cancelled",
    }


async def test_a_backfill_wider_than_the_tickers_cap_is_rejected_naming_the_setting(
    kafka: KafkaSettings, pg_dsn: str, tail: TopicTail, producer: Producer, pg_pool: Pool
) -> None:
    # max_slots=100,000 on every command was accepted at will; the ticker now has its own bound.
    async with tickers(kafka, pg_dsn, max_backfill_slots=5):
        hourly = ScheduleDefinition(spec=CronSpec(expression="0 * * * *"), handler="reports.hourly")
        await send(producer, kafka, CreateSchedule(schedule_id="capped", definition=hourly))
        now = await db_now(pg_pool)
        start = now.replace(minute=0, second=0, microsecond=0) - timedelta(days=2)
        wide = await send(
            producer,
            kafka,
            Backfill(schedule_id="capped", start=start, end=start + timedelta(hours=6), max_slots=100_000),
        )
        narrow = await send(
            producer,
            kafka,
            Backfill(schedule_id="capped", start=start, end=start + timedelta(hours=5), max_slots=100_000),
        )
        await tail.wait_for(lambda t: rejected_reason(t, wide) is not None and accepted(t, narrow))
    reason = rejected_reason(tail, wide) or ""
    assert "more than 5 slots" in reason
    assert "SLOTFLOW_TICKER_MAX_BACKFILL_SLOTS" in reason
    assert len([e for e in tail.of_type("job.due") if job(e).kind == "backfill"]) == 5


async def test_a_schedule_that_can_never_fire_is_rejected_with_why(
    ticker: Replica, tail: TopicTail, producer: Producer, kafka: KafkaSettings
) -> None:
    """Issue 23: `0 0 30 2 *` and an interval of 999,999,999 days were accepted and never fired."""
    never = ScheduleDefinition(spec=CronSpec(expression="0 0 30 2 *"), handler="h")
    cid = await send(producer, kafka, CreateSchedule(schedule_id="feb-30", definition=never))
    await tail.wait_for(lambda t: rejected_reason(t, cid) is not None, message="the rejection")
    assert "can never fire" in (rejected_reason(tail, cid) or "")
    assert "matches no date" in (rejected_reason(tail, cid) or "")
