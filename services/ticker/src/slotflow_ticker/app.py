"""Composition root: pool, migrations, producer, command consumer, ticking loop, relay, metrics.

Every replica runs all of it; none is a leader. Stopping (SIGTERM) lets each loop finish what it
holds: a claim transaction commits or rolls back, the command batch in hand is committed, and
staged rows not yet relayed stay in the outbox for whichever replica relays next.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from pathlib import Path

from slotflow.contracts.topics import DLQ_MESSAGES, SCHEDULE_COMMANDS
from slotflow.errors import TransientStorageError
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.loop import ConsumeLoop
from slotflow.kafka.poison import decode_record
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.pg.migrations import INBOX, OUTBOX, MigrationSource, apply_migrations
from slotflow.pg.outbox import SHARDS, OutboxRelay
from slotflow.pg.pool import CONNECTION_ERRORS, Pool, create_pool
from slotflow.service import RelayGroup
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_ticker.claims import Claimer
from slotflow_ticker.commands import COMMANDS, SERVICE, CommandHandler
from slotflow_ticker.config import TickerSettings
from slotflow_ticker.events import EventFactory, Topics
from slotflow_ticker.metrics import TickerMetrics
from slotflow_ticker.sql import Queries
from slotflow_ticker.ticking import Ticking

log = logging.getLogger(__name__)

MIGRATIONS = MigrationSource("ticker", Path(__file__).parent / "migrations")
_STORAGE_ERRORS: tuple[type[BaseException], ...] = (TransientStorageError, *CONNECTION_ERRORS)


async def migrate(pool: Pool, settings: TickerSettings) -> list[str]:
    """Create or upgrade the ticker schema (outbox and inbox included); returns what was applied."""
    return await apply_migrations(pool, schema=settings.schema_name, sources=[OUTBOX, INBOX, MIGRATIONS])


def group_id(settings: TickerSettings, kafka: KafkaSettings) -> str:
    """The command consumer group, inside the deployment's topic namespace."""
    namespace = kafka.topic_namespace
    return f"{namespace}.{settings.group_id}" if namespace else settings.group_id


