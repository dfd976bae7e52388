"""Composition root: pool, producer, consumer, and the loops of one orchestrator process.

Loops (under `slotflow.service.Supervisor`, drained in this order):

- `intake`: one consumer in the orchestrator group over the workflow commands, the run events and
  the timer events; each poll's inputs are recorded in one transaction (`intake.admit`), then the
  offsets are committed. Poison goes to the DLQ.
- `decider`: holds the leases of the command-topic partitions the group assigned to this process
  and, for every workflow of those shards with waiting inputs, runs one decision transaction
  (`deciding.Decisions`). Stuck workflows of a newly acquired shard are decided again, so a deploy
  that fixes their code lets them go on.
- `relay`: publishes the outbox (history, JobDue, timers, child starts, acknowledgements).
"""

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import asyncpg

from slotflow.contracts import (
    CancelWorkflow,
    RunCompleted,
    RunDeadLettered,
    RunFailed,
    RunRetrying,
    RunSkipped,
    RunStarted,
    SignalWorkflow,
    StartWorkflow,
    TerminateWorkflow,
    TimerFired,
)
from slotflow.contracts.topics import DLQ_MESSAGES, RUN_EVENTS, TIMER_EVENTS, WORKFLOW_COMMANDS
from slotflow.errors import SlotflowError
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.loop import DEFAULT_OUTAGE_TYPES, ConsumeLoop, Incoming
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.pg import migrations as pg_migrations
from slotflow.pg.migrations import MigrationSource
from slotflow.pg.outbox import OutboxRelay
from slotflow.pg.pool import CONNECTION_ERRORS, Pool, wait_for_pool
from slotflow.pg.statements import sql
from slotflow.service import Supervisor, metrics_listener, sleep_or_stop
from slotflow_orchestrator.config import Settings
from slotflow_orchestrator.deciding import Decisions, LeaseLost, Outcome
from slotflow_orchestrator.intake import admit, prune_inbox
from slotflow_orchestrator.leases import Leases
from slotflow_orchestrator.metrics import OrchestratorMetrics
from slotflow_orchestrator.outbound import Outbound
from slotflow_orchestrator.stepping import Decider

log = logging.getLogger(__name__)

MIGRATIONS = MigrationSource("orchestrator", Path(__file__).parent / "migrations")
#: asyncpg's InternalClientError ("cannot switch to state ...") is what a connection released while
#: the server shuts down (a fast PostgreSQL restart) raises: an outage, not something wrong with the
#: record. Counted as anything else, a workflow's input is retried ten times and then parked in the
#: DLQ, and the workflow waits for a redrive.
OUTAGES: tuple[type[BaseException], ...] = (
    *DEFAULT_OUTAGE_TYPES,
    *CONNECTION_ERRORS,
    asyncpg.InternalClientError,
)
#: What a decider pass outlives (the database away, a lease row refused): it pauses and tries again.
RECOVERABLE: tuple[type[BaseException], ...] = (*OUTAGES, SlotflowError, asyncpg.PostgresError)
#: Everything the three consumed topics carry; anything else there is poison.
ACCEPTED = (
    StartWorkflow,
    SignalWorkflow,
    CancelWorkflow,
    TerminateWorkflow,
    RunStarted,
    RunCompleted,
    RunFailed,
    RunRetrying,
    RunDeadLettered,
    RunSkipped,
    TimerFired,
)
#: A workflow whose decision failed (not by a lease) waits this long, doubling, before the next try.
FAILURE_PAUSE = (0.2, 30.0)

# Each held shard's oldest waiting workflows, up to $2 a shard, oldest first overall: a backlog on
# some shards (a survivor's own, when it takes over a dead orchestrator's shards) cannot keep
# the others' first inputs waiting behind it.
PENDING = """
SELECT w.workflow_id, sh.s AS shard
FROM unnest($1::int[]) AS sh(s),
    LATERAL (SELECT workflow_id, min(seq) AS first FROM {schema}.inputs WHERE shard = sh.s
             GROUP BY workflow_id ORDER BY min(seq) LIMIT $2) AS w
ORDER BY w.first
"""


