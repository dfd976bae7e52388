"""The consume loop every service runs: decode, validate, handle, and never block on poison.

Poison goes to the DLQ with its reason, an outage is waited out, any other retryable failure gets
``max_attempts`` tries; offsets are committed once every record of a batch is handled or parked.
How each failure is sorted, and why: docs/dlq.md, "The consume wrapper".
"""

import asyncio
import contextlib
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from slotflow import tracing
from slotflow.contracts import REGISTRY, MessageRegistry
from slotflow.contracts.envelope import Envelope, Message
from slotflow.core.retry import is_retryable, sleep_backoff
from slotflow.errors import KafkaAccessDenied, PoisonMessage, TransientStorageError, UnparkableRecord
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.poison import DLQ_MAX_ENVELOPE_BYTES, decode_record, guess_ids, send_to_dlq
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record

log = logging.getLogger(__name__)

#: Failures that mean "the world is unavailable", retried until it is back.
DEFAULT_OUTAGE_TYPES: tuple[type[BaseException], ...] = (TransientStorageError, ConnectionError, OSError)


@dataclass(frozen=True, slots=True)
class Incoming:
    """A record that decoded and validated."""

    record: Record
    envelope: Envelope
    message: Message


Handler = Callable[[Incoming], Awaitable[None]]
#: Handles every good record of a polled batch at once (one transaction, say); all or nothing.
BatchHandler = Callable[[list[Incoming]], Awaitable[None]]
#: Called after a record was parked in the DLQ, with the record and the reason (for metrics).
DeadLetterHook = Callable[[Record, str], None]


@dataclass
class LoopStats:
    handled: int = 0
    dead_lettered: int = 0
    transient_retries: int = 0
    batches: int = 0
    poll_errors: int = 0
    commit_errors: int = 0
    unparkable: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)


