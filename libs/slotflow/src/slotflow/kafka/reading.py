"""Read a whole topic once, from its first record to the end it had when the read began.

For tools (`slotflow replay` reading the workflow-history topic): no consumer group, nothing
committed, every partition assigned by hand. Committed records only (read_committed), so an
aborted transaction's records are never replayed as history.
"""

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from slotflow.errors import SlotflowError, TransientStorageError
from slotflow.kafka.access import start_failure
from slotflow.kafka.records import Record
from slotflow.kafka.startup import wait_for_kafka
from slotflow.settings import KafkaSettings

T = TypeVar("T")


class TopicNotFound(SlotflowError):
    """The topic does not exist on the broker (a wrong name or namespace)."""


async def read_to_end(
    settings: KafkaSettings,
    topic: str,
    *,
    keep: Callable[[Record], bool] | None = None,
    idle_timeout: float = 10.0,
    client_id: str = "reader",
) -> list[Record]:
    """Every record of ``topic`` (that ``keep`` accepts), partition by partition in offset order.

    Stops at the end offsets read when it started, so a topic still being written is read to a
    fixed point. ``idle_timeout`` bounds a wait in which no partition advances.

    Raises:
        TopicNotFound: the broker has no such topic.
        TransientStorageError: Kafka was unreachable or stopped answering.
    """
    consumer: Any = AIOKafkaConsumer(
        **settings.client_options(),
        client_id=f"{settings.client_id_prefix}-{client_id}",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=settings.max_message_bytes * 4,
    )
    try:
        await wait_for_kafka(settings, f"reading {topic}")
        await consumer.start()
    except KafkaError as err:
        await consumer.stop()
        raise await start_failure(settings.bootstrap, settings.security, err, f"reading {topic}") from err
    except BaseException:
        await consumer.stop()
        raise
    try:
        return await _read(consumer, topic, keep, idle_timeout)
    except KafkaError as err:
        raise TransientStorageError(f"reading {topic} failed: {err}") from err
    finally:
        await consumer.stop()


async def _read(
    consumer: Any, topic: str, keep: Callable[[Record], bool] | None, idle_timeout: float
) -> list[Record]:
    # consumer.topics() hands back a fresh metadata snapshot without keeping it; ask for one directly.
    cluster = await consumer._client.fetch_all_metadata()
    numbers = cluster.partitions_for_topic(topic)
    if not numbers:
        raise TopicNotFound(f"topic {topic} does not exist on the broker")
    partitions = [TopicPartition(topic, p) for p in sorted(numbers)]
    consumer.assign(partitions)
    await consumer.seek_to_beginning(*partitions)
    # Under read_committed these are the last stable offsets: an open transaction is not waited for.
    ends: dict[Any, int] = {
        tp: int(offset) for tp, offset in (await consumer.end_offsets(partitions)).items()
    }
    by_partition: dict[int, list[Record]] = {tp.partition: [] for tp in partitions}
    positions: dict[Any, int] = {}
    last_progress = time.monotonic()
    while True:
        now = {tp: int(await consumer.position(tp)) for tp in partitions}
        if now != positions:
            # Progress is the position moving, not records arriving: transaction markers move it too.
            positions, last_progress = now, time.monotonic()
        pending = [tp for tp in partitions if positions[tp] < ends[tp]]
        if not pending:
            break
        if time.monotonic() - last_progress > idle_timeout:
            left = {tp.partition: ends[tp] - positions[tp] for tp in pending}
            raise TransientStorageError(
                f"reading {topic}: no progress for {idle_timeout:g}s with records left per partition {left}"
            )
        batches = await consumer.getmany(*pending, timeout_ms=200)
        for tp, raw in batches.items():
            for item in raw:
                if item.offset < ends[tp]:
                    record = Record.from_aiokafka(item)
                    if keep is None or keep(record):
                        by_partition[tp.partition].append(record)
    return [record for partition in sorted(by_partition) for record in by_partition[partition]]


def _unassigned_consumer(settings: KafkaSettings, client_id: str) -> Any:
    """A consumer outside any group that reads committed records only. client_options carries the
    bootstrap and the TLS/SASL settings (one built from the bootstrap alone spoke PLAINTEXT to a
    secured broker)."""
    return AIOKafkaConsumer(
        **settings.client_options(),
        client_id=f"{settings.client_id_prefix}-{client_id}",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=settings.max_message_bytes * 4,
    )


async def _assign_every_partition(
    consumer: Any, settings: KafkaSettings, topic: str, *, role: str
) -> list[Any]:
    """Start ``consumer`` and assign it every partition of ``topic``; stopped again on failure.

    Raises:
        TopicNotFound: the broker has no such topic.
        KafkaAuthenticationFailed, KafkaAccessDenied: the broker refused the login or the topic.
        TransientStorageError: Kafka was unreachable.
    """
    try:
        await wait_for_kafka(settings, f"{role} of {topic}")
        await consumer.start()
        cluster = await consumer._client.fetch_all_metadata()
    except KafkaError as err:
        await consumer.stop()
        raise await start_failure(settings.bootstrap, settings.security, err, f"{role} of {topic}") from err
    except BaseException:
        await consumer.stop()
        raise
    numbers = cluster.partitions_for_topic(topic)
    if not numbers:
        await consumer.stop()
        raise TopicNotFound(f"topic {topic} does not exist on the broker")
    partitions = [TopicPartition(topic, p) for p in sorted(numbers)]
    consumer.assign(partitions)
    return partitions


