"""Timer commands come through the internal timer topic only, with ids bound to their action.

The finding: the public schedule-command topic (which the api and any CLI user may write) took
StartTimer, whose `on_fire` fires whatever it carries: a whole JobDue (a handler run with any
payload, no schedule behind it) or a TimerFired for another workflow's sleep; a CancelTimer there,
or a StartTimer taking a predictable timer id first, stalled a sleep or a retry. Each attack is
replayed here on a real ticker, broker and database, next to a genuine timer from the internal
topic that fires, so "nothing fired" is checked after the ticker fired what it was meant to.
"""

import base64
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from slotflow.contracts import (
    CancelTimer,
    CreateSchedule,
    FireJobDue,
    FireTimerFired,
    JobDue,
    Message,
    OnceSpec,
    ScheduleDefinition,
    StartTimer,
    TriggerNow,
)
from slotflow.contracts.routing import build_command
from slotflow.contracts.timers import retry_timer_id, sleep_timer_id
from slotflow.contracts.topics import (
    DLQ_MESSAGES,
    JOBS_DUE,
    SCHEDULE_COMMANDS,
    SCHEDULE_EVENTS,
    TIMER_COMMANDS,
    TIMER_EVENTS,
    TopicSpec,
)
from slotflow.core.identity import run_id
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from tests.integration.ticker.support import Replica, TopicTail, db_now, tickers

TAILED = (JOBS_DUE, SCHEDULE_EVENTS, TIMER_EVENTS, DLQ_MESSAGES)
SLOT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
async def producer(kafka: KafkaSettings) -> AsyncIterator[Producer]:
    async with Producer(kafka, client_id="test-timer-doors") as p:
        yield p


@pytest.fixture
async def tail(kafka: KafkaSettings) -> AsyncIterator[TopicTail]:
    async with TopicTail(kafka, TAILED) as t:
        yield t


async def publish(
    producer: Producer, kafka: KafkaSettings, topic: TopicSpec, message: Message, command_id: str
) -> None:
    """Publish ``message`` on ``topic``, whatever topic its type belongs to (what an attacker does)."""
    _, envelope = build_command(message, command_id=command_id, source="test")
    await producer.send(kafka.topic(topic), envelope)


def payout_retry(job_id: str, payload: dict[str, object]) -> JobDue:
    """A well-formed retry's JobDue: attempt 2 of the run of ``job_id`` at SLOT."""
    return JobDue(
        run_id=run_id(job_id, SLOT),
        job_id=job_id,
        slot=SLOT,
        attempt=2,
        kind="retry",
        handler="payouts.pay",
        payload=payload,
    )


def retry_timer(job: JobDue, fire_at: datetime) -> StartTimer:
    return StartTimer(
        timer_id=retry_timer_id(job.run_id, job.attempt), fire_at=fire_at, on_fire=FireJobDue(job=job)
    )


def reason(tail: TopicTail, command_id: str) -> str | None:
    found = tail.by_id(f"{command_id}/rejected")
    return str(found[0].data["reason"]) if found else None


def parked_ids(tail: TopicTail) -> set[str]:
    return {
        json.loads(base64.b64decode(str(e.data["value_b64"])))["id"]
        for e in tail.of_type("dlq.dead_lettered")
    }


