"""An idempotent producer (acks=all, enable_idempotence) that sends envelopes.

Idempotence makes the broker drop a batch the producer resends after a lost acknowledgement, so a
network retry never duplicates a record inside one producer session. Across sessions duplicates
collapse downstream on the envelope id.
"""

import asyncio
import functools
import random
import struct
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)
from aiokafka.protocol.metadata import MetadataRequest

from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import Envelope, envelope_headers
from slotflow.contracts.topics import DLQ_MAX_RECORD_BYTES, DLQ_MESSAGES
from slotflow.errors import KafkaAccessDenied, MessageTooLarge, TransientStorageError
from slotflow.kafka.access import AUTHORIZATION_ERRORS, access_denied, start_failure
from slotflow.kafka.records import Delivered
from slotflow.kafka.startup import wait_for_kafka
from slotflow.settings import KafkaSettings
from slotflow.tracing import TRACEPARENT
from slotflow.tracing import enabled as tracing_enabled
from slotflow.tracing import produced as traced_create

Headers = Mapping[str, bytes]

#: Room for the record batch framing, key and headers around a value.
_FRAMING = 64 * 1024

#: The client or the broker refused a record for its size: sending it again can never succeed.
_SIZE_ERRORS = (MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError)


class OutgoingRecord(NamedTuple):
    """A record to produce, already encoded (a NamedTuple: relays build one per record, and a
    tuple is built in C where a frozen dataclass sets each field through object.__setattr__)."""

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
        #: This deployment's DLQ topic (where an outbox relay parks a row too large to send).
        self.dlq_topic = settings.topic(DLQ_MESSAGES)
        self._settings = settings
        self._what = f"Kafka producer {client_id}"
        self._producer: Any = AIOKafkaProducer(
            **settings.client_options(),
            client_id=f"{settings.client_id_prefix}-{client_id}",
            acks="all",
            enable_idempotence=True,
            transactional_id=transactional_id,
            linger_ms=linger_ms,
            max_request_size=self._dlq_max_bytes + _FRAMING,
        )

    async def start(self) -> None:
        try:
            await wait_for_kafka(self._settings, self._what)
        except BaseException:
            await self._producer.stop()
            raise
        try:
            await self._producer.start()
        except KafkaError as err:
            await self._producer.stop()
            raise await start_failure(
                self._settings.bootstrap, self._settings.security, err, self._what
            ) from err

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
        except AUTHORIZATION_ERRORS as err:
            raise _denied(err, self._settings, f"{self._what} writing {topic}") from err
        except KafkaError as err:
            raise TransientStorageError(f"send to {topic} failed: {err}") from err
        return Delivered(meta.topic, meta.partition, meta.offset, meta.timestamp)

    async def send(self, topic: str, envelope: Envelope, *, headers: Headers | None = None) -> Delivered:
        """Send one envelope keyed by `envelope.key` and wait for the acknowledgement."""
        return await self.send_raw(
            topic,
            key=envelope.key.encode(),
            value=encode(envelope),
            headers={**envelope_headers(envelope), **_traced(topic, envelope, headers)},
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
                {**envelope_headers(envelope), **_traced(topic, envelope, headers)},
            )
            for topic, envelope in items
        )

    async def send_raw_many(self, records: Iterable[OutgoingRecord]) -> list[Delivered]:
        """Send records as one record batch per partition, then wait for every acknowledgement.

        Each record goes to the partition the producer's own partitioner would choose (murmur2 of
        the key, see `partition_for`), and records of one partition keep the given order inside
        their batches, and the batches their order on the partition; so per-key order and placement
        are what one `send` per record gives, for a fraction of the CPU.
        """
        placed: list[tuple[_Batch, int, int]] = []
        await self._send_batches(records, placed)
        delivered = []
        for batch, index, created in placed:
            meta = batch.meta
            # -1: the topic keeps the producer's create time, which the record carries.
            stamp = created if meta.timestamp in (-1, None) else meta.timestamp
            delivered.append(Delivered(meta.topic, meta.partition, meta.offset + index, stamp))
        return delivered

    async def send_raw_all(self, records: Iterable[OutgoingRecord]) -> int:
        """`send_raw_many` for a caller that needs no per-record `Delivered` (the outbox relay):
        the same batches, placement, order and acknowledgements; returns how many were sent."""
        return await self._send_batches(records, None)

    async def _send_batches(
        self, records: Iterable[OutgoingRecord], placed: list[tuple["_Batch", int, int]] | None
    ) -> int:
        """Build one record batch chain per partition, send them, wait for every acknowledgement.

        With ``placed``, each record's (batch, index in it, create time) is appended there.
        """
        batches: dict[tuple[str, int], list[_Batch]] = {}
        partitions: dict[str, tuple[list[int], list[int]]] = {}
        limits: dict[str, int] = {}
        # Records of one event type share one headers mapping (the relay's `_headers`): list its
        # items once per mapping, not once per record. Kept with the mapping, so its id stays its.
        listed: dict[int, tuple[Headers, list[tuple[str, bytes]]]] = {}
        sent = 0
        try:
            for record in records:
                topic, key, value, headers = record
                limit = limits.get(topic)
                if limit is None:
                    limit = limits[topic] = self.limit_for(topic)
                if value is not None and len(value) > limit:
                    raise _too_large(topic, len(value), limit)
                known = partitions.get(topic)
                if known is None:
                    known = partitions[topic] = await self._partitions(topic)
                tp = (topic, partition_for(key, *known))
                items: list[tuple[str, bytes]] = []
                if headers:
                    seen = listed.get(id(headers))
                    if seen is None or seen[0] is not headers:
                        seen = listed[id(headers)] = (headers, list(headers.items()))
                    items = seen[1]
                chain = batches.get(tp)
                if chain is None:
                    chain = batches[tp] = []
                batch, created = self._append(chain, key, value, items)
                if placed is not None:
                    placed.append((batch, batch.count, created))
                batch.count += 1
                sent += 1
            # Round by round, so a partition whose earlier batch is still being drained holds up
            # only its own later batches.
            rounds = max((len(b) for b in batches.values()), default=0)
            for index in range(rounds):
                for (topic, partition), chain in batches.items():
                    if index < len(chain):
                        batch = chain[index]
                        batch.builder.close()  # closed: ready to drain at once, no linger
                        batch.future = await self._producer.send_batch(
                            batch.builder, topic, partition=partition
                        )
            chains = [batch for chain in batches.values() for batch in chain]
            for batch, meta in zip(chains, await asyncio.gather(*(b.future for b in chains)), strict=True):
                batch.meta = meta
        except _SIZE_ERRORS as err:
            raise MessageTooLarge(f"a record of the batch is too large: {err}") from err
        except AUTHORIZATION_ERRORS as err:
            raise _denied(err, self._settings, f"{self._what} writing {sorted(partitions)}") from err
        except KafkaError as err:
            raise TransientStorageError(f"batch send failed: {err}") from err
        return sent

    def _append(
        self, chain: list["_Batch"], key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]
    ) -> tuple["_Batch", int]:
        """Append to the partition's open batch, or to a new one when it is full; (batch, time).

        ``headers`` may be shared between records: the batch builder only reads it.
        """
        if chain:
            meta = chain[-1].builder.append(timestamp=None, key=key, value=value, headers=headers)
            if meta is not None:
                return chain[-1], int(meta.timestamp)
        # A new batch always takes its first record, whatever its size.
        batch = _Batch(self._producer.create_batch())
        chain.append(batch)
        meta = batch.builder.append(timestamp=None, key=key, value=value, headers=headers)
        return batch, int(meta.timestamp)

    async def _partitions(self, topic: str) -> tuple[list[int], list[int]]:
        # The order aiokafka's partitioner indexes into: list() of the metadata's set.
        every = list(await self._producer.partitions_for(topic))
        available = list(self._producer.client.cluster.available_partitions_for_topic(topic) or ())
        return every, available

    async def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has (waits for its metadata).

        Raises:
            TransientStorageError: the broker did not answer.
        """
        try:
            return len(await self._producer.partitions_for(topic))
        except KafkaError as err:
            raise TransientStorageError(f"no metadata for {topic}: {err}") from err

    async def check_cluster(self) -> None:
        """A readiness check that this producer reaches a broker over its own connections (its
        TLS and SASL included), not merely that some client could: a metadata request naming no
        topic, to each broker it knows in turn until one answers. No topic: a request for all of
        them would carry every topic of a shared cluster, every few seconds, from every replica.

        Raises:
            TransientStorageError: no broker this producer knows answered.
        """
        client = self._producer.client
        brokers = [broker.nodeId for broker in client.cluster.brokers()]
        random.shuffle(brokers)  # spread the checks of many replicas over the brokers
        failures: list[str] = []
        for node in brokers:
            try:
                await client.send(node, MetadataRequest([]))
            except (KafkaError, TimeoutError) as err:
                failures.append(f"broker {node}: {type(err).__name__}: {err}")
                continue
            return
        raise TransientStorageError(
            f"no broker answered a metadata request ({'; '.join(failures) or 'no broker known yet'})"
        )

    def limit_for(self, topic: str) -> int:
        """The largest value this producer sends to ``topic``."""
        if topic == self._dlq_suffix or topic.endswith("." + self._dlq_suffix):
            return self._dlq_max_bytes
        return self._max_bytes

    def _check_size(self, topic: str, value: bytes | None) -> None:
        limit = self.limit_for(topic)
        if value is not None and len(value) > limit:
            raise _too_large(topic, len(value), limit)

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


def _denied(err: Exception, settings: KafkaSettings, what: str) -> KafkaAccessDenied:
    denied = access_denied(err, settings.security, what)
    return denied if denied is not None else KafkaAccessDenied(f"{what}: {err}")


@dataclass(eq=False, slots=True)
class _Batch:
    """One partition's record batch in a `send_raw_many` call."""

    builder: Any
    count: int = 0
    future: Any = None
    meta: Any = None