class NotRunning(SlotflowError):
    """The orchestrator was asked for something that needs it running."""


async def apply_migrations(pool: Pool, schema: str = "orchestrator") -> list[str]:
    """Create or update the orchestrator's schema (workflows, history, inputs, leases, payloads,
    outbox, inbox)."""
    return await pg_migrations.apply_migrations(
        pool,
        schema=schema,
        sources=[pg_migrations.OUTBOX, pg_migrations.INBOX, pg_migrations.PAYLOADS, MIGRATIONS],
    )


class OrchestratorService:
    """One orchestrator process: `await run(stop)`."""

    def __init__(
        self, settings: Settings, *, decider: Decider, metrics: OrchestratorMetrics | None = None
    ) -> None:
        self.settings = settings
        self.owner = settings.orchestrator.instance_id
        self.metrics = metrics or OrchestratorMetrics()
        self._decider = decider
        self.ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._failures: dict[str, tuple[int, float]] = {}
        self._pool: Pool | None = None
        self._relay: OutboxRelay | None = None
        self._shards = 0
        self.leases: Leases | None = None
        self.decisions: Decisions | None = None

    @property
    def pool(self) -> Pool:
        if self._pool is None:
            raise NotRunning("the orchestrator is not running")
        return self._pool

    async def run(self, stop: asyncio.Event) -> None:
        """Migrate, start every part, and run until ``stop``; the work in hand finishes first."""
        cfg = self.settings.orchestrator
        kafka = self.settings.kafka
        pool = await wait_for_pool(self.settings.postgres, min_size=1, max_size=cfg.pool_max_size)
        self._pool = pool
        try:
            await apply_migrations(pool, cfg.db_schema)
            producer = Producer(kafka, client_id=f"orchestrator-{self.owner}")
            consumer = Consumer(
                kafka,
                kafka.topic(WORKFLOW_COMMANDS),
                kafka.topic(RUN_EVENTS),
                kafka.topic(TIMER_EVENTS),
                group_id=self.settings.group_id(),
                client_id=f"orchestrator-{self.owner}",
                max_poll_records=cfg.max_poll_records,
                session_timeout_ms=cfg.session_timeout_ms,
                heartbeat_interval_ms=max(300, cfg.session_timeout_ms // 3),
            )
            async with producer, consumer:
                await self._run_parts(stop, pool, producer, consumer)
        finally:
            self.ready.clear()
            self._pool = None
            await pool.close()

    async def _run_parts(
        self, stop: asyncio.Event, pool: Pool, producer: Producer, consumer: Consumer
    ) -> None:
        cfg = self.settings.orchestrator
        kafka = self.settings.kafka
        self._shards = await producer.partition_count(kafka.topic(WORKFLOW_COMMANDS))
        self._relay = OutboxRelay(pool, producer, schema=cfg.db_schema, one_transaction=True)
        self.leases = Leases(pool, schema=cfg.db_schema, owner=self.owner)
        self.decisions = Decisions(
            pool,
            schema=cfg.db_schema,
            decider=self._decider,
            outbound=Outbound(kafka),
            metrics=self.metrics,
            shards=self._shards,
            crash_window=cfg.crash_window_seconds,
            payload_threshold=cfg.payload_threshold_bytes,
        )
        intake = ConsumeLoop(
            consumer,
            handler=self._on_input,
            batch_handler=self._on_inputs,
            dlq=producer,
            dlq_topic=kafka.topic(DLQ_MESSAGES),
            source_service="orchestrator",
            accept=ACCEPTED,
            max_bytes=kafka.max_message_bytes,
            poll_timeout_ms=cfg.poll_timeout_ms,
            outage_types=OUTAGES,
            on_dead_letter=self._own_poison,
        )
        commands_topic = kafka.topic(WORKFLOW_COMMANDS)
        supervisor = Supervisor("orchestrator")
        supervisor.add("intake", intake.run, stage=0)
        supervisor.add("decider", lambda s: self._decide_loop(s, consumer, commands_topic), stage=1)
        supervisor.add("relay", self._relay.run, stage=2)
        supervisor.add("prune", self._prune_loop, stage=0, cancel_on_stop=True)
        with metrics_listener(self.metrics.registry, port=cfg.metrics_port, host=cfg.metrics_host):
            self.ready.set()
            log.info(
                "orchestrator %s started (group %s, %d shards)",
                self.owner,
                self.settings.group_id(),
                self._shards,
            )
            try:
                await supervisor.run(stop)
            finally:
                for shard in list(self.leases.held):
                    try:
                        await self.leases.release(shard)
                    except RECOVERABLE as err:
                        log.warning("orchestrator %s: releasing shard %d failed: %r", self.owner, shard, err)

    async def _prune_loop(self, stop: asyncio.Event) -> None:
        cfg = self.settings.orchestrator
        while not await sleep_or_stop(stop, cfg.prune_interval_seconds):
            try:
                pruned = await prune_inbox(
                    self.pool, schema=cfg.db_schema, older_than_seconds=cfg.inbox_retention_hours * 3600
                )
            except RECOVERABLE as err:
                log.warning("orchestrator %s: inbox prune failed: %r", self.owner, err)
                continue
            if pruned:
                log.info("orchestrator %s: forgot %d inbox ids", self.owner, pruned)

    # -- intake -----------------------------------------------------------------------------------

    async def _on_inputs(self, batch: list[Incoming]) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            admitted = await admit(
                conn, schema=self.settings.orchestrator.db_schema, shards=self._shards, batch=batch
            )
        for type_ in admitted.types:
            self.metrics.inputs.labels(type_).inc()
        if self.leases is not None and admitted.shards & set(self.leases.held):
            self._wake.set()

    async def _on_input(self, incoming: Incoming) -> None:
        await self._on_inputs([incoming])

    # -- decisions --------------------------------------------------------------------------------

    async def _decide_loop(self, stop: asyncio.Event, consumer: Consumer, commands_topic: str) -> None:
        cfg = self.settings.orchestrator
        leases = self.leases
        if leases is None:
            raise NotRunning("no leases")
        redecide: list[tuple[str, int]] = []
        next_check = 0.0
        failures = 0
        seen_assignments = -1
        while not stop.is_set():
            try:
                # A new assignment is acted on at once (a failover waits for nothing more); the
                # periodic check catches the rest.
                if time.monotonic() >= next_check or consumer.assignments != seen_assignments:
                    seen_assignments = consumer.assignments
                    assigned = frozenset(p for t, p in consumer.assignment() if t == commands_topic)
                    for shard in await leases.reconcile(assigned, consumer.assignments):
                        redecide.extend((wf, shard) for wf in await leases.stuck_workflows(shard))
                    self.metrics.shards_owned.set(len(leases.held))
                    next_check = time.monotonic() + cfg.lease_check_seconds
                work = await self._pending(list(leases.held), cfg.decide_batch)
                failures = 0
            except RECOVERABLE as err:
                failures += 1
                log.warning("orchestrator %s: decider pass failed (try %d): %r", self.owner, failures, err)
                await sleep_or_stop(stop, min(5.0, 0.1 * 2**failures))
                continue
            batch = [(wf, shard, False) for wf, shard in work] + [(wf, s, True) for wf, s in redecide]
            redecide = []
            if not batch:
                await sleep_or_stop(stop, cfg.idle_poll_seconds, wake=self._wake)
                self._wake.clear()
                continue
            await self._decide_all(batch, cfg.decide_concurrency)
            if self._relay is not None:
                self._relay.wake()

    async def _pending(self, shards: Sequence[int], limit: int) -> list[tuple[str, int]]:
        if not shards:
            return []
        now = time.monotonic()
        per_shard = max(1, limit // len(shards))
        rows = await self.pool.fetch(
            sql(PENDING, self.settings.orchestrator.db_schema), list(shards), per_shard
        )
        return [
            (r["workflow_id"], r["shard"])
            for r in rows
            if self._failures.get(r["workflow_id"], (0, 0.0))[1] <= now
        ]

    async def _decide_all(self, batch: list[tuple[str, int, bool]], concurrency: int) -> None:
        """Decide ``batch``: per shard, up to `decisions_per_transaction` workflows share one
        transaction; a chunk that fails (not by a lease) is decided again one workflow at a time,
        so one bad workflow never holds back the others."""
        gate = asyncio.Semaphore(concurrency)
        size = self.settings.orchestrator.decisions_per_transaction
        chunks: list[tuple[list[str], int, bool]] = []
        by_key: dict[tuple[int, bool], list[str]] = {}
        for workflow_id, shard, redecide in batch:
            by_key.setdefault((shard, redecide), []).append(workflow_id)
        for (shard, redecide), ids in by_key.items():
            chunks.extend((ids[i : i + size], shard, redecide) for i in range(0, len(ids), size))

        async def one(ids: list[str], shard: int, redecide: bool) -> None:
            async with gate:
                await self._decide_chunk(ids, shard, redecide)

        await asyncio.gather(*(one(*chunk) for chunk in chunks))

    async def _decide_chunk(self, workflow_ids: list[str], shard: int, redecide: bool) -> None:
        leases, decisions = self.leases, self.decisions
        if leases is None or decisions is None:
            return
        token = leases.held.get(shard)
        if token is None:
            return
        if len(workflow_ids) > 1:
            try:
                outcomes = await decisions.decide_many(
                    workflow_ids, shard=shard, token=token, redecide=redecide
                )
            except LeaseLost:
                self.metrics.leases_lost.inc()
                self.metrics.decisions.labels("lease_lost").inc(len(workflow_ids))
                leases.lost(shard, token)
                return
            except Exception as err:  # noqa: BLE001 - narrowed below, one workflow at a time
                log.warning(
                    "orchestrator %s: %d decisions together failed (%r); one at a time",
                    self.owner,
                    len(workflow_ids),
                    err,
                )
            else:
                for workflow_id, outcome in zip(workflow_ids, outcomes, strict=True):
                    self._failures.pop(workflow_id, None)
                    self._count(outcome)
                return
        for workflow_id in workflow_ids:
            await self._decide_one(workflow_id, shard, redecide)

    async def _decide_one(self, workflow_id: str, shard: int, redecide: bool) -> None:
        leases, decisions = self.leases, self.decisions
        if leases is None or decisions is None:
            return
        token = leases.held.get(shard)
        if token is None:
            return
        try:
            outcome = await decisions.decide(workflow_id, shard=shard, token=token, redecide=redecide)
        except LeaseLost:
            self.metrics.leases_lost.inc()
            self.metrics.decisions.labels("lease_lost").inc()
            leases.lost(shard, token)
            return
        except Exception as err:  # noqa: BLE001 - one workflow's failure must not stop the others
            tries = self._failures.get(workflow_id, (0, 0.0))[0] + 1
            pause = min(FAILURE_PAUSE[1], FAILURE_PAUSE[0] * 2 ** min(tries, 16))
            self._failures[workflow_id] = (tries, time.monotonic() + pause)
            self.metrics.decisions.labels("failed").inc()
            log.error(
                "orchestrator %s: decision for %s failed (try %d): %r", self.owner, workflow_id, tries, err
            )
            return
        self._failures.pop(workflow_id, None)
        self._count(outcome)

    def _count(self, outcome: Outcome) -> None:
        out = outcome.step
        if out is None or not (out.events or out.acks):
            self.metrics.decisions.labels("unchanged").inc()
            return
        self.metrics.decisions.labels("appended").inc()
        for event in out.events:
            self.metrics.history_events.labels(event.message_type).inc()
        for ack in out.acks:
            self.metrics.commands.labels(
                ack.command_type, "accepted" if ack.reason is None else "rejected"
            ).inc()
        if out.diverged:
            self.metrics.non_determinism.inc()

    def _own_poison(self, record: Record, reason: str) -> None:
        self.metrics.poison.labels(reason).inc()
