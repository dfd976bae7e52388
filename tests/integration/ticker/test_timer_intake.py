"""StartTimer intake: a burst of timer commands on the internal timer topic is applied a polled
batch per transaction, and every timer is stored and fired exactly once, with redeliveries,
repeated timer ids, a refused command on the public topic and a poison record mixed into the
burst."""

import base64
import json
from datetime import datetime, timedelta

from slotflow.contracts import CronSpec, FireTimerFired, ScheduleDefinition, StartTimer, UpdateSchedule
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import envelope_headers
from slotflow.contracts.routing import build_command
from slotflow.contracts.timers import sleep_timer_id
from slotflow.contracts.topics import DLQ_MESSAGES, SCHEDULE_EVENTS, TIMER_COMMANDS, TIMER_EVENTS
from slotflow.kafka.producer import OutgoingRecord, Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from tests.integration.ticker.support import TopicTail, db_now, duplicates, tickers

TIMERS = 2000


def record(kafka: KafkaSettings, message: StartTimer | UpdateSchedule, command_id: str) -> OutgoingRecord:
    spec, envelope = build_command(message, command_id=command_id, source="test")
    return OutgoingRecord(
        kafka.topic(spec), envelope.key.encode(), encode(envelope), envelope_headers(envelope)
    )


async def test_a_burst_of_start_timers_is_stored_in_batches_and_fires_each_timer_once(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool
) -> None:
    async with (
        tickers(kafka, pg_dsn) as _,
        TopicTail(kafka, (TIMER_EVENTS, SCHEDULE_EVENTS, DLQ_MESSAGES)) as tail,
    ):
        now = await db_now(pg_pool)
        records: list[OutgoingRecord] = []
        for i in range(TIMERS):
            timer = StartTimer(
                timer_id=sleep_timer_id(f"wf-{i}", 1),
                # Half already due, half due within two seconds: both the claim and the wheel fire.
                fire_at=now + timedelta(milliseconds=(i % 2) * (i % 2000)),
                on_fire=FireTimerFired(owner=f"wf-{i}", sequence=1),
            )
            records.append(record(kafka, timer, f"cmd-{i}"))
            if i % 400 == 7:
                # A redelivered command (same id) and a second StartTimer for the same timer
                # (another id, a later instant): both no-ops.
                records.append(record(kafka, timer, f"cmd-{i}"))
                again = timer.model_copy(update={"fire_at": now + timedelta(hours=1)})
                records.append(record(kafka, again, f"cmd-{i}-again"))
            if i == 1000:
                definition = ScheduleDefinition(spec=CronSpec(expression="0 0 * * *"), handler="h")
                records.append(
                    record(kafka, UpdateSchedule(schedule_id="ghost", definition=definition), "cmd-ghost")
                )
                raw = json.loads(records[-2].value or b"null")
                raw["data"]["fire_at"] = "not a time"
                raw["id"] = "cmd-poison"
                records.append(
                    OutgoingRecord(
                        kafka.topic(TIMER_COMMANDS),
                        records[-2].key,
                        json.dumps(raw).encode(),
                        records[-2].headers,
                    )
                )
        async with Producer(kafka, client_id="test-intake") as producer:
            await producer.send_raw_many(records)

        def fired(t: TopicTail) -> bool:
            return len({e.id for e in t.of_type("timer.fired")}) >= TIMERS

        await tail.wait_for(fired, timeout=120, message=f"{TIMERS} TimerFired")
        await tail.wait_for(
            lambda t: bool(t.by_id("cmd-ghost/rejected")) and bool(t.by_id("cmd-poison/rejected")),
            message="both rejections",
        )
        # Only the undecodable command is parked; the update of an unknown schedule is answered with
        # CommandRejected alone (a deliberate refusal is an answer, not poison).
        await tail.wait_for(lambda t: len(t.of_type("dlq.dead_lettered")) >= 1, message="the parked command")
        # Acknowledgements and TimerFired leave on different partitions: each is waited for.
        await tail.wait_for(
            lambda t: (
                len({e.data["command_id"] for e in t.of_type("command.accepted")}) >= TIMERS + TIMERS // 400
            ),
            message="every command acknowledged",
        )

    fired_events = tail.of_type("timer.fired")
    assert duplicates(e.id for e in fired_events) == {}
    assert {e.data["timer_id"] for e in fired_events} == {sleep_timer_id(f"wf-{i}", 1) for i in range(TIMERS)}
    assert {(e.key, e.data["sequence"]) for e in fired_events} == {(f"wf-{i}", 1) for i in range(TIMERS)}
    # The first StartTimer of each timer id won: the later one's instant was never taken.
    assert all(
        datetime.fromisoformat(str(e.data["fire_at"])) < now + timedelta(hours=1) for e in fired_events
    )
    accepted = [e.data["command_id"] for e in tail.of_type("command.accepted")]
    assert duplicates(accepted) == {}
    assert len(accepted) == TIMERS + TIMERS // 400  # every distinct command id once, the no-op included
    states = await pg_pool.fetch("SELECT state, count(*) AS n FROM ticker.timers GROUP BY state")
    assert {r["state"]: r["n"] for r in states} == {"fired": TIMERS}
    # Every command id of a transaction shares its now(): far fewer transactions than commands.
    # The timer commands are in the internal topic's inbox, the refused update in the public one's.
    transactions = await pg_pool.fetchval(
        "SELECT count(DISTINCT processed_at) FROM ticker.timer_inbox WHERE event_id LIKE 'cmd-%'"
    )
    commands = await pg_pool.fetchval("SELECT count(*) FROM ticker.timer_inbox WHERE event_id LIKE 'cmd-%'")
    assert commands == TIMERS + TIMERS // 400
    assert transactions <= commands // 10, (transactions, commands)
    assert await pg_pool.fetchval("SELECT array_agg(event_id) FROM ticker.inbox") == ["cmd-ghost"]
    parked = {json.loads(_value(e.data))["id"] for e in tail.of_type("dlq.dead_lettered")}
    assert parked == {"cmd-poison"}


def _value(data: dict[str, object]) -> bytes:
    return base64.b64decode(str(data["value_b64"]))
