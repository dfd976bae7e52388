"""The faust-streaming application: three agents, windowed tables with changelogs, the sink timer.

Families and their tables (each table's partitions equal its source topics', as faust requires):

- runs: `slotflow.runs.events.v1` and `slotflow.jobs.due.v1` (co-partitioned by job id) into
  `runs-60s` and `runs-3600s` (a schedule's runs, by job id), `workflows-60s`/`-3600s` (a
  workflow's activity runs, by workflow id: apart, so a workflow never shows as a schedule) and
  `handlers-60s`/`-3600s` (every run under the handler it ran: its JobDue's, or its run event's
  own), plus `handlers` (job id to the handler its newest JobDue named: a schedule's label, and
  the handler of a run event written before run events named theirs);
- schedules: `slotflow.schedules.events.v1` into `schedules-60s` / `-3600s` (SlotSkipped);
- dlq: `slotflow.dlq.events.v1` into `dlq-60s` / `-3600s` (parked dead letters per original topic).

Every table is in memory (`memory://`) and backed by a changelog topic on the broker, which faust
creates through the admin API (the broker does not auto-create topics), so a restarted worker
rebuilds every table from the changelogs before it reads a new event. Agents keep faust's default
concurrency of one: with more, faust can commit an offset past an event still being processed
(faust issue #606), which would lose it after a crash.
"""

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import timedelta
from typing import Any, NamedTuple

import asyncpg
import faust
from aiokafka import AIOKafkaClient
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from faust.exceptions import ConsumerNotStarted

from slotflow_base.settings import KafkaConnection
from slotflow_stats import sink
from slotflow_stats.config import DLQ_EVENTS, JOBS_DUE, RUN_EVENTS, SCHEDULE_EVENTS, Settings
from slotflow_stats.consumer import install_processed_only_acks
from slotflow_stats.errors import StatsError, TopicMissing, UndecodableEvent
from slotflow_stats.health import FlushClock, serve_health
from slotflow_stats.metrics import StatsMetrics, source_lags
from slotflow_stats.observe import Family, Observation, StoredFamily, observe
from slotflow_stats.producer import install_draining_buffer
from slotflow_stats.windows import SIZES, Key, Value, apply, window_start

log = logging.getLogger("slotflow_stats")

SOURCES: dict[Family, tuple[str, ...]] = {
    "runs": (RUN_EVENTS, JOBS_DUE),
    "schedules": (SCHEDULE_EVENTS,),
    "dlq": (DLQ_EVENTS,),
}

DirtyKey = tuple[StoredFamily, int, Key, float]
#: Window families counted from the runs family's events besides `runs` itself (see the module).
DERIVED: tuple[StoredFamily, ...] = ("workflows", "handlers")
#: The `handlers` subject of a run event that does not name its handler (written before run
#: events did): this prefix and its job id. Its JobDue may be read after it (another topic), so
#: the api resolves it at read time to the handler the job's newest JobDue named, as every run
#: was counted before. No handler name starts with it (a handler starts with a letter or digit).
LEGACY_HANDLER_PREFIX = "~"


async def partitions_of(kafka: KafkaConnection, topics: list[str]) -> dict[str, int]:
    """How many partitions each of ``topics`` has; TopicMissing names one that does not exist."""
    client = AIOKafkaClient(client_id="slotflow-stats-metadata", **kafka.client_options())
    await client.bootstrap()
    try:
        metadata = await client.fetch_all_metadata()
    finally:
        await client.close()
    out: dict[str, int] = {}
    for topic in topics:
        partitions = metadata.partitions_for_topic(topic)
        if not partitions:
            raise TopicMissing(
                f"topic {topic} does not exist; create the topic table's topics first "
                "(python -m slotflow.kafka.admin ensure-topics)"
            )
        out[topic] = len(partitions)
    return out


