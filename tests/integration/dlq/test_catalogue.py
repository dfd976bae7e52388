"""The bad-input catalogue sent to every consumer topic, between good messages on one partition.

Each bad record must be parked by the DLQ service with the right reason, the good ones around it
processed in order, and the consumer must keep running (no restart, no stuck partition). Valid
messages with hostile content (quotes, SQL fragments, NUL) are processed harmlessly.

Consumers: the DLQ service's own command consumer, the claimer's JobDue intake
and the ticker's command consumer, all three real.
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

import asyncpg

from slotflow.contracts import (
    CreateSchedule,
    CronSpec,
    DeadLetterFilter,
    DiscardDeadLetters,
    Envelope,
    JobDue,
    ScheduleDefinition,
)
from slotflow.contracts.codec import encode
from slotflow.contracts.routing import build_command
from slotflow.contracts.topics import DLQ_COMMANDS, JOBS_DUE, SCHEDULE_COMMANDS
from slotflow.core.identity import run_id
from slotflow.kafka.producer import Producer
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow.testing.badinput import QUOTED_NAME, SQL_FRAGMENT, BadInput, catalogue, full_catalogue
from slotflow_claimer.app import ClaimerService
from slotflow_claimer.config import ClaimerSettings, Settings
from slotflow_claimer.events import job_due_envelope
from slotflow_ticker.app import TickerService
from slotflow_ticker.config import Settings as TickerServiceSettings
from slotflow_ticker.config import TickerSettings
from tests.integration.dlq.conftest import Running

AT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
HOSTILE = "Robert'); DROP TABLE dlq.dead_letters; --"


async def feed(
    producer: Producer, topic: str, goods: Sequence[Envelope], bad: Sequence[BadInput]
) -> dict[str, int]:
    """good, bad, good, bad, ..., good on partition 0; returns the offset of each bad entry."""
    if len(goods) != len(bad) + 1:
        raise ValueError("one more good than bad")
    offsets: dict[str, int] = {}
    for good, entry in zip(goods, bad, strict=False):
        await producer.send_raw(topic, key=good.key.encode(), value=encode(good), partition=0)
        sent = await producer.send_raw(
            topic, key=entry.key, value=entry.value, headers=dict(entry.headers), partition=0
        )
        offsets[entry.name] = sent.offset
    await producer.send_raw(topic, key=goods[-1].key.encode(), value=encode(goods[-1]), partition=0)
    return offsets


async def check_parked(dlq: Running, topic: str, bad: Sequence[BadInput], offsets: dict[str, int]) -> None:
    expected = {f"{topic}:0:{offsets[e.name]}": (e.name, e.reason) for e in bad if e.reason is not None}

    async def all_parked() -> bool:
        rows = await dlq.pool.fetch("SELECT id FROM dlq.dead_letters WHERE topic = $1", topic)
        return {r["id"] for r in rows} >= expected.keys()

    await assert_eventually(all_parked, timeout=60, message=f"every bad record of {topic} parked")
    rows = await dlq.pool.fetch(
        "SELECT id, reason, count, value_truncated FROM dlq.dead_letters WHERE topic = $1", topic
    )
    parked = {r["id"]: r for r in rows}
    for dead_id, (name, reason) in expected.items():
        assert parked[dead_id]["reason"] == reason, name
        assert parked[dead_id]["count"] == 1, name
        assert not parked[dead_id]["value_truncated"], name  # the 2 MiB record too: parked whole
    hostile = {f"{topic}:0:{offsets[e.name]}" for e in bad if e.reason is None}
    assert not hostile & parked.keys(), "valid messages with hostile content must not be parked"
    assert len(parked) == len(expected)  # and nothing else from this topic


async def wait_processed(processed: Callable[[], Awaitable[list[str]]], expected: list[str]) -> None:
    async def done() -> bool:
        return len(await processed()) >= len(expected)

    await assert_eventually(done, timeout=60, message="every good message processed")
    assert await processed() == expected


async def test_dlq_command_consumer(dlq: Running, producer: Producer, kafka: KafkaSettings) -> None:
    topic = kafka.topic(DLQ_COMMANDS)

    def discard(n: int, selection: DeadLetterFilter | None = None) -> Envelope:
        command = DiscardDeadLetters(
            selection=selection or DeadLetterFilter(ids=(f"none-{n}",)), reason="catalogue"
        )
        return build_command(command, command_id=f"cmd-{n}", source="test")[1]

    bad = full_catalogue(discard(0))
    hostile = [
        discard(900, DeadLetterFilter(source_service=HOSTILE, reason=SQL_FRAGMENT)),
        discard(901, DeadLetterFilter(job_id="in filter", topic=QUOTED_NAME)),
    ]
    bad += [BadInput(f"hostile_{e.id}", e.key.encode(), encode(e), None) for e in hostile]
    # A NUL in a filter: refused at decode like anywhere else (the acceptance rule), written by a
    # producer that does not validate.
    nul = DiscardDeadLetters.model_construct(
        selection=DeadLetterFilter.model_construct(job_id="nul\x00in filter"), reason="catalogue", limit=1000
    )
    nul_envelope = build_command(nul, command_id="cmd-902", source="test")[1]
    bad.append(BadInput("nul_in_filter", nul_envelope.key.encode(), encode(nul_envelope), "invalid_payload"))
    goods = [discard(n) for n in range(len(bad) + 1)]
    offsets = await feed(producer, topic, goods, bad)

    async def processed() -> list[str]:
        rows = await dlq.pool.fetch(
            "SELECT command_id FROM dlq.commands WHERE command_id LIKE 'cmd-%' ORDER BY seq"
        )
        return [r["command_id"] for r in rows if r["command_id"] not in ("cmd-900", "cmd-901")]

    await wait_processed(processed, [g.id for g in goods])
    await check_parked(dlq, topic, bad, offsets)
    assert (
        await dlq.pool.fetchval(
            "SELECT count(*) FROM dlq.commands WHERE command_id IN ('cmd-900', 'cmd-901')"
        )
        == 2
    )
    assert not dlq.task.done()  # the same service, never restarted
    loop = dlq.service.commands_loop
    assert loop is not None
    assert loop.stats.handled == len(goods) + len(hostile)


async def test_claimer_job_due_consumer(
    dlq: Running, producer: Producer, kafka: KafkaSettings, pg_dsn: str
) -> None:
    topic = kafka.topic(JOBS_DUE)
    registry = HandlerRegistry()
    calls: list[str] = []

    async def record(ctx: RunContext) -> None:
        calls.append(ctx.run_id)

    registry.register("catalogue.record", record)

    def job(n: int, job_id: str | None = None) -> Envelope:
        name = job_id or f"cat-{n}"
        slot = AT + timedelta(seconds=n)
        due = JobDue(
            run_id=run_id(name, slot),
            job_id=name,
            slot=slot,
            handler="catalogue.record",
            payload={"note": SQL_FRAGMENT},
        )
        return job_due_envelope(due, at=AT)

    bad = full_catalogue(job(0))
    hostile = job(900, job_id=HOSTILE)
    bad.append(BadInput("hostile_job_id", hostile.key.encode(), encode(hostile), None))
    goods = [job(n) for n in range(len(bad) + 1)]
    offsets = await feed(producer, topic, goods, bad)

    settings = Settings(
        # One run at a time, so handler calls follow the partition's order.
        claimer=ClaimerSettings(
            max_in_flight=1, commit_interval_seconds=0.1, poll_timeout_ms=100, shutdown_grace_seconds=1.0
        ),
        kafka=kafka,
        postgres=PostgresSettings(dsn=pg_dsn),
    )
    claimer = ClaimerService(settings, registry=registry)
    await claimer.start()
    try:

        async def processed() -> list[str]:
            return [c for c in calls if not c.startswith(HOSTILE)]

        await wait_processed(processed, [JobDue.model_validate(g.data).run_id for g in goods])
        await check_parked(dlq, topic, bad, offsets)
        await assert_eventually(lambda: run_id(HOSTILE, AT + timedelta(seconds=900)) in calls, timeout=30)
        assert not claimer.fatal.is_set()
        assert (
            await dlq.pool.fetchval("SELECT count(*) FROM claimer.runs WHERE state = 'completed'")
            == len(goods) + 1
        )
    finally:
        await claimer.stop(grace=0.5)


async def test_ticker_command_consumer(
    dlq: Running, producer: Producer, kafka: KafkaSettings, pg_dsn: str
) -> None:
    topic = kafka.topic(SCHEDULE_COMMANDS)

    def create(n: int, schedule_id: str | None = None) -> Envelope:
        definition = ScheduleDefinition(
            spec=CronSpec(expression="0 2 * * *"),
            handler="h",
            payload={"sql": SQL_FRAGMENT, "q": QUOTED_NAME},
        )
        command = CreateSchedule(schedule_id=schedule_id or f"s-{n:03d}", definition=definition, paused=True)
        return build_command(command, command_id=f"c-{n}", source="test")[1]

    # The NUL-key entry is left to its own test below: the ticker cannot yet survive it.
    bad = [e for e in full_catalogue(create(0)) if e.name != "nul_byte_in_name"]
    hostile = create(900, "s-hostile")
    bad.append(BadInput("hostile_payload", hostile.key.encode(), encode(hostile), None))
    goods = [create(n) for n in range(len(bad) + 1)]
    offsets = await feed(producer, topic, goods, bad)

    settings = TickerSettings(ticker_id=unique_name("tk"), metrics_port=0)
    ticker = TickerService(
        TickerServiceSettings(ticker=settings, kafka=kafka, postgres=PostgresSettings(dsn=pg_dsn))
    )
    stop = asyncio.Event()
    task = asyncio.create_task(ticker.run(stop))
    try:

        async def processed() -> list[str]:
            try:
                rows = await dlq.pool.fetch(
                    "SELECT schedule_id FROM ticker.schedules WHERE schedule_id <> 's-hostile' ORDER BY created_at"
                )
            except asyncpg.UndefinedTableError:  # until the ticker has migrated
                return []
            return [r["schedule_id"] for r in rows]

        await wait_processed(processed, [CreateSchedule.model_validate(g.data).schedule_id for g in goods])
        await check_parked(dlq, topic, bad, offsets)
        assert (
            await dlq.pool.fetchval("SELECT count(*) FROM ticker.schedules WHERE schedule_id = 's-hostile'")
            == 1
        )
        assert not task.done()  # the same ticker, never restarted
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=60)


async def test_ticker_survives_a_nul_byte_in_a_record_key(
    dlq: Running, producer: Producer, kafka: KafkaSettings, pg_dsn: str
) -> None:
    topic = kafka.topic(SCHEDULE_COMMANDS)
    definition = ScheduleDefinition(spec=CronSpec(expression="0 2 * * *"), handler="h")
    good = build_command(
        CreateSchedule(schedule_id="after-nul", definition=definition, paused=True), source="t"
    )[1]
    [nul] = [e for e in catalogue(good) if e.name == "nul_byte_in_name"]
    await producer.send_raw(topic, key=nul.key, value=nul.value, partition=0)
    await producer.send_raw(topic, key=good.key.encode(), value=encode(good), partition=0)
    ticker = TickerService(
        TickerServiceSettings(
            ticker=TickerSettings(ticker_id=unique_name("tk"), metrics_port=0),
            kafka=kafka,
            postgres=PostgresSettings(dsn=pg_dsn),
        )
    )
    stop = asyncio.Event()
    task = asyncio.create_task(ticker.run(stop))
    try:

        async def created() -> bool:
            if task.done():
                raise RuntimeError(f"the ticker stopped: {task.exception()!r}")
            try:
                return bool(await dlq.pool.fetchval("SELECT count(*) FROM ticker.schedules") == 1)
            except asyncpg.UndefinedTableError:
                return False

        await assert_eventually(created, timeout=30, message="the command after the NUL record applied")

        async def parked() -> bool:
            # The ticker moved on once it produced the dead letter; the dlq parks it in its own time.
            return await dlq.count("reason = 'invalid_payload'") == 1

        await assert_eventually(parked, timeout=30, message="the NUL record parked as invalid_payload")
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, timeout=60)
