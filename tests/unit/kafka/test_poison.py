"""Every kind of poison is recognised with its reason, and a dead letter always carries the record."""

import base64
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slotflow.contracts import (
    REGISTRY,
    CreateSchedule,
    CronSpec,
    DeadLettered,
    DeadLetterFilter,
    DiscardDeadLetters,
    Envelope,
    FireJobDue,
    JobDue,
    ScheduleDefinition,
    StartTimer,
    wrap,
)
from slotflow.contracts.codec import encode
from slotflow.contracts.timers import retry_timer_id
from slotflow.errors import InvalidPayload, KeyMismatch, PoisonMessage, UnexpectedMessageType
from slotflow.kafka.poison import (
    TRUNCATED_PREFIX_BYTES,
    dead_letter_envelope,
    decode_record,
    expected_key,
    guess_ids,
)
from slotflow.kafka.records import Record
from slotflow.testing.badinput import catalogue

AT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)


def job_due(job_id: str = "payouts", *, key: str | None = None) -> Envelope:
    job = JobDue(
        run_id=f"{job_id}@2026-12-02T02:00:00Z", job_id=job_id, slot=AT, handler="pay", tags=("money-moving",)
    )
    return wrap(job, id=job.run_id, key=key if key is not None else job_id, source="ticker", occurred_at=AT)


def create_schedule() -> Envelope:
    message = CreateSchedule(
        schedule_id="nightly",
        definition=ScheduleDefinition(spec=CronSpec(expression="0 2 * * *"), handler="pay"),
    )
    return wrap(message, id="cmd-1", key="nightly", source="api", occurred_at=AT)


def discard() -> Envelope:
    message = DiscardDeadLetters(selection=DeadLetterFilter(reason="undecodable"), reason="obsolete")
    return wrap(message, id="cmd-2", key="cmd-2", source="api", occurred_at=AT)


def record(
    value: bytes | None,
    key: bytes | None = b"payouts",
    *,
    offset: int = 7,
    headers: tuple[tuple[str, bytes], ...] = (),
) -> Record:
    return Record("t.jobs", 2, offset, key, value, headers, 1_700_000_000_000)


@pytest.mark.parametrize(
    "good", [job_due(), create_schedule(), discard()], ids=["job_due", "create_schedule", "discard"]
)
def test_every_catalogue_entry_is_poison_with_its_reason(good: Envelope) -> None:
    accept = (REGISTRY.model_for(good.type, good.version),)
    decode_record(record(encode(good), good.key.encode()), accept=accept)  # the template itself is fine
    entries = catalogue(good)
    assert {e.name for e in entries} >= {
        "truncated_json", "non_utf8_bytes", "wrong_field_type", "unknown_version", "missing_field",
        "two_mib_message", "invalid_cron", "record_key_differs", "quotes_in_name", "sql_fragment_in_name",
    }  # fmt: skip
    for entry in entries:
        with pytest.raises(PoisonMessage) as caught:
            decode_record(record(entry.value, entry.key), accept=accept)
        assert caught.value.reason == entry.reason, entry.name
        # And whatever the bytes, a dead letter and the best-effort ids come out of them.
        guess_ids(record(entry.value, entry.key))
        dead_letter_envelope(record(entry.value, entry.key), caught.value, source_service="s", occurred_at=AT)


def test_payload_key_is_checked_per_type() -> None:
    assert expected_key(job_due(), REGISTRY.parse(job_due())) == "payouts"
    assert expected_key(create_schedule(), REGISTRY.parse(create_schedule())) == "nightly"
    # A DLQ command selecting by filter is keyed by its command id.
    assert expected_key(discard(), REGISTRY.parse(discard())) == "cmd-2"
    moved = job_due(key="elsewhere")
    with pytest.raises(KeyMismatch, match="payload names 'payouts'"):
        decode_record(record(encode(moved), b"elsewhere"))
    # Turned off, only the record key versus the envelope key is compared.
    decode_record(record(encode(moved), b"elsewhere"), check_payload_key=False)


def test_timer_commands_are_keyed_by_timer_id() -> None:
    first = REGISTRY.parse(job_due())
    assert isinstance(first, JobDue)
    job = first.model_copy(update={"attempt": 2, "kind": "retry"})
    timer_id = retry_timer_id(job.run_id, 2)
    timer = StartTimer(timer_id=timer_id, fire_at=AT, on_fire=FireJobDue(job=job))
    envelope = wrap(timer, id="t-1", key=timer_id, source="claimer", occurred_at=AT)
    decode_record(record(encode(envelope), timer_id.encode()))
    with pytest.raises(KeyMismatch):
        decode_record(record(encode(envelope.model_copy(update={"key": "payouts"})), b"payouts"))


