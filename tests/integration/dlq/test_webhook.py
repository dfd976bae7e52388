"""The notification hook: money-moving runs reach the webhook; a failing one is retried with jitter
and a dead one never holds up parking; a slow-drip receiver is cut at the delivery deadline and
delays no other delivery; bodies are signed."""

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from slotflow.contracts import JobDue, wrap
from slotflow.contracts.codec import encode
from slotflow.contracts.topics import JOBS_DUE
from slotflow.errors import PermanentError
from slotflow.kafka.producer import Producer
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_dlq.notify import SIGNATURE_HEADER, verify
from tests.integration.dlq.helpers import AT, origin, park


@dataclass
class Hook:
    """A webhook on 127.0.0.1 that answers `statuses` in turn (then 200) and records every body."""

    statuses: list[int] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    signatures: list[str] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.bodies.append(json.loads(body))
        self.raw.append(body)
        self.keys.append(headers.get("idempotency-key", ""))
        self.signatures.append(headers.get(SIGNATURE_HEADER.lower(), ""))
        code = self.statuses.pop(0) if self.statuses else 200
        writer.write(f"HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".encode())
        await writer.drain()
        writer.close()


@pytest.fixture
async def hook() -> AsyncIterator[Hook]:
    found = Hook()
    server = await asyncio.start_server(found.handle, "127.0.0.1", 0)
    found.port = server.sockets[0].getsockname()[1]
    async with server:
        yield found


def job_record(kafka: KafkaSettings, n: int, tags: tuple[str, ...]) -> tuple[JobDue, Any]:
    job = JobDue(run_id=f"payouts@{n}", job_id="payouts", slot=AT, handler="pay", tags=tags)
    value = encode(wrap(job, id=job.run_id, key=job.job_id, source="ticker", occurred_at=AT))
    return job, origin(kafka.topic(JOBS_DUE), n, value, key=b"payouts")


async def test_money_moving_runs_notify_after_retries_others_do_not(
    start: Any, hook: Hook, producer: Producer, kafka: KafkaSettings
) -> None:
    hook.statuses = [500, 503]
    dlq = await start(
        webhook_url=f"http://127.0.0.1:{hook.port}/hooks/dlq",
        webhook_backoff_base_seconds=0.05,
        webhook_backoff_cap_seconds=0.2,
        notifier_poll_seconds=0.05,
    )
    for n, tags in enumerate([("money-moving", "eu"), ("reports",), ()]):
        job, record = job_record(kafka, n, tags)
        await park(
            producer,
            kafka,
            record,
            PermanentError("declined"),
            source="claimer",
            reason="attempts_exhausted",
            run_id=job.run_id,
            job_id=job.job_id,
            tags=job.tags,
        )
    # A poison record with the tag but no run is not a dead-lettered run.
    _, loose = job_record(kafka, 7, ("money-moving",))
    await park(producer, kafka, loose, PermanentError("x"), tags=("money-moving",))

    async def parked() -> bool:
        return bool(await dlq.count() == 4)

    await assert_eventually(parked, timeout=30)
    await assert_eventually(lambda: len(hook.bodies) == 3, timeout=30, message="delivered after two failures")
    assert [b["attempt"] for b in hook.bodies] == [1, 2, 3]
    body = hook.bodies[-1]
    assert body["run_id"] == "payouts@0"
    assert body["reason"] == "attempts_exhausted"
    assert body["tags"] == ["money-moving", "eu"]
    assert hook.keys == [body["dead_letter_id"]] * 3

    # The hook has the body before the notifier has its answer and records the delivery.
    async def recorded() -> Any:
        row = await dlq.pool.fetchrow("SELECT attempts, delivered_at FROM dlq.notifications")
        return row if row is not None and row["delivered_at"] is not None else None

    row = await assert_eventually(recorded, timeout=30, message="delivery recorded")
    assert row["attempts"] == 3
    assert row["delivered_at"] is not None
    assert await dlq.pool.fetchval("SELECT count(*) FROM dlq.notifications") == 1
    registry = dlq.service.metrics.registry
    assert registry.get_sample_value("slotflow_dlq_notifications_total", {"outcome": "failed"}) == 2
    assert registry.get_sample_value("slotflow_dlq_notifications_total", {"outcome": "delivered"}) == 1


