"""Signing a command: the canonical bytes, what the signature covers, key ids and key files."""

import json
import stat
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from slotflow.contracts import PauseSchedule, StartWorkflow, TriggerNow
from slotflow.contracts.codec import decode, encode
from slotflow.contracts.envelope import Envelope
from slotflow.contracts.routing import build_command
from slotflow.principals.signing import (
    SIGNATURE_CONTEXT,
    KeyFileError,
    MalformedKey,
    Signer,
    canonical_bytes,
    decode_public_key,
    encode_public_key,
    is_key_id,
    key_id_of,
    load_private_key,
    load_signer,
    signature_matches,
    write_private_key,
)

TOPIC = "ns.slotflow.schedules.commands.v1"
AT = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def _signer(principal: str = "key:alice", *, acts_for_others: bool = False) -> Signer:
    return Signer(Ed25519PrivateKey.generate(), principal, acts_for_others=acts_for_others)


def _command(**fields: Any) -> Envelope:
    _, envelope = build_command(
        TriggerNow(schedule_id="payouts"), command_id="cmd-1", source="test", occurred_at=AT, **fields
    )
    return envelope


def _verifies(envelope: Envelope, signer: Signer, topic: str = TOPIC) -> bool:
    proof = envelope.proof
    assert proof is not None
    signed = canonical_bytes(envelope, topic=topic, key_id=proof.key_id, signed_at=proof.signed_at)
    return signature_matches(signer.public_key, proof.signature, signed)


def test_canonical_bytes_are_the_context_then_sorted_compact_ascii_json() -> None:
    envelope = _command(principal="key:alice")
    raw = canonical_bytes(envelope, topic=TOPIC, key_id="k_" + "0" * 32, signed_at=AT)
    assert raw.startswith(SIGNATURE_CONTEXT)
    body = raw[len(SIGNATURE_CONTEXT) :]
    parsed = json.loads(body)
    assert list(parsed) == sorted(parsed)
    assert parsed == {
        "data": {"schedule_id": "payouts"},
        "id": "cmd-1",
        "key": "payouts",
        "key_id": "k_" + "0" * 32,
        "occurred_at": "2026-03-01T02:00:00.000000+00:00",
        "principal": "key:alice",
        "signed_at": "2026-03-01T02:00:00.000000+00:00",
        "source": "test",
        "topic": TOPIC,
        "type": "schedule.trigger",
        "version": 1,
    }
    assert b" " not in body
    assert body.isascii()


def test_canonical_bytes_spell_one_instant_one_way_whatever_its_offset() -> None:
    berlin = AT.astimezone(timezone(timedelta(hours=1)))
    one = canonical_bytes(_command(), topic=TOPIC, key_id="k", signed_at=AT)
    other = canonical_bytes(_command(), topic=TOPIC, key_id="k", signed_at=berlin)
    assert one == other


def test_canonical_bytes_refuse_what_json_cannot_carry() -> None:
    envelope = _command().model_copy(update={"data": {"x": float("nan")}})
    with pytest.raises(ValueError, match="Out of range float values"):
        canonical_bytes(envelope, topic=TOPIC, key_id="k", signed_at=AT)


def test_a_signed_command_verifies_after_the_wire_and_names_the_signers_principal() -> None:
    signer = _signer()
    signed = signer.sign(_command(principal="token:someone-else"), topic=TOPIC)
    assert signed.principal == "key:alice"  # a key proves only its own principal
    assert signed.proof is not None
    assert signed.proof.key_id == signer.key_id
    received = decode(encode(signed))
    assert received == signed
    assert _verifies(received, signer)


def test_the_apis_signer_keeps_the_caller_it_names() -> None:
    api = _signer("service:api", acts_for_others=True)
    signed = api.sign(_command(principal="token:oncall"), topic=TOPIC)
    assert signed.principal == "token:oncall"
    assert _verifies(signed, api)
    unnamed = api.sign(_command(), topic=TOPIC)
    assert unnamed.principal == "service:api"


