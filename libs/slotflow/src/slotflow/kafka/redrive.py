"""The owners' side of a redrive (docs/decisions/0009): take the dlq's requests, carry them out
from the owner's own state, answer each one.

A `RedriveRequested` on the internal `dlq.redrives` topic names a letter's origin; it is a pointer,
never the record. Each owner runs a `RedriveResponder` in a consumer group of its own over that
topic and acts only on the requests addressed to it:

- `record` requests are read back from the origin topic at the letter's position (`RecordReader`:
  no group, nothing committed) and handled by the `Rehandler` of the consume loop that reads that
  topic, with every check a record there gets; a record retention removed, or a position that
  holds nothing, is refused with that reason;
- `run` and `activity` requests go to the service's own handler (the claimer reopens a run, the
  ticker re-issues a slot, the orchestrator retries a parked activity), which answers itself or
  through its outbox in the transaction that acts.

Every answer is a `RedriveOutcome` on the DLQ topic, sent after the act: a crash in between
delivers the request again, and the act is idempotent (the run's redrive number, the handlers'
inboxes).
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from slotflow.contracts import RedriveOutcome, RedriveRequested, wrap
from slotflow.contracts.dlq import RedriveOutcomeKind, redrive_outcome_id
from slotflow.contracts.envelope import Envelope, fit_key
from slotflow.contracts.topics import DLQ_MESSAGES, DLQ_REDRIVES
from slotflow.core.stopping import sleep_or_stop
from slotflow.errors import PermanentError, TransientStorageError
from slotflow.kafka.access import start_failure
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.loop import ConsumeLoop, Incoming, Rehandler
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.kafka.startup import wait_for_kafka
from slotflow.settings import KafkaSettings

log = logging.getLogger(__name__)

#: How long reading one record back may wait for the broker to hand it over.
READ_TIMEOUT_SECONDS = 10.0


class RecordUnavailable(PermanentError):
    """The record a letter points at cannot be read back: retention removed it, or nothing is at
    that position. The message is the redrive's refusal."""


@dataclass(frozen=True, slots=True)
class Answer:
    """An owner's answer to one request: done, or refused with the reason."""

    outcome: RedriveOutcomeKind
    reason: str = ""

    @classmethod
    def done(cls, reason: str = "") -> "Answer":
        return cls("done", reason)

    @classmethod
    def refused(cls, reason: str) -> "Answer":
        return cls("refused", reason)


def outcome_envelope(request: RedriveRequested, *, service: str, answer: Answer, at: datetime) -> Envelope:
    """The RedriveOutcome answering ``request``: id from its request id, keyed by its letter."""
    outcome = RedriveOutcome(
        request_id=request.request_id,
        dead_letter_id=request.dead_letter_id,
        service=service,
        outcome=answer.outcome,
        reason=answer.reason[:2000],
    )
    return wrap(
        outcome,
        id=redrive_outcome_id(request.request_id),
        key=fit_key(request.dead_letter_id),
        source=service,
        occurred_at=at,
    )


