"""Every consumer's decode-and-store path, in-process, on one real PostgreSQL database.

A record handed to `Pipeline.deliver` goes to each modelled consumer of its topic, the way its
consume loop takes it: the shared `decode_record` (with that consumer's accepted types), then
the service's own store path in its own schema (the ticker's command handler, the api's
projection, the orchestrator's intake and its next decision, the claimer's intake, the dlq's
letter store). A record a consumer refuses becomes the dead letter its loop would send, delivered
to the dlq in turn; whatever a service staged in its outbox (the bytes its relay would publish) is
delivered to the consumers of its topic until nothing new is staged. Every step's outcome is kept,
so a test can ask: did every consumer of a record decide alike, and could each one store what it
accepted?
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from slotflow.contracts import DeadLettered, JobDue, RedriveOutcome
from slotflow.contracts.catalogue import DLQ_MESSAGE_TYPES
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import envelope_headers
from slotflow.contracts.topics import (
    DLQ_MAX_RECORD_BYTES,
    DLQ_MESSAGES,
    JOBS_DUE,
    RUN_EVENTS,
    SCHEDULE_COMMANDS,
    TIMER_COMMANDS,
    TIMER_EVENTS,
    TOPICS,
    WORKFLOW_COMMANDS,
    TopicSpec,
)
from slotflow.errors import PoisonMessage
from slotflow.kafka.loop import Incoming
from slotflow.kafka.poison import DLQ_MAX_ENVELOPE_BYTES, dead_letter_envelope, decode_record
from slotflow.kafka.records import Record
from slotflow.pg.outbox import append_many
from slotflow.pg.pool import Pool
from slotflow.pg.statements import quote_ident, sql, sql_with
from slotflow.service import migrate as migrate_schema
from slotflow.settings import KafkaSettings
from slotflow_api.projection import Fact, project
from slotflow_api.projector import PROJECTED_TOPICS
from slotflow_api.projector import migrate as migrate_api
from slotflow_claimer.app import migrate as migrate_claimer
from slotflow_claimer.events import RunEvents
from slotflow_claimer.intake import Intake
from slotflow_claimer.metrics import ClaimerMetrics
from slotflow_dlq import store as dlq_store
from slotflow_dlq.app import MIGRATIONS as DLQ_MIGRATIONS
from slotflow_orchestrator.app import ACCEPTED as ORCHESTRATOR_ACCEPTS
from slotflow_orchestrator.app import apply_migrations as migrate_orchestrator
from slotflow_orchestrator.deciding import Decisions
from slotflow_orchestrator.intake import admit, shard_of, workflow_of
from slotflow_orchestrator.leases import Leases
from slotflow_orchestrator.metrics import OrchestratorMetrics
from slotflow_orchestrator.outbound import Outbound
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode
from slotflow_ticker.app import migrate as migrate_ticker
from slotflow_ticker.claims import SlotFirer
from slotflow_ticker.commands import COMMANDS as TICKER_ACCEPTS
from slotflow_ticker.commands import CommandHandler, CommandTopics, poison_rejection
from slotflow_ticker.config import TickerSettings
from slotflow_ticker.events import EventFactory, Topics
from slotflow_ticker.metrics import TickerMetrics
from slotflow_ticker.sql import Queries

SHARDS = 3
#: The schemas with an outbox (the api publishes its commands straight to Kafka, no outbox).
SCHEMAS = ("ticker", "claimer", "orchestrator", "dlq")
#: Which modelled consumer reads which topic (the topic table's consumers that store something).
READERS: dict[str, tuple[str, ...]] = {
    SCHEDULE_COMMANDS.name: ("ticker", "api"),
    JOBS_DUE.name: ("claimer", "api"),
    RUN_EVENTS.name: ("orchestrator", "api"),
    TIMER_EVENTS.name: ("orchestrator", "api"),
    WORKFLOW_COMMANDS.name: ("orchestrator", "api"),
    DLQ_MESSAGES.name: ("dlq",),
}
for _spec in PROJECTED_TOPICS:
    READERS.setdefault(_spec.name, ("api",))

#: Tables a reset keeps: the migrations applied and the orchestrator's shard leases (held).
_KEPT = ("schema_migrations", "shard_leases")
# Tables that reference others come first (the dlq's notifications and redrives its letters).
_TABLES = (
    "SELECT t.schemaname, t.tablename FROM pg_tables t "
    "WHERE t.schemaname = ANY($1) AND t.tablename <> ALL($2) "
    "ORDER BY EXISTS (SELECT 1 FROM pg_constraint c WHERE c.contype = 'f' "
    "AND c.conrelid = format('%I.%I', t.schemaname, t.tablename)::regclass) DESC"
)
_DELETE = "DELETE FROM {table}"
_LAST_SEQ = "SELECT coalesce(max(seq), 0) FROM {schema}.outbox"
_STAGED = "SELECT EXISTS (SELECT 1 FROM {schema}.outbox_events WHERE event_id = $1)"
_OUTBOX_EVENTS = (
    "SELECT seq, topic, event_id, key, value, headers FROM {schema}.outbox_events WHERE seq > $1 ORDER BY seq"
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one consumer made of one record."""

    service: str
    topic: str
    #: The record's envelope type, as far as it could be read.
    type: str
    #: `reason: message` when the consumer refused the record at decode; None when it took it.
    refused: str | None = None
    #: What its store path raised for a record it had accepted (the rule's failure).
    error: str | None = None
    #: The record came from a service's outbox (it emitted it), not from the test.
    emitted: bool = False

    @property
    def stored(self) -> bool:
        return self.refused is None and self.error is None