async def timers(pool: Pool) -> dict[str, tuple[str, datetime]]:
    rows = await pool.fetch("SELECT timer_id, state, fire_at FROM ticker.timers")
    return {r["timer_id"]: (r["state"], r["fire_at"]) for r in rows}


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "one-by-one"])
async def test_timer_commands_on_the_public_topic_are_refused_and_nothing_of_them_fires(
    batching: bool, kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, producer: Producer, tail: TopicTail
) -> None:
    async with tickers(kafka, pg_dsn, command_batching=batching):
        now = await db_now(pg_pool)
        sleep_id = sleep_timer_id("victim-wf", 3)
        # On the public topic, before the victim's own sleep is stored: a handler run with the
        # attacker's payload and no schedule behind it, and the victim's sleep taken to end now.
        payday = payout_retry("payouts", {"to": "attacker"})
        await publish(producer, kafka, SCHEDULE_COMMANDS, retry_timer(payday, now), "attack-jobdue")
        wake = StartTimer(
            timer_id=sleep_id, fire_at=now, on_fire=FireTimerFired(owner="victim-wf", sequence=3)
        )
        await publish(producer, kafka, SCHEDULE_COMMANDS, wake, "attack-wake")
        await tail.wait_for(
            lambda t: bool(reason(t, "attack-jobdue")) and bool(reason(t, "attack-wake")),
            message="the first two attacks answered",
        )
        # The victim's genuine 15-minute sleep, from the internal topic; then its cancel on the
        # public topic; then a genuine retry due at once, so the ticker is seen firing timers.
        genuine_sleep = StartTimer(
            timer_id=sleep_id,
            fire_at=now + timedelta(seconds=900),
            on_fire=FireTimerFired(owner="victim-wf", sequence=3),
        )
        await publish(producer, kafka, TIMER_COMMANDS, genuine_sleep, "sleep-start")
        await tail.wait_for(
            lambda t: bool(t.by_id("sleep-start/accepted")), message="the genuine sleep stored"
        )
        await publish(producer, kafka, SCHEDULE_COMMANDS, CancelTimer(timer_id=sleep_id), "attack-cancel")
        await tail.wait_for(lambda t: bool(reason(t, "attack-cancel")), message="the cancel answered")
        genuine = payout_retry("genuine", {"to": "merchant-1"})
        await publish(producer, kafka, TIMER_COMMANDS, retry_timer(genuine, now), "genuine-retry")
        await tail.wait_for(lambda t: bool(t.by_id(f"{genuine.run_id}#2")), message="the genuine retry fired")
    attacks = {"attack-jobdue": "timer.start", "attack-wake": "timer.start", "attack-cancel": "timer.cancel"}
    for attack, kind in attacks.items():
        said = reason(tail, attack) or ""
        assert said.startswith(f"timer commands are internal: {kind} is taken only from"), said
        assert kafka.topic(TIMER_COMMANDS) in said, said
        assert kafka.topic(SCHEDULE_COMMANDS) in said, said
        assert not tail.by_id(f"{attack}/accepted")
    # Nothing of them applied: no JobDue of the attacker's, no TimerFired, the sleep still pending
    # at its own instant; a refusal is an answer, not poison.
    assert [e.id for e in tail.of_type("job.due")] == [f"{genuine.run_id}#2"]
    assert tail.of_type("timer.fired") == []
    assert await timers(pg_pool) == {
        sleep_id: ("pending", now + timedelta(seconds=900)),
        retry_timer_id(genuine.run_id, 2): ("fired", now),
    }
    assert parked_ids(tail) == set()


async def test_a_start_timer_whose_id_does_not_fit_its_action_is_refused_with_why(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, producer: Producer, tail: TopicTail
) -> None:
    """Even on the internal topic: a squatter's StartTimer under another timer's id, and a JobDue
    that is not a retry, are refused; the genuine timers under those ids then fire as started."""
    async with tickers(kafka, pg_dsn):
        now = await db_now(pg_pool)
        victim = payout_retry("victim", {"to": "merchant-1"})
        victim_timer = retry_timer_id(victim.run_id, 2)
        sleep_id = sleep_timer_id("victim-wf", 3)
        squats: dict[str, tuple[Message, str]] = {
            # The retry's id taken first, for a sleep that never ends (a stalled retry).
            "squat-retry": (
                StartTimer(
                    timer_id=victim_timer,
                    fire_at=now + timedelta(days=365),
                    on_fire=FireTimerFired(owner="victim-wf", sequence=3),
                ),
                "its sleep",
            ),
            # The sleep's id taken first by a JobDue of the attacker's.
            "squat-sleep": (
                StartTimer(
                    timer_id=sleep_id,
                    fire_at=now,
                    on_fire=FireJobDue(job=payout_retry("x", {"to": "attacker"})),
                ),
                "does not fit its action",
            ),
            # A first attempt: a run no schedule made.
            "first-attempt": (
                StartTimer(
                    timer_id=retry_timer_id(run_id("y", SLOT), 1),
                    fire_at=now,
                    on_fire=FireJobDue(
                        job=payout_retry("y", {}).model_copy(update={"attempt": 1, "kind": "scheduled"})
                    ),
                ),
                "not kind scheduled",
            ),
            "cancel-nothing": (CancelTimer(timer_id="payday"), "is none an issuer starts"),
        }
        for command_id, (message, _) in squats.items():
            await publish(producer, kafka, TIMER_COMMANDS, message, command_id)
        await publish(producer, kafka, TIMER_COMMANDS, retry_timer(victim, now), "genuine-retry")
        genuine_sleep = StartTimer(
            timer_id=sleep_id, fire_at=now, on_fire=FireTimerFired(owner="victim-wf", sequence=3)
        )
        await publish(producer, kafka, TIMER_COMMANDS, genuine_sleep, "genuine-sleep")
        await tail.wait_for(
            lambda t: (
                bool(t.by_id(f"{victim.run_id}#2"))
                and bool(t.of_type("timer.fired"))
                and parked_ids(t) == set(squats)
            ),
            message="the genuine timers fired and the squats parked",
        )
    for command_id, (_, fragment) in squats.items():
        said = reason(tail, command_id) or ""
        assert said.startswith("invalid_payload: forged or malformed identity:"), said
        assert fragment in said, (command_id, said)
    assert [e.id for e in tail.of_type("job.due")] == [f"{victim.run_id}#2"]
    [fired] = tail.of_type("timer.fired")
    assert (fired.key, fired.data["timer_id"], fired.data["sequence"]) == ("victim-wf", sleep_id, 3)
    assert {k: state for k, (state, _) in (await timers(pg_pool)).items()} == {
        victim_timer: "fired",
        sleep_id: "fired",
    }


