"""The check every command consumer makes: each refusal with its reason, the replay window, and
nothing checked where signatures are optional."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from slotflow.contracts import (
    CreateSchedule,
    Message,
    PauseSchedule,
    ScheduleDefinition,
    SigningKey,
    TriggerNow,
)
from slotflow.contracts.envelope import Envelope
from slotflow.contracts.routing import build_command
from slotflow.contracts.schedules import OnceSpec
from slotflow.contracts.scopes import Scope
from slotflow.errors import ConfigurationError
from slotflow.principals import CommandVerifier, KeyRing, SignatureSettings, Signer, UnprovenCommand

TOPIC = "slotflow.schedules.commands.v1"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
REQUIRED = SignatureSettings(command_signatures="required")


def _registered(
    signer: Signer, scope: Scope = "operate", *, revoked: bool = False, acts_for_others: bool = False
) -> SigningKey:
    return SigningKey(
        key_id=signer.key_id,
        name=signer.principal.split(":", 1)[1],
        principal=signer.principal,
        scope=scope,
        public_key=signer.public_key,
        acts_for_others=acts_for_others,
        created_at=NOW - timedelta(days=30),
        created_by="token:admin",
        revoked_at=NOW - timedelta(hours=1) if revoked else None,
        revoked_by="token:admin" if revoked else None,
    )


ALICE = Signer(Ed25519PrivateKey.generate(), "key:alice")
READER = Signer(Ed25519PrivateKey.generate(), "key:reader")
GONE = Signer(Ed25519PrivateKey.generate(), "key:gone")
API = Signer(Ed25519PrivateKey.generate(), "service:api", acts_for_others=True)
STRANGER = Signer(Ed25519PrivateKey.generate(), "key:stranger")
KEYS = KeyRing(
    [
        _registered(ALICE),
        _registered(READER, "read"),
        _registered(GONE, revoked=True),
        _registered(API, "admin", acts_for_others=True),
    ]
)


def _command(message: Message | None = None, **fields: Any) -> Envelope:
    _, envelope = build_command(message or TriggerNow(schedule_id="payouts"), source="test", **fields)
    return envelope


def _verifier(settings: SignatureSettings = REQUIRED) -> CommandVerifier:
    return CommandVerifier(settings, KEYS)


def _refusal(envelope: Envelope, *, now: datetime = NOW) -> str:
    with pytest.raises(UnprovenCommand) as caught:
        _verifier().verify(envelope, topic=TOPIC, now=now)
    return str(caught.value)


def test_a_command_signed_by_a_registered_key_is_proven_as_its_principal() -> None:
    proven = _verifier().verify(ALICE.sign(_command(), topic=TOPIC, signed_at=NOW), topic=TOPIC, now=NOW)
    assert (proven.principal, proven.key_id) == ("key:alice", ALICE.key_id)


def test_the_apis_key_proves_the_caller_it_names() -> None:
    signed = API.sign(_command(principal="token:oncall"), topic=TOPIC, signed_at=NOW)
    assert _verifier().verify(signed, topic=TOPIC, now=NOW).principal == "token:oncall"


def test_an_unsigned_command_is_refused() -> None:
    assert _refusal(_command(principal="token:ops-admin")).startswith("unsigned:")


def test_an_unknown_key_is_refused() -> None:
    reason = _refusal(STRANGER.sign(_command(), topic=TOPIC, signed_at=NOW))
    assert f"signed with key '{STRANGER.key_id}', which no principal has registered" in reason


def test_a_forged_signature_is_refused() -> None:
    # Alice's key id, a signature by another key: what anyone who read Alice's commands can write.
    forged = STRANGER.sign(_command(), topic=TOPIC, signed_at=NOW)
    assert forged.proof is not None
    claimed = forged.model_copy(
        update={"principal": "key:alice", "proof": forged.proof.model_copy(update={"key_id": ALICE.key_id})}
    )
    assert "the signature does not match the command" in _refusal(claimed)


def test_a_changed_command_is_refused() -> None:
    signed = ALICE.sign(_command(), topic=TOPIC, signed_at=NOW)
    changed = signed.model_copy(update={"data": {"schedule_id": "someone-elses-payouts"}})
    assert "the signature does not match the command" in _refusal(changed)


def test_a_command_signed_for_another_topic_is_refused() -> None:
    signed = ALICE.sign(_command(), topic="staging." + TOPIC, signed_at=NOW)
    assert "the signature does not match" in _refusal(signed)


def test_a_revoked_key_is_refused_even_with_a_good_signature() -> None:
    reason = _refusal(GONE.sign(_command(), topic=TOPIC, signed_at=NOW))
    assert f"signed with key {GONE.key_id} of key:gone, revoked at" in reason
    assert "by token:admin" in reason


def test_a_key_proves_only_its_own_principal() -> None:
    # A principal the key does not belong to, signed by the key: Alice cannot speak as the admin.
    signed = ALICE.sign(_command(), topic=TOPIC, signed_at=NOW)
    assert signed.proof is not None
    as_admin = signed.model_copy(update={"principal": "token:root-admin", "proof": None})
    resigned = Signer(ALICE.private_key, "token:root-admin").sign(as_admin, topic=TOPIC, signed_at=NOW)
    assert f"key {ALICE.key_id} belongs to key:alice, not to token:root-admin" in _refusal(resigned)


def test_a_scope_the_principal_lacks_is_refused() -> None:
    reason = _refusal(READER.sign(_command(), topic=TOPIC, signed_at=NOW))
    assert reason == "key:reader holds the 'read' scope; schedule.trigger needs 'operate'"
    definition = ScheduleDefinition(spec=OnceSpec(at=NOW), handler="payouts.pay")
    create = ALICE.sign(
        _command(CreateSchedule(schedule_id="p", definition=definition)), topic=TOPIC, signed_at=NOW
    )
    assert _refusal(create) == "key:alice holds the 'operate' scope; schedule.create needs 'admin'"


WINDOW = REQUIRED.command_max_age_seconds
SKEW = REQUIRED.command_max_skew_seconds


@pytest.mark.parametrize(
    ("age", "accepted"),
    [
        (0.0, True),
        (WINDOW - 1, True),
        (WINDOW, True),  # the edge itself is inside
        (WINDOW + 0.001, False),
        (30 * 86400, False),
        (-SKEW, True),  # the signer's clock a little ahead
        (-SKEW - 0.001, False),
    ],
)
def test_the_replay_window_is_judged_by_the_given_database_clock(age: float, accepted: bool) -> None:
    signed = ALICE.sign(_command(), topic=TOPIC, signed_at=NOW - timedelta(seconds=age))
    if accepted:
        assert _verifier().verify(signed, topic=TOPIC, now=NOW).principal == "key:alice"
    elif age > 0:
        assert "outside the replay window" in _refusal(signed)
    else:
        assert "the signer's clock is ahead" in _refusal(signed)


def test_the_window_is_a_setting() -> None:
    short = SignatureSettings(command_signatures="required", command_max_age_seconds=60)
    signed = ALICE.sign(_command(), topic=TOPIC, signed_at=NOW - timedelta(seconds=61))
    with pytest.raises(UnprovenCommand, match="more than 60 s before the database's clock"):
        CommandVerifier(short, KEYS).verify(signed, topic=TOPIC, now=NOW)


def test_signatures_optional_check_nothing_and_take_the_claimed_principal() -> None:
    loose = CommandVerifier(SignatureSettings(), KeyRing())
    forged = STRANGER.sign(_command(), topic=TOPIC, signed_at=NOW - timedelta(days=400))
    assert loose.verify(forged, topic=TOPIC, now=NOW).principal == "key:stranger"
    claimed = _command(PauseSchedule(schedule_id="p"), principal="token:root-admin")
    proven = loose.verify(claimed, topic=TOPIC, now=NOW)
    assert (proven.principal, proven.key_id) == ("token:root-admin", None)


def test_an_inbox_that_forgets_ids_inside_the_window_is_refused_at_start() -> None:
    REQUIRED.check_inbox_outlasts_window(8 * 86400, setting="SLOTFLOW_TICKER_INBOX_RETENTION_DAYS")
    with pytest.raises(ConfigurationError, match="SLOTFLOW_TICKER_INBOX_RETENTION_DAYS"):
        REQUIRED.check_inbox_outlasts_window(7 * 86400, setting="SLOTFLOW_TICKER_INBOX_RETENTION_DAYS")
    SignatureSettings().check_inbox_outlasts_window(3600, setting="x")  # not required: no check


def test_a_signing_key_file_goes_with_its_principal() -> None:
    with pytest.raises(ConfigurationError, match="go together"):
        SignatureSettings(signing_principal="key:alice").signer()
    assert SignatureSettings().signer() is None
    with pytest.raises(ConfigurationError, match="slotflow key create --name claimer --scope admin"):
        REQUIRED.service_signer("claimer")


def test_a_revocation_is_final_in_the_keyring() -> None:
    ring = KeyRing([_registered(GONE, revoked=True)])
    ring.put(_registered(GONE))
    key = ring.get(GONE.key_id)
    assert key is not None
    assert key.revoked_at is not None
