"""The projector: every event topic into the read model, one transaction per polled batch.

It runs the shared `ConsumeLoop` (poison goes to the DLQ with its reason) with a handler that only
stages decoded records; the consumer's commit first writes the staged batch in one transaction,
then commits the offsets. A crash between the two redelivers the batch, and the `seen` table
collapses it.

Rebuild: `rebuild()` empties every read-model table and moves the projector to a fresh consumer
group in one transaction. A projector that finds the group changed under it (checked inside each
batch transaction, so no batch of the old generation can land after the rebuild) restarts on the
new group and replays every topic from the beginning.
Its statements are in `slotflow_api.sql.projection`.
"""

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from slotflow.contracts.topics import (
    CLAIMERS,
    DLQ_COMMANDS,
    DLQ_EVENTS,
    DLQ_MESSAGES,
    DOWNSTREAM_COMMANDS,
    DOWNSTREAM_EVENTS,
    JOBS_DUE,
    RUN_EVENTS,
    SCHEDULE_COMMANDS,
    SCHEDULE_EVENTS,
    TIMER_COMMANDS,
    TIMER_EVENTS,
    WORKFLOW_COMMANDS,
    WORKFLOW_EVENTS,
    WORKFLOW_HISTORY,
    TopicSpec,
)
from slotflow.core.retry import is_retryable, sleep_backoff
from slotflow.errors import SlotflowError, TransientError, UnparkableRecord
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.lag import ConsumerLag
from slotflow.kafka.loop import ConsumeLoop, Incoming
from slotflow.kafka.poison import send_to_dlq
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.pg.migrations import MigrationSource
from slotflow.pg.pool import Pool
from slotflow.pg.statements import compose, quote_ident, sql
from slotflow.service import migrate as migrate_schema
from slotflow.service import sleep_or_stop
from slotflow.settings import KafkaSettings
from slotflow_api.config import Settings
from slotflow_api.metrics import Metrics
from slotflow_api.projection import Fact, project
from slotflow_api.sql.projection import (
    CLAIM_PROJECTOR_GROUP,
    CURRENT_PROJECTOR_GROUP,
    HOLD_PROJECTOR_GROUP,
    MODEL_TABLES,
    SET_PROJECTOR_GROUP,
    TRUNCATE_TABLES,
)

log = logging.getLogger(__name__)

MIGRATIONS = MigrationSource("api", Path(__file__).parent / "migrations")

#: Every topic the read model is built from; the command topics tell which commands exist.
PROJECTED_TOPICS: tuple[TopicSpec, ...] = (
    SCHEDULE_COMMANDS,
    TIMER_COMMANDS,
    SCHEDULE_EVENTS,
    JOBS_DUE,
    RUN_EVENTS,
    TIMER_EVENTS,
    WORKFLOW_COMMANDS,
    WORKFLOW_HISTORY,
    WORKFLOW_EVENTS,
    DLQ_COMMANDS,
    DLQ_EVENTS,
    CLAIMERS,
    DOWNSTREAM_COMMANDS,
    DOWNSTREAM_EVENTS,
)


#: Tables a rebuild keeps: the migrations applied, and the retention horizon (what was purged
#: stays purged: the replay does not bring it back, and the audit still judges nothing before it),
#: the API tokens and signing keys (not projected from any topic: emptied, they would be gone for
#: good), and the outbox (a key's record not yet published would be lost).
KEPT_BY_REBUILD = ("schema_migrations", "retention", "api_tokens", "signing_keys", "outbox")

#: How often an idle projector looks for a rebuild.
GROUP_CHECK_SECONDS = 1.0


class GroupChanged(SlotflowError):
    """The read model was rebuilt under this projector; it must restart on the new group."""


async def migrate(pool: Pool, schema: str) -> list[str]:
    """Create or update the read-model schema, and the outbox the signing keys leave through."""
    return await migrate_schema(pool, schema=schema, source=MIGRATIONS, outbox=True, inbox=False)


async def current_group(pool: Pool, settings: Settings) -> str:
    """The projector group of this read model, choosing one the first time."""
    schema = settings.api.db_schema
    async with pool.acquire() as conn:
        await conn.execute(
            sql(CLAIM_PROJECTOR_GROUP, schema),
            settings.group_id(uuid.uuid4().hex[:12]),
        )
        return str(await conn.fetchval(sql(CURRENT_PROJECTOR_GROUP, schema)))


