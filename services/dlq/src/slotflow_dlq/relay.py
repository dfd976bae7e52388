"""Publish staged redrives to their original topics: the raw-record counterpart of the outbox relay.

Why not the shared outbox: it stores keys and headers as text, and a redriven record must leave
byte for byte as it arrived (a key may be binary or absent, a header may hold any bytes).

One relay publishes at a time (a transaction-scoped advisory lock), in `seq` order, so records
redriven to one partition keep the order they were redriven in. A crash after the broker's
acknowledgement and before the mark republishes those records; each carries the same
`slotflow-redrive-of` and `slotflow-redrive-count` headers, and consumers collapse it on its
envelope id as they do any redelivery.
"""

import asyncio
import logging

from slotflow.errors import MessageTooLarge, SlotflowError
from slotflow.kafka.producer import OutgoingRecord, Producer
from slotflow.pg.pool import CONNECTION_ERRORS, Pool
from slotflow.pg.statements import sql
from slotflow.service import sleep_or_stop
from slotflow_dlq.store import decode_headers

log = logging.getLogger(__name__)

_ERRORS: tuple[type[BaseException], ...] = (SlotflowError, *CONNECTION_ERRORS)


# The oldest unpublished redrives, at most $1 rows and about $2 bytes of values (always at least
# one: redriven records may be megabytes each). Only the holder of the relay's advisory lock runs
# it, so two relays never send one row twice.
PICK_REDRIVES = """
SELECT seq, topic, record_key, value, headers FROM (
    SELECT seq, topic, record_key, value, headers::text AS headers,
           sum(octet_length(value)) OVER (ORDER BY seq) - octet_length(value) AS before
      FROM (SELECT * FROM {schema}.redrives WHERE published_at IS NULL
             ORDER BY seq LIMIT $1) AS pending
) AS sized
WHERE before < $2 ORDER BY seq
"""
# In the transaction that picked them, after the broker acknowledged them: sent once, or again.
MARK_PUBLISHED = "UPDATE {schema}.redrives SET published_at = now() WHERE seq = ANY ($1::bigint[])"
# A record its topic refuses for good keeps the refusal on its row (published, not retried).
MARK_REFUSED = "UPDATE {schema}.redrives SET error = $2 WHERE seq = $1"
PENDING = "SELECT count(*) FROM {schema}.redrives WHERE published_at IS NULL"


class RedriveRelay:
    """Sends pending rows of `{schema}.redrives` and marks them published."""

    def __init__(
        self,
        pool: Pool,
        producer: Producer,
        *,
        schema: str,
        batch_size: int = 500,
        max_batch_bytes: int = 32 * 1024 * 1024,
        idle_interval: float = 0.05,
    ) -> None:
        self._pool = pool
        self._producer = producer
        self._schema = schema
        self._batch_size = batch_size
        self._max_batch_bytes = max_batch_bytes
        self._idle_interval = idle_interval
        self._wake = asyncio.Event()
        self.published = 0
        self.refused = 0

    def wake(self) -> None:
        """Publish soon: call after committing a transaction that staged redrives."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                moved = await self.relay_once()
            except _ERRORS as err:
                log.warning("redrive relay paused: %s", err)
                moved = 0
                await sleep_or_stop(stop, 1.0, wake=self._wake)
            if moved == 0:
                self._wake.clear()
                await sleep_or_stop(stop, self._idle_interval, wake=self._wake)

    async def relay_once(self) -> int:
        """One batch; returns how many records were sent (or refused for good)."""
        async with self._pool.acquire() as conn, conn.transaction():
            locked = await conn.fetchval(
                "SELECT pg_try_advisory_xact_lock(hashtext($1))", f"{self._schema}.redrives"
            )
            if not locked:
                return 0
            # At most batch_size records and about max_batch_bytes of values (always at least one):
            # redriven records may be megabytes each.
            rows = await conn.fetch(
                sql(PICK_REDRIVES, self._schema),
                self._batch_size,
                self._max_batch_bytes,
            )
            if not rows:
                return 0
            records = [
                OutgoingRecord(
                    r["topic"], r["record_key"], bytes(r["value"]), dict(decode_headers(r["headers"]))
                )
                for r in rows
            ]
            failed: dict[int, str] = {}
            try:
                await self._producer.send_raw_many(records)
            except MessageTooLarge:
                # One record the topic no longer accepts must not hold back the rest: send one by
                # one and keep the refusal on the row.
                for row, record in zip(rows, records, strict=True):
                    try:
                        await self._producer.send_raw_many([record])
                    except MessageTooLarge as err:
                        failed[row["seq"]] = str(err)[:2000]
            await conn.execute(sql(MARK_PUBLISHED, self._schema), [r["seq"] for r in rows])
            for seq, error in failed.items():
                log.error("redrive %d refused by its topic: %s", seq, error)
                await conn.execute(sql(MARK_REFUSED, self._schema), seq, error)
            self.published += len(rows) - len(failed)
            self.refused += len(failed)
            return len(rows)

    async def pending(self) -> int:
        value = await self._pool.fetchval(sql(PENDING, self._schema))
        return int(value)
