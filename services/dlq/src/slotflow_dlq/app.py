"""Composition root of the DLQ service: pool, migrations, two consume loops, relays, notifier, metrics and probes.

- The dead-letter loop consumes the DLQ topic and parks each letter. Redeliveries of one DLQ
  record collapse on the inbox (its position); a letter re-sent by a consumer for an origin already
  parked counts a sighting on that entry (its id is the origin position). Both happen in the
  transaction that stages the DeadLetterStatusChanged event.
  The same loop records the owners' answers to redrive requests (RedriveOutcome on the DLQ topic).
- The command loop applies RedriveDeadLetters and DiscardDeadLetters, once per command id: a
  redrive stages a RedriveRequested per letter for its owner (docs/decisions/0009); where
  signatures are required, a command whose principal is not proven is answered CommandRejected
  and touches no letter.
- The outbox relay publishes events and redrive requests.
- The redrive responder answers the requests addressed to the dlq itself (records its own
  consumers refused, read back from their topic).
- The notifier delivers webhook notifications for dead-lettered money-moving runs.

A poll's letters are parked in one transaction. Should that fail, they are parked one at a time,
and there any database error counts as an outage to wait out: every letter's text is made
storable before the insert, so a failure there is the database's, and the DLQ is the last stop;
a letter it skipped would be lost.
"""

import asyncio
import logging
from pathlib import Path

import asyncpg

from slotflow.contracts import DeadLettered, DiscardDeadLetters, RedriveDeadLetters, RedriveOutcome
from slotflow.contracts.catalogue import DLQ_COMMAND_TYPES, DLQ_MESSAGE_TYPES
from slotflow.contracts.dlq import reason_label
from slotflow.contracts.topics import DLQ_COMMANDS, DLQ_MAX_RECORD_BYTES, DLQ_MESSAGES
from slotflow.core.retry import is_data_error
from slotflow.errors import PoisonMessage, TransientStorageError
from slotflow.health import Health, groups_joined, health_listener, kafka_probe, postgres_probe
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.loop import DEFAULT_OUTAGE_TYPES, ConsumeLoop, Incoming
from slotflow.kafka.poison import DLQ_MAX_ENVELOPE_BYTES
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.kafka.redrive import RedriveResponder
from slotflow.pg.migrations import MigrationSource
from slotflow.pg.outbox import append_many
from slotflow.pg.pool import CONNECTION_ERRORS, Conn, Pool, wait_for_pool
from slotflow.pg.retention import purge_loop
from slotflow.principals import CommandVerifier, KafkaKeyRing, UnprovenCommand
from slotflow.relay import OutboxRelay
from slotflow.service import Supervisor, migrate, outbox_backlog, sleep_or_stop
from slotflow_dlq import queries, retention, store
from slotflow_dlq.config import Settings
from slotflow_dlq.metrics import DlqMetrics
from slotflow_dlq.notify import Notifier

log = logging.getLogger(__name__)

MIGRATIONS = MigrationSource("dlq", Path(__file__).parent / "migrations")
OUTAGES: tuple[type[BaseException], ...] = (*DEFAULT_OUTAGE_TYPES, *CONNECTION_ERRORS)
_GAUGE_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, asyncpg.PostgresError)
DATABASE_NOW = "SELECT now()"


