"""The Kafka transport: commands straight to their topics, outcomes from the acknowledgement events.

A command's owner acknowledges it on its events topic, in the transaction that applied it:
schedule and timer commands on the schedule events topic (the ticker), workflow commands on the
workflow events topic (the orchestrator), DLQ commands on the DLQ events topic (the dlq service),
downstream commands on the downstream events topic (the claimers). Before publishing, the transport
notes where each partition of that topic ends; `wait` reads from there on until the command's
CommandAccepted or CommandRejected appears. So it can only wait on commands it published itself;
for any other command id, and for every read, use the HTTP transport (Kafka holds no read model).

A command written straight to Kafka is proven by its signature (`slotflow.principals`): with a
signing key (``signer=``, or `SLOTFLOW_SIGNING_KEY_FILE` and `SLOTFLOW_SIGNING_PRINCIPAL`) each
command is signed as the key's principal, and a deployment that requires signatures
(`SLOTFLOW_COMMAND_SIGNATURES=required`) checks it. Without a key, the transport refuses to send
where signatures are required; elsewhere the principal it stamps is informational only.
"""

import asyncio
import getpass
from dataclasses import dataclass

from slotflow.client.errors import (
    BrokerUnreachable,
    Forbidden,
    InvalidRequest,
    NotAuthorized,
    ReadsNeedHttp,
    Unavailable,
)
from slotflow.client.models import CommandStatus, Sent
from slotflow.commands import publish_command
from slotflow.contracts import CommandAccepted, CommandRejected, Message
from slotflow.contracts.codec import decode
from slotflow.contracts.routing import InvalidCommandId, command_route
from slotflow.contracts.topics import (
    DLQ_COMMANDS,
    DLQ_EVENTS,
    DOWNSTREAM_COMMANDS,
    DOWNSTREAM_EVENTS,
    SCHEDULE_COMMANDS,
    SCHEDULE_EVENTS,
    TIMER_COMMANDS,
    WORKFLOW_COMMANDS,
    WORKFLOW_EVENTS,
    TopicSpec,
)
from slotflow.errors import (
    ConfigurationError,
    KafkaAccessDenied,
    KafkaAuthenticationFailed,
    SlotflowError,
    TransientStorageError,
)
from slotflow.kafka.producer import Producer
from slotflow.kafka.reading import TopicReader
from slotflow.kafka.records import Record
from slotflow.principals import SignatureSettings, Signer
from slotflow.settings import KafkaSettings

#: Where each command topic's consumer acknowledges what it applied or refused.
ACK_TOPICS: dict[str, TopicSpec] = {
    SCHEDULE_COMMANDS.name: SCHEDULE_EVENTS,
    TIMER_COMMANDS.name: SCHEDULE_EVENTS,
    WORKFLOW_COMMANDS.name: WORKFLOW_EVENTS,
    DLQ_COMMANDS.name: DLQ_EVENTS,
    DOWNSTREAM_COMMANDS.name: DOWNSTREAM_EVENTS,
}
_ACK_TYPES = frozenset({CommandAccepted.message_type, CommandRejected.message_type})


def login_principal(prefix: str = "client") -> str | None:
    """``{prefix}:{login name}``, the informational principal of a command sent straight to Kafka
    (None when the login name is unknown)."""
    try:
        return f"{prefix}:{getpass.getuser()}"[:300]
    except (OSError, KeyError):
        return None


@dataclass(frozen=True, slots=True)
class _Mark:
    """Where the acknowledgement of one published command can only be: at or after ``start``."""

    ack_topic: str
    start: dict[int, int]


#: What a refused login or ACL, or contradictory security settings, point the user at.
SECURITY_HINT = "check SLOTFLOW_KAFKA_SECURITY_PROTOCOL, SLOTFLOW_KAFKA_SASL_* and SLOTFLOW_KAFKA_SSL_*"


