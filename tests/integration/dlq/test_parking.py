"""Parking: one entry per origin, the record kept byte-exact, a status event per change, queries."""

import base64
import json
import socket
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import httpx

from slotflow.contracts import DeadLetterFilter, JobDue, wrap
from slotflow.contracts.codec import encode
from slotflow.contracts.topics import DLQ_MESSAGES, JOBS_DUE, SCHEDULE_COMMANDS
from slotflow.errors import InvalidPayload, PermanentError, UndecodableMessage
from slotflow.kafka.poison import dead_letter_envelope
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_dlq import queries
from tests.integration.dlq.conftest import Running
from tests.integration.dlq.helpers import AT, origin, park, read_events


async def test_a_letter_is_parked_once_per_origin_and_counted_per_sighting(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(SCHEDULE_COMMANDS)
    raw = b'{"type": "schedule.create", "version": 1, "data": {'
    record = origin(topic, 41, raw, headers=(("traceparent", b"00-1-2-01"), ("bin", b"\x00\xff")))
    await park(producer, kafka, record, UndecodableMessage("truncated"), reason="undecodable")
    # The same origin again: a consumer re-sent it after a crash, and another group refused it too.
    await park(producer, kafka, record, UndecodableMessage("truncated"), reason="undecodable")
    await park(producer, kafka, record, UndecodableMessage("truncated"), reason="undecodable", source="api")

    async def sightings() -> bool:
        return bool(await dlq.pool.fetchval("SELECT count FROM dlq.dead_letters") == 3)

    await assert_eventually(sightings, timeout=30)
    assert await dlq.count() == 1
    entry = await queries.get_dead_letter(dlq.pool, schema="dlq", dead_letter_id=f"{topic}:1:41")
    assert entry is not None
    assert (entry.status, entry.reason, entry.count, entry.seen_by) == (
        "parked",
        "undecodable",
        3,
        ["ticker", "api"],
    )
    assert base64.b64decode(entry.value_b64) == raw
    assert base64.b64decode(entry.key_b64 or "") == b"k"
    assert {n: base64.b64decode(v) for n, v in entry.headers_b64} == {
        "traceparent": b"00-1-2-01",
        "bin": b"\x00\xff",
    }
    assert entry.decoded is None  # truncated JSON: inspection shows the raw bytes
    assert entry.record_time == datetime.fromtimestamp(1_780_000_000, tz=UTC)

    events = await read_events(kafka, 3)
    assert [(e.status, e.count) for e in events] == [("parked", 1), ("parked", 2), ("parked", 3)]
    assert events[0].dead_letter_id == f"{topic}:1:41"
    assert events[0].first_seen is not None
    assert "UndecodableMessage: truncated" in events[0].error


async def test_inspection_decodes_the_original_envelope_and_keeps_hostile_text(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(JOBS_DUE)
    job = JobDue(
        run_id="pay'; DROP TABLE dlq.dead_letters;--@1",
        job_id="pay'; DROP TABLE x;--",
        slot=AT,
        handler="h",
        tags=("money-moving",),
    )
    value = encode(wrap(job, id=job.run_id, key=job.job_id, source="ticker", occurred_at=AT))
    record = origin(topic, 7, value, key=b'nul\x00key "quoted"')
    await park(
        producer,
        kafka,
        record,
        PermanentError("no handler named h"),
        reason="unknown_handler",
        run_id=job.run_id,
        job_id=job.job_id,
        tags=job.tags,
        source="claimer",
    )
    await assert_eventually(lambda: dlq.count(), timeout=30)
    entry = await queries.get_dead_letter(dlq.pool, schema="dlq", dead_letter_id=f"{topic}:1:7")
    assert entry is not None
    assert entry.decoded["type"] == "job.due"
    assert entry.decoded["data"]["job_id"] == "pay'; DROP TABLE x;--"
    assert entry.original_type == "job.due"
    assert (entry.run_id, entry.job_id, entry.tags) == (job.run_id, job.job_id, ["money-moving"])
    assert base64.b64decode(entry.key_b64 or "") == b'nul\x00key "quoted"'
    assert entry.key == 'nul\ufffdkey "quoted"'  # text columns cannot hold NUL; the bytes can
    # Filters are data, never SQL.
    page = await queries.list_dead_letters(
        dlq.pool, schema="dlq", selection=DeadLetterFilter(job_id=job.job_id)
    )
    assert [i.dead_letter_id for i in page.items] == [f"{topic}:1:7"]


async def test_list_filters_and_pages(dlq: Running, producer: Producer, kafka: KafkaSettings) -> None:
    jobs, commands = kafka.topic(JOBS_DUE), kafka.topic(SCHEDULE_COMMANDS)
    for n in range(6):
        await park(
            producer,
            kafka,
            origin(jobs, n, b"{}"),
            InvalidPayload("x"),
            source="claimer",
            job_id=f"job-{n % 2}",
        )
    for n in range(4):
        await park(producer, kafka, origin(commands, n, b"\xff"), UndecodableMessage("x"), source="ticker")

    async def parked() -> bool:
        return await dlq.count() == 10

    await assert_eventually(parked, timeout=30)

    async def ids(**fields: Any) -> set[str]:
        page = await queries.list_dead_letters(
            dlq.pool, schema="dlq", selection=DeadLetterFilter(**fields), limit=500
        )
        return {i.dead_letter_id for i in page.items}

    assert len(await ids()) == 10
    assert await ids(source_service="ticker") == {f"{commands}:1:{n}" for n in range(4)}
    assert await ids(topic=jobs, reason="invalid_payload") == {f"{jobs}:1:{n}" for n in range(6)}
    assert await ids(job_id="job-1") == {f"{jobs}:1:{n}" for n in (1, 3, 5)}
    assert await ids(reason="undecodable", status="parked") == {f"{commands}:1:{n}" for n in range(4)}
    assert await ids(status="discarded") == set()
    now = datetime.now(UTC)
    assert len(await ids(since=now - timedelta(minutes=5), until=now + timedelta(minutes=5))) == 10
    assert await ids(until=now - timedelta(minutes=5)) == set()

    seen: list[str] = []
    cursor = None
    while True:
        page = await queries.list_dead_letters(dlq.pool, schema="dlq", limit=3, cursor=cursor)
        seen += [i.dead_letter_id for i in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 10


async def test_gauges_counters_and_the_metrics_endpoint(
    start: Any, producer: Producer, kafka: KafkaSettings
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dlq = await start(metrics_port=port, metrics_host="127.0.0.1")
    topic = kafka.topic(JOBS_DUE)
    for n in range(3):
        await park(producer, kafka, origin(topic, n, b"{}"), InvalidPayload("x"))
    await park(producer, kafka, origin(topic, 9, b"{}"), UndecodableMessage("x"), reason="undecodable")
    await park(producer, kafka, origin(topic, 9, b"{}"), UndecodableMessage("x"), reason="undecodable")
    registry = dlq.service.metrics.registry

    def sample(name: str, **labels: str) -> float:
        return cast(float, registry.get_sample_value(name, labels) or 0.0)

    await assert_eventually(lambda: sample("slotflow_dlq_repeat_sightings_total") == 1, timeout=30)
    assert sample("slotflow_dlq_parked_total", reason="invalid_payload") == 3
    assert sample("slotflow_dlq_parked_total", reason="undecodable") == 1
    await assert_eventually(
        lambda: sample("slotflow_dlq_parked_entries", reason="invalid_payload") == 3, timeout=10
    )
    await assert_eventually(lambda: sample("slotflow_dlq_oldest_parked_age_seconds") > 0, timeout=10)
    async with httpx.AsyncClient() as client:
        scraped = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    assert 'slotflow_dlq_parked_total{reason="invalid_payload"} 3.0' in scraped
    assert "slotflow_dlq_oldest_parked_age_seconds" in scraped


async def test_garbage_on_the_dlq_topic_itself_is_parked_too(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(DLQ_MESSAGES)
    sent = await producer.send_raw(topic, key=b"foreign", value=b"not a dead letter")
    dead_id = f"{topic}:{sent.partition}:{sent.offset}"

    async def parked() -> bool:
        return await dlq.count("id = $1", dead_id) == 1

    await assert_eventually(parked, timeout=30)
    entry = await queries.get_dead_letter(dlq.pool, schema="dlq", dead_letter_id=dead_id)
    assert entry is not None
    assert (entry.reason, entry.source_service, entry.topic) == ("undecodable", "dlq", topic)
    assert base64.b64decode(entry.value_b64) == b"not a dead letter"
    assert (
        dlq.service.metrics.registry.get_sample_value(
            "slotflow_dlq_own_poison_total", {"reason": "undecodable"}
        )
        == 1
    )


async def test_a_letter_postgresql_refuses_as_data_is_parked_at_once_as_own_poison(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    # Issue 20, the same class of bug as the projector's: a partition number beyond PostgreSQL's
    # integer (SQLSTATE 22003) fails the same way on every try, but parking took every database
    # error for an outage and retried the letter forever, holding up its partition. The letter
    # model now refuses such a partition (the acceptance rule), so a letter carrying one comes
    # from a producer that does not validate, and the dlq refuses it at decode, naming the field.
    topic = kafka.topic(JOBS_DUE)
    letter = dead_letter_envelope(
        origin(topic, 7, b"{}"),
        UndecodableMessage("not an envelope"),
        source_service="ticker",
        occurred_at=AT,
    )
    raw = json.loads(encode(letter))
    raw["data"]["partition"] = 2**31
    await producer.send_raw(
        kafka.topic(DLQ_MESSAGES), key=letter.key.encode(), value=json.dumps(raw).encode()
    )
    good = origin(topic, 8, b"{}")
    await park(producer, kafka, good, UndecodableMessage("not an envelope"), reason="undecodable")
    dlq_topic = kafka.topic(DLQ_MESSAGES)

    async def both_parked() -> bool:
        return (
            await dlq.count("id = $1", f"{topic}:1:8") == 1 and await dlq.count("topic = $1", dlq_topic) == 1
        )

    await assert_eventually(both_parked, timeout=30, message="the good letter and the wrapped bad one parked")
    (wrapped,) = await dlq.pool.fetch("SELECT id FROM dlq.dead_letters WHERE topic = $1", dlq_topic)
    entry = await queries.get_dead_letter(dlq.pool, schema="dlq", dead_letter_id=wrapped["id"])
    assert entry is not None
    assert (entry.reason, entry.source_service, entry.error_type) == (
        "invalid_payload",
        "dlq",
        "InvalidPayload",
    )
    assert "partition: Input should be less than or equal to 2147483647" in entry.error
    # The refused letter itself, byte for byte, for whoever looks into it.
    assert f'"partition": {2**31}'.encode() in base64.b64decode(entry.value_b64)


async def test_a_letter_about_a_record_holding_nan_is_parked_as_it_is(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    # Every consumer refuses a record holding NaN (the acceptance rule), so its letter comes here;
    # the dlq decoded it for inspection into jsonb, which refuses NaN: the letter was parked as the
    # dlq's own poison (a letter about a letter) instead of under its origin.
    topic = kafka.topic(SCHEDULE_COMMANDS)
    raw = b'{"type": "schedule.create", "version": 1, "data": {"amount": NaN, "other": Infinity}}'
    await park(producer, kafka, origin(topic, 77, raw), InvalidPayload("holds nan"), reason="invalid_payload")

    async def parked() -> bool:
        return await dlq.count("id = $1", f"{topic}:1:77") == 1

    await assert_eventually(parked, timeout=30, message="the letter parked under its origin")
    entry = await queries.get_dead_letter(dlq.pool, schema="dlq", dead_letter_id=f"{topic}:1:77")
    assert entry is not None
    assert (entry.reason, entry.decoded) == ("invalid_payload", None)  # inspected as raw bytes
    assert base64.b64decode(entry.value_b64) == raw
    assert await dlq.count("topic = $1", kafka.topic(DLQ_MESSAGES)) == 0  # nothing parked as the dlq's own
