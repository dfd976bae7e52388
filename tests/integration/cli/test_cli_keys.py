"""The CLI authorises commands as the api does: through the api with the token's scope by default
(a `read` token cannot trigger), and straight to Kafka only signed with a registered key
(`slotflow key create | list | revoke`)."""

import json
import stat
from pathlib import Path

from slotflow.contracts.topics import SCHEDULE_COMMANDS
from slotflow.principals import CommandVerifier, KafkaKeyRing, SignatureSettings
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.topics import Seen, TopicTail
from tests.integration.cli.conftest import Cli


async def test_a_read_token_cannot_trigger_and_nothing_is_sent(cli: Cli, kafka: KafkaSettings) -> None:
    reader = (await cli("token", "create", "--name", "auditor", "--scope", "read")).out.strip()
    as_reader = cli.env(SLOTFLOW_TOKEN=reader)
    async with TopicTail(kafka, [SCHEDULE_COMMANDS]) as tail:
        refused = await cli("schedule", "trigger", "payouts", "--command-id", "by-reader", env=as_reader)
        assert refused.code == 1, refused
        assert refused.err.startswith(
            "slotflow: error: this needs the 'operate' scope; token:auditor holds 'read'"
        )
        assert "nothing was sent" in refused.err
        assert "Traceback" not in refused.err
        # The same token may read, and an operate token may trigger: the scope is the rule.
        assert (await cli("schedule", "list", env=as_reader)).code == 0
        operator = (await cli("token", "create", "--name", "oncall", "--scope", "operate")).out.strip()
        sent = await cli(
            "schedule",
            "trigger",
            "payouts",
            "--command-id",
            "by-oncall",
            env=cli.env(SLOTFLOW_TOKEN=operator),
        )
        assert sent.code == 0, sent

        def seen() -> set[str] | None:
            ids = set(tail.indexed())
            return ids if "by-oncall" in ids else None

        ids = await assert_eventually(seen, timeout=30, message="the operator's trigger is on the topic")
    assert "by-reader" not in ids
    assert tail.indexed()["by-oncall"][1].principal == "token:oncall"


async def test_a_key_made_and_registered_by_the_cli_signs_commands_sent_straight_to_kafka(
    cli: Cli, kafka: KafkaSettings, tmp_path: Path
) -> None:
    key_file = tmp_path / "ops.pem"
    created = await cli("key", "create", "--name", "ops", "--scope", "operate", "--out", str(key_file))
    assert created.code == 0, created
    assert "principal: key:ops" in created.out
    assert f"SLOTFLOW_SIGNING_KEY_FILE={key_file}" in created.err
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    again = await cli(
        "key", "create", "--name", "ops", "--scope", "operate", "--out", str(tmp_path / "b.pem")
    )
    assert again.code == 1
    assert "revoke it first" in again.err
    assert not (tmp_path / "b.pem").exists()  # refused: the private half made for it is not kept
    keys_listed = json.loads((await cli("--json", "key", "list")).out)
    # The api registered its own key at start: it signs what it publishes for its callers.
    [own] = [k for k in keys_listed if k["principal"] == "service:api"]
    assert (own["scope"], own["acts_for_others"]) == ("admin", True)
    [listed] = [k for k in keys_listed if k["principal"] != "service:api"]
    assert (listed["principal"], listed["scope"], listed["created_by"]) == ("key:ops", "operate", "bootstrap")

    signed = cli.env(SLOTFLOW_SIGNING_KEY_FILE=str(key_file), SLOTFLOW_SIGNING_PRINCIPAL="key:ops")
    async with TopicTail(kafka, [SCHEDULE_COMMANDS]) as tail:
        sent = await cli(
            "--via", "kafka", "schedule", "trigger", "payouts", "--command-id", "k-1", env=signed
        )
        assert sent.code == 0, sent

        def found() -> Seen | None:
            return tail.indexed().get("k-1")

        seen = await assert_eventually(found, timeout=30, message="the signed trigger")
    record, envelope = seen.record, seen.envelope
    assert envelope.source == "cli"
    assert envelope.principal == "key:ops"
    # It verifies against the key as the api distributed it on the keys topic.
    keys = KafkaKeyRing(kafka, client_id="test")
    await keys.start()
    try:
        verifier = CommandVerifier(SignatureSettings(command_signatures="required"), keys)
        proof = envelope.proof
        assert proof is not None
        assert verifier.verify(envelope, topic=record.topic, now=proof.signed_at).principal == "key:ops"

        revoked = await cli("key", "revoke", "ops")
        assert revoked.code == 0, revoked
        assert f"revoked key {listed['key_id']} (key:ops)" in revoked.out
        await keys.refresh()
        key = keys.get(listed["key_id"])
        assert key is not None
        assert key.revoked_by == "bootstrap"
    finally:
        await keys.stop()
    assert [k["key_id"] for k in json.loads((await cli("--json", "key", "list")).out)] == [own["key_id"]]
    history = json.loads((await cli("--json", "key", "list", "--revoked")).out)
    assert {(k["principal"], k["revoked_by"]) for k in history} == {
        ("service:api", None),
        ("key:ops", "bootstrap"),
    }
