"""The outbox relay: publishes a schema's outbox (`slotflow.pg.outbox`) to Kafka.

It joins the two halves the layers keep apart (`pg` never imports `kafka`, nor the other way:
docs/development.md, "Layers"): it reads pending rows with PostgreSQL, sends them with the
idempotent producer, and marks them published.

Why the relay cannot skip a row: it never keeps a "last seen seq" watermark. Each pass reads every
row still pending (`published_at IS NULL`), so a row whose transaction commits after a row with a
higher seq was published is simply found on the next pass. The classic watermark relay would have
moved past it forever.

Why records of one key stay in order: rows are sharded by `hashtext(key) & 7`, and a relay takes a
transaction-scoped advisory lock on a shard before reading it, so at most one relay publishes a
shard at a time, in seq order. Any number of relays (one per service replica) share the shards.
A relay that stops while it holds shards (a SIGSTOPped process) loses them after
`hold_timeout_seconds`: PostgreSQL ends a session idle that long inside the pass's transaction.
A relay stopped while its backend was still sending it the pass's rows is not idle (the backend
waits on the full socket, and neither that timeout nor a statement timeout ends it); so a relay
that finds shards held ends, at most every half hold timeout, the sessions of its own role that
have held this outbox's shards for longer than the hold timeout (`RECLAIM_SHARDS`).

A grouped row (`append_grouped`) carries many events: the relay sends them in array order, and
bounds a pass by events, not rows.

A crash after the broker acknowledged but before the mark commits republishes those rows: the
same envelope ids again, which consumers collapse. That is the effectively-once contract.

Why one row cannot stall the outbox: a row larger than its topic takes (a 2 MB handler result)
would fail every pass and hold every row behind it. The relay parks it instead: a dead letter
(reason `too_large`, partition -1 and offset = the row's seq) is staged in the same transaction
and the row stays marked published.
"""

import asyncio
import functools
import itertools
import json
import logging
import operator
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from slotflow.core.stopping import sleep_or_stop
from slotflow.errors import ConfigurationError, KafkaAccessDenied, MessageTooLarge, SlotflowError
from slotflow.kafka.poison import dead_letter_envelope
from slotflow.kafka.producer import OutgoingRecord, Producer
from slotflow.kafka.records import Record
from slotflow.pg.outbox import COUNT_PENDING, PURGE_PUBLISHED, SHARDS, Staged, append_many
from slotflow.pg.pool import CONNECTION_ERRORS, Conn, Pool
from slotflow.pg.statements import sql

log = logging.getLogger(__name__)

_RELAY_ERRORS: tuple[type[BaseException], ...] = (SlotflowError, *CONNECTION_ERRORS)


class PendingEvent(NamedTuple):
    """One event of a pass: a row of its own, or one of a grouped row's events (same `seq`)."""

    seq: int
    topic: str
    key: str
    value: bytes
    headers: str


#: The relay's read: the oldest pending rows of each shard in $1, up to $2 events a shard (a grouped
#: row counts its events; a shard's first row is taken whatever its size), marked published in the
#: same statement. The mark is only as durable as the commit that follows the broker's acknowledgement:
#: a failed send rolls it back, and `now()` is the transaction's time either way.
#:
#: Two plan traps, both met under a backlog while the table's statistics still said "one pending
#: row": joined to the picks, the planner re-ran every shard's pick for each pending row (44 s for
#: 4,000 of 40,000 rows: the relay slowed with the square of its backlog and never caught up); with
#: `published_at IS NULL` repeated outside, it walked the pending index filtering each row against
#: the picks (0.4 s). So the picks are gathered once (an InitPlan) and the rows found by primary
#: key (0.05 s). The outer re-check is not needed: the shard's advisory lock keeps every other relay
#: away from these rows.
PICK_AND_MARK = (
    "UPDATE {schema}.outbox AS o SET published_at = now() "
    "WHERE o.seq = ANY (ARRAY(SELECT pick.seq FROM unnest($1::int[]) AS sh(s), "
    "LATERAL (SELECT w.seq FROM ("
    "SELECT seq, sum(event_count) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) - event_count AS before "
    "FROM {schema}.outbox WHERE shard = sh.s AND published_at IS NULL ORDER BY seq LIMIT $2"
    ") AS w WHERE w.before < $2) AS pick)) "
    "RETURNING o.seq, o.topic, o.key, o.value, o.headers, "
    "o.event_ids, o.event_keys, o.event_values, o.event_headers"
)


