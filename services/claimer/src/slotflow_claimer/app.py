"""Composition root: pools, consumer, producer, relay, and the loops of one claimer process.

Loops: intake (poll JobDue → claim in one transaction → start handlers), offset commits (only up
to records whose runs are durable), heartbeats, the outcome writer, the lease reaper and the
outbox relay. On stop: no more polling or reaping, running handlers get a grace period, whatever
still runs is cancelled and its lease released for another claimer, outcomes and the outbox are
flushed, and the last durable offsets committed.
"""

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Awaitable
from pathlib import Path

from slotflow.contracts.topics import JOBS_DUE
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.pg.migrations import INBOX, OUTBOX, MigrationSource, apply_migrations
from slotflow.pg.outbox import OutboxRelay
from slotflow.pg.pool import Pool, create_pool
from slotflow.runs import REGISTRY, HandlerRegistry, load_handler_modules
from slotflow.settings import PostgresSettings
from slotflow_claimer.config import Settings
from slotflow_claimer.events import RunEvents
from slotflow_claimer.executor import Executor
from slotflow_claimer.intake import Intake
from slotflow_claimer.metrics import ClaimerMetrics
from slotflow_claimer.offsets import OffsetTracker
from slotflow_claimer.outcomes import OutcomeWriter
from slotflow_claimer.reaper import Reaper
from slotflow_claimer.retrying import retry_unless_stopped, storage_pause

log = logging.getLogger(__name__)

MIGRATIONS = MigrationSource("claimer", Path(__file__).parent / "migrations")
#: Most records admitted in one transaction.
MAX_BATCH = 500
#: Poll at least this often even with no room (aiokafka's max_poll_interval is 300 s).
POLL_KEEPALIVE_SECONDS = 30.0


async def migrate(pool: Pool, schema: str = "claimer") -> list[str]:
    """Create or update the claimer's schema (runs, outbox, inbox)."""
    return await apply_migrations(pool, schema=schema, sources=[OUTBOX, INBOX, MIGRATIONS])


