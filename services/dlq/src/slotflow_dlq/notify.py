"""Deliver webhook notifications for dead-lettered money-moving runs.

Notifications are staged in the same transaction that parks the entry, and delivered here, away
from parking: a slow or dead webhook delays nothing, and a crash between parking and delivery
forgets nothing. Each delivery is leased (its `next_at` pushed past its deadline) before the POST,
so replicas never send one twice at the same moment. Failures are retried with full jitter,
`random(0, min(cap, base * 2**attempt))`, up to a bound, then given up and counted.

A delivery has a total deadline: httpx's timeout bounds each read, so a receiver that drips a
byte at a time held one for minutes (issue 23). Deliveries run concurrently, at most
``concurrency`` at once, and a finished one frees its place at once: one slow receiver holds one
place, not the batch behind it.

With a secret, each body is signed (``X-Slotflow-Signature``, see `signature` and docs/dlq.md).
Delivery is at-least-once: the body carries `dead_letter_id`, also sent as `Idempotency-Key`.
"""

import asyncio
import hashlib
import hmac
import json
import logging
import random
import time
from datetime import timedelta
from typing import Any

import asyncpg
import httpx

from slotflow.core.retry import full_jitter_delay
from slotflow.pg.pool import CONNECTION_ERRORS, Pool
from slotflow.pg.statements import sql
from slotflow.service import sleep_or_stop
from slotflow_dlq.metrics import DlqMetrics
from slotflow_dlq.sql import (
    NOTIFICATION_DELIVERED,
    NOTIFICATION_GAVE_UP,
    NOTIFICATION_LEASE_DUE,
    NOTIFICATION_RETRY_LATER,
)

log = logging.getLogger(__name__)

#: The most of a webhook's answer that is read: its status decides, its body is never used, and a
#: receiver answering gigabytes must not take the service's memory with it.
ANSWER_MAX_BYTES = 64 * 1024

_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, asyncpg.PostgresError)


#: The header carrying the body's signature: ``t=<unix seconds>,v1=<hex HMAC-SHA256>``.
SIGNATURE_HEADER = "X-Slotflow-Signature"


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The header value for ``body`` sent at ``timestamp``: HMAC-SHA256 keyed by the secret over
    ``b"<timestamp>." + body`` (the exact bytes sent). The timestamp is signed so a captured
    request cannot be replayed later than the receiver's tolerance."""
    mac = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: bytes, header: str, body: bytes, *, now: float, tolerance: float = 300.0) -> bool:
    """What a receiver does (docs/dlq.md): the signature matches the body and is recent."""
    fields = dict(part.partition("=")[::2] for part in header.split(","))
    try:
        timestamp = int(fields.get("t", ""))
    except ValueError:
        return False
    if abs(now - timestamp) > tolerance:
        return False
    expected = signature(secret, timestamp, body).partition(",v1=")[2]
    return hmac.compare_digest(expected, fields.get("v1", ""))


