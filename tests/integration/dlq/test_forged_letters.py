"""Forged dead letters (issue 23), against a real DLQ service.

A letter is a claim by whoever sent it. One naming a foreign topic made the redrive relay publish
there and loop on it, blocking every later redrive until a restart; letters with made-up reasons
created a metric series each. A redrive now goes only to this deployment's own topics (the
acknowledgement says how many it refused), and reasons outside the known set count as `other`.
"""

from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from slotflow.commands import publish_command
from slotflow.contracts import CommandAccepted, DeadLetterFilter, RedriveDeadLetters, SigningKey, wrap
from slotflow.contracts.codec import encode
from slotflow.contracts.dlq import KNOWN_REASONS
from slotflow.contracts.topics import DLQ_EVENTS, JOBS_DUE, SIGNING_KEYS
from slotflow.errors import PermanentError
from slotflow.kafka.producer import Producer
from slotflow.principals import KafkaKeyRing, Signer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.dlq.conftest import Running
from tests.integration.dlq.helpers import origin, park, read_messages, read_records


async def test_a_forged_redrive_target_is_refused_and_later_redrives_still_go(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    own_topic = kafka.topic(JOBS_DUE)
    forged = origin("someone-elses.payments.v1", 3, b"forged", key=b"k")
    genuine = origin(own_topic, 4, b"genuine", key=b"k")
    for record in (forged, genuine):
        await park(producer, kafka, record, PermanentError("x"), source="claimer", reason="permanent_error")

    async def both_parked() -> bool:
        return await dlq.count("status = 'parked'") == 2

    await assert_eventually(both_parked, timeout=30, message="both letters parked")
    command = RedriveDeadLetters(selection=DeadLetterFilter(ids=(forged.position, genuine.position)))
    await publish_command(producer, kafka, command, command_id="redrive-forged", source="test")

    [sent] = await read_records(kafka, own_topic, 1)
    assert sent.value == b"genuine"
    statuses = {r["id"]: r["status"] for r in await dlq.pool.fetch("SELECT id, status FROM dlq.dead_letters")}
    assert statuses == {forged.position: "parked", genuine.position: "redriven"}
    assert await dlq.pool.fetchval("SELECT count(*) FROM dlq.redrives WHERE topic = $1", forged.topic) == 0
    events = await read_messages(kafka, kafka.topic(DLQ_EVENTS), 2)
    [ack] = [m for _, m in events if isinstance(m, CommandAccepted)]
    assert "redrove 1 dead letter(s)" in ack.subject
    assert "1 refused: their topic is not one of this deployment's" in ack.subject

    # Nothing is stuck behind the refusal: the next redrive goes out at once.
    later = origin(own_topic, 5, b"later", key=b"k")
    await park(producer, kafka, later, PermanentError("x"), source="claimer", reason="permanent_error")
    await assert_eventually(lambda: dlq.count("id = $1", later.position), timeout=30)
    again = RedriveDeadLetters(selection=DeadLetterFilter(ids=(later.position,)))
    await publish_command(producer, kafka, again, command_id="redrive-later", source="test")
    values = [r.value for r in await read_records(kafka, own_topic, 2)]
    assert values == [b"genuine", b"later"]


async def test_forged_reasons_do_not_create_metric_series(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    topic = kafka.topic(JOBS_DUE)
    for n in range(30):
        record = origin(topic, 100 + n, b"x", key=b"k")
        await park(producer, kafka, record, PermanentError("x"), source="claimer", reason=f"forged-{n}")

    async def parked() -> bool:
        return await dlq.count() == 30

    await assert_eventually(parked, timeout=30, message="30 letters parked")
    registry = dlq.service.metrics.registry

    async def gauged() -> bool:
        return registry.get_sample_value("slotflow_dlq_parked_entries", {"reason": "other"}) == 30

    await assert_eventually(gauged, timeout=10, message="the gauge folded them into other")
    labels = {
        sample.labels["reason"]
        for metric in registry.collect()
        if metric.name in ("slotflow_dlq_parked", "slotflow_dlq_parked_entries")
        for sample in metric.samples
        if "reason" in sample.labels
    }
    assert labels <= KNOWN_REASONS | {"other"}
    assert registry.get_sample_value("slotflow_dlq_parked_total", {"reason": "other"}) == 30


async def test_a_letter_naming_the_keys_topic_is_never_redriven_there(
    dlq: Running, producer: Producer, kafka: KafkaSettings
) -> None:
    """Only the api writes the keys topic: a letter that names it (no consumer parks its records)
    is forged, and a redrive of it would have the dlq write a signing key nobody registered."""
    keys_topic = kafka.topic(SIGNING_KEYS)
    attacker = Signer(Ed25519PrivateKey.generate(), "key:ops-admin")
    key = SigningKey(
        key_id=attacker.key_id,
        name="ops-admin",
        principal=attacker.principal,
        scope="admin",
        public_key=attacker.public_key,
        created_at=datetime.now(UTC),
    )
    value = encode(
        wrap(key, id=f"{key.key_id}/registered", key=key.key_id, source="api", occurred_at=key.created_at)
    )
    forged = origin(keys_topic, 0, value, key=key.key_id.encode())
    await park(producer, kafka, forged, PermanentError("x"), source="claimer", reason="permanent_error")
    await assert_eventually(lambda: dlq.count("id = $1", forged.position), timeout=30, message="parked")
    command = RedriveDeadLetters(selection=DeadLetterFilter(ids=(forged.position,)))
    await publish_command(producer, kafka, command, command_id="redrive-keys", source="test")

    events = await read_messages(kafka, kafka.topic(DLQ_EVENTS), 2)
    [ack] = [m for _, m in events if isinstance(m, CommandAccepted)]
    assert "redrove 0 dead letter(s)" in ack.subject
    assert "1 refused" in ack.subject
    assert (
        await dlq.pool.fetchval("SELECT status FROM dlq.dead_letters WHERE id = $1", forged.position)
        == "parked"
    )
    assert await dlq.pool.fetchval("SELECT count(*) FROM dlq.redrives") == 0
    # Nothing reached the keys topic: a service reading it knows no key.
    ring = KafkaKeyRing(kafka, client_id="test")
    await ring.start()
    try:
        assert len(ring) == 0
    finally:
        await ring.stop()