def test_accept_refuses_other_valid_types() -> None:
    with pytest.raises(UnexpectedMessageType, match=r"expected schedule\.create"):
        decode_record(record(encode(job_due())), accept=(CreateSchedule,))


def test_dead_letter_is_byte_exact_and_idempotent_on_the_origin() -> None:
    raw_key = b"\xffkey\x00"
    headers = (("traceparent", b"00-abc-01"), ("bin", b"\x00\xff"))
    rec = record(b"\x00\x01 not json", raw_key, headers=headers)
    envelope = dead_letter_envelope(rec, InvalidPayload("bad"), source_service="ticker", occurred_at=AT)
    letter = REGISTRY.parse(envelope)
    assert isinstance(letter, DeadLettered)
    assert envelope.id == "t.jobs:2:7"
    assert "\x00" not in envelope.key  # outboxes store the key as text
    assert letter.reason == "invalid_payload"
    assert base64.b64decode(letter.value_b64) == b"\x00\x01 not json"
    assert base64.b64decode(letter.key_b64 or "") == raw_key
    assert {k: base64.b64decode(v) for k, v in letter.headers_b64.items()} == dict(headers)
    assert letter.value_size == len(b"\x00\x01 not json")
    assert not letter.value_truncated
    assert letter.traceback == ""  # poison has no stack worth keeping


def test_handler_errors_keep_their_traceback() -> None:
    try:
        raise KeyError("missing")
    except KeyError as err:
        error = err
    envelope = dead_letter_envelope(
        record(b"{}"), error, source_service="s", occurred_at=AT, reason="permanent_error"
    )
    letter = REGISTRY.parse(envelope)
    assert isinstance(letter, DeadLettered)
    assert "raise KeyError" in letter.traceback
    assert letter.error_type == "KeyError"


def test_a_record_too_large_for_the_dlq_is_parked_truncated_not_dropped() -> None:
    big = b"v" * 300_000
    envelope = dead_letter_envelope(
        record(big), InvalidPayload("x"), source_service="s", occurred_at=AT, max_bytes=200_000
    )
    assert len(encode(envelope)) <= 200_000
    letter = REGISTRY.parse(envelope)
    assert isinstance(letter, DeadLettered)
    assert letter.value_truncated
    assert letter.value_size == len(big)
    assert base64.b64decode(letter.value_b64) == big[:TRUNCATED_PREFIX_BYTES]
    assert (letter.topic, letter.partition, letter.offset) == ("t.jobs", 2, 7)


def test_huge_headers_fall_back_to_a_minimal_letter() -> None:
    headers = tuple((f"h{i}", b"\x01" * 5000) for i in range(100))
    envelope = dead_letter_envelope(
        record(b"v", headers=headers),
        InvalidPayload("x"),
        source_service="s",
        occurred_at=AT,
        max_bytes=100_000,
    )
    assert len(encode(envelope)) <= 100_000


def test_a_long_key_still_makes_a_valid_envelope() -> None:
    envelope = dead_letter_envelope(
        record(b"v", b"k" * 5000), InvalidPayload("x"), source_service="s", occurred_at=AT
    )
    assert len(envelope.key) == 1000
    letter = REGISTRY.parse(envelope)
    assert isinstance(letter, DeadLettered)
    assert base64.b64decode(letter.key_b64 or "") == b"k" * 5000


def test_ids_are_guessed_from_invalid_payloads_for_filtering() -> None:
    raw = encode(job_due()).replace(b'"handler":"pay"', b'"handler":7')
    assert guess_ids(record(raw)) == ("payouts@2026-12-02T02:00:00Z", "payouts", ("money-moving",))
    assert guess_ids(record(b"\xff")) == (None, None, ())
    assert guess_ids(record(b'{"data": {"schedule_id": "s", "tags": "no"}}')) == (None, "s", ())


@settings(max_examples=200, deadline=None)
@given(
    value=st.binary(max_size=2000),
    key=st.one_of(st.none(), st.binary(max_size=300)),
    headers=st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=50)), max_size=5),
)
def test_any_record_makes_a_dead_letter_that_decodes(
    value: bytes, key: bytes | None, headers: list[tuple[str, bytes]]
) -> None:
    rec = record(value, key, headers=tuple(headers))
    envelope = dead_letter_envelope(rec, InvalidPayload("x"), source_service="s", occurred_at=AT)
    parsed = REGISTRY.parse(envelope)
    assert isinstance(parsed, DeadLettered)
    assert base64.b64decode(parsed.value_b64) == value
    if key is not None:
        assert base64.b64decode(parsed.key_b64 or "") == key
    # The DLQ consumer itself accepts what every consumer sends it.
    decode_record(
        Record("dlq", 0, 0, envelope.key.encode(), encode(envelope), (), None), accept=(DeadLettered,)
    )