#: Ends the sessions of this role holding one of this outbox's shard locks ($1: the lock's first
#: key, `{schema}.outbox`) in a transaction older than $2 seconds. Advisory locks taken with two
#: int4 keys show as classid = the first key (as an unsigned 32-bit oid) and objsubid = 2. Only
#: this role's own sessions: a role may end its own backends, and no other service's are touched.
RECLAIM_SHARDS = """
SELECT count(*) FROM (
    SELECT DISTINCT a.pid
      FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
       AND l.classid = (hashtext($1)::bigint & 4294967295)::text::oid
       AND a.pid <> pg_backend_pid() AND a.usename = current_user
       AND a.xact_start < clock_timestamp() - make_interval(secs => $2)
) AS stale
WHERE pg_terminate_backend(stale.pid)
"""


class OutboxRelay:
    """Publishes one schema's outbox to Kafka; run one per service replica."""

    def __init__(
        self,
        pool: Pool,
        producer: Producer,
        *,
        schema: str,
        batch_size: int = 1000,
        idle_interval: float = 0.05,
        keep_published_seconds: float = 3600.0,
        parallel_shards: bool = False,
        one_transaction: bool = False,
        shards: Iterable[int] | None = None,
        hold_timeout_seconds: float = 30.0,
        first_topics: Iterable[str] = (),
    ) -> None:
        self._pool = pool
        # A pass's events of these topics are acknowledged before any other event of the pass is
        # sent: with rows staged in one shard (`append_encoded(shard_keys=...)`), a record of
        # another topic reaches Kafka only after every row staged before it on these topics did.
        # The orchestrator's history topic: an effect of a decision (a JobDue, a timer) is never on
        # Kafka without the history that decided it, so a rebuild from the topic loses no
        # decision anyone acted on (docs/decisions/0004-orchestrator.md, amendment).
        self._first_topics = frozenset(first_topics)
        self._producer = producer
        self._schema = schema
        self._batch_size = batch_size
        self._idle_interval = idle_interval
        self._keep_published_seconds = keep_published_seconds
        # Shards are independent (each has its own lock and its own keys), so they can be relayed
        # at once: a pass then waits for the slowest shard's acknowledgement, not for all eight in
        # a row. Needs up to SHARDS pool connections during a pass.
        self._parallel_shards = parallel_shards
        # Or take every free shard's lock in one transaction and relay them together: the same
        # locks and the same per-shard seq order, in five round trips a pass instead of five per
        # shard, which is what a relay woken after every small commit spends its time on.
        self._one_transaction = one_transaction
        # Only these shards (default all): several relays of one process, each on its own shards,
        # so a pass waiting for acknowledgements holds back its own shards only.
        self._shards = sorted(set(range(SHARDS) if shards is None else shards))
        if not self._shards or not set(self._shards) <= set(range(SHARDS)):
            raise ConfigurationError(f"shards must be a non-empty subset of 0..{SHARDS - 1}")
        # A relay holds its shards' locks while it waits for the broker. A relay that stops there
        # (its process SIGSTOPped, a send that never returns) would hold them, and with them the
        # whole outbox, for as long as its connection lives: PostgreSQL ends a session idle in the
        # pass's transaction this long, which frees the locks for the other relays (reliability
        # bug 4). Longer than any acknowledgement worth waiting for; a legitimately slow pass cut
        # off sends its rows again, which consumers collapse.
        if hold_timeout_seconds <= 0:
            raise ConfigurationError("hold_timeout_seconds must be positive")
        self._hold_timeout = f"{max(1, round(hold_timeout_seconds * 1000))}ms"
        self._hold_seconds = hold_timeout_seconds
        self._next_reclaim = 0.0
        #: Sessions ended because they held shards longer than the hold timeout.
        self.reclaimed = 0
        self._wake = asyncio.Event()
        self.published = 0
        #: Rows too large to send, parked in the DLQ instead.
        self.parked = 0

    def wake(self) -> None:
        """Publish soon: call after committing a transaction that staged events."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop`` is set; storage and broker outages are waited out, not fatal."""
        passes = 0
        while not stop.is_set():
            try:
                moved = await self.relay_once()
                passes += 1
                if passes % 1000 == 0:
                    await self.purge_published()
            except KafkaAccessDenied:
                raise  # no WRITE on a topic: waiting will not grant it; the service stops and says why
            except _RELAY_ERRORS as err:
                log.warning("outbox relay for %s paused: %s", self._schema, err)
                moved = 0
                await sleep_or_stop(stop, 1.0)
            if moved == 0:
                self._wake.clear()
                await sleep_or_stop(stop, self._idle_interval, wake=self._wake)

    async def relay_once(self) -> int:
        """One pass over every shard; returns how many records were published."""
        total = 0
        if self._one_transaction:
            total = await self._relay_shards(self._shards)
        elif self._parallel_shards:
            results = await asyncio.gather(
                *(self._relay_shard(s) for s in self._shards), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
                total += result
        else:
            for shard in self._shards:
                total += await self._relay_shard(shard)
        self.published += total
        return total

    async def _relay_shard(self, shard: int) -> int:
        return await self._relay_shards([shard])

    async def _relay_shards(self, shards: list[int]) -> int:
        async with self._pool.acquire() as conn, conn.transaction():
            # Transaction-scoped: released by commit or by the connection dying with us. Shards
            # another relay holds are left to it.
            # The hold timeout is set (for this transaction only) in the same round trip.
            locked = await conn.fetchval(
                "SELECT coalesce(array_agg(s), '{}') "
                "FROM set_config('idle_in_transaction_session_timeout', $3, true) AS hold, "
                "unnest($2::int[]) AS s "
                "WHERE pg_try_advisory_xact_lock(hashtext($1), s)",
                f"{self._schema}.outbox",
                shards,
                self._hold_timeout,
            )
            if len(locked) < len(shards):
                await self._reclaim_if_due(conn)
            if not locked:
                return 0
            # Read and marked in one statement (PICK_AND_MARK says how it is planned).
            rows = await conn.fetch(
                sql(PICK_AND_MARK, self._schema),
                locked,
                self._batch_size,
            )
            if not rows:
                return 0
            # Sorted by seq, and a grouped row's events in their array order, so each key's
            # records leave in staging order; one record batch per partition (the producer keeps
            # the order within each).
            rows.sort(key=_SEQ)
            events = _pending_events(rows)
            # Only when some value exceeds the smallest limit of the pass's topics is each event
            # held to its own topic's limit (a pass has a topic or two: the check stays in C).
            limit = self._producer.limit_for
            smallest = min(limit(t) for t in set(map(_TOPIC, events)))
            if max(map(len, map(_VALUE, events))) > smallest and any(
                len(e.value) > limit(e.topic) for e in events
            ):
                events = await self._park_oversized(conn, events)
            if self._first_topics:
                # Stable: each part keeps its seq order.
                events.sort(key=self._sent_later)
            try:
                if self._first_topics and events and self._sent_later(events[-1]):
                    first = [e for e in events if not self._sent_later(e)]
                    await self._producer.send_raw_all(map(_outgoing, first))
                    await self._producer.send_raw_all(map(_outgoing, events[len(first) :]))
                else:
                    await self._producer.send_raw_all(map(_outgoing, events))
            except MessageTooLarge:
                # The broker's limit is below ours (a topic created smaller): find the refused
                # events one at a time. Events already sent may go twice; consumers collapse them.
                for event in events:
                    try:
                        await self._producer.send_raw_all([_outgoing(event)])
                    except MessageTooLarge as err:
                        await self._park(conn, event, err)
            return len(events)

    def _sent_later(self, event: PendingEvent) -> bool:
        """Whether ``event`` waits for the pass's `first_topics` events to be acknowledged."""
        return event.topic not in self._first_topics

    async def _reclaim_if_due(self, conn: Conn) -> None:
        """Some shards were held: at most every half hold timeout, end this role's sessions that
        have held this outbox's shards longer than the hold timeout (`RECLAIM_SHARDS`). Their
        transactions roll back; their rows are relayed again by whoever takes the shards next."""
        now = time.monotonic()
        if now < self._next_reclaim:
            return
        self._next_reclaim = now + self._hold_seconds / 2
        ended = int(await conn.fetchval(RECLAIM_SHARDS, f"{self._schema}.outbox", self._hold_seconds))
        if ended:
            self.reclaimed += ended
            log.warning(
                "outbox relay for %s ended %d session(s) holding its shards for over %.1f s",
                self._schema,
                ended,
                self._hold_seconds,
            )

    async def _park_oversized(self, conn: Conn, events: list[PendingEvent]) -> list[PendingEvent]:
        """Park events larger than their topic takes; returns the others.

        An event the producer can never send would fail every pass and hold every row behind it
        (issue 23: one 2 MB RunCompleted stopped a claimer's events for good). Its row stays
        marked published (it has left the queue) and a dead letter, staged in this transaction,
        carries it to the DLQ with reason `too_large`.
        """
        limit = self._producer.limit_for
        sendable = []
        for event in events:
            if len(event.value) > limit(event.topic):
                size = len(event.value)
                await self._park(
                    conn, event, MessageTooLarge(f"{size} bytes exceed the {limit(event.topic)}-byte limit")
                )
            else:
                sendable.append(event)
        return sendable

    async def _park(self, conn: Conn, event: PendingEvent, error: MessageTooLarge) -> None:
        log.error(
            "outbox %s: parking an event of row %s for %s: %s", self._schema, event.seq, event.topic, error
        )
        # The event never reached its topic: partition -1 and its outbox row's seq name where it was.
        record = Record(
            topic=event.topic,
            partition=-1,
            offset=event.seq,
            key=event.key.encode(),
            value=event.value,
            headers=tuple(_headers(event.headers).items()),
            timestamp_ms=None,
        )
        letter = dead_letter_envelope(
            record,
            error,
            source_service=f"outbox:{self._schema}",
            occurred_at=datetime.now(UTC),
            reason="too_large",
        )
        await append_many(conn, schema=self._schema, items=[Staged(self._producer.dlq_topic, letter)])
        self.parked += 1

    async def purge_published(self) -> int:
        """Delete rows published longer ago than the keep period; returns how many."""
        status = await self._pool.execute(
            sql(PURGE_PUBLISHED, self._schema),
            self._keep_published_seconds,
        )
        return int(status.split()[-1])

    async def pending(self) -> int:
        """Events staged but not yet published (the outbox backlog; a grouped row counts its events)."""
        value = await self._pool.fetchval(sql(COUNT_PENDING, self._schema))
        return int(value)

    async def flush(self, timeout: float = 10.0) -> None:
        """Publish what is staged, for up to `timeout` seconds (a shutdown step, best effort:
        whatever is left stays for the next relay)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            try:
                if await self.pending() == 0:
                    return
                await self.relay_once()
            except Exception as err:  # noqa: BLE001 - best effort at shutdown; rows stay for the next start
                log.warning("outbox %s: flush failed: %r", self._schema, err)
                return
            await asyncio.sleep(0.05)


def _pending_events(rows: list[Any]) -> list[PendingEvent]:
    """The pass's rows (sorted by seq) as events in sending order: a grouped row's in array order."""
    events: list[PendingEvent] = []
    add = events.append
    for seq, topic, key, value, headers, ids, keys, values, headerses in rows:
        if ids is None:
            add(PendingEvent(seq, topic, key, value, headers))
        else:
            events.extend(
                map(PendingEvent, itertools.repeat(seq), itertools.repeat(topic), keys, values, headerses)
            )
    return events


def _outgoing(event: PendingEvent) -> OutgoingRecord:
    return OutgoingRecord(event.topic, event.key.encode(), event.value, _headers(event.headers))


_SEQ = operator.itemgetter("seq")
_TOPIC = operator.attrgetter("topic")
_VALUE = operator.attrgetter("value")


@functools.lru_cache(maxsize=1024)
def _headers(stored: str) -> Mapping[str, bytes]:
    # Rows of one event type carry the same few headers: decode each distinct set once. The
    # mapping is shared between records, so nothing may change it (the producer only reads it).
    return {k: str(v).encode("latin-1") for k, v in json.loads(stored).items()}
