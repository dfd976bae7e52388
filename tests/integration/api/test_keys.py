"""Signing keys through the api (admin only), distributed on the keys topic, and the api's own key
signing every command it publishes for the caller it authenticated."""

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from slotflow.contracts.topics import SCHEDULE_COMMANDS
from slotflow.principals import CommandVerifier, KafkaKeyRing, SignatureSettings
from slotflow.principals.signing import encode_public_key, key_id_of
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.topics import Seen, TopicTail
from tests.integration.api.conftest import CLIENT_HEADERS

REQUIRED = SignatureSettings(command_signatures="required")


async def test_keys_are_registered_listed_and_revoked_by_an_admin_and_reach_the_keys_topic(
    client: httpx.AsyncClient, kafka: KafkaSettings
) -> None:
    public_key = encode_public_key(Ed25519PrivateKey.generate().public_key())
    created = await client.post(
        "/v1/keys", json={"name": "alice", "scope": "operate", "public_key": public_key}
    )
    assert created.status_code == 201, created.text
    key = created.json()
    assert (key["key_id"], key["principal"], key["created_by"]) == (
        key_id_of(public_key),
        "key:alice",
        "bootstrap",
    )

    again = await client.post("/v1/keys", json={"name": "bob", "scope": "read", "public_key": public_key})
    assert again.status_code == 409
    assert "registered already, as 'alice' (live)" in again.json()["detail"]
    other = encode_public_key(Ed25519PrivateKey.generate().public_key())
    same_name = await client.post("/v1/keys", json={"name": "alice", "scope": "read", "public_key": other})
    assert same_name.status_code == 409
    assert "revoke it first" in same_name.json()["detail"]
    malformed = await client.post("/v1/keys", json={"name": "eve", "scope": "read", "public_key": "AAAA"})
    assert malformed.status_code == 422
    assert "an Ed25519 public key is 32" in malformed.json()["detail"]

    token = (await client.post("/v1/tokens", json={"name": "oncall", "scope": "operate"})).json()["secret"]
    as_operator = {**CLIENT_HEADERS, "Authorization": f"Bearer {token}"}
    refused = await client.post(
        "/v1/keys", json={"name": "mallory", "scope": "admin", "public_key": other}, headers=as_operator
    )
    assert refused.status_code == 403
    assert (await client.get("/v1/keys", headers=as_operator)).status_code == 403

    revoked = await client.delete("/v1/keys/alice")
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked_by"] == "bootstrap"
    assert (await client.delete("/v1/keys/alice")).status_code == 404
    back = await client.post(
        "/v1/keys", json={"name": "alice2", "scope": "operate", "public_key": public_key}
    )
    assert back.status_code == 409
    assert "(revoked)" in back.json()["detail"]  # a revoked key never comes back
    listed = (await client.get("/v1/keys", params={"revoked": "true"})).json()
    assert {k["principal"] for k in listed} == {"key:alice", "service:api"}

    # Every service reads the same from the keys topic: the revocation and the api's own key.
    ring = KafkaKeyRing(kafka, client_id="test")
    await ring.start()
    try:
        alice = ring.get(key["key_id"])
        assert alice is not None
        assert alice.revoked_by == "bootstrap"
        [own] = [k for k in listed if k["principal"] == "service:api"]
        api_key = ring.get(own["key_id"])
        assert api_key is not None
        assert api_key.acts_for_others
    finally:
        await ring.stop()


async def test_the_api_signs_what_it_publishes_and_names_its_caller(
    client: httpx.AsyncClient, kafka: KafkaSettings
) -> None:
    async with TopicTail(kafka, [SCHEDULE_COMMANDS]) as tail:
        sent = await client.post("/v1/schedules/payouts/trigger", headers={"Idempotency-Key": "by-api"})
        assert sent.status_code == 202, sent.text

        def published() -> Seen | None:
            return tail.indexed().get("by-api")

        seen = await assert_eventually(published, timeout=30, message="the trigger on its topic")
    assert seen.envelope.principal == "bootstrap"
    ring = KafkaKeyRing(kafka, client_id="test")
    await ring.start()
    try:
        verifier = CommandVerifier(REQUIRED, ring)
        proof = seen.envelope.proof
        assert proof is not None
        proven = verifier.verify(seen.envelope, topic=seen.record.topic, now=proof.signed_at)
        assert proven.principal == "bootstrap"
    finally:
        await ring.stop()