class Notifier:
    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        url: str,
        metrics: DlqMetrics,
        timeout: float = 5.0,
        deadline: float = 10.0,
        concurrency: int = 8,
        secret: bytes | None = None,
        max_attempts: int = 8,
        base: float = 1.0,
        cap: float = 300.0,
        poll_interval: float = 0.5,
        batch_size: int = 20,
        rng: random.Random | None = None,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._url = url
        self._metrics = metrics
        self._timeout = timeout
        self._deadline = deadline
        self._concurrency = concurrency
        self._secret = secret
        self._in_flight: set[asyncio.Task[None]] = set()
        self._max_attempts = max_attempts
        self._base = timedelta(seconds=base)
        self._cap = timedelta(seconds=cap)
        self._poll_interval = poll_interval
        self._batch_size = batch_size
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(timeout=self._timeout) as client:
            try:
                while not stop.is_set():
                    try:
                        started = await self.start_due(client)
                    except _ERRORS as err:
                        log.warning("notifier paused: %s", err)
                        started = 0
                    if started == 0:
                        # Woken by a parking, by a delivery freeing its place, or by the poll.
                        self._wake.clear()
                        await sleep_or_stop(stop, self._poll_interval, wake=self._wake)
            finally:
                # Leased, so whoever runs next retries them once the lease lapses.
                for task in self._in_flight:
                    task.cancel()
                await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def start_due(self, client: httpx.AsyncClient) -> int:
        """Lease as many due notifications as there are free places and start their deliveries
        without waiting for them; returns how many were started."""
        free = min(self._batch_size, self._concurrency - len(self._in_flight))
        if free <= 0:
            return 0
        # Leased past the deadline (the POST cannot outlive it) with a margin for recording the
        # outcome: no replica takes a notification another is still delivering.
        rows = await self._pool.fetch(
            sql(NOTIFICATION_LEASE_DUE, self._schema),
            free,
            self._deadline * 2 + 5,
        )
        for row in rows:
            task = asyncio.create_task(self._deliver_safely(client, row))
            self._in_flight.add(task)
            task.add_done_callback(self._finished)
        return len(rows)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._wake.set()

    async def deliver_due(self, client: httpx.AsyncClient) -> int:
        """Start the due deliveries and wait for them (tests, and draining in one call)."""
        started = await self.start_due(client)
        await asyncio.gather(*self._in_flight, return_exceptions=True)
        return started

    async def _deliver_safely(self, client: httpx.AsyncClient, row: Any) -> None:
        try:
            await self._deliver(client, row)
        except _ERRORS as err:
            # The outcome is not recorded; the lease lapses and the delivery is tried again.
            log.warning("webhook outcome for %s not recorded: %s", row["dead_letter_id"], err)

    async def _deliver(self, client: httpx.AsyncClient, row: Any) -> None:
        dead_letter_id = str(row["dead_letter_id"])
        attempt = int(row["attempts"])
        body: dict[str, Any] = json.loads(row["payload"])
        body["attempt"] = attempt
        # Serialised here, once: the signature is over exactly the bytes sent.
        content = json.dumps(body, separators=(",", ":")).encode()
        headers = {"Idempotency-Key": dead_letter_id, "Content-Type": "application/json"}
        if self._secret is not None:
            headers[SIGNATURE_HEADER] = signature(self._secret, int(time.time()), content)
        try:
            async with (
                asyncio.timeout(self._deadline),
                client.stream("POST", self._url, content=content, headers=headers) as response,
            ):
                await _read_bounded(response, ANSWER_MAX_BYTES)
            error = None if response.is_success else f"HTTP {response.status_code}"
        except TimeoutError:
            error = f"no complete answer within the {self._deadline:g} s delivery deadline"
        except httpx.HTTPError as err:
            error = f"{type(err).__name__}: {err}"
        if error is None:
            self._metrics.notifications.labels("delivered").inc()
            await self._pool.execute(sql(NOTIFICATION_DELIVERED, self._schema), dead_letter_id)
            return
        if attempt >= self._max_attempts:
            self._metrics.notifications.labels("gave_up").inc()
            log.error("webhook for %s given up after %d attempts: %s", dead_letter_id, attempt, error)
            await self._pool.execute(
                sql(NOTIFICATION_GAVE_UP, self._schema),
                dead_letter_id,
                error[:2000],
            )
            return
        self._metrics.notifications.labels("failed").inc()
        delay = full_jitter_delay(
            attempt=attempt - 1, base=self._base, cap=self._cap, draw=self._rng.random()
        )
        log.warning(
            "webhook for %s failed (try %d), next in %.2fs: %s",
            dead_letter_id,
            attempt,
            delay.total_seconds(),
            error,
        )
        await self._pool.execute(
            sql(NOTIFICATION_RETRY_LATER, self._schema),
            dead_letter_id,
            delay.total_seconds(),
            error[:2000],
        )


async def _read_bounded(response: httpx.Response, limit: int) -> None:
    """Read ``response``'s body to its end or to ``limit`` bytes, whichever comes first.

    Raw bytes, not decoded ones: a compressed answer is not inflated. Read to the end when it is
    short, so a receiver that drips even a small answer is still cut at the delivery deadline.
    """
    seen = 0
    async for chunk in response.aiter_raw():
        seen += len(chunk)
        if seen >= limit:
            return
