"""Composition root: pool, migrations, producer, command consumer, ticking loop, relay, metrics and probes.

Every replica runs all of it; none is a leader. Stopping (SIGTERM) lets each loop finish what it
holds: a claim transaction commits or rolls back, the command batch in hand is committed, and
staged rows not yet relayed stay in the outbox for whichever replica relays next.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path

from slotflow.contracts.topics import SCHEDULE_COMMANDS, TIMER_COMMANDS
from slotflow.errors import TransientStorageError
from slotflow.health import Health, groups_joined, health_listener, kafka_probe, postgres_probe
from slotflow.kafka.loop import Rehandler
from slotflow.kafka.producer import Producer
from slotflow.kafka.redrive import RedriveResponder
from slotflow.pg.migrations import MigrationSource
from slotflow.pg.outbox import SHARDS
from slotflow.pg.pool import CONNECTION_ERRORS, Pool, wait_for_pool
from slotflow.principals import CommandVerifier, KafkaKeyRing, KeyRing
from slotflow.relay import OutboxRelay
from slotflow.service import RelayGroup, Supervisor, periodic
from slotflow.service import migrate as migrate_schema
from slotflow_ticker.claims import SlotFirer
from slotflow_ticker.command_loop import CommandLoop, group_id
from slotflow_ticker.commands import COMMANDS, SERVICE, CommandHandler, CommandTopics
from slotflow_ticker.config import Settings, TickerSettings
from slotflow_ticker.cron_review import CronReview
from slotflow_ticker.events import EventFactory, Topics
from slotflow_ticker.metrics import TickerMetrics
from slotflow_ticker.redrives import TickerRedrives
from slotflow_ticker.sql import Queries
from slotflow_ticker.ticking import Ticking

log = logging.getLogger(__name__)

MIGRATIONS = MigrationSource("ticker", Path(__file__).parent / "migrations")
_STORAGE_ERRORS: tuple[type[BaseException], ...] = (TransientStorageError, *CONNECTION_ERRORS)


async def migrate(pool: Pool, settings: TickerSettings) -> list[str]:
    """Create or upgrade the ticker schema (outbox and inbox included); returns what was applied."""
    return await migrate_schema(pool, schema=settings.db_schema, source=MIGRATIONS)


class TickerService:
    """One ticker replica."""

    def __init__(self, settings: Settings, *, metrics: TickerMetrics | None = None) -> None:
        self.settings = settings
        self.kafka = settings.kafka
        self.postgres = settings.postgres
        self.signatures = settings.signatures
        # Checked before anything starts: an inbox that forgot a command id while its signature
        # is still young enough would let the same command be applied twice.
        self.signatures.check_inbox_outlasts_window(
            settings.ticker.inbox_retention_days * 86400, setting="SLOTFLOW_TICKER_INBOX_RETENTION_DAYS"
        )
        self.metrics = metrics or TickerMetrics()
        self.ticking: Ticking | None = None
        self.relay: RelayGroup | None = None
        self.started = asyncio.Event()
        #: What /livez and /readyz answer (slotflow.health): ready while its loops run, its command
        #: group was joined and PostgreSQL and Kafka answer.
        self.health = Health(
            f"ticker-{settings.ticker.ticker_id}", stall_after=settings.ticker.liveness_stall_seconds
        )
        self._published_seen = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set."""
        settings = self.settings.ticker
        pool = await wait_for_pool(
            self.postgres,
            min_size=2,
            max_size=settings.pool_size,
            server_settings={"application_name": f"slotflow-ticker-{settings.ticker_id}"[:63]},
        )
        keys: KafkaKeyRing | None = None
        try:
            await migrate(pool, settings)
            if self.signatures.required:
                keys = KafkaKeyRing(self.kafka, client_id=f"ticker-{settings.ticker_id}")
                await keys.start()
            producer = Producer(self.kafka, client_id=f"ticker-{settings.ticker_id}")
            await producer.start()
            try:
                await self._serve(pool, producer, stop, keys)
            finally:
                await producer.stop()
        finally:
            if keys is not None:
                await keys.stop()
            await pool.close()

    async def _serve(self, pool: Pool, producer: Producer, stop: asyncio.Event, keys: KeyRing | None) -> None:
        settings = self.settings.ticker
        schema = settings.db_schema
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
        firer = SlotFirer(
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
            pool, firer=firer, queries=queries, settings=settings, metrics=self.metrics, relay=relay
        )
        review = CronReview(
            pool,
            schema=schema,
            queries=queries,
            events=events,
            metrics=self.metrics,
            batch_size=settings.batch_size,
        )
        # Before any loop claims: a schedule stored under older cron rules whose expression reads
        # differently now is paused, not fired under a reading nobody chose (cron_review).
        await review.run()

        def committed(due: list[tuple[str, datetime]]) -> None:
            relay.wake()
            ticking.offer(due)

        handler = CommandHandler(
            pool,
            schema=schema,
            queries=queries,
            events=events,
            firer=firer,
            metrics=self.metrics,
            on_commit=committed,
            topics=CommandTopics(
                schedules=self.kafka.topic(SCHEDULE_COMMANDS),
                timers=self.kafka.topic(TIMER_COMMANDS),
                legacy_timer_commands=settings.legacy_timer_commands,
            ),
            max_backfill_slots=settings.max_backfill_slots,
            verifier=CommandVerifier(self.signatures, keys),
        )
        self.ticking, self.relay = ticking, relay
        redrives = TickerRedrives(pool, schema=schema, kafka=self.kafka, events=events, wake_relay=relay.wake)
        # The ticker owns its command topics' records and the slots of its schedules: a redrive
        # re-issues a slot from the current definition, or reads a command back and applies it.
        commands_again = Rehandler(
            handler=handler.handle,
            source_service=SERVICE,
            accept=COMMANDS,
            max_bytes=self.kafka.max_message_bytes,
        )
        self.redrives = RedriveResponder(
            self.kafka,
            service=SERVICE,
            producer=producer,
            group_id=group_id(settings, self.kafka) + ".redrives",
            rehandlers={
                self.kafka.topic(SCHEDULE_COMMANDS): commands_again,
                self.kafka.topic(TIMER_COMMANDS): commands_again,
            },
            on_request=redrives.on_request,
            client_id=f"ticker-redrives-{settings.ticker_id}",
        )
        loops = Supervisor(f"ticker-{settings.ticker_id}")
        commands = CommandLoop(self.kafka, settings, producer, handler, lag=self.metrics.consumer_lag)
        loops.add("commands", commands.run)
        loops.add("redrives", self.redrives.run)
        loops.add("ticking", ticking.run)
        relay.add_to(loops)
        loops.add(
            "backlog",
            periodic(settings.backlog_seconds, self._backlog(relay), outages=_STORAGE_ERRORS, what="backlog"),
        )
        loops.add(
            "housekeeping",
            periodic(
                settings.housekeeping_seconds,
                self._housekeeping(firer, review),
                outages=_STORAGE_ERRORS,
                what="housekeeping",
            ),
        )
        health = self.health
        health.gate("loops", loops.problem)
        health.gate("commands", groups_joined(lambda: [commands.consumer]))
        health.probe("postgres", postgres_probe(pool))
        health.probe("kafka", kafka_probe(producer))
        with health_listener(
            health, self.metrics.registry, port=settings.metrics_port, host=settings.metrics_host, stop=stop
        ):
            self.started.set()
            log.info("ticker %s running (schema %s)", settings.ticker_id, schema)
            if settings.legacy_timer_commands:
                # A door left open: say so every start, so it is not left open past the upgrade.
                log.warning(
                    "ticker %s accepts timer commands from the public topic %s "
                    "(SLOTFLOW_TICKER_LEGACY_TIMER_COMMANDS): turn it off once the rolling upgrade is done",
                    settings.ticker_id,
                    self.kafka.topic(SCHEDULE_COMMANDS),
                )
            await loops.run(stop)

    def _backlog(self, relay: RelayGroup) -> Callable[[], Awaitable[None]]:
        async def refresh() -> None:
            self.metrics.outbox_backlog.set(await relay.pending())
            published = relay.published
            self.metrics.outbox_published.inc(published - self._published_seen)
            self._published_seen = published

        return refresh

    def _housekeeping(self, firer: SlotFirer, review: CronReview) -> Callable[[], Awaitable[None]]:
        async def purge() -> None:
            # Rows a ticker of the previous version stored during a rolling upgrade, or that were
            # locked at the start's review, are reviewed here.
            await review.run()
            inbox, timers = await firer.purge(
                inbox_seconds=self.settings.ticker.inbox_retention_days * 86400,
                timer_seconds=self.settings.ticker.timer_retention_days * 86400,
            )
            if inbox or timers:
                log.info("ticker: purged %d inbox entries and %d finished timers", inbox, timers)

        return purge