async def rebuild(pool: Pool, settings: Settings) -> str:
    """Empty the read model (but for `KEPT_BY_REBUILD`) and point the projector at a fresh group;
    returns the new group id.

    Every running projector restarts on the new group at its next batch and replays the topics
    from the beginning (use `run_until_idle` to do it in this process).
    """
    schema = settings.api.db_schema
    await migrate(pool, schema)
    group = settings.group_id(uuid.uuid4().hex[:12])
    async with pool.acquire() as conn, conn.transaction():
        tables = await conn.fetch(MODEL_TABLES, schema, list(KEPT_BY_REBUILD))
        names = ", ".join(f"{quote_ident(schema)}.{quote_ident(r['tablename'])}" for r in tables)
        await conn.execute(compose(TRUNCATE_TABLES, tables=names))
        await conn.execute(sql(SET_PROJECTOR_GROUP, schema), group)
    log.info("read model %s emptied; projector group is now %s", schema, group)
    return group


class _StagingConsumer(Consumer):
    """Writes the staged batch to PostgreSQL before the loop commits its offsets."""

    def __init__(
        self,
        projector: "Projector",
        settings: KafkaSettings,
        topics: Sequence[str],
        *,
        group_id: str,
        max_poll_records: int,
        lag: ConsumerLag | None = None,
    ) -> None:
        super().__init__(
            settings,
            *topics,
            group_id=group_id,
            client_id="api-projector",
            max_poll_records=max_poll_records,
            lag=lag,
        )
        self._projector = projector

    async def commit(self, records: Sequence[Record]) -> None:
        if await self._projector.flush():
            await super().commit(records)