class TopicReader:
    """A topic read from given positions by hand (no group, nothing committed, read_committed).

    For clients that must see what a service writes after a point in time they control: note the
    topic's `end_offsets()` before acting, then `find()` the reply from there on. Used by
    `slotflow.client`'s Kafka transport to see a command's CommandAccepted/CommandRejected.
    """

    def __init__(self, settings: KafkaSettings, topic: str, *, client_id: str = "reader") -> None:
        self.topic = topic
        self._settings = settings
        self._consumer: Any = _unassigned_consumer(settings, client_id)
        self._partitions: list[Any] = []

    async def start(self) -> None:
        """Connect and learn the topic's partitions.

        Raises:
            TopicNotFound: the broker has no such topic.
            KafkaAuthenticationFailed, KafkaAccessDenied: the broker refused the login or the topic.
            TransientStorageError: Kafka was unreachable.
        """
        self._partitions = await _assign_every_partition(
            self._consumer, self._settings, self.topic, role="reader"
        )

    async def stop(self) -> None:
        await self._consumer.stop()

    async def end_offsets(self) -> dict[int, int]:
        """Each partition's end (the last stable offset under read_committed): what comes later is new.

        Raises:
            TransientStorageError: Kafka did not answer.
        """
        try:
            found = await self._consumer.end_offsets(self._partitions)
        except KafkaError as err:
            raise TransientStorageError(f"reading the end of {self.topic} failed: {err}") from err
        return {tp.partition: int(offset) for tp, offset in found.items()}

    async def find(
        self, start: Mapping[int, int], match: Callable[[Record], T | None], *, timeout: float
    ) -> T | None:
        """The first non-None ``match`` of a record at or after ``start`` (per partition), or None
        once ``timeout`` seconds pass without one. A partition missing from ``start`` is read from
        its beginning.

        Raises:
            TransientStorageError: Kafka failed while reading.
        """
        deadline = time.monotonic() + timeout
        try:
            for tp in self._partitions:
                if tp.partition in start:
                    self._consumer.seek(tp, start[tp.partition])
                else:
                    await self._consumer.seek_to_beginning(tp)
            while (left := deadline - time.monotonic()) > 0:
                batches = await self._consumer.getmany(timeout_ms=max(1, int(min(left, 0.5) * 1000)))
                for raw in batches.values():
                    for item in raw:
                        found = match(Record.from_aiokafka(item))
                        if found is not None:
                            return found
        except KafkaError as err:
            raise TransientStorageError(f"reading {self.topic} failed: {err}") from err
        return None


class TopicFollower:
    """A whole topic kept up with on demand: from its first record on, no group, nothing committed.

    For state a process keeps in memory from a compacted topic (the signing keys every command
    consumer checks, `slotflow.principals.keyring`): `catch_up` hands every record up to the end
    the topic has *when it is called* to ``apply``, so whatever was on the topic before the call
    is known once it returns. Records are applied in offset order per partition.
    """

    def __init__(self, settings: KafkaSettings, topic: str, *, client_id: str = "follower") -> None:
        self.topic = topic
        self._settings = settings
        self._consumer: Any = _unassigned_consumer(settings, client_id)
        self._partitions: list[Any] = []

    async def start(self) -> None:
        """Connect, learn the partitions, and stand before the first record of each.

        Raises:
            TopicNotFound: the broker has no such topic.
            KafkaAuthenticationFailed, KafkaAccessDenied: the broker refused the login or the topic.
            TransientStorageError: Kafka was unreachable.
        """
        self._partitions = await _assign_every_partition(
            self._consumer, self._settings, self.topic, role="follower"
        )
        await self._consumer.seek_to_beginning(*self._partitions)

    async def stop(self) -> None:
        await self._consumer.stop()

    async def catch_up(self, apply: Callable[[Record], None], *, timeout: float) -> int:
        """Apply every record up to the topic's current end; how many were applied.

        Raises:
            TransientStorageError: Kafka failed, or the end was not reached within ``timeout`` s.
        """
        deadline = time.monotonic() + timeout
        applied = 0
        try:
            found = await self._consumer.end_offsets(self._partitions)
            ends = {tp: int(offset) for tp, offset in found.items()}
            while True:
                pending = [tp for tp in self._partitions if int(await self._consumer.position(tp)) < ends[tp]]
                if not pending:
                    return applied
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TransientStorageError(f"{self.topic} was not read to its end within {timeout:g} s")
                batches = await self._consumer.getmany(
                    *pending, timeout_ms=max(1, int(min(left, 0.2) * 1000))
                )
                for raw in batches.values():
                    for item in raw:
                        apply(Record.from_aiokafka(item))
                        applied += 1
        except KafkaError as err:
            raise TransientStorageError(f"reading {self.topic} failed: {err}") from err