async def test_a_public_command_cannot_take_a_timer_commands_id_first(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, producer: Producer, tail: TopicTail
) -> None:
    """The claimer's StartTimer is command `retry:{run}#{attempt}`: predictable. A public command
    sent first under that id used to fill the inbox, and the real StartTimer was then skipped as a
    redelivery: the retry never ran. Each topic's command ids now have an inbox of their own."""
    async with tickers(kafka, pg_dsn):
        now = await db_now(pg_pool)
        victim = payout_retry("victim", {"to": "merchant-1"})
        taken = retry_timer_id(victim.run_id, 2)
        await publish(producer, kafka, SCHEDULE_COMMANDS, TriggerNow(schedule_id="nothing-here"), taken)
        await tail.wait_for(lambda t: bool(reason(t, taken)), message="the public command answered")
        await publish(producer, kafka, TIMER_COMMANDS, retry_timer(victim, now), taken)
        await tail.wait_for(lambda t: bool(t.by_id(f"{victim.run_id}#2")), message="the retry fired")
    assert "nothing-here" in (reason(tail, taken) or "")
    assert (await timers(pg_pool))[taken][0] == "fired"


async def test_schedule_commands_on_the_internal_topic_are_refused(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, producer: Producer, tail: TopicTail
) -> None:
    async with tickers(kafka, pg_dsn):
        slot = (await db_now(pg_pool)).replace(microsecond=0) + timedelta(seconds=1)
        create = CreateSchedule(
            schedule_id="sideways", definition=ScheduleDefinition(spec=OnceSpec(at=slot), handler="h")
        )
        await publish(producer, kafka, TIMER_COMMANDS, create, "sideways")
        await tail.wait_for(lambda t: bool(reason(t, "sideways")), message="the refusal")
    said = reason(tail, "sideways") or ""
    assert said.startswith("schedule.create is not a timer command"), said
    assert kafka.topic(SCHEDULE_COMMANDS) in said
    assert await pg_pool.fetchval("SELECT count(*) FROM ticker.schedules") == 0


async def test_the_legacy_setting_lets_an_old_issuers_timers_in_during_a_roll(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, producer: Producer, tail: TopicTail
) -> None:
    """A rolling upgrade: new tickers with SLOTFLOW_TICKER_LEGACY_TIMER_COMMANDS on, while an old
    claimer still sends its StartTimer to the public topic and a new one to the internal topic;
    both retries run. The id rule holds on the public topic too. Then the setting off (a restart):
    the same command on the public topic is refused, and fires once copied to the internal one."""
    old = payout_retry("old-claimer", {})
    new = payout_retry("new-claimer", {})
    bad = payout_retry("bad", {})
    async with tickers(kafka, pg_dsn, legacy_timer_commands=True) as (replica,):
        now = await db_now(pg_pool)
        await publish(producer, kafka, SCHEDULE_COMMANDS, retry_timer(old, now), "old-retry")
        await publish(producer, kafka, TIMER_COMMANDS, retry_timer(new, now), "new-retry")
        forged = retry_timer(bad, now).model_copy(update={"timer_id": "anything"})
        await publish(producer, kafka, SCHEDULE_COMMANDS, forged, "forged")
        await tail.wait_for(
            lambda t: (
                bool(t.by_id(f"{old.run_id}#2"))
                and bool(t.by_id(f"{new.run_id}#2"))
                and bool(reason(t, "forged"))
            ),
            message="both retries fired, the forged one refused",
        )
        assert counted(replica, "accepted") == 1
    assert "does not fit its action" in (reason(tail, "forged") or "")
    late = payout_retry("late-old-claimer", {})
    async with tickers(kafka, pg_dsn) as (replica,):
        now = await db_now(pg_pool)
        _, envelope = build_command(retry_timer(late, now), command_id="late-retry", source="test")
        await producer.send(kafka.topic(SCHEDULE_COMMANDS), envelope)
        await tail.wait_for(lambda t: bool(reason(t, "late-retry")), message="the late one refused")
        assert counted(replica, "refused") == 1
        assert (reason(tail, "late-retry") or "").startswith("timer commands are internal:")
        assert not tail.by_id(f"{late.run_id}#2")
        # The recovery docs/operations.md gives for a door closed too early: the refused record,
        # copied unchanged to the internal topic, is applied (that topic's inbox never saw its id).
        await producer.send(kafka.topic(TIMER_COMMANDS), envelope)
        await tail.wait_for(lambda t: bool(t.by_id(f"{late.run_id}#2")), message="the copied record fired")
    assert sorted(e.id for e in tail.of_type("job.due")) == sorted(
        [f"{old.run_id}#2", f"{new.run_id}#2", f"{late.run_id}#2"]
    )


def counted(replica: Replica, outcome: str) -> float:
    value = replica.app.metrics.registry.get_sample_value(
        "slotflow_ticker_public_timer_commands_total", {"outcome": outcome}
    )
    return value or 0.0
