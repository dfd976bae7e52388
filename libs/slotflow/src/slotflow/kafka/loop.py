"""The consume loop every service runs: decode, validate, handle, and never block on poison.

For each polled batch: records that do not decode or validate go to the DLQ with the reason; the
rest reach the service's handler. A handler's `PermanentError` (or poison it detects itself)
dead-letters that one record. Transient failures (storage or broker down) retry the same record
with full-jitter back-off: nothing can progress until the world is back, and skipping would lose
it. Offsets are committed only after every record of the batch is handled or acknowledged by the
DLQ, so a crash redelivers, and handlers collapse redeliveries on the envelope id.
"""

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from slotflow.contracts.envelope import Envelope, Message
from slotflow.core.retry import is_retryable, sleep_backoff
from slotflow.errors import PoisonMessage
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.poison import decode_record, send_to_dlq
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Incoming:
    """A record that decoded and validated."""

    record: Record
    envelope: Envelope
    message: Message


Handler = Callable[[Incoming], Awaitable[None]]


@dataclass
class LoopStats:
    handled: int = 0
    dead_lettered: int = 0
    transient_retries: int = 0


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
    ) -> None:
        self._consumer = consumer
        self._handler = handler
        self._dlq = dlq
        self._dlq_topic = dlq_topic
        self._source = source_service
        self._accept = accept
        self._max_bytes = max_bytes
        self._poll_timeout_ms = poll_timeout_ms
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self.stats = LoopStats()

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; the batch in hand is finished first."""
        while not stop.is_set():
            records = await self._consumer.poll(timeout_ms=self._poll_timeout_ms)
            if records:
                await self.process(records, stop)

    async def process(self, records: list[Record], stop: asyncio.Event | None = None) -> None:
        """Handle one polled batch in order, then commit it."""
        for record in records:
            await self._process_one(record, stop)
        await self._consumer.commit(records)

    async def _process_one(self, record: Record, stop: asyncio.Event | None) -> None:
        try:
            envelope, message = decode_record(record, accept=self._accept, max_bytes=self._max_bytes)
        except PoisonMessage as poison:
            await self._dead_letter(record, poison)
            return
        incoming = Incoming(record, envelope, message)
        attempt = 0
        while True:
            try:
                await self._handler(incoming)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # sorted below: nothing escapes unclassified
                if not is_retryable(err):
                    await self._dead_letter(record, err)
                    return
                attempt += 1
                self.stats.transient_retries += 1
                log.warning(
                    "%s: transient failure on %s (try %d): %s", self._source, record.position, attempt, err
                )
                if stop is not None and stop.is_set() and attempt > 3:
                    raise
                await sleep_backoff(min(attempt, 8), draw=self._rng.random())
            else:
                self.stats.handled += 1
                return

    async def _dead_letter(self, record: Record, error: BaseException) -> None:
        reason = error.reason if isinstance(error, PoisonMessage) else "permanent_error"
        log.error("%s: dead-lettering %s (%s): %s", self._source, record.position, reason, error)
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
                )
            except PoisonMessage:
                raise
            except Exception as err:  # noqa: BLE001 - the DLQ must accept it; wait for the broker
                attempt += 1
                log.warning("%s: DLQ send failed (try %d): %s", self._source, attempt, err)
                await sleep_backoff(min(attempt, 8), draw=self._rng.random())
            else:
                self.stats.dead_lettered += 1
                return