async def test_a_dead_webhook_never_holds_up_parking(
    start: Any, producer: Producer, kafka: KafkaSettings
) -> None:
    # Nothing listens on this port: every delivery fails at once.
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    dlq = await start(
        webhook_url=f"http://127.0.0.1:{port}/",
        webhook_max_attempts=3,
        webhook_backoff_base_seconds=0.05,
        webhook_backoff_cap_seconds=0.1,
        notifier_poll_seconds=0.05,
    )
    for n in range(20):
        job, record = job_record(kafka, n, ("money-moving",))
        await park(
            producer,
            kafka,
            record,
            PermanentError("x"),
            source="claimer",
            run_id=job.run_id,
            job_id=job.job_id,
            tags=job.tags,
        )

    async def parked() -> bool:
        return bool(await dlq.count() == 20)

    await assert_eventually(parked, timeout=30)

    async def given_up() -> bool:
        given = await dlq.pool.fetchval("SELECT count(*) FROM dlq.notifications WHERE gave_up_at IS NOT NULL")
        return bool(given == 20)

    await assert_eventually(given_up, timeout=30)
    attempts = await dlq.pool.fetch("SELECT DISTINCT attempts FROM dlq.notifications")
    assert [r["attempts"] for r in attempts] == [3]
    gave_up = cast(
        float,
        dlq.service.metrics.registry.get_sample_value(
            "slotflow_dlq_notifications_total", {"outcome": "gave_up"}
        ),
    )
    assert gave_up == 20


async def test_a_hanging_webhook_never_holds_up_parking(
    start: Any, producer: Producer, kafka: KafkaSettings
) -> None:
    hung: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hung.append(writer)

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        dlq = await start(
            webhook_url=f"http://127.0.0.1:{port}/", webhook_timeout_seconds=60, notifier_poll_seconds=0.05
        )
        for n in range(30):
            job, record = job_record(kafka, n, ("money-moving",))
            await park(
                producer,
                kafka,
                record,
                PermanentError("x"),
                source="claimer",
                run_id=job.run_id,
                job_id=job.job_id,
                tags=job.tags,
            )

        async def parked() -> bool:
            return bool(await dlq.count() == 30)

        # Well inside the webhook's 60 s timeout: parking does not wait for it.
        await assert_eventually(parked, timeout=20)
        await assert_eventually(
            lambda: len(hung) > 0, timeout=10, message="the notifier is stuck in a request"
        )
        assert (
            await dlq.pool.fetchval("SELECT count(*) FROM dlq.notifications WHERE delivered_at IS NULL") == 30
        )
        for writer in hung:
            writer.close()


async def read_request(reader: asyncio.StreamReader) -> dict[str, Any]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body: dict[str, Any] = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))))
    return body


async def park_money_moving(producer: Producer, kafka: KafkaSettings, n: int) -> None:
    job, record = job_record(kafka, n, ("money-moving",))
    await park(
        producer,
        kafka,
        record,
        PermanentError("x"),
        source="claimer",
        run_id=job.run_id,
        job_id=job.job_id,
        tags=job.tags,
    )