@pytest.mark.parametrize(
    "change",
    [
        {"principal": "token:root-admin"},
        {"id": "cmd-2"},
        {"key": "other"},
        {"type": "schedule.pause"},
        {"source": "api"},
        {"occurred_at": AT + timedelta(microseconds=1)},
        {"data": {"schedule_id": "other-payouts"}},
    ],
    ids=lambda change: next(iter(change)),
)
def test_changing_any_field_after_signing_breaks_the_signature(change: dict[str, Any]) -> None:
    signer = _signer()
    signed = signer.sign(_command(), topic=TOPIC)
    assert not _verifies(signed.model_copy(update=change), signer)


def test_the_signature_binds_the_topic_the_signing_time_and_the_key() -> None:
    signer = _signer()
    signed = signer.sign(_command(), topic=TOPIC, signed_at=AT)
    assert signed.proof is not None
    assert not _verifies(signed, signer, topic="other-namespace.slotflow.schedules.commands.v1")
    later = signed.proof.model_copy(update={"signed_at": AT + timedelta(days=1)})
    assert not _verifies(signed.model_copy(update={"proof": later}), signer)
    assert not _verifies(signed, _signer())  # another key


def test_malformed_signatures_are_no_match_not_errors() -> None:
    signer = _signer()
    message = b"anything"
    for signature in ("", "!!!", "AAAA", "A" * 86, "A" * 200):
        assert not signature_matches(signer.public_key, signature, message)
    assert not signature_matches("not-a-key", "A" * 86, message)


SIGNER = _signer()
#: What the acceptance rule lets into a payload (no NUL, no lone surrogate, finite numbers).
_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
_keys = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=20,
)


@given(payload=st.dictionaries(_keys, json_values, max_size=5))
def test_any_json_payload_still_verifies_after_encoding_and_decoding(payload: dict[str, Any]) -> None:
    _, envelope = build_command(
        StartWorkflow(workflow_id="order-1", workflow_type="orders.checkout", input=payload),
        command_id="cmd-wf",
        source="test",
    )
    signed = SIGNER.sign(envelope, topic="slotflow.workflows.commands.v1")
    assert _verifies(decode(encode(signed)), SIGNER, topic="slotflow.workflows.commands.v1")


def test_key_ids_derive_from_the_public_key() -> None:
    key = Ed25519PrivateKey.generate()
    text = encode_public_key(key.public_key())
    assert len(text) == 43
    assert key_id_of(text) == key_id_of(key.public_key())
    assert is_key_id(key_id_of(text))
    assert key_id_of(text) != key_id_of(Ed25519PrivateKey.generate().public_key())
    assert encode_public_key(decode_public_key(text)) == text


@pytest.mark.parametrize("text", ["", "****", "AAAA", "A" * 44])
def test_a_public_key_that_is_not_32_bytes_of_base64url_is_refused(text: str) -> None:
    with pytest.raises(MalformedKey):
        decode_public_key(text)


def test_a_key_file_is_written_for_its_owner_only_never_overwritten_and_read_back(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "alice.pem"
    write_private_key(path, key)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert encode_public_key(load_private_key(path).public_key()) == encode_public_key(key.public_key())
    with pytest.raises(KeyFileError, match="never overwritten"):
        write_private_key(path, Ed25519PrivateKey.generate())
    signer = load_signer(path, "key:alice")
    assert signer.key_id == key_id_of(key.public_key())


def test_a_missing_or_foreign_key_file_is_refused_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="cannot read"):
        load_private_key(tmp_path / "absent.pem")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key")
    with pytest.raises(KeyFileError, match="not an unencrypted PEM"):
        load_private_key(junk)


def test_pause_commands_sign_too() -> None:
    signer = _signer()
    _, envelope = build_command(PauseSchedule(schedule_id="p", reason="maintenance"), source="t")
    assert _verifies(signer.sign(envelope, topic=TOPIC), signer)