def _too_large(topic: str, size: int, limit: int) -> MessageTooLarge:
    return MessageTooLarge(f"record of {size} bytes exceeds the {limit}-byte limit for {topic}")


@functools.lru_cache(maxsize=65536)
def _murmur2(key: bytes) -> int:
    # Keys (job ids, schedule ids) repeat, so hash each once.
    return murmur2(key)


@functools.lru_cache(maxsize=256)
def _words(count: int) -> Callable[[bytes], tuple[int, ...]]:
    return struct.Struct(f"<{count}I").unpack_from


def murmur2(data: bytes) -> int:
    """The Kafka partitioner's murmur2 (the Java client's `Utils.murmur2`), equal to aiokafka's.

    aiokafka's is pure Python and assembles every 4-byte word from single bytes with a mask per
    step (3.5 µs for a 15-byte key here); this unpacks the words at once and masks only after the
    multiplications (1.2 µs). tests/unit/kafka pins it to aiokafka's for any bytes.
    """
    length = len(data)
    m = 0x5BD1E995
    h = 0x9747B28C ^ length
    for word in _words(length >> 2)(data):
        k = (word * m) & 0xFFFFFFFF
        k = ((k ^ (k >> 24)) * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length & 3
    if tail:
        end = length - tail
        if tail == 3:
            h ^= data[end + 2] << 16
        if tail >= 2:
            h ^= data[end + 1] << 8
        h = ((h ^ data[end]) * m) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


def key_partition(key: str, partitions: int) -> int:
    """The partition of a topic with ``partitions`` partitions that a record keyed ``key`` goes
    to: a workflow's shard is the commands topic's partition of its id (the orchestrator's lease,
    the api's query route)."""
    return partition_for(key.encode(), list(range(partitions)), [])


def partition_for(key: bytes | None, partitions: Sequence[int], available: Sequence[int]) -> int:
    """The partition aiokafka's default partitioner picks for ``key`` (the Java client's too).

    ``partitions`` in the order the producer's metadata lists them; a record without a key goes to
    a random available partition, as the partitioner does.
    """
    if key is None:
        return random.choice(available or partitions)  # noqa: S311 - placement, not secrets
    return partitions[(_murmur2(key) & 0x7FFFFFFF) % len(partitions)]


def _traced(topic: str, envelope: Envelope, headers: Headers | None) -> Headers:
    """``headers`` plus the trace context of the message's creation, while tracing is on and the
    caller did not bring a context of its own (slotflow.tracing)."""
    if not tracing_enabled() or (headers and TRACEPARENT in headers):
        return headers or {}
    created = traced_create("slotflow.kafka", topic, message_id=envelope.id, key=envelope.key)
    return {**(headers or {}), **created}