class TickerApp:
    """One ticker replica."""

    def __init__(
        self,
        settings: TickerSettings,
        kafka: KafkaSettings,
        postgres: PostgresSettings,
        *,
        metrics: TickerMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.kafka = kafka
        self.postgres = postgres
        self.metrics = metrics or TickerMetrics()
        self.ticking: Ticking | None = None
        self.relay: RelayGroup | None = None
        self.started = asyncio.Event()
        self._published_seen = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set."""
        settings = self.settings
        pool = await create_pool(
            self.postgres,
            min_size=2,
            max_size=settings.pool_size,
            server_settings={"application_name": f"slotflow-ticker-{settings.ticker_id}"[:63]},
        )
        try:
            await migrate(pool, settings)
            producer = Producer(self.kafka, client_id=f"ticker-{settings.ticker_id}")
            await producer.start()
            try:
                await self._serve(pool, producer, stop)
            finally:
                await producer.stop()
        finally:
            await pool.close()

    def _consumer(self) -> Consumer:
        return Consumer(
            self.kafka,
            self.kafka.topic(SCHEDULE_COMMANDS),
            group_id=group_id(self.settings, self.kafka),
            client_id=f"ticker-{self.settings.ticker_id}",
            max_poll_records=self.settings.command_batch_size,
        )

    async def _serve(self, pool: Pool, producer: Producer, stop: asyncio.Event) -> None:
        settings = self.settings
        schema = settings.schema_name
        queries = Queries.for_schema(schema)
        events = EventFactory(Topics.of(self.kafka), source=f"{SERVICE}/{settings.ticker_id}")
        relay = RelayGroup(
            [
                OutboxRelay(
                    pool,
                    producer,
                    schema=schema,
                    batch_size=settings.relay_batch_size,
                    idle_interval=settings.relay_idle_seconds,
                    parallel_shards=settings.relay_parallel_shards,
                    one_transaction=settings.relay_one_transaction,
                    shards=range(first, SHARDS, settings.relay_loops),
                )
                for first in range(settings.relay_loops)
            ]
        )
        claimer = Claimer(
            pool,
            schema=schema,
            queries=queries,
            events=events,
            metrics=self.metrics,
            batch_size=settings.batch_size,
            max_slots=settings.max_slots_per_claim,
            hold_seconds=settings.debug_hold_claim_ms / 1000,
        )
        ticking = Ticking(
            pool, claimer=claimer, queries=queries, settings=settings, metrics=self.metrics, relay=relay
        )

        def committed(due: list[tuple[str, datetime]]) -> None:
            relay.wake()
            ticking.offer(due)

        handler = CommandHandler(
            pool,
            schema=schema,
            queries=queries,
            events=events,
            claimer=claimer,
            metrics=self.metrics,
            on_commit=committed,
        )
        precheck = partial(decode_record, accept=COMMANDS, max_bytes=self.kafka.max_message_bytes)
        self.ticking, self.relay = ticking, relay
        if settings.metrics_port:
            self.metrics.serve(settings.metrics_port, settings.metrics_host)
        tasks = [
            asyncio.create_task(self._consume(producer, handler, precheck, stop), name="commands"),
            asyncio.create_task(ticking.run(stop), name="ticking"),
            *(asyncio.create_task(r.run(stop), name=f"relay-{i}") for i, r in enumerate(relay.relays)),
            asyncio.create_task(
                self._every(stop, settings.backlog_seconds, self._backlog(relay)), name="backlog"
            ),
            asyncio.create_task(
                self._every(stop, settings.housekeeping_seconds, self._housekeeping(claimer)),
                name="housekeeping",
            ),
        ]
        self.started.set()
        log.info("ticker %s running (schema %s)", settings.ticker_id, schema)
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _consume(
        self,
        producer: Producer,
        handler: CommandHandler,
        precheck: Callable[[Record], object],
        stop: asyncio.Event,
    ) -> None:
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
                break
            except asyncio.CancelledError:
                await consumer.stop()
                raise
            except _STORAGE_ERRORS as err:
                log.warning("ticker: command consumer not started yet: %s", err)
                await _sleep_or_stop(stop, 1.0)
        loop = ConsumeLoop(
            consumer,
            handler=handler.handle,
            batch_handler=handler.handle_batch if self.settings.command_batching else None,
            dlq=producer,
            dlq_topic=self.kafka.topic(DLQ_MESSAGES),
            source_service=SERVICE,
            accept=COMMANDS,
            max_bytes=self.kafka.max_message_bytes,
        )
        try:
            await self._poll_commands(consumer, loop, handler, precheck, stop)
        finally:
            await consumer.stop()

    async def _poll_commands(
        self,
        consumer: Consumer,
        loop: ConsumeLoop,
        handler: CommandHandler,
        precheck: Callable[[Record], object],
        stop: asyncio.Event,
    ) -> None:
        while not stop.is_set():
            try:
                records = await consumer.poll(timeout_ms=500)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - aiokafka raises many types; all mean "poll again"
                log.warning("ticker: poll failed: %s", err)
                await _sleep_or_stop(stop, 1.0)
                continue
            if not records:
                continue
            while True:
                try:
                    await handler.reject_poison(records, decode_record=precheck)
                    break
                except _STORAGE_ERRORS as err:
                    log.warning("ticker: cannot record rejections yet: %s", err)
                    await _sleep_or_stop(stop, 1.0)
                    if stop.is_set():
                        return
            await loop.process(records, stop)

    def _backlog(self, relay: RelayGroup) -> Callable[[], Awaitable[None]]:
        async def refresh() -> None:
            self.metrics.outbox_backlog.set(await relay.pending())
            published = relay.published
            self.metrics.outbox_published.inc(published - self._published_seen)
            self._published_seen = published

        return refresh

    def _housekeeping(self, claimer: Claimer) -> Callable[[], Awaitable[None]]:
        async def purge() -> None:
            inbox, timers = await claimer.purge(
                inbox_seconds=self.settings.inbox_retention_days * 86400,
                timer_seconds=self.settings.timer_retention_days * 86400,
            )
            if inbox or timers:
                log.info("ticker: purged %d inbox entries and %d finished timers", inbox, timers)

        return purge

    @staticmethod
    async def _every(stop: asyncio.Event, seconds: float, job: Callable[[], Awaitable[None]]) -> None:
        while not stop.is_set():
            try:
                await job()
            except _STORAGE_ERRORS as err:
                log.warning("ticker: periodic job failed: %s", err)
            await _sleep_or_stop(stop, seconds)


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
