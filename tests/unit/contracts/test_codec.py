from datetime import UTC, datetime

import pytest

from slotflow.contracts import REGISTRY, JobDue, wrap
from slotflow.contracts.codec import decode, encode
from slotflow.errors import InvalidPayload, MessageTooLarge, UndecodableMessage, UnknownMessageType

AT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)


def make_job() -> JobDue:
    return JobDue(run_id="payouts@2026-12-02T02:00:00Z", job_id="payouts", slot=AT, handler="pay")


def test_envelope_round_trips_through_bytes() -> None:
    envelope = wrap(make_job(), id="payouts@2026-12-02T02:00:00Z", key="payouts", source="t", occurred_at=AT)
    decoded = decode(encode(envelope))
    assert decoded == envelope
    assert REGISTRY.parse(decoded) == make_job()


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"", "empty"),
        (None, "empty"),
        (b'{"type": "job.due", "vers', "not a slotflow envelope"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"[1, 2, 3]", "not a slotflow envelope"),
        (b'{"type": "job.due"}', "not a slotflow envelope"),
    ],
)
def test_undecodable_bytes_name_the_problem(raw: bytes | None, fragment: str) -> None:
    with pytest.raises(UndecodableMessage, match=fragment) as caught:
        decode(raw)
    assert caught.value.reason == "undecodable"


def test_oversize_record_is_refused_before_parsing() -> None:
    with pytest.raises(MessageTooLarge) as caught:
        decode(b"x" * 2_000_000, max_bytes=1_048_576)
    assert caught.value.reason == "too_large"


def test_unknown_version_lists_known_versions() -> None:
    envelope = wrap(make_job(), id="x", key="payouts", source="t", occurred_at=AT)
    future = envelope.model_copy(update={"version": 9})
    with pytest.raises(UnknownMessageType, match=r"job\.due.*version 9.*known versions \[1\]"):
        REGISTRY.parse(future)


def test_invalid_payload_names_each_field() -> None:
    envelope = wrap(make_job(), id="x", key="payouts", source="t", occurred_at=AT)
    broken = envelope.model_copy(update={"data": {**envelope.data, "slot": "yesterday", "handler": None}})
    with pytest.raises(InvalidPayload) as caught:
        REGISTRY.parse(broken)
    assert "slot" in str(caught.value)
    assert "handler" in str(caught.value)


def test_naive_occurred_at_is_rejected() -> None:
    raw = encode(wrap(make_job(), id="x", key="k", source="t", occurred_at=AT)).replace(b"Z", b"")
    with pytest.raises(UndecodableMessage, match="occurred_at"):
        decode(raw)


def test_unknown_fields_are_tolerated_for_forward_compatibility() -> None:
    envelope = wrap(make_job(), id="x", key="payouts", source="t", occurred_at=AT)
    newer = envelope.model_copy(update={"data": {**envelope.data, "added_in_v1_1": True}})
    assert REGISTRY.parse(newer) == make_job()
