"""The ticker's command consumer: ConsumeLoop's poll → process → commit, plus CommandRejected.

One consumer, in one group, reads both command topics: the public schedule-command topic and the
internal timer topic (the handler refuses what comes through the wrong one).

Started inside its loop, not before the claim loop: joining the consumer group can wait for a
dead member's session to time out, and time must not stop for that.
"""

import asyncio
import logging
from functools import partial

from slotflow.contracts.topics import DLQ_MESSAGES, SCHEDULE_COMMANDS, TIMER_COMMANDS
from slotflow.errors import KafkaAccessDenied, TransientStorageError
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.lag import ConsumerLag
from slotflow.kafka.loop import ConsumeLoop
from slotflow.kafka.poison import decode_record
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import CONNECTION_ERRORS
from slotflow.service import sleep_or_stop
from slotflow.settings import KafkaSettings
from slotflow_ticker.commands import COMMANDS, SERVICE, CommandHandler
from slotflow_ticker.config import TickerSettings

log = logging.getLogger(__name__)

_STORAGE_ERRORS: tuple[type[BaseException], ...] = (TransientStorageError, *CONNECTION_ERRORS)


def group_id(settings: TickerSettings, kafka: KafkaSettings) -> str:
    """The command consumer group, inside the deployment's topic namespace."""
    return kafka.consumer_group(settings.group_id)


class CommandLoop:
    """Schedule and timer commands, once each; poison records rejected and parked."""

    def __init__(
        self,
        kafka: KafkaSettings,
        settings: TickerSettings,
        producer: Producer,
        handler: CommandHandler,
        *,
        lag: ConsumerLag | None = None,
    ) -> None:
        self._kafka = kafka
        self._lag = lag
        self._settings = settings
        self._producer = producer
        self._handler = handler
        self._precheck = partial(decode_record, accept=COMMANDS, max_bytes=kafka.max_message_bytes)
        #: The started consumer while the loop runs (readiness asks whether it joined its group).
        self.consumer: Consumer | None = None

    def _consumer(self) -> Consumer:
        return Consumer(
            self._kafka,
            self._kafka.topic(SCHEDULE_COMMANDS),
            self._kafka.topic(TIMER_COMMANDS),
            group_id=group_id(self._settings, self._kafka),
            client_id=f"ticker-{self._settings.ticker_id}",
            max_poll_records=self._settings.command_batch_size,
            lag=self._lag,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """ConsumeLoop's poll → process → commit, plus CommandRejected for poison records.

        The rejection is staged before the loop parks the record, so a crash in between only
        repeats both (the rejection collapses on its id, the DLQ on the record position).
        """
        # Started here, not before the claim loop: joining the consumer group can wait for a
        # dead member's session to time out, and time must not stop for that.
        while True:
            if stop.is_set():
                return
            consumer = self._consumer()
            try:
                await consumer.start()
                self.consumer = consumer
                break
            except asyncio.CancelledError:
                await consumer.stop()
                raise
            except _STORAGE_ERRORS as err:
                log.warning("ticker: command consumer not started yet: %s", err)
                await sleep_or_stop(stop, 1.0)
        loop = ConsumeLoop(
            consumer,
            handler=self._handler.handle,
            batch_handler=self._handler.handle_batch if self._settings.command_batching else None,
            dlq=self._producer,
            dlq_topic=self._kafka.topic(DLQ_MESSAGES),
            source_service=SERVICE,
            accept=COMMANDS,
            max_bytes=self._kafka.max_message_bytes,
        )
        try:
            await self._poll(consumer, loop, stop)
        finally:
            self.consumer = None
            await consumer.stop()

    async def _poll(self, consumer: Consumer, loop: ConsumeLoop, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                records = await consumer.poll(timeout_ms=500)
            except (asyncio.CancelledError, KafkaAccessDenied):
                raise  # a missing ACL never heals by polling again: the service stops and says why
            except Exception as err:  # noqa: BLE001 - aiokafka raises many types; all mean "poll again"
                log.warning("ticker: poll failed: %s", err)
                await sleep_or_stop(stop, 1.0)
                continue
            if not records:
                continue
            while True:
                try:
                    await self._handler.reject_poison(records, decode_record=self._precheck)
                    break
                except _STORAGE_ERRORS as err:
                    log.warning("ticker: cannot record rejections yet: %s", err)
                    await sleep_or_stop(stop, 1.0)
                    if stop.is_set():
                        return
            await loop.process(records, stop)
