"""Composition root of the DLQ service: pool, migrations, two consume loops, relays, notifier, metrics.

- The dead-letter loop consumes the DLQ topic and parks each letter. Redeliveries of one DLQ
  record collapse on the inbox (its position); a letter re-sent by a consumer for an origin already
  parked counts a sighting on that entry (its id is the origin position). Both happen in the
  transaction that stages the DeadLetterStatusChanged event.
- The command loop applies RedriveDeadLetters and DiscardDeadLetters, once per command id; where
  signatures are required, a command whose principal is not proven is answered CommandRejected
  and touches no letter.
- The outbox relay publishes events; the redrive relay sends redriven records back, byte-exact.
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

from slotflow.contracts import DeadLettered, DiscardDeadLetters, RedriveDeadLetters
from slotflow.contracts.catalogue import DLQ_COMMAND_TYPES
from slotflow.contracts.dlq import reason_label
from slotflow.contracts.topics import DLQ_COMMANDS, DLQ_MAX_RECORD_BYTES, DLQ_MESSAGES
from slotflow.core.retry import is_data_error
from slotflow.errors import TransientStorageError
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.loop import DEFAULT_OUTAGE_TYPES, ConsumeLoop, Incoming
from slotflow.kafka.poison import DLQ_MAX_ENVELOPE_BYTES
from slotflow.kafka.producer import Producer
from slotflow.kafka.records import Record
from slotflow.pg.migrations import MigrationSource
from slotflow.pg.outbox import OutboxRelay, append_many
from slotflow.pg.pool import CONNECTION_ERRORS, Conn, Pool, wait_for_pool
from slotflow.pg.retention import purge_loop
from slotflow.principals import CommandVerifier, KafkaKeyRing, SignatureSettings, UnprovenCommand
from slotflow.service import Supervisor, metrics_listener, migrate, outbox_backlog, sleep_or_stop
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow_dlq import queries, retention, store
from slotflow_dlq.config import DlqSettings
from slotflow_dlq.metrics import DlqMetrics
from slotflow_dlq.notify import Notifier
from slotflow_dlq.relay import RedriveRelay

log = logging.getLogger(__name__)

MIGRATIONS = MigrationSource("dlq", Path(__file__).parent / "migrations")
OUTAGES: tuple[type[BaseException], ...] = (*DEFAULT_OUTAGE_TYPES, *CONNECTION_ERRORS)
_GAUGE_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, asyncpg.PostgresError)
DATABASE_NOW = "SELECT now()"


class DlqService:
    """One replica of the DLQ service; `run` until the stop event is set."""

    def __init__(
        self,
        settings: DlqSettings | None = None,
        *,
        kafka: KafkaSettings | None = None,
        postgres: PostgresSettings | None = None,
        metrics: DlqMetrics | None = None,
        signatures: SignatureSettings | None = None,
    ) -> None:
        self.settings = settings or DlqSettings()
        self.kafka = kafka or KafkaSettings()
        self.postgres = postgres or PostgresSettings()
        #: Its dedupe of commands (the `commands` table) is never pruned: any replay window holds.
        self.signatures = signatures or SignatureSettings()
        self._verifier = CommandVerifier(self.signatures)
        self.metrics = metrics or DlqMetrics()
        self.schema = self.settings.db_schema
        self.ready = asyncio.Event()
        self.letters_loop: ConsumeLoop | None = None
        self.commands_loop: ConsumeLoop | None = None
        self._pool: Pool | None = None
        self._outbox: OutboxRelay | None = None
        self._redrives: RedriveRelay | None = None
        self._notifier: Notifier | None = None

    def _group(self, name: str) -> str:
        namespace = self.kafka.topic_namespace
        return f"{namespace}.{name}" if namespace else name

    @property
    def pool(self) -> Pool:
        if self._pool is None:
            raise TransientStorageError("the DLQ service is not running")
        return self._pool

    async def run(self, stop: asyncio.Event) -> None:
        """Migrate, start every part, and run until ``stop``; the batches in hand finish first."""
        pool = await wait_for_pool(self.postgres, min_size=1, max_size=self.settings.pool_size)
        self._pool = pool
        listener = metrics_listener(
            self.metrics.registry, port=self.settings.metrics_port, host=self.settings.metrics_host
        )
        keys: KafkaKeyRing | None = None
        try:
            await migrate(pool, schema=self.schema, source=MIGRATIONS)
            if self.signatures.required:
                keys = KafkaKeyRing(self.kafka, client_id=f"dlq-{self.settings.instance_id}")
                await keys.start()
                self._verifier = CommandVerifier(self.signatures, keys)
            producer = Producer(
                self.kafka,
                client_id=f"dlq-{self.settings.instance_id}",
                max_message_bytes=DLQ_MAX_ENVELOPE_BYTES,
            )
            letters = Consumer(
                self.kafka,
                self.kafka.topic(DLQ_MESSAGES),
                group_id=self._group(self.settings.messages_group),
                client_id=f"dlq-letters-{self.settings.instance_id}",
                max_poll_records=self.settings.max_poll_records,
                max_partition_fetch_bytes=DLQ_MAX_RECORD_BYTES + 64 * 1024,
                lag=self.metrics.consumer_lag,
            )
            commands = Consumer(
                self.kafka,
                self.kafka.topic(DLQ_COMMANDS),
                group_id=self._group(self.settings.commands_group),
                client_id=f"dlq-commands-{self.settings.instance_id}",
                max_poll_records=self.settings.max_poll_records,
                lag=self.metrics.consumer_lag,
            )
            with listener:
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
        self._redrives = RedriveRelay(
            pool,
            producer,
            schema=self.schema,
            batch_size=self.settings.redrive_batch_size,
            idle_interval=self.settings.redrive_idle_seconds,
        )
        dlq_topic = self.kafka.topic(DLQ_MESSAGES)
        self.letters_loop = ConsumeLoop(
            letters,
            handler=self._on_letter,
            batch_handler=self._on_letters,
            dlq=producer,
            dlq_topic=dlq_topic,
            source_service="dlq",
            accept=(DeadLettered,),
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
        loops = Supervisor(f"dlq-{self.settings.instance_id}")
        loops.add("letters", self.letters_loop.run)
        loops.add("commands", self.commands_loop.run)
        loops.add("outbox", self._outbox.run)
        loops.add(
            "outbox-backlog", outbox_backlog(self._outbox, self.metrics.outbox_backlog), cancel_on_stop=True
        )
        loops.add("redrives", self._redrives.run)
        loops.add("gauges", self._refresh_gauges)
        purges = retention.purges(
            self.schema,
            resolved_days=self.settings.retention_days,
            parked_days=self.settings.parked_retention_days,
        )
        loops.add(
            "purge",
            lambda stop: purge_loop(
                stop,
                pool,
                purges,
                interval=self.settings.purge_interval_seconds,
                batch_size=self.settings.purge_batch_size,
            ),
        )
        if self.settings.webhook_url is not None:
            secret = self.settings.webhook_secret
            if secret is None:
                log.warning("SLOTFLOW_DLQ_WEBHOOK_SECRET is unset: webhook bodies go unsigned")
            self._notifier = Notifier(
                pool,
                schema=self.schema,
                url=str(self.settings.webhook_url),
                metrics=self.metrics,
                timeout=self.settings.webhook_timeout_seconds,
                deadline=self.settings.webhook_deadline_seconds,
                concurrency=self.settings.webhook_concurrency,
                secret=None if secret is None else secret.get_secret_value().encode(),
                max_attempts=self.settings.webhook_max_attempts,
                base=self.settings.webhook_backoff_base_seconds,
                cap=self.settings.webhook_backoff_cap_seconds,
                poll_interval=self.settings.notifier_poll_seconds,
            )
            # A delivery in flight is leased and is retried by whoever runs next; waiting out
            # a hanging webhook's timeout would only delay the shutdown.
            loops.add("notifier", self._notifier.run, cancel_on_stop=True)
        self.ready.set()
        try:
            await loops.run(stop)
        finally:
            self.ready.clear()

    # -- handlers ---------------------------------------------------------------------------------

    async def _on_letters(self, batch: list[Incoming]) -> None:
        """Park a whole poll in one transaction (the fast path; see ConsumeLoop's batch_handler)."""
        async with self.pool.acquire() as conn, conn.transaction():
            done = [p for incoming in batch if (p := await self._park(conn, incoming)) is not None]
            await append_many(conn, schema=self.schema, items=[p.event for p in done])
        self._after_parking(done)
        if self.settings.crash_window_seconds:
            await asyncio.sleep(self.settings.crash_window_seconds)

    async def _on_letter(self, incoming: Incoming) -> None:
        """Park one letter (the slow path, after a batch failed)."""
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                parked = await self._park(conn, incoming)
                if parked is not None:
                    await append_many(conn, schema=self.schema, items=[parked.event])
        except asyncpg.PostgresError as err:
            if is_data_error(err):
                # A value PostgreSQL refuses (a partition number past its integer, SQLSTATE class
                # 22) fails the same way on every try: waiting would hold up every letter behind
                # it for good. The loop parks it at once, wrapped, with the DLQ topic as origin.
                raise
            raise TransientStorageError(f"parking {incoming.envelope.id} failed; waiting: {err}") from err
        self._after_parking([parked] if parked is not None else [])

    async def _park(self, conn: Conn, incoming: Incoming) -> store.Parked | None:
        letter = incoming.message
        if not isinstance(letter, DeadLettered):
            return None  # unreachable: the loop accepts DeadLettered only
        tag = self.settings.money_moving_tag if self.settings.webhook_url is not None else None
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
        if refusal is not None:
            log.warning("rejected %s %s: %s", incoming.envelope.type, incoming.envelope.id, refusal)
        elif isinstance(command, RedriveDeadLetters):
            self.metrics.redrives.inc(len(applied.changed))
            if self._redrives is not None:
                self._redrives.wake()
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
            await sleep_or_stop(stop, self.settings.gauge_seconds)