class Claimer:
    """One claimer: `await start()`, then `await stop()` (or use it as an async context manager)."""

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
        self._tracker = OffsetTracker()
        self._intake_stop = asyncio.Event()
        self._reaper_stop = asyncio.Event()
        self._core_stop = asyncio.Event()
        self._relay_stop = asyncio.Event()
        self._commit_stop = asyncio.Event()
        self.fatal = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._started = False
        self._stopped = False

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.settings.claimer
        kafka = self.settings.kafka
        load_handler_modules(cfg.modules())
        self.pool = await create_pool(self.settings.postgres, min_size=1, max_size=cfg.pool_max_size)
        await migrate(self.pool, cfg.db_schema)
        handler_dsn = cfg.handler_dsn or self.settings.postgres.dsn
        self.handler_pool = await create_pool(
            PostgresSettings(dsn=handler_dsn), min_size=0, max_size=cfg.handler_pool_max_size
        )
        self.producer = Producer(kafka, client_id=f"claimer-{self.owner}")
        await self.producer.start()
        self.relay = OutboxRelay(self.pool, self.producer, schema=cfg.db_schema, one_transaction=True)
        events = RunEvents(kafka)
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
        )
        self.intake = Intake(
            self.pool,
            schema=cfg.db_schema,
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
        )
        await self.consumer.start()
        self._spawn("relay", self.relay.run(self._relay_stop))
        self._spawn("writer", self.writer.run(self._core_stop))
        self._spawn("heartbeat", self.executor.heartbeat_loop(self._core_stop, cfg.heartbeat_interval))
        self._spawn("reaper", self.reaper.run(self._reaper_stop, cfg.reaper_interval))
        self._spawn("commit", self._commit_loop())
        self._spawn("intake", self._intake_loop())
        self._started = True
        log.info("claimer %s started (group %s)", self.owner, self.settings.group_id())

    async def stop(self, *, grace: float | None = None) -> None:
        """Graceful stop (see the module docstring)."""
        if self._stopped or not self._started:
            return
        self._stopped = True
        grace = self.settings.claimer.shutdown_grace_seconds if grace is None else grace
        self._intake_stop.set()
        self._reaper_stop.set()
        await self._join("intake", "reaper")
        if not await self.executor.drain(grace):
            released = await self.executor.release_all()
            log.info("claimer %s: released %d leases at shutdown", self.owner, released)
        try:
            await asyncio.wait_for(self.writer.wait_idle(), timeout=10.0)
        except TimeoutError:
            log.warning("claimer %s: outcomes still unrecorded at shutdown", self.owner)
        self._core_stop.set()
        self._commit_stop.set()
        await self._join("writer", "heartbeat", "commit")
        await self._flush_relay()
        self._relay_stop.set()
        await self._join("relay")
        self.executor.abandon()
        await self.consumer.stop()
        await self.producer.stop()
        await self.handler_pool.close()
        await self.pool.close()
        log.info("claimer %s stopped", self.owner)

    async def kill(self) -> None:
        """Stop abruptly without recording or releasing anything (tests: a crash in-process)."""
        self._stopped = True
        # No stop events: a loop woken by one would take its last orderly step (commit offsets,
        # record outcomes), which is exactly what a crash does not get to do.
        self.executor.abandon()
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        await self.consumer.stop()
        await self.producer.stop()
        self.handler_pool.terminate()
        self.pool.terminate()

    async def __aenter__(self) -> "Claimer":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- loops --------------------------------------------------------------------------------

    def _spawn(self, name: str, coro: Awaitable[None]) -> None:
        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("claimer %s: %s loop crashed", self.owner, name)
                self.fatal.set()
                raise

        self._tasks[name] = asyncio.create_task(guarded(), name=f"claimer-{name}")

    async def _join(self, *names: str) -> None:
        tasks = [self._tasks[n] for n in names if n in self._tasks]
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _intake_loop(self) -> None:
        cfg = self.settings.claimer
        failures = 0
        held: list[Record] = []
        last_poll = time.monotonic()
        while not self._intake_stop.is_set():
            free = await self.executor.wait_for_space(timeout=0.2)
            if self._intake_stop.is_set():
                break
            if free == 0:
                # Full of long runs: aiokafka leaves the group when it is not polled for
                # max_poll_interval, so poll now and then and hold what arrives (not admitted,
                # so not durable, so never committed before it is).
                if time.monotonic() - last_poll > POLL_KEEPALIVE_SECONDS and len(held) < MAX_BATCH:
                    with contextlib.suppress(Exception):
                        held.extend(await self.consumer.poll(timeout_ms=0, max_records=1))
                    last_poll = time.monotonic()
                continue
            if held:
                records, held = held[: min(free, MAX_BATCH)], held[min(free, MAX_BATCH) :]
            else:
                try:
                    records = await self.consumer.poll(
                        timeout_ms=cfg.poll_timeout_ms, max_records=min(free, MAX_BATCH)
                    )
                except Exception as err:  # noqa: BLE001 - aiokafka's own error types; the broker may be away
                    failures += 1
                    log.warning("claimer %s: poll failed (try %d): %r", self.owner, failures, err)
                    await storage_pause(failures)
                    continue
                last_poll = time.monotonic()
                failures = 0
            if not records:
                continue
            for record in records:
                self._tracker.seen((record.topic, record.partition), record.offset)
            try:
                admission = await retry_unless_stopped(
                    functools.partial(self.intake.admit, records),
                    what="admit JobDue batch",
                    stop=self._intake_stop,
                )
            except Exception as err:  # noqa: BLE001 - one refused record must not stop its partition
                log.warning(
                    "claimer %s: batch refused (%r); admitting its records one by one", self.owner, err
                )
                admission = await retry_unless_stopped(
                    functools.partial(self.intake.admit_each, records),
                    what="admit JobDue records",
                    stop=self._intake_stop,
                )
            if admission is None:
                return  # stopping while storage is away: the records stay uncommitted
            for record in records:
                self._tracker.durable((record.topic, record.partition), record.offset)
            self.relay.wake()
            self.executor.start_all(admission.claimed)

    async def _commit_loop(self) -> None:
        interval = max(self.settings.claimer.commit_interval_seconds, 0.02)
        while True:
            try:
                await asyncio.wait_for(self._commit_stop.wait(), timeout=interval)
                stopping = True
            except TimeoutError:
                stopping = False
            await self.commit_offsets()
            if stopping:
                return

    async def commit_offsets(self) -> dict[tuple[str, int], int]:
        """Commit the highest contiguous durable offset per partition; returns what was committed."""
        offsets = self._tracker.committable()
        if not offsets:
            return {}
        try:
            await self.consumer.commit_offsets(offsets)
        except Exception as err:  # noqa: BLE001 - a rebalance or a broker hiccup; the next pass retries
            log.warning("claimer %s: offset commit failed: %r", self.owner, err)
            self._tracker.forget(self.consumer.assignment())
            return {}
        self._tracker.committed(offsets)
        return offsets

    async def _flush_relay(self, timeout: float = 10.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            try:
                if await self.relay.pending() == 0:
                    return
                await self.relay.relay_once()
            except Exception as err:  # noqa: BLE001 - best effort at shutdown; rows stay for the next start
                log.warning("claimer %s: outbox flush failed: %r", self.owner, err)
                return
            await asyncio.sleep(0.05)
