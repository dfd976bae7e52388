"""Builders and probes shared by the claimer's integration and chaos tests."""

import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from slotflow.contracts import Envelope, JobDue, RetryPolicy
from slotflow.contracts.codec import decode
from slotflow.contracts.envelope import REDRIVE_COUNT_HEADER
from slotflow.contracts.topics import JOBS_DUE, TopicSpec
from slotflow.core.identity import run_id as make_run_id
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Conn, Pool
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow.testing.topics import first_reads
from slotflow_claimer.config import ClaimerSettings, Settings
from slotflow_claimer.events import job_due_envelope

REPO = Path(__file__).resolve().parents[3]
PAYOUTS_DIR = REPO / "examples" / "payouts"

#: Append-only, no constraints: every handler invocation leaves a row, so a duplicate is visible.
ATTEMPTS_SQL = """
CREATE TABLE IF NOT EXISTS handler_attempts (
    run_id      text        NOT NULL,
    attempt     integer     NOT NULL,
    fence_token bigint      NOT NULL,
    owner       text        NOT NULL,
    phase       text        NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def payouts_module() -> ModuleType:
    """The example's handler module (imported once; its decorator registers in REGISTRY)."""
    if str(PAYOUTS_DIR) not in sys.path:
        sys.path.insert(0, str(PAYOUTS_DIR))
    import payouts

    return payouts


async def create_user_tables(conn: Conn) -> None:
    await payouts_module().create_ledger(conn)
    await conn.execute(ATTEMPTS_SQL)


def settings_for(kafka: KafkaSettings, pg_dsn: str, **claimer: Any) -> Settings:
    defaults: dict[str, Any] = {
        "lease_ttl_seconds": 3.0,
        "commit_interval_seconds": 0.1,
        "shutdown_grace_seconds": 2.0,
        "poll_timeout_ms": 100,
    }
    defaults.update(claimer)
    return Settings(
        claimer=ClaimerSettings(**defaults),
        kafka=kafka,
        postgres=PostgresSettings(dsn=pg_dsn, pool_min_size=1, pool_max_size=10),
    )


SLOT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)


def job_due(
    job_id: str,
    *,
    handler: str = "payouts.pay_merchants",
    slot: datetime = SLOT,
    payload: dict[str, Any] | None = None,
    retry: RetryPolicy | None = None,
    overlap: str = "allow",
    attempt: int = 1,
    kind: str = "scheduled",
    workflow_id: str | None = None,
    sequence: int | None = None,
) -> JobDue:
    return JobDue.model_validate(
        {
            "run_id": make_run_id(job_id, slot) if workflow_id is None else f"{workflow_id}/{sequence}",
            "job_id": job_id,
            "slot": slot,
            "attempt": attempt,
            "kind": kind,
            "handler": handler,
            "payload": {"merchant_id": job_id, "amount_cents": 1250} if payload is None else payload,
            "retry": retry or RetryPolicy(base=timedelta(milliseconds=200), cap=timedelta(seconds=1)),
            "overlap": overlap,
            "workflow_id": workflow_id,
            "sequence": sequence,
        }
    )


async def publish(
    producer: Producer, kafka: KafkaSettings, jobs: Sequence[JobDue], *, redrive_count: int | None = None
) -> None:
    headers = {REDRIVE_COUNT_HEADER: str(redrive_count).encode()} if redrive_count is not None else None
    now = datetime.now(UTC)
    await producer.send_many(
        [(kafka.topic(JOBS_DUE), job_due_envelope(job, at=now, source="test")) for job in jobs],
        headers=headers,
    )


async def run_row(pool: Pool, run_id: str) -> dict[str, Any] | None:
    row = await pool.fetchrow("SELECT * FROM claimer.runs WHERE run_id = $1", run_id)
    return dict(row) if row is not None else None


async def wait_state(pool: Pool, run_id: str, state: str, *, timeout: float = 30.0) -> dict[str, Any]:
    seen: list[Any] = [None]

    async def probe() -> dict[str, Any] | None:
        row = await run_row(pool, run_id)
        seen[0] = row and {k: row[k] for k in ("state", "attempt", "fence_token", "owner")}
        return row if row is not None and row["state"] == state else None

    try:
        return await assert_eventually(probe, timeout=timeout, message=f"{run_id} {state}")
    except AssertionError as err:
        raise AssertionError(f"{run_id} never reached {state}; last seen {seen[0]}") from err


async def ledger(pool: Pool, run_id: str | None = None) -> list[dict[str, Any]]:
    if run_id is None:
        rows = await pool.fetch("SELECT * FROM payouts_ledger ORDER BY payout_id")
    else:
        rows = await pool.fetch("SELECT * FROM payouts_ledger WHERE run_id = $1", run_id)
    return [dict(r) for r in rows]


async def attempts(pool: Pool, run_id: str) -> list[dict[str, Any]]:
    rows = await pool.fetch("SELECT * FROM handler_attempts WHERE run_id = $1 ORDER BY at", run_id)
    return [dict(r) for r in rows]


class TopicReader:
    """Reads one topic from the beginning, keeping everything seen so far."""

    def __init__(self, kafka: KafkaSettings, spec: TopicSpec) -> None:
        self._consumer = Consumer(
            kafka, kafka.topic(spec), group_id=unique_name("reader"), client_id="reader"
        )
        self.seen: list[Envelope] = []
        self._positions: set[str] = set()

    async def __aenter__(self) -> "TopicReader":
        await self._consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def drain(self) -> list[Envelope]:
        for record in first_reads(
            await self._consumer.poll(timeout_ms=100, max_records=5000), self._positions
        ):
            if record.value:
                self.seen.append(decode(record.value))
        return self.seen

    def of_type(self, type_: str, run_id: str | None = None) -> list[Envelope]:
        return [
            e for e in self.seen if e.type == type_ and (run_id is None or e.data.get("run_id") == run_id)
        ]

    async def wait_for(
        self, type_: str, *, run_id: str | None = None, count: int = 1, timeout: float = 30.0
    ) -> list[Envelope]:
        async def probe() -> list[Envelope] | None:
            await self.drain()
            found = self.of_type(type_, run_id)
            return found if len(found) >= count else None

        return await assert_eventually(probe, timeout=timeout, message=f"{count} x {type_} for {run_id}")