class DlqService:
    """One replica of the DLQ service; `run` until the stop event is set."""

    def __init__(self, settings: Settings, *, metrics: DlqMetrics | None = None) -> None:
        self.settings = settings
        self.kafka = settings.kafka
        self.postgres = settings.postgres
        #: Its dedupe of commands (the `commands` table) is never pruned: any replay window holds.
        self.signatures = settings.signatures
        self._verifier = CommandVerifier(self.signatures)
        self.metrics = metrics or DlqMetrics()
        self.schema = self.settings.dlq.db_schema
        self.ready = asyncio.Event()
        #: What /livez and /readyz answer (slotflow.health): ready while its loops run, its two
        #: groups (letters, commands) were joined and PostgreSQL and Kafka answer.
        self.health = Health(
            f"dlq-{settings.dlq.instance_id}", stall_after=settings.dlq.liveness_stall_seconds
        )
        self.letters_loop: ConsumeLoop | None = None
        self.commands_loop: ConsumeLoop | None = None
        self.responder: RedriveResponder | None = None
        self._pool: Pool | None = None
        self._outbox: OutboxRelay | None = None
        self._notifier: Notifier | None = None

    def _group(self, name: str) -> str:
        return self.kafka.consumer_group(name)

    @property
    def pool(self) -> Pool:
        if self._pool is None:
            raise TransientStorageError("the DLQ service is not running")
        return self._pool

    async def run(self, stop: asyncio.Event) -> None:
        """Migrate, start every part, and run until ``stop``; the batches in hand finish first."""
        pool = await wait_for_pool(self.postgres, min_size=1, max_size=self.settings.dlq.pool_size)
        self._pool = pool
        keys: KafkaKeyRing | None = None
        try:
            await migrate(pool, schema=self.schema, source=MIGRATIONS)
            if self.signatures.required:
                keys = KafkaKeyRing(self.kafka, client_id=f"dlq-{self.settings.dlq.instance_id}")
                await keys.start()
                self._verifier = CommandVerifier(self.signatures, keys)
            producer = Producer(
                self.kafka,
                client_id=f"dlq-{self.settings.dlq.instance_id}",
                max_message_bytes=DLQ_MAX_ENVELOPE_BYTES,
            )
            letters = Consumer(
                self.kafka,
                self.kafka.topic(DLQ_MESSAGES),
                group_id=self._group(self.settings.dlq.messages_group),
                client_id=f"dlq-letters-{self.settings.dlq.instance_id}",
                max_poll_records=self.settings.dlq.max_poll_records,
                max_partition_fetch_bytes=DLQ_MAX_RECORD_BYTES + 64 * 1024,
                lag=self.metrics.consumer_lag,
            )
            commands = Consumer(
                self.kafka,
                self.kafka.topic(DLQ_COMMANDS),
                group_id=self._group(self.settings.dlq.commands_group),
                client_id=f"dlq-commands-{self.settings.dlq.instance_id}",
                max_poll_records=self.settings.dlq.max_poll_records,
                lag=self.metrics.consumer_lag,
            )
            async with producer, letters, commands:
                await self._run_parts(stop, producer, letters, commands)
        finally:
            self._pool = None
            if keys is not None:
                await keys.stop()
            await pool.close()

    async def _run_parts(
        self, stop: asyncio.Event, producer: Producer, letters: Consumer, commands: Consumer
    ) -> None:
        pool = self.pool
        self._outbox = OutboxRelay(pool, producer, schema=self.schema)
        dlq_topic = self.kafka.topic(DLQ_MESSAGES)
        self.letters_loop = ConsumeLoop(
            letters,
            handler=self._on_letter,
            batch_handler=self._on_letters,
            dlq=producer,
            dlq_topic=dlq_topic,
            source_service="dlq",
            accept=DLQ_MESSAGE_TYPES,
            # The DLQ topic carries envelopes up to its own, larger limit.
            max_bytes=DLQ_MAX_RECORD_BYTES,
            outage_types=OUTAGES,
            on_dead_letter=self._own_poison,
        )
        self.commands_loop = ConsumeLoop(
            commands,
            handler=self._on_command,
            dlq=producer,
            dlq_topic=dlq_topic,
            source_service="dlq",
            accept=DLQ_COMMAND_TYPES,
            max_bytes=self.kafka.max_message_bytes,
            outage_types=OUTAGES,
            on_dead_letter=self._own_poison,
        )
        # The dlq owns what its own consumers refused: a redrive of such a letter reads the record
        # back from its topic and handles it as these loops do.
        self.responder = RedriveResponder(
            self.kafka,
            service="dlq",
            producer=producer,
            group_id=self._group(self.settings.dlq.redrives_group),
            rehandlers={
                dlq_topic: self.letters_loop.rehandler(),
                self.kafka.topic(DLQ_COMMANDS): self.commands_loop.rehandler(),
            },
            client_id=f"dlq-redrives-{self.settings.dlq.instance_id}",
        )
        loops = Supervisor(f"dlq-{self.settings.dlq.instance_id}")
        loops.add("letters", self.letters_loop.run)
        loops.add("commands", self.commands_loop.run)
        loops.add("redrives", self.responder.run)
        loops.add("outbox", self._outbox.run)
        loops.add(
            "outbox-backlog", outbox_backlog(self._outbox, self.metrics.outbox_backlog), cancel_on_stop=True
        )
        loops.add("gauges", self._refresh_gauges)
        purges = retention.purges(
            self.schema,
            resolved_days=self.settings.dlq.retention_days,
            parked_days=self.settings.dlq.parked_retention_days,
        )
        loops.add(
            "purge",
            lambda stop: purge_loop(
                stop,
                pool,
                purges,
                interval=self.settings.dlq.purge_interval_seconds,
                batch_size=self.settings.dlq.purge_batch_size,
            ),
        )
        if self.settings.dlq.webhook_url is not None:
            secret = self.settings.dlq.webhook_secret
            if secret is None:
                log.warning("SLOTFLOW_DLQ_WEBHOOK_SECRET is unset: webhook bodies go unsigned")
            self._notifier = Notifier(
                pool,
                schema=self.schema,
                url=str(self.settings.dlq.webhook_url),
                metrics=self.metrics,
                timeout=self.settings.dlq.webhook_timeout_seconds,
                deadline=self.settings.dlq.webhook_deadline_seconds,
                concurrency=self.settings.dlq.webhook_concurrency,
                secret=None if secret is None else secret.get_secret_value().encode(),
                max_attempts=self.settings.dlq.webhook_max_attempts,
                base=self.settings.dlq.webhook_backoff_base_seconds,
                cap=self.settings.dlq.webhook_backoff_cap_seconds,
                poll_interval=self.settings.dlq.notifier_poll_seconds,
            )
            # A delivery in flight is leased and is retried by whoever runs next; waiting out
            # a hanging webhook's timeout would only delay the shutdown.
            loops.add("notifier", self._notifier.run, cancel_on_stop=True)
        health = self.health
        health.gate("loops", loops.problem)
        health.gate("consumers", groups_joined(lambda: [letters, commands]))
        health.probe("postgres", postgres_probe(pool))
        health.probe("kafka", kafka_probe(producer))
        dlq = self.settings.dlq
        with health_listener(
            health, self.metrics.registry, port=dlq.metrics_port, host=dlq.metrics_host, stop=stop
        ):
            self.ready.set()
            try:
                await loops.run(stop)
            finally:
                self.ready.clear()

    # -- handlers ---------------------------------------------------------------------------------

    async def _on_letters(self, batch: list[Incoming]) -> None:
        """Park a whole poll in one transaction (the fast path; see ConsumeLoop's batch_handler);
        the owners' answers among it are recorded in the same one."""
        async with self.pool.acquire() as conn, conn.transaction():
            done = [p for incoming in batch if (p := await self._park(conn, incoming)) is not None]
            answers = [a for incoming in batch if (a := await self._answer(conn, incoming)) is not None]
            events = [p.event for p in done] + [a.event for a in answers if a.event is not None]
            await append_many(conn, schema=self.schema, items=events)
        self._after_parking(done)
        self._after_answers(answers)
        if self.settings.dlq.crash_window_seconds:
            await asyncio.sleep(self.settings.dlq.crash_window_seconds)

    async def _on_letter(self, incoming: Incoming) -> None:
        """Park one letter, or record one answer (the slow path, after a batch failed)."""
        answers: list[store.Answered] = []
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                parked = await self._park(conn, incoming)
                if parked is not None:
                    await append_many(conn, schema=self.schema, items=[parked.event])
                answered = await self._answer(conn, incoming)
                if answered is not None:
                    answers.append(answered)
                    if answered.event is not None:
                        await append_many(conn, schema=self.schema, items=[answered.event])
        except PoisonMessage:
            raise  # an answer that names no request of ours: parked as our own poison
        except asyncpg.PostgresError as err:
            if is_data_error(err):
                # A value PostgreSQL refuses (a partition number past its integer, SQLSTATE class
                # 22) fails the same way on every try: waiting would hold up every letter behind
                # it for good. The loop parks it at once, wrapped, with the DLQ topic as origin.
                raise
            raise TransientStorageError(f"parking {incoming.envelope.id} failed; waiting: {err}") from err
        self._after_parking([parked] if parked is not None else [])
        self._after_answers(answers)

    async def _answer(self, conn: Conn, incoming: Incoming) -> store.Answered | None:
        outcome = incoming.message
        if not isinstance(outcome, RedriveOutcome):
            return None
        return await store.answer(
            conn, schema=self.schema, kafka=self.kafka, envelope=incoming.envelope, outcome=outcome
        )

    def _after_answers(self, answers: list[store.Answered]) -> None:
        for answered in answers:
            self.metrics.redrive_outcomes.labels(answered.outcome).inc()
        if any(a.event is not None for a in answers) and self._outbox is not None:
            self._outbox.wake()

    async def _park(self, conn: Conn, incoming: Incoming) -> store.Parked | None:
        letter = incoming.message
        if not isinstance(letter, DeadLettered):
            return None  # an owner's answer (`_answer`)
        tag = self.settings.dlq.money_moving_tag if self.settings.dlq.webhook_url is not None else None
        return await store.park(
            conn,
            schema=self.schema,
            kafka=self.kafka,
            envelope=incoming.envelope,
            letter=letter,
            notify_tag=tag,
            dlq_record=f"dlq-record:{incoming.record.position}",
            dlq_topic=incoming.record.topic,
        )

    def _after_parking(self, parked: list[store.Parked]) -> None:
        for one in parked:
            if one.new:
                self.metrics.parked.labels(reason_label(one.reason)).inc()
            else:
                self.metrics.sightings.inc()
        if parked and self._outbox is not None:
            self._outbox.wake()
        if any(p.notify for p in parked) and self._notifier is not None:
            self._notifier.wake()

    async def _on_command(self, incoming: Incoming) -> None:
        command = incoming.message
        if not isinstance(command, RedriveDeadLetters | DiscardDeadLetters):
            return  # unreachable: the loop accepts these two only
        await self._verifier.refresh()  # every key revoked before this call is known after it
        async with self.pool.acquire() as conn, conn.transaction():
            refusal = await self._unproven(conn, incoming)
            if refusal is not None:
                applied = await store.reject(
                    conn,
                    schema=self.schema,
                    kafka=self.kafka,
                    envelope=incoming.envelope,
                    command=command,
                    reason=refusal,
                )
            elif isinstance(command, RedriveDeadLetters):
                applied = await store.redrive(
                    conn, schema=self.schema, kafka=self.kafka, envelope=incoming.envelope, command=command
                )
            else:
                applied = await store.discard(
                    conn, schema=self.schema, kafka=self.kafka, envelope=incoming.envelope, command=command
                )
        if applied.repeated:
            return
        if applied.rejected is not None:
            log.info("%s %s rejected: %s", incoming.envelope.type, incoming.envelope.id, applied.rejected)
        elif isinstance(command, RedriveDeadLetters):
            for target, count in applied.requested.items():
                self.metrics.redrives.labels(target).inc(count)
            if applied.refused:
                self.metrics.redrive_outcomes.labels("refused").inc(applied.refused)
        else:
            self.metrics.discards.inc(len(applied.changed))
        if self._outbox is not None:
            self._outbox.wake()
        log.info("%s %s: %d entries", incoming.envelope.type, incoming.envelope.id, len(applied.changed))

    async def _unproven(self, conn: Conn, incoming: Incoming) -> str | None:
        """Why ``incoming``'s principal is not proven, or None (always None when not required)."""
        if not self._verifier.required:
            return None
        # The replay window is judged by the database's clock, never the host's.
        now = await conn.fetchval(DATABASE_NOW)
        try:
            self._verifier.verify(incoming.envelope, topic=incoming.record.topic, now=now)
        except UnprovenCommand as refusal:
            return str(refusal)
        return None

    def _own_poison(self, record: Record, reason: str) -> None:
        self.metrics.poison.labels(reason_label(reason)).inc()

    async def _refresh_gauges(self, stop: asyncio.Event) -> None:
        shown: set[str] = set()
        while not stop.is_set():
            try:
                counts = await queries.parked_by_reason(self.pool, schema=self.schema)
                age = await queries.oldest_parked_age_seconds(self.pool, schema=self.schema)
                waiting = await queries.oldest_redriving_age_seconds(self.pool, schema=self.schema)
            except _GAUGE_ERRORS as err:
                log.warning("gauge refresh failed: %s", err)
            else:
                # Forged reasons fold into `other`: the label set stays the known reasons.
                labelled: dict[str, int] = {}
                for reason, count in counts.items():
                    label = reason_label(reason)
                    labelled[label] = labelled.get(label, 0) + count
                for reason in shown - labelled.keys():
                    self.metrics.parked_now.labels(reason).set(0)
                for reason, count in labelled.items():
                    self.metrics.parked_now.labels(reason).set(count)
                shown |= labelled.keys()
                self.metrics.oldest_parked_age.set(age)
                self.metrics.oldest_redriving_age.set(waiting)
            await sleep_or_stop(stop, self.settings.dlq.gauge_seconds)