async def test_a_slow_drip_receiver_is_cut_at_the_deadline_and_delays_no_other_delivery(
    start: Any, producer: Producer, kafka: KafkaSettings
) -> None:
    """Issue 23: httpx's per-read timeout let a receiver dripping a byte at a time hold a delivery
    for 120 s, and the deliveries behind it waited for the whole batch."""
    deadline = 6.0
    slow_open = asyncio.Event()
    slow_spans: list[tuple[float, float]] = []  # (request read, connection given up) per slow try
    fast: list[tuple[str, bool]] = []  # (run id, the slow delivery still dripping when it came)

    async def receiver(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_request(reader)
        if body["run_id"] == "payouts@0" and body["attempt"] == 1:
            began = time.monotonic()
            slow_open.set()
            # Headers at once, then one byte every 0.2 s of a 1,000-byte body: no single read
            # ever waits the 5 s read timeout, so only a total deadline ends it.
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
            try:
                for _ in range(1000):
                    await writer.drain()
                    if reader.at_eof():
                        break
                    writer.write(b"x")
                    await asyncio.sleep(0.2)
            except ConnectionError:
                pass
            finally:
                slow_spans.append((began, time.monotonic()))
                slow_open.clear()
                writer.close()
            return
        fast.append((body["run_id"], slow_open.is_set()))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(receiver, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        dlq = await start(
            webhook_url=f"http://127.0.0.1:{port}/",
            webhook_timeout_seconds=5,
            webhook_deadline_seconds=deadline,
            webhook_concurrency=4,
            webhook_backoff_base_seconds=0.05,
            webhook_backoff_cap_seconds=0.1,
            notifier_poll_seconds=0.05,
        )
        await park_money_moving(producer, kafka, 0)
        await asyncio.wait_for(slow_open.wait(), timeout=30)
        for n in range(1, 6):
            await park_money_moving(producer, kafka, n)
        await assert_eventually(lambda: len(fast) >= 5, timeout=30, message="the other deliveries")
        # Every other delivery reached the receiver while the slow one was still dripping.
        assert sorted(fast[:5]) == [(f"payouts@{n}", True) for n in range(1, 6)]

        async def delivered() -> bool:
            count = await dlq.pool.fetchval(
                "SELECT count(*) FROM dlq.notifications WHERE delivered_at IS NOT NULL"
            )
            return bool(count == 6)

        await assert_eventually(delivered, timeout=30, message="all six delivered, the slow one on its retry")
    assert len(slow_spans) == 1
    began, ended = slow_spans[0]
    # Cut at the deadline, not at the 200 s the drip would take (nor at the 5 s read timeout).
    assert deadline - 0.5 <= ended - began <= deadline + 3
    row = await dlq.pool.fetchrow("SELECT attempts FROM dlq.notifications WHERE dead_letter_id LIKE '%:0'")
    assert row is not None
    assert row["attempts"] == 2
    registry = dlq.service.metrics.registry
    assert registry.get_sample_value("slotflow_dlq_notifications_total", {"outcome": "failed"}) == 1


async def test_deliveries_in_flight_never_exceed_the_bound(
    start: Any, producer: Producer, kafka: KafkaSettings
) -> None:
    open_now = 0
    peak = 0
    seen = 0

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now, peak, seen
        await read_request(reader)
        open_now += 1
        seen += 1
        peak = max(peak, open_now)
        try:
            await reader.read()  # until the notifier gives up on it at its deadline
        finally:
            open_now -= 1
            writer.close()

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        await start(
            webhook_url=f"http://127.0.0.1:{port}/",
            webhook_deadline_seconds=1.0,
            webhook_concurrency=2,
            webhook_max_attempts=1,
            notifier_poll_seconds=0.05,
        )
        for n in range(6):
            await park_money_moving(producer, kafka, n)
        await assert_eventually(lambda: seen == 6, timeout=60, message="every delivery tried once")
    assert peak == 2


async def test_bodies_are_signed_with_the_configured_secret(
    start: Any, hook: Hook, producer: Producer, kafka: KafkaSettings
) -> None:
    secret = "whsec-test-3b1f"
    await start(
        webhook_url=f"http://127.0.0.1:{hook.port}/hooks/dlq",
        webhook_secret=secret,
        notifier_poll_seconds=0.05,
    )
    await park_money_moving(producer, kafka, 0)
    await assert_eventually(lambda: len(hook.bodies) == 1, timeout=30, message="the delivery")
    header, raw = hook.signatures[0], hook.raw[0]
    # What docs/dlq.md tells a receiver to do, written out by hand.
    fields = dict(part.split("=", 1) for part in header.split(","))
    assert abs(time.time() - int(fields["t"])) < 60
    expected = hmac.new(secret.encode(), fields["t"].encode() + b"." + raw, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(fields["v1"], expected)
    assert verify(secret.encode(), header, raw, now=time.time())
    # A changed body, another key or a stale timestamp does not verify.
    assert not verify(secret.encode(), header, raw.replace(b"payouts", b"payoutz"), now=time.time())
    assert not verify(b"other", header, raw, now=time.time())
    assert not verify(secret.encode(), header, raw, now=time.time() + 3600)


async def test_a_huge_answer_is_not_read_past_its_bound(
    start: Any, producer: Producer, kafka: KafkaSettings
) -> None:
    """Issue 20, every HTTP body bounded: the notifier read a webhook's whole answer into memory,
    so a receiver answering 200 with a body of gigabytes took the DLQ service's memory with it. It
    reads at most `ANSWER_MAX_BYTES` of an answer (the status decides) and hangs up."""
    declared = 1024 * 1024 * 1024
    give_up_at = 128 * 1024 * 1024  # the most this receiver sends, should the notifier read on
    sent: list[int] = []

    async def receiver(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(f"HTTP/1.1 200 OK\r\ncontent-length: {declared}\r\n\r\n".encode())
        chunk = b"x" * (64 * 1024)
        total = 0
        try:
            while total < give_up_at and not reader.at_eof():
                writer.write(chunk)
                await writer.drain()
                total += len(chunk)
        except ConnectionError:
            pass
        finally:
            sent.append(total)
            writer.close()

    server = await asyncio.start_server(receiver, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        dlq = await start(
            webhook_url=f"http://127.0.0.1:{port}/",
            webhook_deadline_seconds=20,
            webhook_backoff_base_seconds=0.05,
            webhook_backoff_cap_seconds=0.1,
            notifier_poll_seconds=0.05,
        )
        await park_money_moving(producer, kafka, 0)

        async def delivered() -> bool:
            count = await dlq.pool.fetchval(
                "SELECT count(*) FROM dlq.notifications WHERE delivered_at IS NOT NULL"
            )
            return bool(count == 1)

        await assert_eventually(delivered, timeout=30, message="delivered on its status")
        await assert_eventually(lambda: bool(sent), timeout=30, message="the receiver hung up on")
    # What the receiver got out before the notifier hung up: the bound plus socket buffers.
    assert sent[0] < 16 * 1024 * 1024, f"the notifier read {sent[0] / 1024 / 1024:.0f} MiB of the answer"
