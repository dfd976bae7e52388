"""The notification hook: money-moving runs reach the webhook; a failing one is retried with jitter
and a dead one never holds up parking."""

import asyncio
import json
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
from tests.integration.dlq.helpers import AT, origin, park


@dataclass
class Hook:
    """A webhook on 127.0.0.1 that answers `statuses` in turn (then 200) and records every body."""

    statuses: list[int] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.bodies.append(json.loads(body))
        self.keys.append(headers.get("idempotency-key", ""))
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
        return await dlq.count() == 4

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
        return await dlq.count() == 20

    await assert_eventually(parked, timeout=30)

    async def given_up() -> bool:
        return (
            await dlq.pool.fetchval("SELECT count(*) FROM dlq.notifications WHERE gave_up_at IS NOT NULL")
            == 20
        )

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
            return await dlq.count() == 30

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
