"""Composition root: pool, producer, consumer, and the loops of one orchestrator process.

Loops (under `slotflow.service.Supervisor`, drained in this order):

- `intake`: one consumer in the orchestrator group over the workflow commands, the run events, the
  timer events and the dlq's redrive requests; each poll's inputs are recorded in one transaction
  (`intake.admit`), then the offsets are committed. Poison goes to the DLQ. A redrive request for a
  workflow's parked activity is an input of its decision; one for a record the orchestrator
  refused reads it back and takes it again (docs/decisions/0009).
- `decider` (`decider_loop.DeciderLoop`): holds the leases of the command-topic partitions the
  group assigned to this process and decides the workflows of those shards with waiting inputs
  (`deciding.Decisions`).
- `relay`: publishes the outbox (history, JobDue, timers, child starts, acknowledgements).
- `prune` and `purge`: forget old inbox ids; purge closed workflows' history rows (retention.py).
"""

import asyncio
import logging
from datetime import datetime
from pathlib import Path
from typing import cast

from slotflow import tracing
from slotflow.contracts import Envelope, RedriveRequested, StartWorkflow, TimerFired
from slotflow.contracts.catalogue import RUN_EVENT_TYPES, WORKFLOW_COMMAND_TYPES, Messages
from slotflow.contracts.topics import (
    DLQ_MESSAGES,
    DLQ_REDRIVES,
    RUN_EVENTS,
    TIMER_EVENTS,
    WORKFLOW_COMMANDS,
    WORKFLOW_HISTORY,
)
from slotflow.errors import ConfigurationError, SlotflowError
from slotflow.health import Health, groups_joined, health_listener, kafka_probe, postgres_probe
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.loop import ConsumeLoop, Incoming
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.kafka.redrive import Answer, RedriveResponder
from slotflow.pg.migrations import MigrationSource
from slotflow.pg.outbox import Staged, append_many
from slotflow.pg.pool import Pool, wait_for_pool
from slotflow.pg.retention import purge_loop
from slotflow.principals import CommandVerifier, KafkaKeyRing, UnprovenCommand
from slotflow.relay import OutboxRelay
from slotflow.service import Supervisor, migrate, outbox_backlog, sleep_or_stop
from slotflow_orchestrator.config import Settings
from slotflow_orchestrator.decider_loop import RECOVERABLE, DeciderLoop
from slotflow_orchestrator.deciding import Decisions
from slotflow_orchestrator.intake import (
    COMMANDS,
    OUTAGES,
    Admitted,
    Refuse,
    admit,
    prune_inbox,
    workflow_redrive,
)
from slotflow_orchestrator.leases import Leases
from slotflow_orchestrator.metrics import OrchestratorMetrics
from slotflow_orchestrator.outbound import Outbound
from slotflow_orchestrator.queries import Queryable, QueryAnswers, QueryListener
from slotflow_orchestrator.retention import purges
from slotflow_orchestrator.sql import DATABASE_NOW
from slotflow_orchestrator.stepping import WorkflowCode

log = logging.getLogger(__name__)

MIGRATIONS = MigrationSource("orchestrator", Path(__file__).parent / "migrations")
#: Everything the three consumed topics carry; anything else there is poison.
ACCEPTED: Messages = (*WORKFLOW_COMMAND_TYPES, *RUN_EVENT_TYPES, TimerFired, RedriveRequested)


class NotRunning(SlotflowError):
    """The orchestrator was asked for something that needs it running."""


async def apply_migrations(pool: Pool, schema: str = "orchestrator") -> list[str]:
    """Create or update the orchestrator's schema (workflows, history, inputs, leases, payloads,
    outbox, inbox)."""
    return await migrate(pool, schema=schema, source=MIGRATIONS, payloads=True)


