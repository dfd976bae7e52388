"""Every consumer's poison path is total: any bytes as key, value and headers, and it returns.

Issue 23: one record whose rejection could not be built (its id too long to suffix, its key past
the envelope's limit) escaped the ticker's reject path and crash-looped it. These properties feed
arbitrary records to each consumer's poison path (the shared decode and letter, the consume
loop as the DLQ service's two loops, the api projector, the ticker and the orchestrator run it,
the ticker's CommandRejected, the claimer's intake, the stats worker's decode) and check it
returns with something PostgreSQL and Kafka will take: ids and keys within the envelope's limits,
no NUL, no lone surrogate, encodable.
"""

import asyncio
import json
from datetime import UTC, datetime
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slotflow.contracts import REGISTRY, DeadLettered, Envelope, JobDue
from slotflow.contracts.acceptance import ID_CONTROL, ID_MAX_BYTES
from slotflow.contracts.catalogue import DLQ_COMMAND_TYPES
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import ID_MAX_CHARS, KEY_MAX_CHARS, fit_id, fit_key
from slotflow.core.nul import storable
from slotflow.errors import PoisonMessage, UndecodableMessage
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.loop import ConsumeLoop, Incoming
from slotflow.kafka.poison import (
    DLQ_MAX_ENVELOPE_BYTES,
    dead_letter_envelope,
    decode_record,
    guess_ids,
    minimal_dead_letter,
)
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.pg.outbox import Encoded, Staged, encoded
from slotflow.settings import KafkaSettings
from slotflow_claimer.events import RunEvents
from slotflow_claimer.intake import Intake, poison_letter
from slotflow_orchestrator.app import ACCEPTED as ORCHESTRATOR_INPUTS
from slotflow_stats.errors import UndecodableEvent
from slotflow_stats.observe import SUBJECT_MAX_CHARS, Family, observe
from slotflow_ticker.commands import COMMANDS, poison_rejection
from slotflow_ticker.events import EventFactory, Topics
from tests.unit.kafka.test_loop import FakeProducer

AT = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
KAFKA = KafkaSettings(bootstrap="127.0.0.1:1")

# Hostile text: NUL, lone surrogates, long runs, ordinary ids.
hostile_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.sampled_from("a\x00\ud800é/@#~"), max_size=30),
    st.builds(lambda c, n: c * n, st.sampled_from(["i", "\x00", "é", "\ud800"]), st.integers(990, 1100)),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | hostile_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3),
    max_leaves=8,
)
known_types = st.sampled_from(
    [*(m.message_type for m in COMMANDS), JobDue.message_type, DeadLettered.message_type, "no.such.type"]
)


def _envelope_json(draw: Any) -> bytes:
    """Something shaped like an envelope, with hostile fields; sometimes a valid JobDue."""
    data = draw(st.dictionaries(hostile_text, json_values, max_size=4))
    if draw(st.booleans()):
        data.update(run_id=draw(hostile_text), job_id=draw(hostile_text), slot=AT.isoformat(), handler="h")
    raw = {
        "type": draw(known_types),
        "version": draw(st.sampled_from([1, 2, 0])),
        "id": draw(hostile_text),
        "key": draw(hostile_text),
        "occurred_at": AT.isoformat(),
        "source": draw(hostile_text),
        "data": data,
    }
    text = json.dumps(raw, ensure_ascii=draw(st.booleans()))
    return text.encode("utf-8", errors="surrogatepass")


@st.composite
def records(draw: Any) -> Record:
    value = draw(
        st.one_of(
            st.none(),
            st.binary(max_size=200),
            st.builds(lambda: b"{" * 5000),
            st.builds(lambda n: b"[" * n, st.integers(900, 100_000)),
            st.composite(lambda d: _envelope_json(d))(),
        )
    )
    key = draw(
        st.one_of(st.none(), st.binary(max_size=50), st.builds(lambda n: b"k" * n, st.integers(990, 1100)))
    )
    headers = draw(st.lists(st.tuples(hostile_text, st.binary(max_size=40)), max_size=4).map(tuple))
    return Record("slotflow.schedule.commands.v1", 1, draw(st.integers(0, 2**40)), key, value, headers, None)


def assert_storable(row: Encoded) -> None:
    """What the outbox's text columns and Kafka will take."""
    for text in (row.topic, row.event_id, row.key, row.headers):
        assert "\x00" not in text
        text.encode("utf-8")  # no lone surrogate
    assert 1 <= len(row.event_id) <= ID_MAX_CHARS
    assert len(row.key) <= KEY_MAX_CHARS
    Envelope.model_validate_json(row.value)


PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(hostile_text, st.sampled_from(["", "/rejected", "/accepted"]))
def test_fit_id_always_fits_and_is_deterministic(base: str, suffix: str) -> None:
    fitted = fit_id(base, suffix)
    assert len(fitted) <= ID_MAX_CHARS
    assert len(fitted.encode()) <= ID_MAX_BYTES  # every index it keys takes it
    assert fitted == storable(fitted)
    assert not ID_CONTROL.search(fitted)  # every consumer's identity check refuses one
    assert fitted.endswith(suffix)
    assert fitted == fit_id(base, suffix)
    whole = base + suffix
    clean = storable(base) == base and not ID_CONTROL.search(base)
    if clean and len(whole) <= ID_MAX_CHARS and len(whole.encode()) <= ID_MAX_BYTES:
        assert fitted == whole
    assert len(fit_key(base)) <= KEY_MAX_CHARS


def test_long_ids_that_differ_only_past_the_cut_stay_apart() -> None:
    assert fit_id("i" * 995 + "a", "/rejected") != fit_id("i" * 995 + "b", "/rejected")


@PROPERTY
@given(records())
def test_the_shared_decode_and_letter_are_total(record: Record) -> None:
    try:
        decode_record(record)
    except PoisonMessage as poison:
        error: BaseException = poison
    else:
        error = UndecodableMessage("refused by a handler")
    guess_ids(record)
    letter = dead_letter_envelope(record, error, source_service="test", occurred_at=AT)
    assert len(encode(letter)) <= DLQ_MAX_ENVELOPE_BYTES
    assert_storable(encoded(Staged("dlq", letter)))
    REGISTRY.parse(letter)
    assert_storable(
        encoded(
            Staged("dlq", minimal_dead_letter(record, error, source_service="t", occurred_at=AT, reason="r"))
        )
    )


class _OneBatch:
    """A consumer stand-in that commits (the loop is exercised, not the broker)."""

    committed = False

    async def commit(self, records: object) -> None:
        self.committed = True


async def _through_loop(
    record: Record, accept: tuple[type[Any], ...] | None, max_bytes: int, *, batched: bool = False
) -> None:
    handled: list[Incoming] = []
    reasons: list[str] = []

    async def handler(incoming: Incoming) -> None:
        handled.append(incoming)

    async def batch_handler(batch: list[Incoming]) -> None:
        handled.extend(batch)

    consumer, producer = _OneBatch(), FakeProducer()
    loop = ConsumeLoop(
        cast(Consumer, consumer),
        handler=handler,
        batch_handler=batch_handler if batched else None,
        dlq=cast(Producer, producer),
        dlq_topic="dlq",
        source_service="test",
        accept=accept,
        max_bytes=max_bytes,
        on_dead_letter=lambda _record, reason: reasons.append(reason),
    )
    await loop.process([record])
    assert consumer.committed
    assert len(handled) + len(producer.sent) == 1
    assert len(reasons) == len(producer.sent)
    for letter in producer.sent:
        assert_storable(encoded(Staged("dlq", letter)))


@PROPERTY
@given(records())
def test_the_consume_loop_parks_or_hands_over_every_record(record: Record) -> None:
    # As the DLQ service's letters loop, the api projector (every type) and the ticker run it.
    asyncio.run(_through_loop(record, (DeadLettered,), 16 * 1024 * 1024, batched=True))
    asyncio.run(_through_loop(record, None, 1_048_576))
    asyncio.run(_through_loop(record, COMMANDS, 1_048_576))
    # The DLQ service's commands loop, and the orchestrator's intake (batched).
    asyncio.run(_through_loop(record, DLQ_COMMAND_TYPES, 1_048_576))
    asyncio.run(_through_loop(record, ORCHESTRATOR_INPUTS, 1_048_576, batched=True))


@PROPERTY
@given(records())
def test_the_tickers_rejection_is_total(record: Record) -> None:
    events = EventFactory(Topics.of(KAFKA), source="ticker/t")
    try:
        decode_record(record, accept=COMMANDS)
    except PoisonMessage as poison:
        rejection = poison_rejection(events, record, poison, now=AT)
        assert rejection is not None
        assert_storable(encoded(rejection))


@PROPERTY
@given(records())
def test_the_claimers_intake_is_total(record: Record) -> None:
    intake = Intake(
        cast(Any, None),
        schema="claimer",
        owner="c",
        lease_ttl=10.0,
        kafka=KAFKA,
        events=RunEvents(KAFKA),
        metrics=cast(Any, None),
    )
    dues, poison = intake.decode([record])
    assert len(dues) + len(poison) == 1
    for bad, err in poison:
        assert_storable(encoded(poison_letter("dlq", bad, err, at=AT)))


@PROPERTY
@given(records())
def test_the_stats_workers_decode_is_total(record: Record) -> None:
    """It never parks (the projector parks the same record); it skips anything it cannot count,
    and only that: an UndecodableEvent, never another error out of its faust agent."""
    families: tuple[Family, ...] = ("runs", "schedules", "dlq")
    for family in families:
        try:
            observation = observe(family, record.value, 1_780_000_000.0)
        except UndecodableEvent:
            continue
        if observation is not None:
            assert 1 <= len(observation.subject) <= SUBJECT_MAX_CHARS