@dataclass(repr=False)
class Pipeline:
    pool: Pool
    kafka: KafkaSettings
    workflow_code: RuntimeWorkflowCode
    outcomes: list[Outcome] = field(default_factory=list)
    _seen: dict[str, int] = field(default_factory=dict)
    _offset: int = 0

    def __repr__(self) -> str:  # hypothesis prints it beside a failing case
        return f"Pipeline({len(self.outcomes)} outcomes)"

    async def start(self) -> None:
        await migrate_ticker(self.pool, TickerSettings(metrics_port=0))
        await migrate_claimer(self.pool)
        await migrate_orchestrator(self.pool)
        await migrate_schema(self.pool, schema="dlq", source=DLQ_MIGRATIONS)
        await migrate_api(self.pool, "api")
        self._spec_by_name = {self.kafka.topic(spec): spec for spec in TOPICS}
        queries = Queries.for_schema("ticker")
        events = self._ticker_events = EventFactory(Topics.of(self.kafka), source="ticker/acceptance")
        metrics = TickerMetrics()
        self.ticker = CommandHandler(
            self.pool,
            schema="ticker",
            queries=queries,
            events=events,
            firer=SlotFirer(
                self.pool,
                schema="ticker",
                queries=queries,
                events=events,
                metrics=metrics,
                batch_size=100,
                max_slots=100,
            ),
            metrics=metrics,
            on_commit=lambda _due: None,
            topics=CommandTopics(
                schedules=self.kafka.topic(SCHEDULE_COMMANDS), timers=self.kafka.topic(TIMER_COMMANDS)
            ),
        )
        self.claimer = Intake(
            self.pool,
            schema="claimer",
            owner="claimer/acceptance",
            lease_ttl=30.0,
            kafka=self.kafka,
            events=RunEvents(self.kafka),
            metrics=ClaimerMetrics(),
        )
        self._orchestrator_metrics = OrchestratorMetrics()
        self.leases = Leases(self.pool, schema="orchestrator", owner="orchestrator/acceptance")
        await self.leases.reconcile(frozenset(range(SHARDS)), 1)
        self.decisions = self._new_decisions()
        for schema in SCHEMAS:
            self._seen[schema] = await self._last_seq(schema)

    async def reset(self) -> None:
        """Empty every table the consumers wrote (their leases and migrations stay), so an example
        meets the same state however often hypothesis replays it."""
        async with self.pool.acquire() as conn, conn.transaction():
            # DELETE, not TRUNCATE: the tables hold a few rows, and a TRUNCATE of forty tables
            # costs half a second of new files. Referencing tables first (the FKs' order).
            for row in await conn.fetch(_TABLES, [*SCHEMAS, "api"], list(_KEPT)):
                table = f"{quote_ident(row['schemaname'])}.{quote_ident(row['tablename'])}"
                await conn.execute(sql_with(_DELETE, "api", table=table))
        self.outcomes.clear()
        # The decisions keep recent histories in memory: a fresh one forgets the emptied ones.
        self.decisions = self._new_decisions()

    def _new_decisions(self) -> Decisions:
        return Decisions(
            self.pool,
            schema="orchestrator",
            workflow_code=self.workflow_code,
            outbound=Outbound(self.kafka),
            metrics=self._orchestrator_metrics,
            shards=SHARDS,
        )

    def record(self, spec: TopicSpec, value: bytes | None, *, key: bytes | None) -> Record:
        """A record as a consumer of ``spec`` receives it (a fresh offset each)."""
        self._offset += 1
        return Record(
            topic=self.kafka.topic(spec),
            partition=0,
            offset=self._offset,
            key=key,
            value=value,
            headers=(),
            timestamp_ms=int(datetime.now(UTC).timestamp() * 1000),
        )

    async def deliver(self, spec: TopicSpec, record: Record, *, emitted: bool = False) -> list[Outcome]:
        """``record`` through every modelled consumer of ``spec``, then whatever they emitted."""
        found = [await self._consume(name, spec, record, emitted) for name in READERS.get(spec.name, ())]
        self.outcomes.extend(found)
        if not emitted:
            await self.settle()
        return found

    async def settle(self, rounds: int = 6) -> None:
        """Deliver what the services staged until nothing new is staged."""
        for _ in range(rounds):
            moved = False
            for schema in SCHEMAS:
                for row in await self._staged(schema):
                    spec = self._spec_by_name.get(row["topic"])
                    if spec is None or spec.name not in READERS:
                        continue
                    stored = row["headers"]
                    loaded = json.loads(stored) if isinstance(stored, str) else stored
                    headers = tuple((k, str(v).encode("latin-1")) for k, v in (loaded or {}).items())
                    self._offset += 1
                    record = Record(
                        topic=row["topic"],
                        partition=0,
                        offset=self._offset,
                        key=row["key"].encode() if row["key"] is not None else None,
                        value=bytes(row["value"]),
                        headers=headers,
                        timestamp_ms=int(datetime.now(UTC).timestamp() * 1000),
                    )
                    await self.deliver(spec, record, emitted=True)
                    moved = True
            if not moved:
                return

    # -- one consumer each -------------------------------------------------------------------------

    async def _consume(self, service: str, spec: TopicSpec, record: Record, emitted: bool) -> Outcome:
        kind = _type_of(record)
        try:
            refused = await getattr(self, f"_{service}")(spec, record)
        except PoisonMessage:
            raise
        except Exception as err:  # noqa: BLE001 - the outcome the test judges
            return Outcome(service, spec.name, kind, error=f"{type(err).__name__}: {err}", emitted=emitted)
        return Outcome(service, spec.name, kind, refused=refused, emitted=emitted)

    async def _refuse(self, service: str, record: Record, poison: PoisonMessage) -> str:
        """The letter the consume loop sends for a refused record, through the dlq's store."""
        letter = dead_letter_envelope(
            record,
            poison,
            source_service=service,
            occurred_at=datetime.now(UTC),
            max_bytes=DLQ_MAX_ENVELOPE_BYTES,
        )
        self._offset += 1
        parked = Record(
            topic=self.kafka.topic(DLQ_MESSAGES),
            partition=0,
            offset=self._offset,
            key=letter.key.encode(),
            value=encode(letter),
            headers=tuple(envelope_headers(letter).items()),
            timestamp_ms=int(datetime.now(UTC).timestamp() * 1000),
        )
        await self.deliver(DLQ_MESSAGES, parked, emitted=True)
        return f"{poison.reason}: {poison}"

    async def _ticker(self, spec: TopicSpec, record: Record) -> str | None:
        check = partial(decode_record, accept=TICKER_ACCEPTS, max_bytes=self.kafka.max_message_bytes)
        try:
            envelope, message = check(record)
        except PoisonMessage as poison:
            # The sender is told why: the ticker stages a CommandRejected (its id follows from the
            # command's, so a repeat collapses onto the first).
            expected = poison_rejection(self._ticker_events, record, poison, now=datetime.now(UTC))
            await self.ticker.reject_poison([record], decode_record=check)
            if expected is None or not await self._staged_in("ticker", expected.envelope.id):
                raise AssertionError(f"the ticker staged no CommandRejected for {record.position}") from None
            return await self._refuse("ticker", record, poison)
        await self.ticker.handle(Incoming(record, envelope, message))
        return None

    async def _api(self, spec: TopicSpec, record: Record) -> str | None:
        try:
            envelope, message = decode_record(record, max_bytes=self.kafka.max_message_bytes)
        except PoisonMessage as poison:
            return await self._refuse("api", record, poison)
        async with self.pool.acquire() as conn, conn.transaction():
            await project(conn, schema="api", facts=[Fact(spec.name, record, envelope, message)])
        return None

    async def _orchestrator(self, spec: TopicSpec, record: Record) -> str | None:
        try:
            envelope, message = decode_record(
                record, accept=ORCHESTRATOR_ACCEPTS, max_bytes=self.kafka.max_message_bytes
            )
        except PoisonMessage as poison:
            return await self._refuse("orchestrator", record, poison)
        async with self.pool.acquire() as conn, conn.transaction():
            await admit(
                conn, schema="orchestrator", shards=SHARDS, batch=[Incoming(record, envelope, message)]
            )
        workflow_id = workflow_of(message)
        if workflow_id is not None:
            shard = shard_of(workflow_id, SHARDS)
            await self.decisions.decide(workflow_id, shard=shard, token=self.leases.held[shard])
        return None

    async def _claimer(self, spec: TopicSpec, record: Record) -> str | None:
        admission = await self.claimer.admit([record])
        if admission.poison:
            # Its letter is staged in the claimer's outbox (the settle delivers it); the reason is
            # the shared decode's, which the claimer's own fast path must agree with.
            try:
                decode_record(record, accept=(JobDue,), max_bytes=self.kafka.max_message_bytes)
            except PoisonMessage as poison:
                return f"{poison.reason}: {poison}"
            raise AssertionError(f"the claimer parked {record.position}, which the shared decode accepts")
        return None

    async def _dlq(self, spec: TopicSpec, record: Record) -> str | None:
        try:
            envelope, letter = decode_record(record, accept=DLQ_MESSAGE_TYPES, max_bytes=DLQ_MAX_RECORD_BYTES)
        except PoisonMessage as poison:
            return f"{poison.reason}: {poison}"  # parked by the dlq as a letter about a letter
        if isinstance(letter, RedriveOutcome):
            # An owner's answer: taken only for a request this dlq staged (none here).
            try:
                async with self.pool.acquire() as conn, conn.transaction():
                    await dlq_store.answer(
                        conn, schema="dlq", kafka=self.kafka, envelope=envelope, outcome=letter
                    )
            except PoisonMessage as poison:
                return f"{poison.reason}: {poison}"
            return None
        if not isinstance(letter, DeadLettered):
            raise AssertionError("the dlq decoded something other than a letter or an answer")
        async with self.pool.acquire() as conn, conn.transaction():
            parked = await dlq_store.park(
                conn,
                schema="dlq",
                kafka=self.kafka,
                envelope=envelope,
                letter=letter,
                notify_tag=None,
                dlq_record=f"dlq-record:{record.position}",
                dlq_topic=record.topic,
            )
            if parked is not None:
                await append_many(conn, schema="dlq", items=[parked.event])
        return None

    # -- bookkeeping -------------------------------------------------------------------------------

    async def _last_seq(self, schema: str) -> int:
        return int(await self.pool.fetchval(sql(_LAST_SEQ, schema)))

    async def _staged(self, schema: str) -> Sequence[Any]:
        rows = await self.pool.fetch(sql(_OUTBOX_EVENTS, schema), self._seen[schema])
        if rows:
            self._seen[schema] = max(int(r["seq"]) for r in rows)
        return rows

    async def _staged_in(self, schema: str, event_id: str) -> bool:
        return bool(await self.pool.fetchval(sql(_STAGED, schema), event_id))


def _type_of(record: Record) -> str:
    try:
        loaded = json.loads(record.value or b"")
    except (ValueError, RecursionError):
        return "?"
    found = loaded.get("type") if isinstance(loaded, dict) else None
    return str(found) if found is not None else "?"