class Projector:
    """Consumes every projected topic into the read model until stopped."""

    def __init__(self, pool: Pool, settings: Settings, metrics: Metrics | None = None) -> None:
        self._pool = pool
        self._settings = settings
        self._schema = settings.api.db_schema
        self._metrics = metrics or Metrics()
        self._names = {settings.kafka.topic(spec): spec.name for spec in PROJECTED_TOPICS}
        self._staged: list[Fact] = []
        self._group = ""
        self._stop_loop = asyncio.Event()
        self._rng = random.Random()  # noqa: S311 - jitter, not secrets
        self._dlq: Producer | None = None
        self.projected = 0
        self.batches = 0
        self.last_progress = time.monotonic()
        self.generation_changes = 0

    @property
    def group_id(self) -> str:
        return self._group

    async def run(self, stop: asyncio.Event) -> None:
        """Project until ``stop`` is set, restarting on a new group after a rebuild."""
        await migrate(self._pool, self._schema)
        while not stop.is_set():
            self._group = await current_group(self._pool, self._settings)
            self._stop_loop = asyncio.Event()
            self._staged = []
            await self._run_group(stop)

    async def _run_group(self, stop: asyncio.Event) -> None:
        kafka = self._settings.kafka
        consumer = _StagingConsumer(
            self,
            kafka,
            list(self._names),
            group_id=self._group,
            max_poll_records=self._settings.api.projector_max_records,
            lag=self._metrics.consumer_lag,
        )
        dlq = Producer(kafka, client_id="api-projector-dlq")
        await dlq.start()
        self._dlq = dlq
        try:
            await consumer.start()
            try:
                loop = ConsumeLoop(
                    consumer,
                    handler=self._stage,
                    dlq=dlq,
                    dlq_topic=kafka.topic(DLQ_MESSAGES),
                    source_service="api",
                    max_bytes=kafka.max_message_bytes,
                    poll_timeout_ms=self._settings.api.projector_poll_ms,
                )
                watcher = asyncio.create_task(self._relay_stop(stop))
                try:
                    await loop.run(self._stop_loop)
                finally:
                    watcher.cancel()
            finally:
                await consumer.stop()
        finally:
            self._dlq = None
            await dlq.stop()

    async def _relay_stop(self, stop: asyncio.Event) -> None:
        # Batches check the group in their own transaction; this catches a rebuild while idle.
        while not stop.is_set() and not self._stop_loop.is_set():
            if await sleep_or_stop(stop, GROUP_CHECK_SECONDS):
                break
            try:
                group = await self._pool.fetchval(sql(CURRENT_PROJECTOR_GROUP, self._schema))
            except Exception as err:  # noqa: BLE001 - an unreachable database is the batches' concern
                log.debug("group check failed: %s", err)
                continue
            if group != self._group:
                log.warning("read model rebuilt: restarting the projector on group %s", group)
                self.generation_changes += 1
                break
        self._stop_loop.set()

    async def _stage(self, incoming: Incoming) -> None:
        topic = self._names.get(incoming.record.topic, incoming.record.topic)
        self._staged.append(Fact(topic, incoming.record, incoming.envelope, incoming.message))

    async def flush(self) -> bool:
        """Write the staged batch; False when its offsets must not be committed."""
        facts, self._staged = self._staged, []
        attempt = 0
        while True:
            try:
                fresh = await self._write(facts)
            except GroupChanged:
                log.warning("read model rebuilt: restarting the projector on the new group")
                self.generation_changes += 1
                self._stop_loop.set()
                return False
            except Exception as err:  # noqa: BLE001 - sorted: outages wait, bugs fall back per record
                if not is_retryable(err) or attempt >= 20:
                    await self._write_one_by_one(facts, err)
                    return True
                attempt += 1
                log.warning("projection batch failed (try %d): %s", attempt, err)
                if self._stop_loop.is_set():
                    return False
                await sleep_backoff(min(attempt, 8), draw=self._rng.random())
            else:
                self._observe(facts, fresh)
                return True

    async def _write(self, facts: Sequence[Fact]) -> int:
        async with self._pool.acquire() as conn, conn.transaction():
            group = await conn.fetchval(sql(HOLD_PROJECTOR_GROUP, self._schema))
            if group != self._group:
                raise GroupChanged(f"projector group is now {group}, was {self._group}")
            return await project(conn, schema=self._schema, facts=facts)

    async def _write_one_by_one(self, facts: Sequence[Fact], cause: BaseException) -> None:
        # One record the projection cannot take must not hold the others back: park it.
        log.error("projection batch failed permanently (%s); retrying record by record", cause)
        for fact in facts:
            try:
                fresh = await self._write([fact])
            except GroupChanged:
                self._stop_loop.set()
                return
            except Exception as err:  # parked with the reason, never dropped
                if self._dlq is None:
                    raise
                await self._park(self._dlq, fact, err)
            else:
                self._observe([fact], fresh)

    async def _park(self, dlq: Producer, fact: Fact, error: BaseException) -> None:
        """Park ``fact``'s record, waiting out a DLQ outage as the consume loop does: raised from
        here, the batch's other facts were dropped while the next batch's commit passed them."""
        attempt = 0
        while True:
            try:
                await send_to_dlq(
                    dlq,
                    fact.record,
                    error,
                    dlq_topic=self._settings.kafka.topic(DLQ_MESSAGES),
                    source_service="api",
                    occurred_at=datetime.now(UTC),
                    reason="permanent_error",
                )
            except UnparkableRecord as unparkable:
                # Not even the minimal letter was taken, for a reason waiting will not change.
                log.critical("skipping %s, unparkable: %s", fact.record.position, unparkable)
                return
            except TransientError as outage:
                attempt += 1
                if self._stop_loop.is_set() and attempt > 3:
                    raise  # stopping: uncommitted, the record comes back to the next projector
                log.warning("DLQ send failed (try %d): %s", attempt, outage)
                await sleep_backoff(min(attempt, 8), draw=self._rng.random())
            else:
                return

    def _observe(self, facts: Sequence[Fact], fresh: int) -> None:
        self.projected += fresh
        self.batches += 1
        if facts:
            self.last_progress = time.monotonic()
        now_ms = time.time() * 1000
        for fact in facts:
            self._metrics.events_projected.labels(fact.envelope.type).inc()
            if fact.record.timestamp_ms is not None:
                self._metrics.projection_lag.observe(max(0.0, (now_ms - fact.record.timestamp_ms) / 1000))


async def run_until_idle(pool: Pool, settings: Settings, *, idle_seconds: float = 2.0) -> int:
    """Project until nothing new arrived for ``idle_seconds``; returns how many events were new."""
    projector = Projector(pool, settings)
    stop = asyncio.Event()
    task = asyncio.create_task(projector.run(stop))
    try:
        while not task.done():
            await asyncio.sleep(0.2)
            if time.monotonic() - projector.last_progress >= idle_seconds and projector.batches > 0:
                break
            if time.monotonic() - projector.last_progress >= idle_seconds * 5:
                break
    finally:
        stop.set()
        await task
    return projector.projected