def faust_credentials(kafka: KafkaConnection) -> Any:
    """faust's credentials object for the SLOTFLOW_KAFKA_* security settings (None: PLAINTEXT)."""
    security = kafka.security
    context = security.ssl_context() if security.uses_ssl else None
    if security.uses_sasl:
        if security.sasl_mechanism == "OAUTHBEARER":
            return faust.OAuthCredentials(
                oauth_cb=security.client_options()["sasl_oauth_token_provider"], ssl_context=context
            )
        return faust.SASLCredentials(
            username=security.sasl_username,
            password=security.sasl_password.get_secret_value() if security.sasl_password else None,
            mechanism=security.sasl_mechanism,
            ssl_context=context,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


class Changelog(NamedTuple):
    """A changelog topic faust expects, as faust itself would declare it."""

    name: str
    partitions: int
    config: dict[str, str]


async def ensure_changelogs(
    kafka: KafkaConnection, changelogs: list[Changelog], *, replication: int = 1, timeout: float = 60.0
) -> None:
    """Create the changelog topics that are missing and wait until every partition has a leader.

    faust would create them itself through the admin API, but on a loaded broker it then reads
    metadata before the new partitions have leaders, sees zero partitions and stops the agent
    with PartitionsMismatch (seen here). Creating them first, and waiting, removes the race.
    """
    admin = AIOKafkaAdminClient(client_id="slotflow-stats-admin", **kafka.client_options())
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [c for c in changelogs if c.name not in existing]
        if missing:
            response: Any = await admin.create_topics(
                [NewTopic(c.name, c.partitions, replication, topic_configs=c.config) for c in missing]
            )
            # The answer carries an error code per topic instead of raising: 36 is
            # TOPIC_ALREADY_EXISTS (another worker won the race), which is fine.
            failed = [(str(e[0]), int(e[1])) for e in response.topic_errors if int(e[1]) not in (0, 36)]
            if failed:
                raise StatsError(f"could not create changelog topics (name, Kafka error code): {failed}")
    finally:
        await admin.close()
    client = AIOKafkaClient(client_id="slotflow-stats-metadata", **kafka.client_options())
    await client.bootstrap()
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            metadata = await client.fetch_all_metadata()
            unled = [
                f"{c.name}[{p}]"
                for c in changelogs
                for p in range(c.partitions)
                if (metadata.leader_for_partition(TopicPartition(c.name, p)) or -1) < 0
            ]
            if not unled:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise StatsError(f"changelog partitions without a leader after {timeout:.0f}s: {unled[:5]}")
            await asyncio.sleep(0.2)
    finally:
        await client.close()


class Processor:
    """The faust app and what the sink needs from it (changed windows, the PostgreSQL pool)."""

    def __init__(self, settings: Settings, partitions: dict[str, int]) -> None:
        self.settings = settings
        stats = settings.stats
        self.app = faust.App(
            settings.app_id,
            broker=[f"kafka://{host}" for host in settings.kafka.bootstrap.split(",")],
            broker_credentials=faust_credentials(settings.kafka),
            store="memory://",
            processing_guarantee="at_least_once",
            consumer_auto_offset_reset="earliest",
            broker_commit_interval=stats.commit_interval_seconds,
            broker_session_timeout=stats.session_timeout_seconds,
            topic_allow_declare=True,
            # No leader-only timers here, so no leader-election topic to create.
            topic_disable_leader=True,
            topic_replication_factor=stats.changelog_replication_factor,
            web_enabled=False,
            datadir=str(stats.data_dir / settings.app_id),
            autodiscover=False,
        )
        # Without it a commit can overtake the changelog writes of the events it covers.
        install_draining_buffer(self.app)
        # Without it an event skipped in a rebalance can be committed before it is processed.
        install_processed_only_acks(self.app)
        # Table keys are (subject, partition) tuples and values dicts: JSON both ways.
        self._json = faust.Schema(key_serializer="json", value_serializer="json")
        self.tables: dict[StoredFamily, dict[int, Any]] = {}
        self.dirty: dict[DirtyKey, Value] = {}
        self.dirty_handlers: dict[str, tuple[str, float]] = {}
        self.full_copy = True
        self.undecodable = 0
        #: Observations older than a window's expiry, left out of that window size.
        self.too_old = 0
        self.pool: asyncpg.Pool | None = None
        #: Served on the health listener's /metrics.
        self.metrics = StatsMetrics()
        self._source_topics = {settings.kafka.topic_name(n) for names in SOURCES.values() for n in names}
        for family, names in SOURCES.items():
            topics = [settings.kafka.topic_name(name) for name in names]
            counts = {partitions[topic] for topic in topics}
            if len(counts) != 1:
                raise StatsError(f"topics {topics} must have the same number of partitions, got {counts}")
            (count,) = counts
            self.tables[family] = {size: self._window_table(family, size, count) for size in SIZES}
            channel = self.app.topic(*topics, key_serializer="raw", value_serializer="raw")
            self.app.agent(channel, name=f"stats-{family}", concurrency=1)(self._agent(family))
            if family == "runs":
                for derived in DERIVED:
                    self.tables[derived] = {size: self._window_table(derived, size, count) for size in SIZES}
        self.handlers = self.app.Table(
            "handlers",
            default=dict,
            partitions=partitions[settings.kafka.topic_name(RUN_EVENTS)],
            schema=self._json,
        )
        self.handlers.on_recover(self._recovered)
        self.app.timer(stats.flush_interval_seconds)(self.flush)
        #: Successful copies to PostgreSQL, for the health listener's /readyz.
        self.flushes = FlushClock()
        if stats.health_port:
            self.app.task(self._serve_health)

    async def _serve_health(self) -> None:
        stats = self.settings.stats
        server = await serve_health(
            stats.health_host,
            stats.health_port,
            self.flushes,
            stats.health_stale_after_seconds,
            metrics=self.metrics.render,
        )
        log.info("health listener on %s:%d (/livez, /readyz, /metrics)", stats.health_host, stats.health_port)
        async with server:
            await server.serve_forever()

    def changelogs(self) -> list[Changelog]:
        """Every table's changelog topic, configured as faust declares it (compacted; windowed
        tables also keep records only as long as their windows live)."""
        out = []
        for tables in self.tables.values():
            for size, wrapper in tables.items():
                table = wrapper.table
                retention_ms = int(self._expires(size) * 1000)
                out.append(
                    Changelog(
                        table.changelog_topic_name,
                        int(table.partitions),
                        {"cleanup.policy": "compact", "retention.ms": str(retention_ms)},
                    )
                )
        out.append(
            Changelog(
                self.handlers.changelog_topic_name,
                int(self.handlers.partitions),
                {"cleanup.policy": "compact"},
            )
        )
        return out

    def _expires(self, size: int) -> int:
        stats = self.settings.stats
        return stats.minute_window_expires_seconds if size == SIZES[0] else stats.hour_window_expires_seconds

    def _window_table(self, family: StoredFamily, size: int, partitions: int) -> Any:
        expires = self._expires(size)
        table = self.app.Table(
            f"{family}-{size}s",
            default=dict,
            partitions=partitions,
            schema=self._json,
        )
        table.on_recover(self._recovered)
        return table.tumbling(size, expires=timedelta(seconds=expires))

    async def _recovered(self) -> None:
        # The tables were (re)built from their changelogs: copy all of them at the next flush,
        # since what changed just before a crash may have reached the changelog but not PostgreSQL.
        self.full_copy = True

    def _agent(self, family: Family) -> Callable[[Any], Coroutine[Any, Any, None]]:
        async def agent(stream: Any) -> None:
            events: AsyncIterator[Any] = stream.events()
            async for event in events:
                self.handle(family, event)

        agent.__name__ = agent.__qualname__ = f"stats_{family}"
        return agent

    def handle(self, family: Family, event: Any) -> None:
        """Count one event in every window table of ``family`` (skipping a redelivery)."""
        message = event.message
        try:
            observation = observe(family, event.value, message.timestamp)
        except UndecodableEvent as err:
            # Not dead-lettered here: the api's projector reads the same record and parks it in
            # the DLQ with its reason; a second dead letter for it would count the poison twice.
            self.undecodable += 1
            self.metrics.skipped.labels("undecodable").inc()
            log.warning(
                "skipping undecodable record %s[%d]@%d: %s",
                message.topic,
                message.partition,
                message.offset,
                err,
            )
            return
        if observation is None:
            return
        targets: list[tuple[StoredFamily, str]] = [(family, observation.subject)]
        if family == "runs":
            # A schedule's runs and a workflow's activity runs apart, and every run once more
            # under the handler it ran.
            targets = [
                ("workflows" if observation.workflow else "runs", observation.subject),
                ("handlers", self._handler_of(observation)),
            ]
        now = time.time()
        for target, subject in targets:
            self._count(target, Key(subject, message.partition), observation, now=now, event=event)
        if observation.handler and observation.counter == "due":
            # The job's newest JobDue names its handler today (a schedule's label); a run event
            # names the handler of its own run, which may be older.
            known = self.handlers[observation.subject]
            if not known or float(known["at"]) <= observation.at:
                self.handlers[observation.subject] = {"handler": observation.handler, "at": observation.at}
                self.dirty_handlers[observation.subject] = (observation.handler, observation.at)

    @staticmethod
    def _handler_of(observation: Observation) -> str:
        """The handler the run ran: the event's own, else (a run event written before run events
        named it) its job, for the api to resolve (LEGACY_HANDLER_PREFIX)."""
        return observation.handler or LEGACY_HANDLER_PREFIX + observation.subject

    def _count(
        self, family: StoredFamily, key: Key, observation: Observation, *, now: float, event: Any
    ) -> None:
        message = event.message
        counted = redelivered = too_old = False
        for size, table in self.tables[family].items():
            if observation.at < now - self._expires(size):
                # faust drops windows older than their expiry (by the wall clock); counting into
                # one would start it again from zero, and the sink would refuse the smaller copy.
                self.too_old += 1
                too_old = True
                continue
            # .value() reads the window of the wrapper's own instant (the event's time); .current()
            # would read the window of the Kafka record's timestamp, another window for any event
            # produced after its minute was over.
            window = table.relative_to(observation.at)
            updated = apply(window[key].value(), observation, topic=message.topic, offset=message.offset)
            if updated is None:
                redelivered = True
                continue
            counted = True
            window[key] = updated
            self.dirty[(family, size, key, window_start(observation.at, size))] = updated
        if counted:
            self.metrics.events.labels(family).inc()
        elif redelivered:
            self.metrics.skipped.labels("redelivered").inc()
        elif too_old:
            self.metrics.skipped.labels("too_old").inc()

    async def _connect(self) -> asyncpg.Pool:
        """The pool the sink copies through, with the sink's tables created.

        Raises:
            StatsError: PostgreSQL refused or could not be reached; the message names it by its
                DSN with the password masked (the worker stops, as on any failed first copy).
        """
        postgres = self.settings.postgres
        failures = (OSError, TimeoutError, ValueError, asyncpg.PostgresError, asyncpg.InterfaceError)
        try:
            # One timer copies, one connection at a time: SLOTFLOW_PG_POOL_* size the library's pools.
            pool: asyncpg.Pool = await asyncpg.create_pool(
                postgres.dsn, min_size=1, max_size=2, **postgres.connect_kwargs()
            )
        except failures as err:
            raise StatsError(f"cannot connect to PostgreSQL at {postgres.display_dsn}: {err}") from err
        try:
            async with pool.acquire() as conn:
                await sink.create_schema(conn, self.settings.stats.db_schema)
        except failures as err:
            await pool.close()
            raise StatsError(
                f"cannot create the stats tables in PostgreSQL at {postgres.display_dsn}: {err}"
            ) from err
        return pool

    def _everything(self) -> tuple[dict[DirtyKey, Value], dict[str, tuple[str, float]]]:
        windows: dict[DirtyKey, Value] = {}
        for family, tables in self.tables.items():
            for size, wrapper in tables.items():
                for (subject_part, (start, _end)), value in list(wrapper.table.data.items()):
                    if value:
                        key = Key(str(subject_part[0]), int(subject_part[1]))
                        windows[(family, size, key, float(start))] = value
        handlers = {
            str(job): (str(v["handler"]), float(v["at"])) for job, v in list(self.handlers.data.items()) if v
        }
        return windows, handlers

    async def flush(self) -> None:
        """Copy the windows changed since the last flush (all of them after a recovery), and
        sample the consumer lag."""
        self._sample_lag()
        if self.pool is None:
            self.pool = await self._connect()
        if self.full_copy:
            self.full_copy = False
            windows, handlers = self._everything()
            windows.update(self.dirty)
            handlers.update(self.dirty_handlers)
        else:
            windows, handlers = self.dirty, self.dirty_handlers
        self.dirty, self.dirty_handlers = {}, {}
        if not windows and not handlers:
            self._copied()
            return
        rows = [
            sink.WindowRow(size, start, family, key.subject, key.partition, value)
            for (family, size, key, start), value in windows.items()
        ]
        try:
            async with self.pool.acquire() as conn:
                await sink.write(conn, self.settings.stats.db_schema, rows, handlers)
        except (TimeoutError, asyncpg.PostgresError, OSError) as err:
            # Keep them for the next flush; anything changed since is newer and wins.
            log.warning("copying %d windows to PostgreSQL failed, will retry: %s", len(rows), err)
            self.metrics.copy_failures.inc()
            self.dirty = {**windows, **self.dirty}
            self.dirty_handlers = {**handlers, **self.dirty_handlers}
            return
        self._copied()
        self.metrics.windows_copied.inc(len(rows))
        log.debug("copied %d windows and %d handlers", len(rows), len(handlers))

    def _copied(self) -> None:
        self.flushes.copied()
        self.metrics.last_copy.set(time.time())

    def _sample_lag(self) -> None:
        """The source topics' lag from the consumer's own state (the high watermark each fetch
        reported, the offsets faust committed): no broker round trip."""
        consumer = self.app.consumer
        ends: dict[tuple[str, int], int | None] = {}
        committed: dict[tuple[str, int], int | None] = {}
        try:
            for tp in consumer.assignment():
                key = (tp.topic, tp.partition)
                ends[key] = consumer.highwater(tp)
                # faust's own record of what it committed (a defaultdict: .get adds nothing).
                committed[key] = consumer._committed_offset.get(tp)
        except (AssertionError, ConsumerNotStarted) as err:
            # Not started yet, or a partition revoked while read: the next flush samples again.
            log.debug("consumer lag not sampled: %r", err)
            return
        self.metrics.record_lag(
            self.settings.app_id, source_lags(ends.keys(), self._source_topics, ends, committed)
        )