class OrchestratorService:
    """One orchestrator process: `await run(stop)`."""

    def __init__(
        self, settings: Settings, *, workflow_code: WorkflowCode, metrics: OrchestratorMetrics | None = None
    ) -> None:
        self.settings = settings
        self.owner = settings.orchestrator.instance_id
        self.metrics = metrics or OrchestratorMetrics()
        self._workflow_code = workflow_code
        self.ready = asyncio.Event()
        #: What /livez and /readyz answer (slotflow.health): ready while its loops run, its group
        #: was joined (it holds the leases of the shards the group gave it) and PostgreSQL and
        #: Kafka answer.
        self.health = Health(
            f"orchestrator-{self.owner}", stall_after=settings.orchestrator.liveness_stall_seconds
        )
        self._wake = asyncio.Event()
        self._pool: Pool | None = None
        self._relay: OutboxRelay | None = None
        #: The decision loop, once running (tests read which workflows a pass would pick).
        self.decider: DeciderLoop | None = None
        self._shards = 0
        self.leases: Leases | None = None
        self.decisions: Decisions | None = None
        signatures = settings.signatures
        # Both checked before anything starts: the orchestrator signs what it sends (timers, child
        # workflows) when signatures are required, and its inbox must remember a command id for
        # as long as the command's signature could still be accepted.
        self._signer = signatures.service_signer("orchestrator")
        signatures.check_inbox_outlasts_window(
            settings.orchestrator.inbox_retention_hours * 3600,
            setting="SLOTFLOW_ORCHESTRATOR_INBOX_RETENTION_HOURS",
        )
        self._verifier = CommandVerifier(signatures)
        self._outbound: Outbound | None = None
        self._redrives: RedriveResponder | None = None
        #: The query listener, when SLOTFLOW_ORCHESTRATOR_QUERY_PORT is set.
        self.queries: QueryListener | None = None

    @property
    def pool(self) -> Pool:
        if self._pool is None:
            raise NotRunning("the orchestrator is not running")
        return self._pool

    async def run(self, stop: asyncio.Event) -> None:
        """Migrate, start every part, and run until ``stop``; the work in hand finishes first."""
        cfg = self.settings.orchestrator
        kafka = self.settings.kafka
        pool = await wait_for_pool(self.settings.postgres, min_size=1, max_size=cfg.pool_size)
        self._pool = pool
        keys: KafkaKeyRing | None = None
        try:
            await apply_migrations(pool, cfg.db_schema)
            if self.settings.signatures.required:
                keys = KafkaKeyRing(kafka, client_id=f"orchestrator-{self.owner}")
                await keys.start()
                self._verifier = CommandVerifier(self.settings.signatures, keys)
            producer = Producer(kafka, client_id=f"orchestrator-{self.owner}")
            consumer = Consumer(
                kafka,
                kafka.topic(WORKFLOW_COMMANDS),
                kafka.topic(RUN_EVENTS),
                kafka.topic(TIMER_EVENTS),
                kafka.topic(DLQ_REDRIVES),
                group_id=self.settings.group_id(),
                client_id=f"orchestrator-{self.owner}",
                max_poll_records=cfg.max_poll_records,
                session_timeout_ms=cfg.session_timeout_ms,
                heartbeat_interval_ms=max(300, cfg.session_timeout_ms // 3),
                lag=self.metrics.consumer_lag,
            )
            async with producer, consumer:
                await self._run_parts(stop, pool, producer, consumer)
        finally:
            self.ready.clear()
            self._pool = None
            if keys is not None:
                await keys.stop()
            await pool.close()

    async def _run_parts(
        self, stop: asyncio.Event, pool: Pool, producer: Producer, consumer: Consumer
    ) -> None:
        cfg = self.settings.orchestrator
        kafka = self.settings.kafka
        self._shards = await producer.partition_count(kafka.topic(WORKFLOW_COMMANDS))
        # The history first: no JobDue, timer or command of a decision reaches Kafka before the
        # history that decided it (what a rebuild from the topic relies on, rebuild.py).
        self._relay = OutboxRelay(
            pool,
            producer,
            schema=cfg.db_schema,
            one_transaction=True,
            first_topics=[kafka.topic(WORKFLOW_HISTORY)],
        )
        self.leases = Leases(pool, schema=cfg.db_schema, owner=self.owner)
        self._outbound = Outbound(kafka, signer=self._signer)
        self.decisions = Decisions(
            pool,
            schema=cfg.db_schema,
            workflow_code=self._workflow_code,
            outbound=self._outbound,
            metrics=self.metrics,
            shards=self._shards,
            crash_window=cfg.crash_window_seconds,
            payload_threshold=cfg.payload_threshold_bytes,
            activity_payloads_schema=cfg.activity_payloads_schema,
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
        # The orchestrator owns what it refused on its three topics: a redrive reads such a record
        # back and takes it through the intake again (requests arrive on the intake's consumer).
        again = intake.rehandler()

        async def take_in_again(record: Record) -> Answer:
            handled = await again.handle(record)
            if not handled.done:
                return Answer.refused(
                    f"the orchestrator read {record.position} back and refused it again: "
                    f"{handled.reason}: {handled.detail}"
                )
            # An outcome taken in is checked by its workflow's decision against its issuer's record,
            # as any is; its dead letter has the same origin as this one, which the outbox already
            # sent, so a second refusal is counted (slotflow_orchestrator_refused_inputs_total), not
            # parked twice (docs/dlq.md, "Redriving").
            return Answer.done(
                f"the orchestrator read {record.position} back and took it in again; its workflow's "
                "decision checks it as any input (a refusal is counted, not parked twice)"
            )

        self._redrives = RedriveResponder(
            kafka,
            service="orchestrator",
            producer=producer,
            group_id=self.settings.group_id(),
            rehandlers={
                kafka.topic(WORKFLOW_COMMANDS): take_in_again,
                kafka.topic(RUN_EVENTS): take_in_again,
                kafka.topic(TIMER_EVENTS): take_in_again,
            },
            on_request=self._unroutable_redrive,
            client_id=f"orchestrator-redrives-{self.owner}",
        )
        commands_topic = kafka.topic(WORKFLOW_COMMANDS)
        supervisor = Supervisor("orchestrator")
        supervisor.add("intake", intake.run, stage=0)
        self.decider = decider = DeciderLoop(
            pool,
            cfg,
            owner=self.owner,
            leases=self.leases,
            decisions=self.decisions,
            metrics=self.metrics,
            consumer=consumer,
            commands_topic=commands_topic,
            relay=self._relay,
            wake=self._wake,
        )
        supervisor.add("decider", decider.run, stage=1)
        supervisor.add("relay", self._relay.run, stage=2)
        supervisor.add(
            "outbox-backlog", outbox_backlog(self._relay, self.metrics.outbox_backlog), cancel_on_stop=True
        )
        if cfg.query_port:
            answers = QueryAnswers(pool, schema=cfg.db_schema, leases=self.leases, code=self._queryable())
            self.queries = QueryListener(
                answers,
                pool,
                schema=cfg.db_schema,
                owner=self.owner,
                host=cfg.query_host,
                port=cfg.query_port,
                address=cfg.query_url(),
                token=cfg.query_token.get_secret_value() if cfg.query_token is not None else None,
            )
            supervisor.add("queries", self.queries.run, stage=0)
        supervisor.add("prune", self._prune_loop, stage=0, cancel_on_stop=True)
        supervisor.add("purge", self._purge_loop, stage=0, cancel_on_stop=True)
        health = self.health
        health.gate("loops", supervisor.problem)
        health.gate("intake", groups_joined(lambda: [consumer]))
        health.probe("postgres", postgres_probe(pool))
        health.probe("kafka", kafka_probe(producer))
        with health_listener(
            health, self.metrics.registry, port=cfg.metrics_port, host=cfg.metrics_host, stop=stop
        ):
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
                await self._redrives.reader.stop()
                for shard in list(self.leases.held):
                    try:
                        await self.leases.release(shard)
                    except RECOVERABLE as err:
                        log.warning("orchestrator %s: releasing shard %d failed: %r", self.owner, shard, err)

    def _queryable(self) -> Queryable:
        runtime = getattr(self._workflow_code, "runtime", None)
        if runtime is None:
            raise ConfigurationError(
                "SLOTFLOW_ORCHESTRATOR_QUERY_PORT is set, but the workflow code answers no queries"
            )
        return cast(Queryable, runtime)

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

    async def _purge_loop(self, stop: asyncio.Event) -> None:
        cfg = self.settings.orchestrator
        await purge_loop(
            stop,
            self.pool,
            purges(cfg.db_schema, days=cfg.history_retention_days),
            interval=cfg.purge_interval_seconds,
            batch_size=cfg.purge_batch_size,
            on_purged=lambda _name, count: self.metrics.histories_purged.inc(count),
        )

    # -- intake -----------------------------------------------------------------------------------

    async def _on_inputs(self, batch: list[Incoming]) -> None:
        schema = self.settings.orchestrator.db_schema
        if tracing.enabled():
            _link_started_runs(batch)
        checks = self._verifier.required and any(isinstance(i.message, COMMANDS) for i in batch)
        if checks:
            await self._verifier.refresh()  # every key revoked before this call is known after it
        async with self.pool.acquire() as conn, conn.transaction():
            if not checks:
                admitted = await admit(conn, schema=schema, shards=self._shards, batch=batch)
            else:
                now: datetime = await conn.fetchval(DATABASE_NOW)
                admitted = await admit(
                    conn, schema=schema, shards=self._shards, batch=batch, refuse=self._refusal(now)
                )
                if admitted.refused:
                    await append_many(conn, schema=schema, items=self._rejections(admitted, now))
        for type_ in admitted.types:
            self.metrics.inputs.labels(type_).inc()
        for incoming, reason in admitted.refused:
            self.metrics.commands.labels(incoming.envelope.type, "rejected").inc()
            log.warning("rejected %s %s: %s", incoming.envelope.type, incoming.envelope.id, reason)
        if admitted.refused and self._relay is not None:
            self._relay.wake()
        if self.leases is not None and admitted.shards & set(self.leases.held):
            self._wake.set()
        # Redrive requests that are no workflow's input: answered here, after the batch is recorded.
        for incoming in batch:
            request = incoming.message
            if isinstance(request, RedriveRequested) and not workflow_redrive(request) and self._redrives:
                await self._redrives.respond(incoming)

    async def _unroutable_redrive(self, envelope: Envelope, request: RedriveRequested) -> Answer | None:
        del envelope
        return Answer.refused(
            f"the orchestrator retries a workflow's parked activity, and this {request.kind} redrive names "
            "no workflow and sequence"
        )

    def _refusal(self, now: datetime) -> Refuse:
        """Why a command may not become an input as of ``now`` (its principal is not proven)."""
        verifier = self._verifier

        def refuse(incoming: Incoming) -> str | None:
            try:
                verifier.verify(incoming.envelope, topic=incoming.record.topic, now=now)
            except UnprovenCommand as refusal:
                return str(refusal)
            return None

        return refuse

    def _rejections(self, admitted: Admitted, now: datetime) -> list[Staged]:
        outbound = self._outbound or Outbound(self.settings.kafka)
        return [
            outbound.rejection(
                incoming.envelope.id,
                incoming.envelope.type,
                str(getattr(incoming.message, "workflow_id", incoming.envelope.key)),
                reason,
                now,
            )
            for incoming, reason in admitted.refused
        ]

    async def _on_input(self, incoming: Incoming) -> None:
        await self._on_inputs([incoming])

    def _own_poison(self, record: Record, reason: str) -> None:
        self.metrics.poison.labels(reason).inc()


def _link_started_runs(batch: list[Incoming]) -> None:
    """Link the intake's span to the trace of each workflow run a StartWorkflow of ``batch``
    starts (the run's trace id is derived from the workflow id and the command id,
    `slotflow.tracing.workflow_ids`): from a command's trace (the API request, the CLI call) one
    step leads to its workflow's. A start the decision refuses starts no run, and that trace stays
    empty: the CommandRejected in the command's own trace says why."""
    for incoming in batch:
        if isinstance(incoming.message, StartWorkflow):
            tracing.link_current(
                tracing.workflow_context(incoming.message.workflow_id, incoming.envelope.id),
                {"slotflow.workflow_id": incoming.message.workflow_id, "slotflow.link": "workflow run"},
            )
