"""Publish a command to the topic its type belongs to: the one helper the api, the CLI and tests share.

Which topic and key a command takes, its id and its envelope are `slotflow.contracts.routing`
(pure, shared with the consumers' poison path); this module sends it. A command's id is its
envelope id. Consumers (the ticker, the orchestrator, the dlq service) record it in their inbox, so
publishing the same command id twice applies the command once: a client that retries after a lost
acknowledgement passes the same id (HTTP `Idempotency-Key`, CLI `--command-id`).
"""

from datetime import datetime

from slotflow.contracts.envelope import Message
from slotflow.contracts.routing import build_command
from slotflow.kafka.producer import Producer
from slotflow.principals.signing import Signer
from slotflow.settings import KafkaSettings


async def publish_command(
    producer: Producer,
    settings: KafkaSettings,
    message: Message,
    *,
    command_id: str | None = None,
    source: str,
    principal: str | None = None,
    signer: Signer | None = None,
    signed_at: datetime | None = None,
) -> str:
    """Publish ``message`` to its command topic and wait for the broker; return the command id.

    With ``signer`` the command is signed for its topic (this deployment's name of it): its
    principal is then the signer's, or, for the api's signer, ``principal`` (the caller the api
    authenticated). Without one it goes unsigned, which a deployment requiring signatures rejects.
    ``signed_at`` dates the signature (default: this host's clock; a service passes its database's).

    Raises:
        NotACommand: ``message`` is not a command.
        InvalidCommandId: ``command_id`` is unusable.
        TransientStorageError: Kafka did not acknowledge (retry with the same command id).
    """
    spec, envelope = build_command(message, command_id=command_id, source=source, principal=principal)
    topic = settings.topic(spec)
    if signer is not None:
        envelope = signer.sign(envelope, topic=topic, signed_at=signed_at)
    await producer.send(topic, envelope)
    return envelope.id
