"""The Kafka transport signs with its key, or refuses to send unsigned where signatures are required;
the HTTP transport carries every command the CLI sends, downstream ones included."""

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from slotflow.client import InvalidRequest, KafkaTransport
from slotflow.client._http import http_request
from slotflow.contracts import (
    CloseDownstream,
    ConfigureDownstream,
    DownstreamSettings,
    OpenDownstream,
    TriggerNow,
)
from slotflow.principals import SignatureSettings, Signer
from slotflow.principals.signing import write_private_key
from slotflow.settings import KafkaSettings

NOWHERE = KafkaSettings(bootstrap="127.0.0.1:9")


async def test_without_a_key_it_refuses_to_send_where_signatures_are_required() -> None:
    transport = KafkaTransport(NOWHERE, signatures=SignatureSettings(command_signatures="required"))
    with pytest.raises(InvalidRequest, match="not sent: this deployment accepts only signed commands"):
        await transport.send(TriggerNow(schedule_id="payouts"))
    await transport.close()


def test_a_signer_names_the_principal_and_the_environment_gives_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    signer = Signer(Ed25519PrivateKey.generate(), "key:billing")
    given = KafkaTransport(NOWHERE, signer=signer, principal="client:someone")
    assert (given.signer, given.principal) == (signer, "key:billing")
    key_file = tmp_path / "billing.pem"
    write_private_key(key_file, signer.private_key)
    monkeypatch.setenv("SLOTFLOW_SIGNING_KEY_FILE", str(key_file))
    monkeypatch.setenv("SLOTFLOW_SIGNING_PRINCIPAL", "key:billing")
    from_env = KafkaTransport(NOWHERE)
    assert from_env.signer is not None
    assert from_env.signer.key_id == signer.key_id
    assert from_env.principal == "key:billing"


def test_a_key_file_without_its_principal_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "k.pem"
    write_private_key(key_file, Ed25519PrivateKey.generate())
    monkeypatch.setenv("SLOTFLOW_SIGNING_KEY_FILE", str(key_file))
    monkeypatch.delenv("SLOTFLOW_SIGNING_PRINCIPAL", raising=False)
    with pytest.raises(InvalidRequest, match="go together"):
        KafkaTransport(NOWHERE)


def test_downstream_commands_go_through_the_api_too() -> None:
    # The CLI sends every command through the api by default, a breaker's open included.
    opened = http_request(OpenDownstream(downstream="bank api", reason="maintenance"))
    assert opened == ("POST", "/v1/downstreams/bank%20api/open", {"reason": "maintenance"})
    closed = http_request(CloseDownstream(downstream="bank-api", reason="back"))
    assert closed == ("POST", "/v1/downstreams/bank-api/close", {"reason": "back"})
    method, path, body = http_request(
        ConfigureDownstream(downstream="bank-api", settings=DownstreamSettings(cooldown_seconds=60))
    )
    assert (method, path) == ("PUT", "/v1/downstreams/bank-api/settings")
    assert DownstreamSettings.model_validate(body) == DownstreamSettings(cooldown_seconds=60)