class RecordReader:
    """Reads single records back from their topics at given positions (no group, nothing committed,
    read_committed), for redrives. One reader serves one responder, a request at a time."""

    def __init__(self, settings: KafkaSettings, *, client_id: str) -> None:
        self._settings = settings
        self._client_id = client_id
        self._consumer: Any = None
        self._lock = asyncio.Lock()

    async def _started(self) -> Any:
        if self._consumer is None:
            consumer: Any = AIOKafkaConsumer(
                **self._settings.client_options(),
                client_id=f"{self._settings.client_id_prefix}-{self._client_id}",
                group_id=None,
                enable_auto_commit=False,
                isolation_level="read_committed",
                max_partition_fetch_bytes=self._settings.max_message_bytes * 4,
            )
            try:
                await wait_for_kafka(self._settings, "redrive reader")
                await consumer.start()
            except KafkaError as err:
                await consumer.stop()
                raise await start_failure(
                    self._settings.bootstrap, self._settings.security, err, "redrive reader"
                ) from err
            except BaseException:
                await consumer.stop()
                raise
            self._consumer = consumer
        return self._consumer

    async def stop(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await consumer.stop()

    async def read(
        self, topic: str, partition: int, offset: int, *, timeout: float = READ_TIMEOUT_SECONDS
    ) -> Record:
        """The record at ``topic``/``partition``/``offset``.

        Raises:
            RecordUnavailable: retention removed it, or the position holds no record.
            TransientStorageError: Kafka did not answer.
            KafkaAccessDenied: this service may not read ``topic``.
        """
        async with self._lock:
            consumer = await self._started()
            try:
                return await self._read(consumer, topic, partition, offset, timeout)
            except KafkaError as err:
                raise TransientStorageError(
                    f"reading {topic}:{partition}:{offset} back failed: {err}"
                ) from err

    async def _read(self, consumer: Any, topic: str, partition: int, offset: int, timeout: float) -> Record:
        cluster = await consumer._client.fetch_all_metadata()
        partitions = cluster.partitions_for_topic(topic)
        if not partitions:
            raise RecordUnavailable(f"topic {topic} does not exist on the broker")
        if partition not in partitions:
            raise RecordUnavailable(f"topic {topic} has no partition {partition}")
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        first = int((await consumer.beginning_offsets([tp]))[tp])
        end = int((await consumer.end_offsets([tp]))[tp])
        if offset < first:
            raise RecordUnavailable(
                f"retention removed it: {topic}:{partition} now starts at offset {first}, past {offset}"
            )
        if offset >= end:
            raise RecordUnavailable(
                f"no record at {topic}:{partition}:{offset}: the partition ends at offset {end}"
            )
        consumer.seek(tp, offset)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            batches = await consumer.getmany(tp, timeout_ms=max(1, int(min(left, 0.5) * 1000)))
            for raw in batches.get(tp, ()):
                if raw.offset == offset:
                    return Record.from_aiokafka(raw)
                if raw.offset > offset:
                    raise RecordUnavailable(
                        f"no record at {topic}:{partition}:{offset} (a transaction marker, or compacted away)"
                    )
            if int(await consumer.position(tp)) > offset:
                raise RecordUnavailable(
                    f"no record at {topic}:{partition}:{offset} (a transaction marker, or compacted away)"
                )
        raise TransientStorageError(
            f"reading {topic}:{partition}:{offset} back: no answer within {timeout:g} s"
        )


#: A service's own handling of `run` and `activity` requests: an answer to send, or None when the
#: service answers itself (an outcome staged in its outbox with the act).
RequestHandler = Callable[[Envelope, RedriveRequested], Awaitable[Answer | None]]
#: A service's own handling of a record read back (the claimer's JobDue intake, which is not a
#: consume loop): the answer.
RecordHandler = Callable[[Record], Awaitable[Answer]]


async def _refuse_kind(envelope: Envelope, request: RedriveRequested) -> Answer | None:
    return Answer.refused(f"this service does not carry out {request.kind} redrives")


class RedriveResponder:
    """One service's consumer of redrive requests (see the module docstring)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        *,
        service: str,
        producer: Producer,
        group_id: str,
        rehandlers: Mapping[str, Rehandler | RecordHandler] | None = None,
        on_request: RequestHandler = _refuse_kind,
        client_id: str | None = None,
        poll_timeout_ms: int = 500,
    ) -> None:
        """``rehandlers`` maps each topic the service consumes (its deployment name) to what it
        does with a record of that topic; ``on_request`` carries out `run` and `activity` requests."""
        self._kafka = kafka
        self._service = service
        self._producer = producer
        self._group_id = group_id
        self._rehandlers = dict(rehandlers or {})
        self._on_request = on_request
        self._client_id = client_id or f"{service}-redrives"
        self._poll_timeout_ms = poll_timeout_ms
        self._dlq_topic = kafka.topic(DLQ_MESSAGES)
        self.reader = RecordReader(kafka, client_id=f"{self._client_id}-reader")
        self.answered = 0

    def add_rehandler(self, topic: str, rehandler: Rehandler | RecordHandler) -> None:
        """What to do with a record read back from ``topic`` (a loop built after the responder)."""
        self._rehandlers[topic] = rehandler

    async def run(self, stop: asyncio.Event) -> None:
        """Take requests until ``stop``; poison on the request topic is parked like any."""
        consumer = Consumer(
            self._kafka,
            self._kafka.topic(DLQ_REDRIVES),
            group_id=self._group_id,
            client_id=self._client_id,
        )
        loop = ConsumeLoop(
            consumer,
            handler=self._on_incoming,
            dlq=self._producer,
            dlq_topic=self._dlq_topic,
            source_service=self._service,
            accept=(RedriveRequested,),
            max_bytes=self._kafka.max_message_bytes,
            poll_timeout_ms=self._poll_timeout_ms,
        )
        # A broker not up yet is waited for (requests keep on the topic); a refused login or ACL
        # is not (KafkaAuthenticationFailed, KafkaAccessDenied stop the service with their reason).
        while True:
            try:
                await consumer.start()
                break
            except TransientStorageError as err:
                log.warning("%s: redrive consumer not started yet: %s", self._service, err)
                if await sleep_or_stop(stop, 1.0):
                    return
        try:
            await loop.run(stop)
        finally:
            await consumer.stop()
            await self.reader.stop()

    async def _on_incoming(self, incoming: Incoming) -> None:
        await self.respond(incoming)

    async def respond(self, incoming: Incoming) -> None:
        """Carry out a request addressed to this service and send its answer (another service's
        request is left alone). For a service whose own consumer reads the request topic."""
        request = incoming.message
        if not isinstance(request, RedriveRequested) or request.target != self._service:
            return  # another owner's request
        answer = await self.answer(incoming.envelope, request)
        if answer is None:
            return
        await self._producer.send(
            self._dlq_topic,
            outcome_envelope(request, service=self._service, answer=answer, at=datetime.now(UTC)),
        )
        self.answered += 1
        log.info(
            "%s: redrive of %s (%s): %s %s",
            self._service,
            request.dead_letter_id,
            request.kind,
            answer.outcome,
            answer.reason,
        )

    async def answer(self, envelope: Envelope, request: RedriveRequested) -> Answer | None:
        """Carry ``request`` out; the answer (None: the service answers itself)."""
        if request.kind == "record":
            return await self.reread(request)
        return await self._on_request(envelope, request)

    async def reread(self, request: RedriveRequested) -> Answer:
        """Read the letter's record back from its topic and handle it as that topic's consumer does."""
        rehandler = self._rehandlers.get(request.topic)
        if rehandler is None:
            return Answer.refused(f"{self._service} does not consume {request.topic}")
        try:
            record = await self.reader.read(request.topic, request.partition, request.offset)
        except RecordUnavailable as err:
            return Answer.refused(str(err))
        if isinstance(rehandler, Rehandler):
            handled = await rehandler.handle(record)
            if handled.done:
                return Answer.done(f"{self._service} read {record.position} back and handled it")
            return Answer.refused(
                f"{self._service} read {record.position} back and refused it again: {handled.reason}: {handled.detail}"
            )
        return await rehandler(record)
