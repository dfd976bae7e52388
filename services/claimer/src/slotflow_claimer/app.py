"""Composition root: pools, consumer, producer, relay, and the loops of one claimer process.

Loops: intake (poll JobDue → claim in one transaction → start handlers), offset commits (only up
to records whose runs are durable), heartbeats, the outcome writer, the lease reaper and the
outbox relay. On stop: no more polling or reaping, running handlers get a grace period, whatever
still runs is cancelled and its lease released for another claimer, outcomes and the outbox are
flushed, and the last durable offsets committed.
"""

import asyncio
import contextlib
import logging
import random
from pathlib import Path

from slotflow.contracts.catalogue import ACTIVITY_CANCEL_TYPES, DOWNSTREAM_COMMAND_TYPES
from slotflow.contracts.topics import ACTIVITY_CANCELS, CLAIMERS, DLQ_MESSAGES, DOWNSTREAM_COMMANDS, JOBS_DUE
from slotflow.health import Health, groups_joined, health_listener, kafka_probe, postgres_probe
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.loop import ConsumeLoop
from slotflow.kafka.producer import Producer
from slotflow.kafka.redrive import RedriveResponder
from slotflow.pg.migrations import MigrationSource
from slotflow.pg.pool import Pool, wait_for_pool
from slotflow.pg.retention import purge_loop
from slotflow.principals import CommandVerifier, KafkaKeyRing
from slotflow.relay import OutboxRelay
from slotflow.runs import REGISTRY, HandlerRegistry, load_handler_modules
from slotflow.service import Supervisor, outbox_backlog
from slotflow.service import migrate as migrate_schema
from slotflow.settings import PostgresSettings
from slotflow_claimer import retention
from slotflow_claimer.announce import Announcer
from slotflow_claimer.cancels import ActivityCancels
from slotflow_claimer.config import Settings
from slotflow_claimer.downstream_commands import DownstreamCommands
from slotflow_claimer.downstreams import Gate
from slotflow_claimer.events import RunEvents
from slotflow_claimer.executor import Executor
from slotflow_claimer.intake import Intake
from slotflow_claimer.metrics import ClaimerMetrics
from slotflow_claimer.outcomes import OutcomeWriter
from slotflow_claimer.polling import MAX_BATCH, Polling
from slotflow_claimer.reaper import Reaper
from slotflow_claimer.redrives import ClaimerRedrives
from slotflow_claimer.watchdog import LoopWatchdog

log = logging.getLogger(__name__)

MIGRATIONS = MigrationSource("claimer", Path(__file__).parent / "migrations")


async def migrate(pool: Pool, schema: str = "claimer") -> list[str]:
    """Create or update the claimer's schema (runs, outbox, inbox, payloads: activity results
    too large to travel inline)."""
    return await migrate_schema(pool, schema=schema, source=MIGRATIONS, payloads=True)