class KafkaTransport:
    """Publishes commands to their Kafka topics; waits on their acknowledgement events.

    ``source`` goes in each envelope's `source`. With a ``signer`` (default: the key of
    `SLOTFLOW_SIGNING_KEY_FILE` for `SLOTFLOW_SIGNING_PRINCIPAL`, if set) every command is signed and
    carries the signer's principal; without one, ``principal`` (default `client:<login name>`; ""
    for none), which nothing proves, and sending is refused where ``signatures`` (default: from
    the environment) are required. ``timeout`` bounds connecting and each broker acknowledgement.

    Example::

        async with KafkaTransport(KafkaSettings()) as kafka:
            client = Client(kafka)
            sent = await client.trigger_schedule("nightly-payouts")
            status = await client.wait(sent.command_id, timeout=10)
    """

    reads_supported = False

    def __init__(
        self,
        settings: KafkaSettings | None = None,
        *,
        source: str = "client",
        principal: str | None = None,
        timeout: float = 10.0,
        client_id: str = "client",
        retry_with: str = "the same command id",
        signer: Signer | None = None,
        signatures: SignatureSettings | None = None,
    ) -> None:
        """
        Raises:
            InvalidRequest: the signing key settings are incomplete or the key file is unusable.
        """
        # A call fails at once when the broker is away and the caller decides whether to try again
        # (`timeout` bounds a call); only a service starting up waits for its broker.
        self.settings = (settings or KafkaSettings()).model_copy(update={"startup_wait_seconds": 0.0})
        self.source = source
        self.signatures = signatures or SignatureSettings()
        try:
            self.signer = signer if signer is not None else self.signatures.signer()
        except ConfigurationError as err:
            raise InvalidRequest(str(err)) from None
        if self.signer is not None:
            self.principal: str | None = self.signer.principal
        else:
            # None: the login name; an empty string: no principal at all.
            self.principal = login_principal() if principal is None else principal or None
        self.timeout = timeout
        self._client_id = client_id
        #: How a failed publish's message says to retry (the CLI names its `--command-id` flag).
        self.retry_with = retry_with
        self._producer: Producer | None = None
        self._readers: dict[str, TopicReader] = {}
        self._reader_locks: dict[str, asyncio.Lock] = {}
        self._marks: dict[str, _Mark] = {}
        self._outcomes: dict[str, CommandStatus] = {}

    async def __aenter__(self) -> "KafkaTransport":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the producer and the readers."""
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        for reader in self._readers.values():
            await reader.stop()
        self._readers.clear()

    async def _started_producer(self) -> Producer:
        if self._producer is None:
            try:
                producer = Producer(self.settings, client_id=self._client_id, linger_ms=0)
            except ConfigurationError as err:
                raise InvalidRequest(f"{err}; {SECURITY_HINT}") from None
            try:
                async with asyncio.timeout(self.timeout):
                    await producer.start()
            except KafkaAuthenticationFailed as err:
                raise NotAuthorized(f"{err}; {SECURITY_HINT}") from None
            except KafkaAccessDenied as err:
                raise Forbidden(f"{err}; {SECURITY_HINT}") from None
            except TransientStorageError as err:
                raise BrokerUnreachable(f"cannot reach Kafka at {self.settings.bootstrap}: {err}") from None
            except TimeoutError:
                await producer.stop()
                raise BrokerUnreachable(
                    f"Kafka at {self.settings.bootstrap} did not answer within {self.timeout:g} s"
                ) from None
            self._producer = producer
        return self._producer

    async def _reader(self, topic: str) -> TopicReader:
        if topic not in self._readers:
            reader = TopicReader(self.settings, topic, client_id=f"{self._client_id}-acks")
            try:
                async with asyncio.timeout(self.timeout):
                    await reader.start()
            except (SlotflowError, TimeoutError) as err:
                await reader.stop()
                raise Unavailable(
                    f"cannot read {topic} from Kafka at {self.settings.bootstrap}: {err}"
                ) from None
            self._readers[topic] = reader
            self._reader_locks[topic] = asyncio.Lock()
        return self._readers[topic]

    async def send(self, message: Message, *, command_id: str | None = None, track: bool = True) -> Sent:
        """Publish ``message`` to its command topic; return once the broker acknowledged it.

        With ``track`` (the default) the end of the acknowledgement topic is noted first, so
        `wait` can find the outcome; a caller that never waits may pass False and save that read.

        Raises:
            InvalidRequest: ``command_id`` is unusable, or ``message`` is not a command, or it
                would go unsigned where signatures are required.
            Unavailable: Kafka did not acknowledge (retry with the same command id: applied once).
        """
        if self.signer is None and self.signatures.required:
            raise InvalidRequest(
                "not sent: this deployment accepts only signed commands (SLOTFLOW_COMMAND_SIGNATURES=required) "
                "and this Kafka transport has no signing key; set SLOTFLOW_SIGNING_KEY_FILE and "
                "SLOTFLOW_SIGNING_PRINCIPAL (`slotflow key create`), pass signer=, or send through the api "
                "(HttpTransport)"
            )
        route = command_route(message)
        ack = ACK_TOPICS.get(route.topic.name)
        producer = await self._started_producer()
        mark: _Mark | None = None
        if track and ack is not None:
            ack_topic = self.settings.topic(ack)
            reader = await self._reader(ack_topic)
            try:
                async with self._reader_locks[ack_topic], asyncio.timeout(self.timeout):
                    mark = _Mark(ack_topic, await reader.end_offsets())
            except (TransientStorageError, TimeoutError) as err:
                raise Unavailable(f"cannot read the end of {ack_topic}: {err}") from None
        topic = self.settings.topic(route.topic)
        try:
            async with asyncio.timeout(self.timeout):
                sent_id = await publish_command(
                    producer,
                    self.settings,
                    message,
                    command_id=command_id,
                    source=self.source,
                    principal=self.principal,
                    signer=self.signer,
                )
        except InvalidCommandId as err:
            raise InvalidRequest(f"command id: {err}") from None
        except KafkaAccessDenied as err:
            raise Forbidden(f"{err}; the command was not written") from None
        except TransientStorageError as err:
            raise Unavailable(
                f"Kafka did not acknowledge the command: {err}; it may or may not have been written, "
                f"so retry with {self.retry_with} to keep it applied once"
            ) from None
        except TimeoutError:
            raise Unavailable(
                f"Kafka did not acknowledge the command on {topic} within {self.timeout:g} s (does the topic "
                f"exist? the devstack creates them); retry with {self.retry_with} to keep it applied once"
            ) from None
        if mark is not None:
            self._marks[sent_id] = mark
        return Sent(
            command_id=sent_id, command_type=message.message_type, topic=topic, key=route.key or sent_id
        )

    async def wait(self, command_id: str, *, timeout: float) -> CommandStatus:
        """The command's status once its owner acknowledged it, or `pending` after ``timeout`` s.

        Raises:
            ReadsNeedHttp: this transport did not publish ``command_id`` (or did not track it).
            Unavailable: Kafka failed while reading.
        """
        if command_id in self._outcomes:
            return self._outcomes[command_id]
        mark = self._marks.get(command_id)
        if mark is None:
            raise ReadsNeedHttp(
                f"command {command_id} was not published by this Kafka transport, so it cannot tell where "
                "its acknowledgement is; ask the api (HttpTransport) for its status"
            )
        reader = await self._reader(mark.ack_topic)

        def match(record: Record) -> CommandStatus | None:
            try:
                envelope = decode(record.value)
            except SlotflowError:
                return None  # poison on the events topic is the consumers' business, not ours
            if envelope.type not in _ACK_TYPES or envelope.data.get("command_id") != command_id:
                return None
            rejected = envelope.type == CommandRejected.message_type
            return CommandStatus(
                command_id=command_id,
                status="rejected" if rejected else "accepted",
                reason=str(envelope.data.get("reason")) if rejected else None,
                command_type=envelope.data.get("command_type"),
                subject=envelope.data.get("subject"),
            )

        try:
            async with self._reader_locks[mark.ack_topic]:
                found = await reader.find(mark.start, match, timeout=timeout)
        except TransientStorageError as err:
            raise Unavailable(str(err)) from None
        if found is not None:
            # Final: a later wait answers from here without reading again.
            self._marks.pop(command_id, None)
            self._outcomes[command_id] = found
            return found
        return CommandStatus(command_id=command_id, status="pending")

    async def get(self, path: str, params: object = None) -> object:
        """Reads are not possible over Kafka alone.

        Raises:
            ReadsNeedHttp: always.
        """
        raise ReadsNeedHttp(f"{path}: reads go through the api; give the client an HttpTransport for them")