class ConsumeLoop:
    """Poll → decode → handle → commit, with poison parked in the DLQ."""

    def __init__(
        self,
        consumer: Consumer,
        *,
        handler: Handler,
        dlq: Producer,
        dlq_topic: str,
        source_service: str,
        accept: tuple[type[Message], ...] | None = None,
        max_bytes: int = 1_048_576,
        poll_timeout_ms: int = 500,
        rng: random.Random | None = None,
        max_attempts: int = 10,
        outage_types: tuple[type[BaseException], ...] = DEFAULT_OUTAGE_TYPES,
        registry: MessageRegistry = REGISTRY,
        check_payload_key: bool = True,
        dlq_max_bytes: int = DLQ_MAX_ENVELOPE_BYTES,
        on_dead_letter: DeadLetterHook | None = None,
        retry_base: float = 0.1,
        retry_cap: float = 10.0,
        batch_handler: BatchHandler | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self._consumer = consumer
        self._handler = handler
        self._dlq = dlq
        self._dlq_topic = dlq_topic
        self._source = source_service
        self._accept = accept
        self._max_bytes = max_bytes
        self._poll_timeout_ms = poll_timeout_ms
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self._max_attempts = max_attempts
        self._outage_types = outage_types
        self._registry = registry
        self._check_payload_key = check_payload_key
        self._dlq_max_bytes = dlq_max_bytes
        self._on_dead_letter = on_dead_letter
        self._retry_base = retry_base
        self._retry_cap = retry_cap
        self._batch_handler = batch_handler
        self.stats = LoopStats()

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; the batch in hand is finished first.

        Broker hiccups while polling or committing are logged and outlived, never fatal: an
        uncommitted batch is simply delivered again, and handlers collapse it on the envelope id.
        """
        failures = 0
        while not stop.is_set():
            try:
                records = await self._consumer.poll(timeout_ms=self._poll_timeout_ms)
            except (asyncio.CancelledError, KafkaAccessDenied):
                raise  # a missing ACL never heals by polling again: the service stops and says why
            except Exception as err:  # noqa: BLE001 - aiokafka raises many types; all mean "poll again"
                failures += 1
                self.stats.poll_errors += 1
                log.warning("%s: poll failed (try %d): %s", self._source, failures, err)
                await self._pause(failures, stop)
                continue
            failures = 0
            if records:
                await self.process(records, stop)

    async def process(self, records: list[Record], stop: asyncio.Event | None = None) -> None:
        """Handle one polled batch in order, then commit it."""
        if self._batch_handler is None:
            for record in records:
                incoming = await self._decode(record, stop)
                if incoming is not None:
                    await self._handle_one(incoming, stop)
        else:
            await self._process_batch(records, stop)
        self.stats.batches += 1
        try:
            await self._consumer.commit(records)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - a lost commit only means redelivery
            self.stats.commit_errors += 1
            log.warning("%s: commit failed; the batch will be redelivered: %s", self._source, err)

    async def _decode(self, record: Record, stop: asyncio.Event | None) -> Incoming | None:
        """The record as a message, or None once it is parked as poison."""
        try:
            envelope, message = decode_record(
                record,
                accept=self._accept,
                registry=self._registry,
                max_bytes=self._max_bytes,
                check_payload_key=self._check_payload_key,
            )
        except PoisonMessage as poison:
            await self._dead_letter(record, poison, poison.reason, stop)
            return None
        return Incoming(record, envelope, message)

    async def _process_batch(self, records: list[Record], stop: asyncio.Event | None) -> None:
        goods = [incoming for record in records if (incoming := await self._decode(record, stop)) is not None]
        if not goods or self._batch_handler is None:
            return
        with self._batch_span(goods):
            await self._handle_batch(goods, stop)

    async def _handle_batch(self, goods: list[Incoming], stop: asyncio.Event | None) -> None:
        if self._batch_handler is None:
            return
        attempt = 0
        while True:
            try:
                await self._batch_handler(goods)
            except asyncio.CancelledError:
                raise
            except self._outage_types as err:
                attempt += 1
                self.stats.transient_retries += 1
                log.warning(
                    "%s: outage handling a batch of %d (try %d): %s", self._source, len(goods), attempt, err
                )
                if stop is not None and stop.is_set() and attempt > 3:
                    raise
                await self._pause(attempt, None)
            except Exception as err:  # noqa: BLE001 - narrowed below, one record at a time
                # Whatever failed may belong to one record: the slow path finds it, handles the
                # others, and sorts that one's failure like any handler's.
                log.warning("%s: batch of %d failed, handling one by one: %s", self._source, len(goods), err)
                for incoming in goods:
                    await self._handle_one(incoming, stop)
                return
            else:
                self.stats.handled += len(goods)
                return

    def _span(self, incoming: Incoming) -> AbstractContextManager[object]:
        """A CONSUMER span for one record, child of the context its headers carry (if tracing)."""
        if not tracing.enabled():
            return contextlib.nullcontext()
        record, envelope = incoming.record, incoming.envelope
        return tracing.span(
            f"slotflow.{self._source}",
            f"process {record.topic}",
            kind=tracing.SpanKind.CONSUMER,
            parent=tracing.extract(record.headers),
            attributes={
                **tracing.messaging(
                    record.topic,
                    operation="process",
                    operation_type="process",
                    message_id=envelope.id,
                    key=record.key,
                    partition=record.partition,
                    offset=record.offset,
                    group=self._consumer.group_id,
                ),
                "slotflow.message.type": envelope.type,
            },
        )

    def _batch_span(self, goods: list[Incoming]) -> AbstractContextManager[object]:
        """One CONSUMER span for a batch (if tracing): a batch of one continues its record's
        trace like `_span`; a larger one is linked to every record's context."""
        if not tracing.enabled():
            return contextlib.nullcontext()
        if len(goods) == 1:
            return self._span(goods[0])
        first = goods[0].record
        links = [c for g in goods if (c := tracing.extract(g.record.headers)) is not None]
        return tracing.span(
            f"slotflow.{self._source}",
            f"process {first.topic}",
            kind=tracing.SpanKind.CONSUMER,
            links=links,
            attributes={
                **tracing.messaging(
                    first.topic, operation="process", operation_type="process", group=self._consumer.group_id
                ),
                "messaging.batch.message_count": len(goods),
            },
        )

    async def _handle_one(self, incoming: Incoming, stop: asyncio.Event | None) -> None:
        with self._span(incoming):
            await self._handle_one_traced(incoming, stop)

    async def _handle_one_traced(self, incoming: Incoming, stop: asyncio.Event | None) -> None:
        record = incoming.record
        attempt = 0
        while True:
            try:
                await self._handler(incoming)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # sorted below: nothing escapes unclassified
                if not is_retryable(err):
                    reason = err.reason if isinstance(err, PoisonMessage) else "permanent_error"
                    await self._dead_letter(record, err, reason, stop)
                    return
                attempt += 1
                self.stats.transient_retries += 1
                outage = isinstance(err, self._outage_types)
                if not outage and attempt >= self._max_attempts:
                    await self._dead_letter(record, err, "attempts_exhausted", stop)
                    return
                log.warning(
                    "%s: %s on %s (try %d): %s",
                    self._source,
                    "outage" if outage else "transient failure",
                    record.position,
                    attempt,
                    err,
                )
                if stop is not None and stop.is_set() and attempt > 3:
                    raise
                await self._pause(attempt, None)
            else:
                self.stats.handled += 1
                return

    async def _dead_letter(
        self, record: Record, error: BaseException, reason: str, stop: asyncio.Event | None
    ) -> None:
        log.error("%s: dead-lettering %s (%s): %s", self._source, record.position, reason, error)
        if tracing.enabled():
            current = tracing.current_span()
            current.set_attribute("slotflow.dlq.reason", reason)
            tracing.record_error(current, error)
        run_id, job_id, tags = guess_ids(record, max_bytes=self._max_bytes)
        attempt = 0
        while True:
            try:
                await send_to_dlq(
                    self._dlq,
                    record,
                    error,
                    dlq_topic=self._dlq_topic,
                    source_service=self._source,
                    occurred_at=datetime.now(UTC),
                    reason=reason,
                    run_id=run_id,
                    job_id=job_id,
                    tags=tags,
                    max_bytes=self._dlq_max_bytes,
                )
            except asyncio.CancelledError:
                raise
            except UnparkableRecord as err:
                # Not even the minimal letter (position, reason, error) was taken, for a reason
                # waiting will not change: holding the partition for it would stop every record
                # behind it for good. The log is its last record; the bytes stay on the topic.
                self.stats.unparkable += 1
                log.critical(
                    "%s: skipping %s, unparkable (%s): %s", self._source, record.position, reason, err
                )
                return
            except Exception as err:  # the DLQ must accept it: wait for the broker
                attempt += 1
                log.warning("%s: DLQ send failed (try %d): %s", self._source, attempt, err)
                if stop is not None and stop.is_set() and attempt > 3:
                    # Leaving without a commit: the record comes back to whoever consumes next.
                    raise TransientStorageError(f"DLQ unavailable while stopping: {err}") from err
                await self._pause(attempt, None)
            else:
                self.stats.dead_lettered += 1
                self.stats.by_reason[reason] += 1
                if self._on_dead_letter is not None:
                    try:
                        self._on_dead_letter(record, reason)
                    except Exception as err:  # noqa: BLE001 - a metrics hook must not stop the loop
                        log.warning("%s: dead-letter hook failed: %s", self._source, err)
                return

    def rehandler(self) -> "Rehandler":
        """What this loop does to a record, without the parking: for a record read back from its
        topic by a redrive (`slotflow.kafka.redrive`), whose failure is answered, not parked again."""
        return Rehandler(
            handler=self._handler,
            source_service=self._source,
            accept=self._accept,
            max_bytes=self._max_bytes,
            registry=self._registry,
            check_payload_key=self._check_payload_key,
            max_attempts=self._max_attempts,
            outage_types=self._outage_types,
            retry_base=self._retry_base,
            retry_cap=self._retry_cap,
        )

    async def _pause(self, attempt: int, stop: asyncio.Event | None) -> None:
        delay = sleep_backoff(
            min(attempt, 16), base=self._retry_base, cap=self._retry_cap, draw=self._rng.random()
        )
        if stop is None:
            await delay
            return
        sleeper = asyncio.ensure_future(delay)
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([sleeper, stopper], return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            stopper.cancel()


@dataclass(frozen=True, slots=True)
class Handled:
    """What handling a record again came to: `done`, or `refused` with the reason it would have
    been parked with (`reason`) and the error's text (`detail`)."""

    done: bool
    reason: str = ""
    detail: str = ""


class Rehandler:
    """A consume loop's checks and handler for one record at a time, never parking: a record read
    back from its topic for a redrive (docs/decisions/0009) goes through every check a record on
    that topic gets (decode, type, key, identity, the handler with its own idempotence), and a
    failure is returned for the redrive's answer instead of becoming a second dead letter.

    Failures are sorted as the loop sorts them: poison and permanent errors refuse at once, other
    retryable failures get ``max_attempts`` tries, an outage is waited out.
    """

    def __init__(
        self,
        *,
        handler: Handler,
        source_service: str,
        accept: tuple[type[Message], ...] | None = None,
        max_bytes: int = 1_048_576,
        registry: MessageRegistry = REGISTRY,
        check_payload_key: bool = True,
        max_attempts: int = 10,
        outage_types: tuple[type[BaseException], ...] = DEFAULT_OUTAGE_TYPES,
        retry_base: float = 0.1,
        retry_cap: float = 10.0,
        rng: random.Random | None = None,
    ) -> None:
        self._handler = handler
        self._source = source_service
        self._accept = accept
        self._max_bytes = max_bytes
        self._registry = registry
        self._check_payload_key = check_payload_key
        self._max_attempts = max(max_attempts, 1)
        self._outage_types = outage_types
        self._retry_base = retry_base
        self._retry_cap = retry_cap
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrets

    async def handle(self, record: Record) -> Handled:
        """Decode and handle ``record``; never parks it."""
        try:
            envelope, message = decode_record(
                record,
                accept=self._accept,
                registry=self._registry,
                max_bytes=self._max_bytes,
                check_payload_key=self._check_payload_key,
            )
        except PoisonMessage as poison:
            return Handled(False, poison.reason, str(poison))
        incoming = Incoming(record, envelope, message)
        attempt = 0
        while True:
            try:
                await self._handler(incoming)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - sorted below, as the consume loop sorts it
                if not is_retryable(err):
                    reason = err.reason if isinstance(err, PoisonMessage) else "permanent_error"
                    return Handled(False, reason, f"{type(err).__name__}: {err}")
                attempt += 1
                if not isinstance(err, self._outage_types) and attempt >= self._max_attempts:
                    return Handled(False, "attempts_exhausted", f"{type(err).__name__}: {err}")
                log.warning(
                    "%s: handling %s again failed (try %d): %s", self._source, record.position, attempt, err
                )
                await sleep_backoff(
                    min(attempt, 16), base=self._retry_base, cap=self._retry_cap, draw=self._rng.random()
                )
            else:
                return Handled(True)