class ClaimerService:
    """One claimer: `await run(stop)` like every service; tests also `await start()`, then
    `await stop()` or `kill()` (or use it as an async context manager)."""

    def __init__(
        self,
        settings: Settings,
        *,
        registry: HandlerRegistry = REGISTRY,
        rng: random.Random | None = None,
        metrics: ClaimerMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.owner = settings.claimer.claimer_id
        self.metrics = metrics or ClaimerMetrics()
        self._registry = registry
        self._rng = rng or random.Random()  # noqa: S311 - retry jitter, not secrets
        self._loops = Supervisor(f"claimer-{self.owner}")
        #: What /livez and /readyz answer (slotflow.health): ready while its loops run, its two
        #: groups (JobDue, downstream commands) were joined and PostgreSQL and Kafka answer.
        self.health = Health(f"claimer-{self.owner}", stall_after=settings.claimer.liveness_stall_seconds)
        #: Set when a loop crashed; the process then stops (exit 1).
        self.fatal = self._loops.failed
        self._stop = asyncio.Event()
        self._grace = settings.claimer.shutdown_grace_seconds
        self._running: asyncio.Task[None] | None = None
        self._resources = contextlib.ExitStack()
        self._started = False
        self._stopped = False
        # Checked before anything starts: the claimer signs its timers when signatures are
        # required (a key is needed), and checks downstream commands. Its inbox keeps every
        # command id for good, so any replay window is covered.
        self._signer = settings.signatures.service_signer("claimer")
        self._keys: KafkaKeyRing | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.settings.claimer
        kafka = self.settings.kafka
        load_handler_modules(cfg.modules())
        self.pool = await wait_for_pool(self.settings.postgres, min_size=1, max_size=cfg.pool_size)
        await migrate(self.pool, cfg.db_schema)
        handler_dsn = cfg.handler_dsn or self.settings.postgres.dsn
        self.handler_pool = await wait_for_pool(
            PostgresSettings(dsn=handler_dsn), min_size=0, max_size=cfg.handler_pool_max_size
        )
        self.producer = Producer(kafka, client_id=f"claimer-{self.owner}")
        await self.producer.start()
        self.relay = OutboxRelay(self.pool, self.producer, schema=cfg.db_schema, one_transaction=True)
        events = RunEvents(kafka, signer=self._signer)
        verifier = CommandVerifier(self.settings.signatures)
        if self.settings.signatures.required:
            self._keys = KafkaKeyRing(kafka, client_id=f"claimer-{self.owner}")
            await self._keys.start()
            verifier = CommandVerifier(self.settings.signatures, self._keys)
        self.writer = OutcomeWriter(
            self.pool,
            schema=cfg.db_schema,
            owner=self.owner,
            lease_ttl=cfg.lease_ttl_seconds,
            events=events,
            metrics=self.metrics,
            batch=cfg.outcome_batch,
            on_settled=lambda outcomes, started: self.executor.settled(outcomes, started),
            wake_relay=self.relay.wake,
        )
        self.gate = Gate(
            self.pool,
            schema=cfg.db_schema,
            owner=self.owner,
            policy=cfg.downstream_policy(),
            metrics=self.metrics,
            rng=self._rng,
            kafka=kafka,
            wake_relay=self.relay.wake,
            signer=self._signer,
        )
        self.executor = Executor(
            pool=self.pool,
            schema=cfg.db_schema,
            owner=self.owner,
            lease_ttl=cfg.lease_ttl_seconds,
            max_in_flight=cfg.max_in_flight,
            registry=self._registry,
            handler_pool=self.handler_pool,
            metrics=self.metrics,
            submit=self.writer.submit,
            rng=self._rng,
            max_lease_lapses=cfg.max_lease_lapses,
            gate=self.gate,
            handler_threads=cfg.handler_threads,
            handler_processes=cfg.handler_processes or None,
        )
        self.intake = Intake(
            self.pool,
            schema=cfg.db_schema,
            ticker_schema=cfg.ticker_schema,
            owner=self.owner,
            lease_ttl=cfg.lease_ttl_seconds,
            kafka=kafka,
            events=events,
            metrics=self.metrics,
        )
        self.reaper = Reaper(
            self.pool,
            schema=cfg.db_schema,
            owner=self.owner,
            lease_ttl=cfg.lease_ttl_seconds,
            executor=self.executor,
            events=events,
            metrics=self.metrics,
            wake_relay=self.relay.wake,
        )
        self.consumer = Consumer(
            kafka,
            kafka.topic(JOBS_DUE),
            group_id=self.settings.group_id(),
            client_id=f"claimer-{self.owner}",
            max_poll_records=MAX_BATCH,
            lag=self.metrics.consumer_lag,
        )
        await self.consumer.start()
        self.command_consumer = Consumer(
            kafka,
            kafka.topic(DOWNSTREAM_COMMANDS),
            group_id=self.settings.downstream_commands_group_id(),
            client_id=f"claimer-commands-{self.owner}",
            lag=self.metrics.consumer_lag,
        )
        await self.command_consumer.start()
        commands = DownstreamCommands(
            self.pool,
            schema=cfg.db_schema,
            gate=self.gate,
            kafka=kafka,
            metrics=self.metrics,
            wake_relay=self.relay.wake,
            verifier=verifier,
        )
        self.commands = ConsumeLoop(
            self.command_consumer,
            handler=commands.handle,
            dlq=self.producer,
            dlq_topic=kafka.topic(DLQ_MESSAGES),
            source_service="claimer",
            accept=DOWNSTREAM_COMMAND_TYPES,
            max_bytes=kafka.max_message_bytes,
        )
        self.cancel_consumer = Consumer(
            kafka,
            kafka.topic(ACTIVITY_CANCELS),
            group_id=self.settings.activity_cancels_group_id(),
            client_id=f"claimer-cancels-{self.owner}",
            lag=self.metrics.consumer_lag,
        )
        await self.cancel_consumer.start()
        cancels = ActivityCancels(
            self.pool,
            schema=cfg.db_schema,
            orchestrator_schema=cfg.orchestrator_schema,
            owner=self.owner,
            events=events,
            metrics=self.metrics,
            wake_relay=self.relay.wake,
        )
        # A workflow's cancel of its activity (only the orchestrator writes the topic; each record
        # is checked against the orchestrator's record, and a refused one is parked).
        self.cancels = ConsumeLoop(
            self.cancel_consumer,
            handler=cancels.handle,
            dlq=self.producer,
            dlq_topic=kafka.topic(DLQ_MESSAGES),
            source_service="claimer",
            accept=ACTIVITY_CANCEL_TYPES,
            max_bytes=kafka.max_message_bytes,
        )
        redrives = ClaimerRedrives(
            self.pool,
            schema=cfg.db_schema,
            kafka=kafka,
            events=events,
            intake=self.intake,
            executor=self.executor,
            wake_relay=self.relay.wake,
        )
        # The claimer owns the runs it dead-lettered and the records of its two topics: a redrive
        # reopens a run from its own row, or reads a record back and takes it again.
        self.redrives = RedriveResponder(
            kafka,
            service="claimer",
            producer=self.producer,
            group_id=self.settings.redrives_group_id(),
            rehandlers={
                kafka.topic(JOBS_DUE): redrives.reread_job_due,
                kafka.topic(DOWNSTREAM_COMMANDS): self.commands.rehandler(),
            },
            on_request=redrives.on_request,
            client_id=f"claimer-redrives-{self.owner}",
            poll_timeout_ms=cfg.poll_timeout_ms,
        )
        self.polling = Polling(
            self.consumer,
            intake=self.intake,
            executor=self.executor,
            wake_relay=self.relay.wake,
            owner=self.owner,
            poll_timeout_ms=cfg.poll_timeout_ms,
            commit_interval=cfg.commit_interval_seconds,
        )
        handlers = self._registry.names()
        # One line a person can check against the schedules: what this claimer will run.
        log.info(
            "claimer %s serves %d handlers: %s",
            self.owner,
            len(handlers),
            ", ".join(handlers) if handlers else "none (set SLOTFLOW_CLAIMER_HANDLER_MODULES)",
        )
        self.announcer = Announcer(
            self.pool,
            schema=cfg.db_schema,
            owner=self.owner,
            handlers=handlers,
            interval=cfg.announce_interval_seconds,
            topic=kafka.topic(CLAIMERS),
            wake_relay=self.relay.wake,
        )
        loops = self._loops
        loops.add("announce", self.announcer.run)
        loops.add("relay", self.relay.run)
        loops.add("outbox-backlog", outbox_backlog(self.relay, self.metrics.outbox_backlog))
        loops.add("writer", self.writer.run)
        loops.add("heartbeat", lambda stop: self.executor.heartbeat_loop(stop, cfg.heartbeat_interval))
        loops.add("reaper", lambda stop: self.reaper.run(stop, cfg.reaper_interval))
        loops.add("commit", self.polling.commit_loop)
        loops.add("intake", self.polling.intake_loop)
        loops.add("downstream-commands", self.commands.run)
        loops.add("activity-cancels", self.cancels.run)
        loops.add("redrives", self.redrives.run)
        if cfg.downstream_report_interval_seconds > 0:
            interval = cfg.downstream_report_interval_seconds
            loops.add("downstream-reports", lambda stop: self.gate.report_loop(stop, interval))
        purges = retention.purges(cfg.db_schema, days=cfg.run_retention_days)
        loops.add(
            "purge",
            lambda stop: purge_loop(
                stop, self.pool, purges, interval=cfg.purge_interval_seconds, batch_size=cfg.purge_batch_size
            ),
        )
        if cfg.loop_block_threshold_seconds > 0:
            watchdog = LoopWatchdog(
                self._registry,
                self.metrics,
                threshold=cfg.loop_block_threshold_seconds,
                interval=min(0.1, cfg.loop_block_threshold_seconds / 2),
            )
            self.executor.watch_freezes(watchdog.froze_since)
            loops.add("watchdog", watchdog.run)
        health = self.health
        health.gate("loops", loops.problem)
        health.gate(
            "consumers", groups_joined(lambda: [self.consumer, self.command_consumer, self.cancel_consumer])
        )
        health.probe("postgres", postgres_probe(self.pool))
        health.probe("kafka", kafka_probe(self.producer))
        self._resources.enter_context(
            health_listener(
                health, self.metrics.registry, port=cfg.metrics_port, host=cfg.metrics_host, stop=self._stop
            )
        )
        self._running = asyncio.create_task(loops.run(self._stop, drain=self._drain), name="claimer")
        await loops.running.wait()
        self._started = True
        log.info("claimer %s started (group %s)", self.owner, self.settings.group_id())

    async def stop(self, *, grace: float | None = None) -> None:
        """Graceful stop (see the module docstring)."""
        if self._stopped or not self._started:
            return
        self._stopped = True
        if grace is not None:
            self._grace = grace
        self._stop.set()
        await self._join_loops()
        if self._loops.crashed is not None:
            # The crash cancelled every loop without the drain; hand the leases back anyway.
            with contextlib.suppress(Exception):
                await self.executor.release_all()
        self.executor.abandon()
        self.executor.close()
        self._resources.close()
        await self.consumer.stop()
        await self.command_consumer.stop()
        await self.cancel_consumer.stop()
        await self.producer.stop()
        if self._keys is not None:
            await self._keys.stop()
        await self.handler_pool.close()
        await self.pool.close()
        log.info("claimer %s stopped", self.owner)

    async def _drain(self) -> None:
        loops = self._loops
        await loops.stop_loops(
            "intake",
            "reaper",
            "announce",
            "purge",
            "downstream-commands",
            "activity-cancels",
            "redrives",
            "outbox-backlog",
        )
        if "downstream-reports" in loops.names:
            await loops.stop_loops("downstream-reports")
        if not await self.executor.drain(self._grace):
            released = await self.executor.release_all()
            log.info("claimer %s: released %d leases at shutdown", self.owner, released)
        try:
            await asyncio.wait_for(self.writer.wait_idle(), timeout=10.0)
        except TimeoutError:
            log.warning("claimer %s: outcomes still unrecorded at shutdown", self.owner)
        await loops.stop_loops("writer", "heartbeat", "commit")
        if "watchdog" in loops.names:
            await loops.stop_loops("watchdog")
        await self.relay.flush(timeout=10.0)
        await loops.stop_loops("relay")

    async def run(self, stop: asyncio.Event) -> None:
        """Every service's lifecycle (`slotflow.service.serve`): start, run until ``stop`` is set,
        then stop gracefully. A crashed loop stops the claimer too, and its error is raised."""
        # Not ready from the signal on, before `stop()` sets the claimer's own stop event.
        self.health.leaving_on(stop)
        await self.start()
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self.fatal.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await self.stop()
        running = self._running
        if running is not None and not running.cancelled() and running.exception() is not None:
            raise running.exception()  # type: ignore[misc]

    async def kill(self) -> None:
        """Stop abruptly without recording or releasing anything (tests: a crash in-process)."""
        self._stopped = True
        # No stop events: a loop woken by one would take its last orderly step (commit offsets,
        # record outcomes), which is exactly what a crash does not get to do.
        self.executor.abandon()
        self.executor.close()
        if self._running is not None:
            self._running.cancel()
        await self._join_loops()
        self._resources.close()
        await self.consumer.stop()
        await self.command_consumer.stop()
        await self.cancel_consumer.stop()
        await self.producer.stop()
        if self._keys is not None:
            await self._keys.stop()
        self.handler_pool.terminate()
        self.pool.terminate()

    async def _join_loops(self) -> None:
        running = self._running
        if running is None:
            return
        await asyncio.wait([running])
        if not running.cancelled():
            running.exception()  # a crash: the supervisor has logged it, `fatal` says so

    async def __aenter__(self) -> "ClaimerService":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
