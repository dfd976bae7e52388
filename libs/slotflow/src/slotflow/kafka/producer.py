"""An idempotent producer (acks=all, enable_idempotence) that sends envelopes.

Idempotence makes the broker drop a batch the producer resends after a lost acknowledgement, so a
network retry never duplicates a record inside one producer session. Across sessions duplicates
collapse downstream on the envelope id.
"""

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)

from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import TYPE_HEADER, VERSION_HEADER, Envelope
from slotflow.contracts.topics import DLQ_MAX_RECORD_BYTES, DLQ_MESSAGES
from slotflow.errors import MessageTooLarge, TransientStorageError
from slotflow.kafka.records import Delivered
from slotflow.settings import KafkaSettings

Headers = Mapping[str, bytes]

#: Room for the record batch framing, key and headers around a value.
_FRAMING = 64 * 1024

#: The client or the broker refused a record for its size: sending it again can never succeed.
_SIZE_ERRORS = (MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError)


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    """A record to produce, already encoded."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers | None = None


class Producer:
    """A started aiokafka producer behind a small typed API."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        client_id: str,
        transactional_id: str | None = None,
        linger_ms: int = 5,
        max_message_bytes: int | None = None,
    ) -> None:
        """``max_message_bytes`` overrides `settings.max_message_bytes` for this producer only (the
        DLQ producer parks records larger than anything else may send)."""
        self._max_bytes = settings.max_message_bytes if max_message_bytes is None else max_message_bytes
        # Dead letters carry the refused record base64-encoded, so the DLQ topic takes larger records
        # than any other; every producer may send them, since every service parks poison.
        self._dlq_max_bytes = max(self._max_bytes, DLQ_MAX_RECORD_BYTES - _FRAMING)
        self._dlq_suffix = DLQ_MESSAGES.name
        self._producer: Any = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap,
            client_id=f"{settings.client_id_prefix}-{client_id}",
            acks="all",
            enable_idempotence=True,
            transactional_id=transactional_id,
            linger_ms=linger_ms,
            max_request_size=self._dlq_max_bytes + _FRAMING,
        )

    async def start(self) -> None:
        try:
            await self._producer.start()
        except KafkaError as err:
            await self._producer.stop()
            raise TransientStorageError(f"cannot start Kafka producer: {err}") from err

    async def stop(self) -> None:
        await self._producer.stop()

    async def __aenter__(self) -> "Producer":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def send_raw(
        self,
        topic: str,
        *,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> Delivered:
        """Send bytes and wait for the broker's acknowledgement."""
        self._check_size(topic, value)
        try:
            meta = await self._producer.send_and_wait(
                topic,
                value=value,
                key=key,
                partition=partition,
                headers=list((headers or {}).items()),
            )
        except _SIZE_ERRORS as err:
            raise MessageTooLarge(f"{topic} refused a record of {len(value or b'')} bytes: {err}") from err
        except KafkaError as err:
            raise TransientStorageError(f"send to {topic} failed: {err}") from err
        return Delivered(meta.topic, meta.partition, meta.offset, meta.timestamp)

    async def send(self, topic: str, envelope: Envelope, *, headers: Headers | None = None) -> Delivered:
        """Send one envelope keyed by `envelope.key` and wait for the acknowledgement."""
        return await self.send_raw(
            topic,
            key=envelope.key.encode(),
            value=encode(envelope),
            headers={**envelope_headers(envelope), **(headers or {})},
        )

    async def send_many(
        self, items: Iterable[tuple[str, Envelope]], *, headers: Headers | None = None
    ) -> list[Delivered]:
        """Send several envelopes in one pipelined burst; wait until every one is acknowledged."""
        return await self.send_raw_many(
            OutgoingRecord(
                topic,
                envelope.key.encode(),
                encode(envelope),
                {**envelope_headers(envelope), **(headers or {})},
            )
            for topic, envelope in items
        )

    async def send_raw_many(self, records: Iterable[OutgoingRecord]) -> list[Delivered]:
        """Enqueue records in the given order, then wait for every acknowledgement.

        Enqueueing one after another (not in concurrent tasks) keeps the given order per partition.
        """
        futures = []
        try:
            for record in records:
                self._check_size(record.topic, record.value)
                futures.append(
                    await self._producer.send(
                        record.topic,
                        value=record.value,
                        key=record.key,
                        headers=list((record.headers or {}).items()),
                    )
                )
            metas = await asyncio.gather(*futures)
        except _SIZE_ERRORS as err:
            raise MessageTooLarge(f"a record of the batch is too large: {err}") from err
        except KafkaError as err:
            raise TransientStorageError(f"batch send failed: {err}") from err
        return [Delivered(m.topic, m.partition, m.offset, m.timestamp) for m in metas]

    def limit_for(self, topic: str) -> int:
        """The largest value this producer sends to ``topic``."""
        if topic == self._dlq_suffix or topic.endswith("." + self._dlq_suffix):
            return self._dlq_max_bytes
        return self._max_bytes

    def _check_size(self, topic: str, value: bytes | None) -> None:
        limit = self.limit_for(topic)
        if value is not None and len(value) > limit:
            raise MessageTooLarge(f"record of {len(value)} bytes exceeds the {limit}-byte limit for {topic}")

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Begin a Kafka transaction, commit on success, abort on error (transactional producers only)."""
        async with self._producer.transaction():
            yield

    async def send_offsets_to_transaction(
        self, offsets: Mapping[tuple[str, int], int], group_id: str
    ) -> None:
        """Commit consumer offsets (next offset to read) inside the open transaction."""
        from aiokafka.structs import TopicPartition

        await self._producer.send_offsets_to_transaction(
            {TopicPartition(t, p): o for (t, p), o in offsets.items()}, group_id
        )


def envelope_headers(envelope: Envelope) -> dict[str, bytes]:
    """Routing headers that let a reader see the type without parsing the value."""
    return {TYPE_HEADER: envelope.type.encode(), VERSION_HEADER: str(envelope.version).encode()}
